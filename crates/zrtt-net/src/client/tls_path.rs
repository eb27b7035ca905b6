//! The TLS 1.3 path of a connection (rustls): the handshake on the zrtt
//! port, raced or as the fallback ([`super::connect`]), and the request
//! sent on it.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::config::ClientConfig;
use super::connect::{AppProtocol, Conn, ConnInfo, Mode, Target};
use crate::error::{Error, Result};
use crate::tfo::{self, ConnectMode};

/// A TLS connection and the times to its TCP and TLS handshakes.
pub(super) struct TlsReady {
    tls: TlsStream<TcpStream>,
    time_connect: Duration,
    time_appconnect: Duration,
}

impl TlsReady {
    /// The RTT the kernel measured on the TLS connection's socket.
    pub(super) fn rtt(&self) -> Duration {
        let (tcp, _) = self.tls.get_ref();
        tfo::stream_info(tcp)
            .map(|i| Duration::from_micros(u64::from(i.rtt_us)))
            .unwrap_or_default()
    }
}

/// TCP connect and TLS 1.3 handshake on the same port, offering the ALPN
/// of `protocol` (HTTP/2: only `h2`, on a copy of the configuration).
/// With `hello_at`, the ClientHello is not sent before that instant (the
/// TCP handshake starts at once): a race that is dropped before it costs
/// the server no TLS work ([`super::KEY_RACE_GRACE`]).
pub(super) async fn tls_handshake(
    cfg: &ClientConfig,
    target: &Target,
    protocol: AppProtocol,
    t0: Instant,
    hello_at: Option<Instant>,
) -> Result<TlsReady> {
    let tcp = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(target.addr))
        .await
        .map_err(|_| Error::Timeout("connect"))?
        .map_err(Error::io("connect"))?;
    tcp.set_nodelay(true).map_err(Error::io("TCP_NODELAY"))?;
    let time_connect = t0.elapsed();
    if let Some(at) = hello_at {
        tokio::time::sleep_until(at.into()).await;
    }
    let name = pki_types::ServerName::try_from(target.host.clone())
        .map_err(|_| Error::Config(format!("{:?} is not a valid server name", target.host)))?;
    let tls_cfg = match protocol {
        AppProtocol::Http1 => cfg.tls.clone(),
        AppProtocol::Http2 => {
            let mut c = (*cfg.tls).clone();
            c.alpn_protocols = vec![b"h2".to_vec()];
            std::sync::Arc::new(c)
        }
    };
    let connector = tokio_rustls::TlsConnector::from(tls_cfg);
    let tls = tokio::time::timeout(cfg.connect_timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| Error::Timeout("TLS handshake"))?
        .map_err(|e| match e.downcast::<rustls::Error>() {
            Ok(t) => Error::Tls(t),
            Err(io) => Error::io("TLS handshake")(io),
        })?;
    Ok(TlsReady {
        tls,
        time_connect,
        time_appconnect: t0.elapsed(),
    })
}

/// Send `request` on a ready TLS connection that must speak `protocol`.
pub(super) async fn tls_send(
    ready: TlsReady,
    protocol: AppProtocol,
    request: &[u8],
) -> Result<(Conn, ConnInfo)> {
    let TlsReady {
        mut tls,
        time_connect,
        time_appconnect,
    } = ready;
    if protocol == AppProtocol::Http2 && tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(Error::Protocol(
            "the TLS server did not agree to HTTP/2 (ALPN h2)",
        ));
    }
    tls.write_all(request)
        .await
        .map_err(Error::io("sending request"))?;
    tls.flush().await.map_err(Error::io("sending request"))?;
    let (tcp_ref, _) = tls.get_ref();
    let rtt = tfo::stream_info(tcp_ref)
        .map(|i| Duration::from_micros(u64::from(i.rtt_us)))
        .unwrap_or_default();
    let local_addr = tcp_ref.local_addr().ok();
    let info = ConnInfo {
        mode: Mode::TlsFallback,
        notes: Vec::new(),
        fallback: None,
        connect_mode: ConnectMode::Plain,
        syn_data_acked: false,
        early_data: false,
        retried_with_fresh_keys: false,
        time_connect,
        time_appconnect,
        rtt,
        round_trips: 3,
        local_addr,
        verifiers: Vec::new(),
        protocol,
        resumed: false,
    };
    Ok((Conn::Tls(Box::new(tls)), info))
}
