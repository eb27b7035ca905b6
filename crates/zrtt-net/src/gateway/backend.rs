//! Where a site's requests go: a backend by address, host name or Unix
//! socket, spoken to in HTTP/1.1 or HTTP/2 over cleartext (h2c, prior
//! knowledge), through one pooled client per backend (keep-alive; idle
//! connections kept 60 s). A host name is resolved at each new
//! connection, so a changed DNS answer takes effect without a restart.
//!
//! A backend marked `proxy-v2+` gets a PROXY protocol v2 header at the
//! start of each connection (proxy_header.rs). Such a connection carries
//! one client's address, so it is never pooled across clients: it is
//! opened for one client connection ([`open`]) and kept for that
//! connection's next requests (pool.rs); health checks open their own.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::body::RequestBody;
use super::static_files::StaticRoot;

/// A backend: where it listens and which HTTP it speaks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Backend {
    /// Where to connect.
    pub target: BackendTarget,
    /// HTTP/2 over cleartext with prior knowledge (RFC 9113 §3.3) instead
    /// of HTTP/1.1.
    pub h2c: bool,
    /// Send a PROXY protocol v2 header (the client's address and port, and
    /// the gateway's) at the start of each connection.
    pub proxy_v2: bool,
}

/// Where a backend listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BackendTarget {
    /// A TCP address, or a host name and port (resolved at each connect).
    Tcp {
        /// IP address or host name.
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix domain socket.
    Unix(PathBuf),
    /// No server: the gateway serves the files of a directory itself
    /// (static_files.rs).
    Files(StaticRoot),
}

impl Backend {
    /// HTTP/1.1 to `target`.
    pub fn http1(target: BackendTarget) -> Self {
        Self {
            target,
            h2c: false,
            proxy_v2: false,
        }
    }
}

impl From<StaticRoot> for Backend {
    fn from(root: StaticRoot) -> Self {
        Self::http1(BackendTarget::Files(root))
    }
}

impl Backend {
    /// The directory this backend serves, if it is one (`files:DIR`).
    pub fn files(&self) -> Option<&StaticRoot> {
        match &self.target {
            BackendTarget::Files(r) => Some(r),
            _ => None,
        }
    }
}

/// `files:DIR`, `files+index:DIR`, `files+links:DIR`,
/// `files+index+links:DIR`.
fn parse_files(s: &str) -> Option<Result<StaticRoot, String>> {
    let mut rest = s.strip_prefix("files")?;
    let (mut index, mut outside_links) = (false, false);
    loop {
        if let Some(r) = rest.strip_prefix("+index") {
            (index, rest) = (true, r);
        } else if let Some(r) = rest.strip_prefix("+links") {
            (outside_links, rest) = (true, r);
        } else {
            break;
        }
    }
    let dir = rest.strip_prefix(':')?;
    if dir.is_empty() {
        return Some(Err(format!("{s:?}: files:DIR needs a directory")));
    }
    Some(Ok(StaticRoot {
        dir: PathBuf::from(dir),
        index,
        outside_links,
    }))
}

impl From<SocketAddr> for Backend {
    fn from(a: SocketAddr) -> Self {
        Self::http1(BackendTarget::Tcp {
            host: a.ip().to_string(),
            port: a.port(),
        })
    }
}

impl FromStr for Backend {
    type Err = String;

    /// `ADDR:PORT`, `HOST:PORT`, `unix:/PATH`, each optionally after
    /// `h2c://` (`h2c://HOST:PORT`, `h2c+unix:/PATH`), all optionally after
    /// `proxy-v2+` (`proxy-v2+10.0.0.2:80`, `proxy-v2+h2c://app:9000`).
    /// `files:DIR` (with `+index`, `+links` before the colon): the gateway
    /// serves DIR's files itself.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(root) = parse_files(s) {
            return root.map(Self::from);
        }
        let (proxy_v2, rest) = match s.strip_prefix("proxy-v2+") {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (h2c, rest) = if let Some(r) = rest.strip_prefix("h2c://") {
            (true, r)
        } else if let Some(r) = rest.strip_prefix("h2c+") {
            (true, r)
        } else if let Some(r) = rest.strip_prefix("http://") {
            (false, r)
        } else {
            (false, rest)
        };
        let target = if let Some(path) = rest.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(format!("{s:?}: a Unix socket path must be absolute"));
            }
            BackendTarget::Unix(PathBuf::from(path))
        } else if let Ok(a) = rest.parse::<SocketAddr>() {
            BackendTarget::Tcp {
                host: a.ip().to_string(),
                port: a.port(),
            }
        } else {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?}: use HOST:PORT, ADDR:PORT or unix:/PATH"))?;
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("{s:?}: bad port {port:?}"))?;
            let valid = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
            if !valid {
                return Err(format!("{s:?}: {host:?} is not a host name"));
            }
            BackendTarget::Tcp {
                host: host.to_ascii_lowercase(),
                port,
            }
        };
        Ok(Self {
            target,
            h2c,
            proxy_v2,
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.proxy_v2 {
            f.write_str("proxy-v2+")?;
        }
        if self.h2c {
            f.write_str(match self.target {
                BackendTarget::Tcp { .. } => "h2c://",
                BackendTarget::Unix(_) | BackendTarget::Files(_) => "h2c+",
            })?;
        }
        match &self.target {
            BackendTarget::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            BackendTarget::Tcp { host, port } => write!(f, "{host}:{port}"),
            BackendTarget::Unix(p) => write!(f, "unix:{}", p.display()),
            BackendTarget::Files(r) => {
                f.write_str("files")?;
                if r.index {
                    f.write_str("+index")?;
                }
                if r.outside_links {
                    f.write_str("+links")?;
                }
                write!(f, ":{}", r.dir.display())
            }
        }
    }
}

