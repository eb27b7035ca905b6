//! `zrtt proxy`'s metrics (prometheus-client, under the `zrtt_proxy`
//! prefix): requests by route, errors, time to first byte by mode,
//! connection setup of new zrtt connections, key lookups. `zrtt proxy
//! --admin` serves them (crate::admin).

use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::client::{ConnInfo, ConnInfoHandle, Mode};

/// The path a request took.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    /// `zrtt_early` (answered before the TCP handshake completed),
    /// `zrtt_gated` (after it), `tls_fallback`, or `plain` (no key: plain
    /// HTTP to the origin).
    pub mode: &'static str,
}

/// An outcome label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// See the metric's help.
    pub outcome: &'static str,
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::ZrttEarly => "zrtt_early",
        Mode::ZrttGated => "zrtt_gated",
        Mode::TlsFallback => "tls_fallback",
        Mode::DnsShortcut => "dns_shortcut",
        Mode::ShortcutFetch => "shortcut_fetch",
    }
}

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The proxy's counters since start, and its histograms.
        #[derive(Debug)]
        pub struct ProxyMetrics {
            $($(#[doc = $doc])* pub $name: Counter,)*
            first_byte: Family<ModeLabels, Histogram>,
            setup: Family<ModeLabels, Histogram>,
            new_connections: Family<ModeLabels, Counter>,
            key_lookups: Family<OutcomeLabels, Counter>,
            key_lookup_time: Histogram,
            /// zrtt connections already counted (by their info's address;
            /// the weak reference keeps the address from being reused).
            seen: Mutex<HashMap<usize, Weak<Mutex<Option<ConnInfo>>>>>,
        }

        impl ProxyMetrics {
            /// `(name, value)` for every counter.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.get()),)*]
            }

            /// A registry holding every metric (shared, not copied), under
            /// the `zrtt_proxy` prefix, with help texts.
            pub fn registry(&self) -> Registry {
                let mut r = Registry::with_prefix("zrtt_proxy");
                $(r.register(
                    stringify!($name),
                    concat!($($doc, )*).trim().trim_end_matches('.'),
                    self.$name.clone(),
                );)*
                self.register_histograms(&mut r);
                r
            }
        }
    };
}

counters! {
    /// Client connections accepted.
    connections,
    /// Client connections that chose HTTP/2 (HTTPS proxy only).
    h2_connections,
    /// TLS handshakes with clients that failed or timed out after the
    /// client's first byte (HTTPS proxy only).
    tls_failures,
    /// Client connections closed, reset or timed out before their first
    /// byte: readiness probes, unused preconnections (HTTPS proxy only).
    tls_unused,
    /// Requests sent over zrtt (or its TLS fallback).
    zrtt_requests,
    /// Requests forwarded as plain HTTP.
    passthrough_requests,
    /// `CONNECT` tunnels opened.
    tunnels,
    /// Requests refused as malformed (400).
    bad_requests,
    /// 502 answers (origin unreachable or failed).
    bad_gateway,
    /// 504 answers (no response head in time).
    gateway_timeout,
    /// Requests that found `max_conns_per_origin` HTTP/1.1 requests in
    /// flight to their origin and waited for one to finish.
    origin_waits,
    /// Of those, the ones that got no slot within the response timeout
    /// (answered 504).
    origin_wait_timeouts,
    /// Responses that held their origin slot for 10 s and gave it up while
    /// their body went on.
    origin_long_holds,
}

fn buckets() -> impl Iterator<Item = f64> {
    // 0.5 ms doubling to about 16 s, as the gateway's.
    exponential_buckets(0.0005, 2.0, 16)
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self {
            connections: Counter::default(),
            h2_connections: Counter::default(),
            tls_failures: Counter::default(),
            tls_unused: Counter::default(),
            zrtt_requests: Counter::default(),
            passthrough_requests: Counter::default(),
            tunnels: Counter::default(),
            bad_requests: Counter::default(),
            bad_gateway: Counter::default(),
            gateway_timeout: Counter::default(),
            origin_waits: Counter::default(),
            origin_wait_timeouts: Counter::default(),
            origin_long_holds: Counter::default(),
            first_byte: Family::new_with_constructor(|| Histogram::new(buckets())),
            setup: Family::new_with_constructor(|| Histogram::new(buckets())),
            new_connections: Family::default(),
            key_lookups: Family::default(),
            key_lookup_time: Histogram::new(buckets()),
            seen: Mutex::default(),
        }
    }
}

impl ProxyMetrics {
    /// A response head arrived `took` after the request was sent; `info`
    /// is its connection's (`None` for plain HTTP). A zrtt connection seen
    /// for the first time is counted, with its setup time, by mode.
    pub(crate) fn first_byte(&self, info: Option<&ConnInfoHandle>, took: Duration) {
        let conn = info.and_then(|h| {
            let i = h.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
            Some((i, self.first_use(h)))
        });
        let mode = conn.as_ref().map_or("plain", |(i, _)| mode_name(i.mode));
        self.first_byte
            .get_or_create(&ModeLabels { mode })
            .observe(took.as_secs_f64());
        if let Some((i, true)) = conn {
            self.new_connections
                .get_or_create(&ModeLabels { mode })
                .inc();
            self.setup
                .get_or_create(&ModeLabels { mode })
                .observe(i.time_appconnect.as_secs_f64());
        }
    }

