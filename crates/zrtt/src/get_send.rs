//! `zrtt get`'s one request over a [`ZrttStream`], with the HTTP version
//! the stream chose (HTTP/2 inside zrtt where the key record offers it).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use zrtt_dns::resolver::{Resolver, ResolverConfig, Trust};
use zrtt_net::client::{ShortcutLookup, ZrttStream};

/// The request sender of the protocol the stream speaks.
pub(crate) enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    /// hyper's handshake over `stream` (HTTP/2 when `h2`), its connection
    /// driven by a task.
    pub(crate) async fn handshake(
        stream: ZrttStream,
        h2: bool,
    ) -> hyper::Result<(Self, tokio::task::JoinHandle<()>)> {
        let io = TokioIo::new(stream);
        Ok(if h2 {
            let (s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
            (Sender::H2(s), tokio::spawn(async move { drop(c.await) }))
        } else {
            let (s, c) = hyper::client::conn::http1::handshake(io).await?;
            (Sender::H1(s), tokio::spawn(async move { drop(c.await) }))
        })
    }

    pub(crate) async fn send(
        &mut self,
        req: hyper::Request<Full<Bytes>>,
    ) -> hyper::Result<hyper::Response<hyper::body::Incoming>> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        }
    }
}

/// An HTTP/2 request: the target in absolute form (`:authority`), no `Host`.
pub(crate) fn h2_request(
    req: hyper::Request<Full<Bytes>>,
    host: &str,
    port: u16,
) -> hyper::Request<Full<Bytes>> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    if let Ok(uri) = format!("https://{host}:{port}{path}").parse() {
        parts.uri = uri;
        parts.headers.remove(hyper::header::HOST);
    }
    parts.version = hyper::Version::HTTP_2;
    hyper::Request::from_parts(parts, body)
}

/// `--dns-shortcut` with `--record`: the resolver (`server`, else
/// /etc/resolv.conf) the shortcut's TXT query goes through, and the plain
/// address lookup through it, started now (its HTTPS, A and AAAA questions;
/// no TLSA, `cert` being pinned).
pub(crate) fn shortcut_lookup(
    server: Option<SocketAddr>,
    host: &str,
    port: u16,
    cert: Option<Vec<u8>>,
) -> Result<ShortcutLookup, String> {
    let cfg = match server {
        Some(s) => ResolverConfig::new(s),
        None => ResolverConfig::system().map_err(|e| e.to_string())?,
    };
    let dns = Arc::new(Resolver::new(cfg, Trust::none()));
    if let Some(c) = cert {
        dns.pin_cert(host, c);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (resolver, name) = (dns.clone(), host.to_owned());
    // Bounded by the resolver's timeouts; ends with the runtime anyway.
    tokio::spawn(async move {
        let now = zrtt_net::client::system_clock();
        let on_addresses = move |found: Vec<std::net::IpAddr>| drop(tx.send(found));
        if let Err(e) = resolver
            .resolve_addresses_first(&name, now, on_addresses)
            .await
        {
            tracing::debug!("address lookup: {e}");
        }
    });
    let name = host.to_owned();
    let addr = Box::pin(async move {
        let found = rx.await.unwrap_or_default();
        found
            .first()
            .map(|ip| SocketAddr::new(*ip, port))
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, format!("{name}: no address"))
            })
    });
    // A fresh resolver caches nothing yet: only an IP literal is known.
    let known = host
        .parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, port));
    Ok(ShortcutLookup { dns, addr, known })
}
