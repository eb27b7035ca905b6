//! The HTTPS proxy's listener ([`ProxyConfig::tls`](super::ProxyConfig::tls)):
//! its TLS settings and the handshake in front of each client connection.

use std::sync::Arc;

use tokio::net::TcpStream;

use super::{inc, serve_connection, Shared};
use crate::error::Result;

/// The TLS settings of an HTTPS proxy ([`ProxyConfig::tls`](super::ProxyConfig::tls)): the PEM
/// certificate chain and private key the proxy shows its clients (for the
/// name or address they connect to, e.g. `127.0.0.1`), TLS 1.3 and 1.2,
/// ALPN `h2` then `http/1.1`. The certificate authenticates the proxy only;
/// `https://` URLs still go through `CONNECT` tunnels to their origins,
/// end to end. Errors name the file.
pub fn proxy_tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>> {
    let ck = crate::gateway::load_certified_key(cert, key)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
    .with_no_client_auth()
    .with_cert_resolver(crate::gateway::ReloadableCert::new(ck));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The TLS handshake (bounded by the header-read timeout), then HTTP/2 if
/// the client chose `h2`, else HTTP/1.1.
pub(super) async fn serve_tls(shared: Arc<Shared>, tcp: TcpStream, tls: tokio_rustls::TlsAcceptor) {
    let _ = tcp.set_nodelay(true);
    let bound = shared.cfg.timeouts.header_read;
    let deadline = tokio::time::Instant::now() + bound;
    // A connection that never sends a byte (a readiness probe, a
    // browser's unused preconnection) is not a failed handshake.
    let mut first = [0u8; 1];
    if !matches!(
        tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await,
        Ok(Ok(n)) if n > 0
    ) {
        inc(&shared.metrics.tls_unused);
        return;
    }
    let stream = match tokio::time::timeout_at(deadline, tls.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            inc(&shared.metrics.tls_failures);
            tracing::debug!("proxy TLS handshake: {e}");
            return;
        }
        Err(_) => {
            inc(&shared.metrics.tls_failures);
            tracing::debug!("proxy TLS handshake: no handshake within {bound:?}");
            return;
        }
    };
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    if h2 {
        inc(&shared.metrics.h2_connections);
    }
    serve_connection(shared, stream, None, h2).await;
}