/// A connection to a backend.
#[derive(Debug)]
pub(super) enum BackendStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Connection for BackendStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for BackendStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BackendStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, b),
            Self::Unix(s) => Pin::new(s).poll_write(cx, b),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Connects every request's connection to one backend, whatever the URI.
#[derive(Clone, Debug)]
pub(super) struct Connector {
    target: BackendTarget,
    timeout: Duration,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<BackendStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let (target, limit) = (self.target.clone(), self.timeout);
        Box::pin(async move { connect(&target, limit).await.map(TokioIo::new) })
    }
}

/// A new connection to `target` within `limit`.
pub(super) async fn connect(target: &BackendTarget, limit: Duration) -> io::Result<BackendStream> {
    let connect = async {
        match target {
            BackendTarget::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Ok(BackendStream::Tcp(s))
            }
            BackendTarget::Unix(p) => Ok(BackendStream::Unix(UnixStream::connect(p).await?)),
            BackendTarget::Files(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a directory is served, not connected to",
            )),
        }
    };
    match tokio::time::timeout(limit, connect).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "connecting to the backend timed out",
        )),
    }
}

/// The pooled client of one backend.
pub(super) type BackendClient = Client<Connector, RequestBody>;

/// A pooled client for `backend`, connecting within `connect_timeout`.
pub(super) fn client(backend: &Backend, connect_timeout: Duration) -> BackendClient {
    let connector = Connector {
        target: backend.target.clone(),
        timeout: connect_timeout,
    };
    let mut b = Client::builder(TokioExecutor::new());
    b.pool_idle_timeout(Duration::from_secs(60))
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new());
    if backend.h2c {
        b.http2_only(true);
    }
    b.build(connector)
}

/// One connection of its own to a backend (not pooled), ready for a
/// request.
pub(super) enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<RequestBody>),
    Http2(hyper::client::conn::http2::SendRequest<RequestBody>),
}

impl Sender {
    /// Send `req` (its URI in origin form for HTTP/1.1, absolute for h2c).
    pub(super) async fn send(
        &mut self,
        req: hyper::Request<RequestBody>,
    ) -> hyper::Result<hyper::Response<hyper::body::Incoming>> {
        match self {
            Self::Http1(s) => s.send_request(req).await,
            Self::Http2(s) => s.send_request(req).await,
        }
    }

    /// Whether a request may be sent now (the previous one finished, the
    /// connection still open).
    pub(super) fn is_ready(&self) -> bool {
        match self {
            Self::Http1(s) => s.is_ready(),
            Self::Http2(s) => s.is_ready(),
        }
    }

    /// Whether `uri` is sent as it is (h2c) or in origin form (HTTP/1.1).
    pub(super) fn absolute_uri(&self) -> bool {
        matches!(self, Self::Http2(_))
    }
}

/// Open a connection of its own to `backend` within `limit`, write
/// `header` (a PROXY protocol header) first, then speak its HTTP. An error
/// here means no request byte was sent. The connection's task ends when it
/// closes (the sender dropped and the response read, or an upgrade done).
pub(super) async fn open(
    backend: &Backend,
    limit: Duration,
    header: Option<&[u8]>,
) -> io::Result<Sender> {
    let mut stream = connect(&backend.target, limit).await?;
    if let Some(h) = header {
        tokio::time::timeout(limit, tokio::io::AsyncWriteExt::write_all(&mut stream, h))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "writing the PROXY header"))??;
    }
    let io = TokioIo::new(stream);
    let to_io = |e: hyper::Error| io::Error::other(e.to_string());
    if backend.h2c {
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(to_io)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("backend h2c connection: {e}");
            }
        });
        Ok(Sender::Http2(send))
    } else {
        let (send, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(to_io)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!("backend connection: {e}");
            }
        });
        Ok(Sender::Http1(send))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backends_parse_and_print_back() {
        for s in [
            "127.0.0.1:8080",
            "[::1]:80",
            "app.internal:8080",
            "unix:/run/app.sock",
            "h2c://app.internal:9000",
            "h2c+unix:/run/grpc.sock",
            "proxy-v2+127.0.0.1:8080",
            "proxy-v2+h2c://app.internal:9000",
            "proxy-v2+unix:/run/app.sock",
            "files:/srv/www",
            "files+index:/srv/www",
            "files+links:www",
            "files+index+links:/srv/www",
        ] {
            let b: Backend = s.parse().unwrap();
            assert_eq!(b.to_string(), s);
        }
        let b: Backend = "h2c://10.0.0.1:9000".parse().unwrap();
        assert!(b.h2c && !b.proxy_v2);
        let b: Backend = "proxy-v2+h2c+unix:/run/a.sock".parse().unwrap();
        assert!(b.h2c && b.proxy_v2);
        let b: Backend = "files+links+index:/srv".parse().unwrap();
        assert_eq!(b.files().unwrap().dir, PathBuf::from("/srv"));
        assert!(b.files().unwrap().index && b.files().unwrap().outside_links);
        assert!("files:".parse::<Backend>().is_err());
        assert_eq!(
            Backend::from(SocketAddr::from(([127, 0, 0, 1], 1))),
            "127.0.0.1:1".parse().unwrap()
        );
        for bad in [
            "app",
            "app:x",
            "unix:run/app.sock",
            "a b:80",
            ":80",
            "h2c://",
            "proxy-v2+",
            "h2c://proxy-v2+a:1",
        ] {
            assert!(bad.parse::<Backend>().is_err(), "{bad}");
        }
    }
}
