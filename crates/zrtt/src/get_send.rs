//! `zrtt get`'s one request over a [`ZrttStream`], with the HTTP version
//! the stream chose (HTTP/2 inside zrtt where the key record offers it).

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use zrtt_net::client::ZrttStream;

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
