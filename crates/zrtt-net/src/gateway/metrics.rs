//! Gateway counters (prometheus-client `Counter`s, lock-free) and latency
//! histograms; the admin endpoint that serves them (`/metrics`, `/healthz`,
//! `/readyz`) is [`crate::admin`], shared by every role.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Gateway counters since start, and latency histograms.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[doc = $doc])* pub $name: Counter,)*
            /// HTTP requests being served: from their head to the end (or
            /// the cancellation) of their response.
            pub requests_in_flight: Gauge,
            /// Latency histograms.
            pub latency: Latency,
            /// Per-backend state and counts.
            pub backends: BackendMetrics,
        }

        impl Metrics {
            /// All counters as (name, value).
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.get()),)*]
            }

            /// A registry holding every counter (shared, not copied), with
            /// its documentation as help, under the `zrtt_gateway` prefix.
            fn registry(&self) -> Registry {
                let mut r = Registry::with_prefix("zrtt_gateway");
                $(r.register(
                    stringify!($name),
                    concat!($($doc, )*).trim().trim_end_matches('.'),
                    self.$name.clone(),
                );)*
                r.register(
                    "requests_in_flight",
                    "HTTP requests being served (head received, response not ended)",
                    self.requests_in_flight.clone(),
                );
                self.latency.register(&mut r);
                self.backends.register(&mut r);
                r
            }
        }
    };
}

