//! The TLS path on the zrtt port: TLS clients (and zrtt clients that fell
//! back) get the same backend after a normal handshake.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use tokio::net::TcpStream;

use super::gate::Gate;
use super::listener::SourceSlot;
use super::{relay, Metrics, Shared};

/// Serve one TLS connection: wait for the TCP handshake (a ClientHello
/// that rode in the SYN gets no certificate flight before it), then the
/// TLS handshake, then HTTP to the backend.
pub(super) async fn serve(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    gate_fd: OwnedFd,
    slot: Arc<SourceSlot>,
) {
    let t = &shared.cfg.timeouts;
    Metrics::inc(&shared.metrics.tls_connections);
    let gate = match Gate::new(gate_fd, false, t.gate) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            tracing::warn!("TLS {peer}: {e}");
            return;
        }
    };
    if gate.wait_to_send().await.is_err() {
        Metrics::inc(&shared.metrics.gate_timeouts);
        return;
    }
    // The handshake completed: the source is real and takes its place.
    if !slot.claim() {
        Metrics::inc(&shared.metrics.source_limited);
        return;
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(shared.cfg.tls.clone());
    let Ok(Ok(tls)) = tokio::time::timeout(t.first_flight, acceptor.accept(tcp)).await else {
        return;
    };
    let protocol = match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => relay::Protocol::Http2,
        _ => relay::Protocol::Http1,
    };
    if protocol == relay::Protocol::Http2 {
        Metrics::inc(&shared.metrics.tls_h2_connections);
    }
    if tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        Metrics::inc(&shared.metrics.tls_resumed);
    }
    relay::serve_http(shared.clone(), tls, peer, gate, false, None, slot, protocol).await;
}
