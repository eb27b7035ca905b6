//! A verifier's metrics (prometheus-client, under the `zrtt_verifier`
//! prefix): requests, certificates issued, refusals by reason, signing
//! latency. `zrtt verifier serve --admin` serves them (crate::admin).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Why a request got no certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Over `max_concurrent`: the connection was closed at once.
    Busy,
    /// The request did not arrive within 5 s.
    Timeout,
    /// Not a verifier request, truncated, too large, a bad previous certificate.
    Malformed,
    /// No key could sign (a key store without a current key).
    NoKey,
    /// Reading the request or writing the certificate failed.
    Io,
}

impl Refusal {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Busy => "busy",
            Refusal::Timeout => "timeout",
            Refusal::Malformed => "malformed",
            Refusal::NoKey => "no_key",
            Refusal::Io => "io",
        }
    }
}

/// A refusal's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Counters and the signing latency of one verifier (shared values).
#[derive(Debug)]
pub struct VerifierMetrics {
    requests: Counter,
    issued: Counter,
    refreshed: Counter,
    refused: Family<ReasonLabels, Counter>,
    signing: Histogram,
}

const REASONS: [Refusal; 5] = [
    Refusal::Busy,
    Refusal::Timeout,
    Refusal::Malformed,
    Refusal::NoKey,
    Refusal::Io,
];

impl Default for VerifierMetrics {
    fn default() -> Self {
        let m = Self {
            requests: Counter::default(),
            issued: Counter::default(),
            refreshed: Counter::default(),
            refused: Family::default(),
            // 10 us doubling to about 80 ms.
            signing: Histogram::new(exponential_buckets(0.000_01, 2.0, 14)),
        };
        // Every reason is exposed, at 0 until it happens.
        for r in REASONS {
            let _ = m
                .refused
                .get_or_create(&ReasonLabels { reason: r.as_str() });
        }
        m
    }
}

impl VerifierMetrics {
    /// A connection accepted (every request ends issued or refused).
    pub(crate) fn request(&self) {
        self.requests.inc();
    }

    /// A certificate sent; `refresh` when it doubled a previous one.
    pub(crate) fn issued(&self, refresh: bool) {
        self.issued.inc();
        if refresh {
            self.refreshed.inc();
        }
    }

    /// A request that got no certificate.
    pub(crate) fn refused(&self, why: Refusal) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: why.as_str(),
            })
            .inc();
    }

    /// How long one signature (or the attempt) took.
    pub(crate) fn signed(&self, took: Duration) {
        self.signing.observe(took.as_secs_f64());
    }

    /// Certificates issued so far.
    pub fn issued_total(&self) -> u64 {
        self.issued.get()
    }

    /// Refreshed certificates issued so far.
    pub fn refreshed_total(&self) -> u64 {
        self.refreshed.get()
    }

    /// Requests refused so far, every reason.
    pub fn refused_total(&self) -> u64 {
        REASONS
            .iter()
            .map(|r| {
                self.refused
                    .get_or_create(&ReasonLabels { reason: r.as_str() })
                    .get()
            })
            .sum()
    }

    /// A registry holding every metric (shared, not copied), under the
    /// `zrtt_verifier` prefix, with help texts.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("zrtt_verifier");
        r.register(
            "requests",
            "Certificate requests (connections accepted, refused ones included)",
            self.requests.clone(),
        );
        r.register(
            "issued",
            "Certificates issued (sent to the client)",
            self.issued.clone(),
        );
        r.register(
            "refreshed",
            "Of those, refreshes that doubled a previous certificate's duration",
            self.refreshed.clone(),
        );
        r.register(
            "refused",
            "Requests that got no certificate, by reason (busy, timeout, malformed, no_key, io)",
            self.refused.clone(),
        );
        r.register(
            "signing_seconds",
            "Time to sign one certificate (key lookup and signature)",
            self.signing.clone(),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_exposed_and_counted() {
        let m = VerifierMetrics::default();
        let text = crate::admin::encode(&m.registry());
        for r in REASONS {
            let line = format!(
                "zrtt_verifier_refused_total{{reason=\"{}\"}} 0\n",
                r.as_str()
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
        m.request();
        m.refused(Refusal::NoKey);
        m.request();
        m.signed(Duration::from_micros(40));
        m.issued(true);
        assert_eq!(
            (m.issued_total(), m.refreshed_total(), m.refused_total()),
            (1, 1, 1)
        );
        let text = crate::admin::encode(&m.registry());
        for want in [
            "zrtt_verifier_requests_total 2\n",
            "zrtt_verifier_refused_total{reason=\"no_key\"} 1\n",
            "# TYPE zrtt_verifier_signing_seconds histogram\n",
            "zrtt_verifier_signing_seconds_count 1\n",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }
}