counters! {
    /// Connections accepted.
    connections,
    /// zrtt first flights read.
    zrtt_flights,
    /// First flights that authenticated and passed every check.
    zrtt_accepted,
    /// Of those, flights built on a key's previous record (re-signed with
    /// the same terms, e.g. after a certificate renewal).
    zrtt_on_previous_record,
    /// Of those, resumed flights (a resumption ticket, Noise NNpsk0:
    /// docs/PROTOCOL.md §12).
    zrtt_resumed,
    /// Resumed flights refused for their ticket (Reject 9: unknown key,
    /// does not open, expired, another site's).
    zrtt_tickets_refused,
    /// Resumption tickets granted in Replies.
    zrtt_tickets_granted,
    /// Replies sent without waiting for the TCP handshake (proven address).
    zrtt_answered_early,
    /// Of those, replies sent while the socket was still SYN_RECV.
    zrtt_answered_in_syn_recv,
    /// Replies held until the TCP handshake completed (unproven address).
    zrtt_answered_gated,
    /// Refusals answered with a Reject frame (after gating).
    zrtt_rejects_sent,
    /// First flights that failed to authenticate or parse: no answer at all.
    zrtt_silent_drops,
    /// Reject Busy sent (hard limits).
    zrtt_busy,
    /// Flights forced onto the gated path by soft limits.
    zrtt_forced_gating,
    /// Connections dropped because the handshake did not complete in time.
    gate_timeouts,
    /// Replies to proven addresses cut at 3x the bytes received until the handshake completed.
    amplification_holds,
    /// TLS connections.
    tls_connections,
    /// Of those, connections that negotiated HTTP/2 (ALPN h2).
    tls_h2_connections,
    /// TLS connections that resumed a session (ticket or session id).
    tls_resumed,
    /// TLS connections that sent 0-RTT early data rustls accepted.
    tls_early_data,
    /// TLS connections answered before their TCP handshake completed (a
    /// session issued to their address).
    tls_answered_early,
    /// Connections that were neither zrtt nor TLS (closed).
    other_refused,
    /// HTTP requests forwarded to the backend.
    requests,
    /// Of those, requests that arrived as early data (sent with `Early-Data: 1`).
    early_requests,
    /// Backend 425 Too Early answers retried after the client confirmed the handshake.
    backend_425_retries,
    /// Backend 425 Too Early answers passed to the client (no confirmation in time).
    backend_425_unconfirmed,
    /// First flights whose early data waited for the client's confirmation
    /// (not one safe request).
    early_data_held,
    /// HTTP/2 requests that began in early data but are not safe (method,
    /// body): held until the client confirmed the handshake.
    early_requests_held,
    /// Of those, answered 425 Too Early (no confirmation in time).
    early_requests_too_early,
    /// zrtt connections serving HTTP/2 (first-flight ALPN h2).
    zrtt_h2_connections,
    /// Connections closed at once: their source address or prefix was at its cap.
    source_limited,
    /// Proven flights served after the handshake: their address is cooling
    /// down after early answers it did not follow with a handshake.
    early_withheld_cooldown,
    /// Proven flights served after the handshake: the destination's,
    /// prefix's or gateway's pre-handshake byte budget was used up.
    early_withheld_budget,
    /// 502 answers (backend unreachable or failed).
    backend_errors,
    /// 504 answers (backend too slow).
    backend_timeouts,
    /// Connections switched to another protocol (`101`, e.g. WebSocket) and relayed.
    upgrades,
    /// Responses cancelled (HTTP/2: RST_STREAM; HTTP/1.1: connection
    /// closed; the backend request dropped): no progress toward the client
    /// for the stream idle timeout.
    responses_stalled,
    /// HTTP/1.1 request heads that did not arrive in time: 408, closed.
    request_heads_timed_out,
    /// Address tokens issued.
    tokens_issued,
    /// First flights answered early because of a valid token.
    tokens_accepted,
    /// Tokens presented but refused (expired, other address or key, forged).
    tokens_refused,
    /// First flights whose provenance certificates met the quorum.
    provenance_accepted,
    /// Of those, answered from the verified-certificate cache (no signature check).
    provenance_cache_hits,
    /// Provenance certificates refused (untrusted, mismatch, expired, forged, quorum).
    provenance_refused,
    /// Certificates not checked because the check rate was exceeded (gated instead).
    provenance_overload,
    /// Certificates not checked because a soft load limit gated the flight anyway.
    provenance_skipped,
    /// First flights the local filter accepted but the shared replay store
    /// had recorded (a replay to another gateway of the fleet): Reject Replay.
    replay_store_replays,
    /// First flights refused Busy because the shared replay store could not
    /// vouch for them (no answer in time, error, no connection, stamped
    /// before its last failure): the fail-safe refusals.
    replay_store_unavailable,
    /// TLS sessions taken from the fleet's store (a Redis script: `GETDEL`) for a
    /// ClientHello offering them.
    tls_sessions_taken,
    /// TLS sessions offered that the fleet's store did not hold (taken
    /// already, expired, never written) or that did not open: full handshakes.
    tls_sessions_missed,
    /// TLS sessions not looked up because the fleet's store gave no answer
    /// in time, failed or was not connected: full handshakes.
    tls_sessions_unavailable,
    /// TLS sessions resumed without 0-RTT because they were issued before
    /// the fleet's store last failed or reconnected.
    tls_sessions_without_early,
    /// TLS sessions not kept (so no ticket issued) because this gateway's
    /// cap on session writes was reached (gateway/tls/limits.rs).
    tls_sessions_puts_limited,
    /// ClientHellos offering a session not looked up in the fleet's store
    /// because the per-source or global cap on look-ups was reached: full
    /// handshakes.
    tls_sessions_lookups_limited,
    /// DNS shortcut flights received (SDNS queries for a whole flight name,
    /// and TCP forms on the gateway's port), copies included.
    shortcut_flights,
    /// Of those, answered from the answer cache (a resolver's retry, the
    /// TCP fetch after FETCH, a replay): no second run.
    shortcut_cache_hits,
    /// Shortcut flights accepted whose request was run on a backend.
    shortcut_runs,
    /// SDNS answers carrying the whole answer stream (ANSWER).
    shortcut_answers,
    /// SDNS answers saying the answer does not fit (FETCH).
    shortcut_fetch,
    /// Shortcut flights refused with a Reject frame (REJECT in DNS, or on TCP).
    shortcut_rejects,
    /// SDNS queries for a new flight answered FETCH without a run: over a
    /// bound for unproven queriers (runs per source prefix, in all, per
    /// prefix and second) or the soft load limit.
    shortcut_deferred,
    /// Shortcut responses over the bound of their run (64 KiB from the
    /// SDNS, 1 MiB from a TCP form): REJECT busy, the client takes the
    /// normal path.
    shortcut_too_large,
    /// Answer streams written on the gateway's port for a shortcut flight's TCP form.
    shortcut_tcp_answers,
    /// DNS queries the SDNS received (UDP and TCP).
    sdns_queries,
    /// SDNS answers NXDOMAIN (partial names, other types, flights that do not authenticate).
    sdns_nxdomain,
    /// SDNS answers REFUSED for names outside its zones.
    sdns_refused,
    /// SDNS answers truncated (TC) to fit a UDP budget.
    sdns_truncated,
    /// SDNS queries dropped (too many at once).
    sdns_dropped,
}

/// How a connection's first answer went: `path` is `zrtt` or `tls`,
/// `early` whether it was sent before the TCP handshake completed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabels {
    /// `zrtt` or `tls`.
    pub path: &'static str,
    /// `true` when sent before the handshake completed.
    pub early: &'static str,
}

/// Latency histograms (seconds, buckets from 0.5 ms doubling to about 16 s).
#[derive(Debug)]
pub struct Latency {
    /// Backend response head after the request was sent to it.
    pub backend: Histogram,
    /// From a connection's first bytes to its first response head, by path.
    pub first_answer: Family<AnswerLabels, Histogram>,
    /// Shared replay store checks, until the answer or the deadline.
    pub replay_store: Histogram,
    /// TLS session takes from the fleet's store, until the answer or the
    /// deadline.
    pub tls_session_take: Histogram,
}

fn buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 16)
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            backend: Histogram::new(buckets()),
            first_answer: Family::new_with_constructor(|| Histogram::new(buckets())),
            // 25 us doubling to about 0.1 s: the deadline is 1 ms by default.
            replay_store: Histogram::new(exponential_buckets(0.000_025, 2.0, 13)),
            tls_session_take: Histogram::new(exponential_buckets(0.000_025, 2.0, 13)),
        }
    }
}

