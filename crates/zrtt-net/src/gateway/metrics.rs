//! Gateway counters: lock-free, rendered as `name value` lines
//! (Prometheus text format without types).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Gateway counters since start.
        #[derive(Debug, Default)]
        pub struct Metrics {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
        }

        impl Metrics {
            /// All counters as (name, value).
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
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
}

impl Metrics {
    /// Add one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Text form: one `zrtt_gateway_<name> <value>` line per counter.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, value) in self.snapshot() {
            out.push_str("zrtt_gateway_");
            out.push_str(name);
            out.push(' ');
            out.push_str(&value.to_string());
            out.push('\n');
        }
        out
    }
}

/// Serve `GET /metrics` (any path) as text on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (mut tcp, _) = tokio::select! {
            () = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
        };
        let body = metrics.render();
        let _ = tokio::time::timeout(Duration::from_secs(2), async move {
            let mut req = [0u8; 1024];
            let _ = tcp.read(&mut req).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = tcp.write_all(head.as_bytes()).await;
            let _ = tcp.write_all(body.as_bytes()).await;
            let _ = tcp.shutdown().await;
        })
        .await;
    }
}