    /// Whether this is the first response over the connection of `h`.
    fn first_use(&self, h: &ConnInfoHandle) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = std::sync::Arc::as_ptr(h) as usize;
        if seen.get(&key).is_some_and(|w| w.strong_count() > 0) {
            return false;
        }
        // Closed connections are forgotten once there are many.
        if seen.len() >= 256 {
            seen.retain(|_, w| w.strong_count() > 0);
        }
        seen.insert(key, std::sync::Arc::downgrade(h));
        true
    }

    /// A key lookup for a request's host: `outcome` is `verified` (a
    /// verified key record: zrtt), `none` (plain HTTP) or `timeout` (the
    /// DNS prefetch ran out of time; the host went plain).
    pub(crate) fn key_lookup(&self, outcome: &'static str, took: Duration) {
        self.key_lookups
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        self.key_lookup_time.observe(took.as_secs_f64());
    }

    fn register_histograms(&self, r: &mut Registry) {
        r.register(
            "first_byte_seconds",
            "From sending a request to the origin's response head, by mode: zrtt_early, zrtt_gated (answered after the TCP handshake), tls_fallback, plain",
            self.first_byte.clone(),
        );
        r.register(
            "connection_setup_seconds",
            "New zrtt connections: time to the secure channel (zrtt reply or TLS handshake), by mode",
            self.setup.clone(),
        );
        r.register(
            "zrtt_connections",
            "New connections to zrtt hosts, by mode",
            self.new_connections.clone(),
        );
        r.register(
            "key_lookups",
            "Key lookups (DNS or record files) for requested hosts, by outcome: verified (zrtt), none (plain HTTP), timeout",
            self.key_lookups.clone(),
        );
        r.register(
            "key_lookup_seconds",
            "Time to decide whether a host has a verified key (DNS prefetch and lookup)",
            self.key_lookup_time.clone(),
        );
    }
}

pub(crate) fn inc(c: &Counter) {
    c.inc();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn conn(mode: Mode, setup_ms: u64) -> ConnInfoHandle {
        Arc::new(Mutex::new(Some(ConnInfo {
            mode,
            notes: Vec::new(),
            fallback: None,
            connect_mode: crate::tfo::ConnectMode::FastOpen,
            syn_data_acked: true,
            early_data: true,
            retried_with_fresh_keys: false,
            time_connect: Duration::from_millis(setup_ms),
            time_appconnect: Duration::from_millis(setup_ms),
            rtt: Duration::from_millis(setup_ms),
            round_trips: 1,
            local_addr: None,
            verifiers: Vec::new(),
            protocol: crate::client::AppProtocol::Http1,
            resumed: false,
        })))
    }

    #[test]
    fn first_byte_by_mode_and_new_connections_once() {
        let m = ProxyMetrics::default();
        let early = conn(Mode::ZrttEarly, 20);
        m.first_byte(Some(&early), Duration::from_millis(21));
        // The same pooled connection again: no second new connection.
        m.first_byte(Some(&early), Duration::from_millis(3));
        m.first_byte(
            Some(&conn(Mode::TlsFallback, 40)),
            Duration::from_millis(41),
        );
        m.first_byte(None, Duration::from_millis(2));
        inc(&m.zrtt_requests);
        let text = crate::admin::encode(&m.registry());
        for want in [
            "zrtt_proxy_first_byte_seconds_count{mode=\"zrtt_early\"} 2\n",
            "zrtt_proxy_first_byte_seconds_count{mode=\"tls_fallback\"} 1\n",
            "zrtt_proxy_first_byte_seconds_count{mode=\"plain\"} 1\n",
            "zrtt_proxy_zrtt_connections_total{mode=\"zrtt_early\"} 1\n",
            "zrtt_proxy_zrtt_connections_total{mode=\"tls_fallback\"} 1\n",
            "zrtt_proxy_connection_setup_seconds_count{mode=\"zrtt_early\"} 1\n",
            "# HELP zrtt_proxy_zrtt_requests Requests sent over zrtt (or its TLS fallback).\n# TYPE",
            "\nzrtt_proxy_zrtt_requests_total 1\n",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(
            m.snapshot().iter().find(|(n, _)| *n == "zrtt_requests"),
            Some(&("zrtt_requests", 1))
        );
    }

    #[test]
    fn closed_connections_are_forgotten() {
        let m = ProxyMetrics::default();
        for _ in 0..600 {
            let c = conn(Mode::ZrttGated, 1);
            assert!(m.first_use(&c));
            assert!(!m.first_use(&c));
        }
        let seen = m.seen.lock().map(|s| s.len()).unwrap_or_default();
        assert!(seen <= 256, "{seen}");
    }
}