impl Latency {
    fn register(&self, r: &mut Registry) {
        r.register(
            "backend_response_seconds",
            "Backend response head after the request was sent to it.",
            self.backend.clone(),
        );
        r.register(
            "first_answer_seconds",
            "From a connection's first bytes to its first response head, by path (zrtt or tls) and whether it was answered before the TCP handshake completed.",
            self.first_answer.clone(),
        );
        r.register(
            "replay_store_check_seconds",
            "Shared replay store checks (SET NX on Redis) of accepted first flights, until the answer or the deadline.",
            self.replay_store.clone(),
        );
        r.register(
            "tls_session_take_seconds",
            "TLS session takes from the fleet's store (GETDEL and a tombstone, one Redis script) before a resumption, until the answer or the deadline.",
            self.tls_session_take.clone(),
        );
    }
}

/// Which backend: its site (the site's first name, `*` for a default site
/// without names) and the backend as configured (`127.0.0.1:8080`,
/// `unix:/run/app.sock`, `proxy-v2+h2c://app:9000`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    /// The site.
    pub site: String,
    /// The backend.
    pub backend: String,
}

/// Per-backend gauges and counters (gateway/pool.rs, gateway/health.rs).
#[derive(Debug, Default)]
pub struct BackendMetrics {
    /// 1 while the backend takes requests, 0 while marked down.
    pub up: Family<BackendLabels, Gauge>,
    /// Requests sent to the backend (each attempt).
    pub requests: Family<BackendLabels, Counter>,
    /// Connections to the backend that failed (requests then go to another).
    pub connect_failures: Family<BackendLabels, Counter>,
    /// Active health checks that failed.
    pub check_failures: Family<BackendLabels, Counter>,
}

impl BackendMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "backend_up",
            "1 while the backend takes requests, 0 while marked down (passive or active health).",
            self.up.clone(),
        );
        r.register(
            "backend_requests",
            "Requests sent to the backend (each attempt).",
            self.requests.clone(),
        );
        r.register(
            "backend_connect_failures",
            "Connections to the backend that failed before any byte of a request was sent.",
            self.connect_failures.clone(),
        );
        r.register(
            "backend_check_failures",
            "Active health checks of the backend that failed.",
            self.check_failures.clone(),
        );
    }
}

impl Metrics {
    /// Add one to a counter.
    pub fn inc(counter: &Counter) {
        counter.inc();
    }

    /// OpenMetrics text: `zrtt_gateway_<name>_total <value>` per counter,
    /// with `# HELP` and `# TYPE` lines, ending in `# EOF`.
    pub fn render(&self) -> String {
        crate::admin::encode(&self.registry())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openmetrics_with_help_and_totals() {
        let m = Metrics::default();
        Metrics::inc(&m.requests);
        Metrics::inc(&m.requests);
        let text = m.render();
        assert!(
            text.contains("# HELP zrtt_gateway_requests HTTP requests forwarded to the backend."),
            "{text}"
        );
        assert!(
            text.contains("# TYPE zrtt_gateway_requests counter"),
            "{text}"
        );
        assert!(text.contains("\nzrtt_gateway_requests_total 2\n"), "{text}");
        assert!(
            text.contains("\nzrtt_gateway_connections_total 0\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        m.latency.backend.observe(0.003);
        m.latency
            .first_answer
            .get_or_create(&AnswerLabels {
                path: "zrtt",
                early: "true",
            })
            .observe(0.021);
        let text = m.render();
        assert!(
            text.contains("# TYPE zrtt_gateway_backend_response_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("zrtt_gateway_backend_response_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "zrtt_gateway_first_answer_seconds_count{path=\"zrtt\",early=\"true\"} 1"
            ),
            "{text}"
        );
        assert_eq!(
            m.snapshot().iter().find(|(n, _)| *n == "requests"),
            Some(&("requests", 2))
        );
        // The shared replay store's (docs/FLEET.md).
        Metrics::inc(&m.replay_store_unavailable);
        m.latency.replay_store.observe(0.0003);
        let text = m.render();
        for want in [
            "# HELP zrtt_gateway_replay_store_replays First flights the local filter",
            "\nzrtt_gateway_replay_store_replays_total 0\n",
            "\nzrtt_gateway_replay_store_unavailable_total 1\n",
            "# TYPE zrtt_gateway_replay_store_check_seconds histogram",
            "zrtt_gateway_replay_store_check_seconds_bucket{le=\"0.0004\"} 1",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        let b = BackendLabels {
            site: "a.example".into(),
            backend: "127.0.0.1:8080".into(),
        };
        m.backends.up.get_or_create(&b).set(1);
        m.backends.requests.get_or_create(&b).inc();
        let text = m.render();
        for want in [
            "# TYPE zrtt_gateway_backend_up gauge",
            "zrtt_gateway_backend_up{site=\"a.example\",backend=\"127.0.0.1:8080\"} 1",
            "zrtt_gateway_backend_requests_total{site=\"a.example\",backend=\"127.0.0.1:8080\"} 1",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }
}
