//! [`ZrttStream`]: an `AsyncRead + AsyncWrite` client stream for hyper that
//! connects lazily. The bytes written before the first flush (one request)
//! become the early data; the handshake ([`establish`]) runs at that flush.
//! Only idempotent requests without a body (GET, HEAD, OPTIONS) travel as
//! early data by default; any other request goes inside the channel once
//! the server's reply arrived (one round trip later, already forward
//! secret).
//!
//! HTTP/2 ([`ZrttStream::negotiated_h2`], chosen at creation by the
//! config's [`Http2Policy`] and the host's key record): hyper writes and
//! flushes the connection preface and SETTINGS before any request, so the
//! stream stays *corked* (flushes buffer) until the first request's header
//! block is complete ([`zrtt_proto::http2::first_request`]), the buffer
//! reaches [`H2_CORK_LIMIT`], or [`H2_CORK_TIMEOUT`] passes (a connection
//! opened without a request still connects); then preface, SETTINGS and
//! the request travel together, as early data up to the end of the leading
//! run of bodiless GETs (what hyper wrote after it follows inside the
//! channel).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::config::ClientConfig;
use super::connect::{establish_as, AppProtocol, Conn, ConnInfo, Target};
use super::key_race::establish_when_keys_as;
use super::keys::PrefetchFuture;
use super::shortcut::{establish_shortcut, ShortcutLookup};
use crate::error::Result;

type Establishing = Pin<Box<dyn Future<Output = Result<(Conn, ConnInfo)>> + Send>>;

// One per connection; boxing the connection would add a pointer chase per read.
#[allow(clippy::large_enum_variant)]
enum StreamState {
    Buffering {
        cfg: Arc<ClientConfig>,
        target: Target,
        buf: Vec<u8>,
        keys: Option<PrefetchFuture>,
        /// The DNS shortcut's lookup: the address is not known yet.
        shortcut: Option<ShortcutLookup>,
        /// HTTP/2: fires [`H2_CORK_TIMEOUT`] after the first corked flush.
        cork: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    Connecting(Establishing),
    Ready(Conn),
    Failed(io::ErrorKind, String),
}

/// Shared view of a [`ZrttStream`]'s [`ConnInfo`], filled once connected;
/// also the extension that responses over a
/// [`ZrttConnector`](super::ZrttConnector) carry ([`super::conn_info`]).
pub type ConnInfoHandle = Arc<Mutex<Option<ConnInfo>>>;

/// A lazily connecting client stream for hyper (see the module docs).
pub struct ZrttStream {
    state: StreamState,
    protocol: AppProtocol,
    info: ConnInfoHandle,
    read_waker: Option<Waker>,
}

impl std::fmt::Debug for ZrttStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZrttStream").finish_non_exhaustive()
    }
}

/// Largest request head buffered before the handshake.
const MAX_BUFFERED_REQUEST: usize = 64 * 1024;

/// HTTP/2: the most bytes held back waiting for a complete first request
/// (the usual `max_early_data`; more could not be early data anyway).
pub const H2_CORK_LIMIT: usize = 16 * 1024;

/// HTTP/2: the longest the preface waits for a first request.
pub const H2_CORK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(50);

/// The protocol `cfg` chooses for `host` now (see [`Http2Policy`]).
fn choose_protocol(cfg: &ClientConfig, host: &str) -> AppProtocol {
    let advertised = || {
        cfg.keys
            .lookup(host, (cfg.clock)())
            .is_some_and(|r| r.body().flags.http2())
    };
    match cfg.http2.speaks_h2(advertised) {
        true => AppProtocol::Http2,
        false => AppProtocol::Http1,
    }
}

impl ZrttStream {
    /// A stream to `target`; nothing is sent until the first flush. The
    /// protocol is chosen now ([`ZrttStream::negotiated_h2`]).
    pub fn new(cfg: Arc<ClientConfig>, target: Target) -> Self {
        let protocol = choose_protocol(&cfg, &target.host);
        Self {
            protocol,
            state: StreamState::Buffering {
                cfg,
                target,
                buf: Vec::new(),
                keys: None,
                shortcut: None,
                cork: None,
            },
            info: Arc::new(Mutex::new(None)),
            read_waker: None,
        }
    }

    /// A stream to `target` whose key records are still being fetched by
    /// `keys`: at the first flush TLS starts beside them and whichever is
    /// ready first carries the request ([`establish_when_keys`](super::establish_when_keys)).
    pub fn with_pending_keys(cfg: Arc<ClientConfig>, target: Target, keys: PrefetchFuture) -> Self {
        let mut s = Self::new(cfg, target);
        if let StreamState::Buffering { keys: k, .. } = &mut s.state {
            *k = Some(keys);
        }
        s
    }

    /// A stream to `host` on `port` whose address `lookup` is still
    /// finding: at the first flush the request also goes inside a DNS query
    /// if it may (the DNS shortcut, docs/DNS.md §8: a GET or HEAD without a
    /// body, [`ClientConfig::dns_shortcut`] on, a key record held), raced
    /// against the plain path, which starts as soon as the address is
    /// known; otherwise the plain path once it is. A request answered by the
    /// shortcut reads as its whole response, then the end of the stream.
    pub fn with_shortcut(
        cfg: Arc<ClientConfig>,
        host: String,
        port: u16,
        lookup: ShortcutLookup,
    ) -> Self {
        // The address is the lookup's; the target keeps only the port.
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
        let mut s = Self::new(cfg, Target { host, addr });
        if let StreamState::Buffering { shortcut, .. } = &mut s.state {
            *shortcut = Some(lookup);
        }
        s
    }

    /// What happened while connecting (`None` until connected).
    pub fn info(&self) -> ConnInfoHandle {
        self.info.clone()
    }

    /// Whether the stream speaks HTTP/2 (decided at creation: the config's
    /// [`Http2Policy`](super::Http2Policy) and the host's key record as known then; the zrtt
    /// first flight and the TLS fallback both insist on it). The caller
    /// must speak what this says.
    pub fn negotiated_h2(&self) -> bool {
        self.protocol == AppProtocol::Http2
    }

    /// HTTP/2 before the first request is complete: keep buffering
    /// (arming the cork timer); `false` once it is time to connect.
    fn corked(&mut self, cx: &mut Context<'_>) -> bool {
        let StreamState::Buffering { buf, cork, .. } = &mut self.state else {
            return false;
        };
        if self.protocol != AppProtocol::Http2
            || buf.len() >= H2_CORK_LIMIT
            || zrtt_proto::http2::first_request(buf, usize::MAX)
                != zrtt_proto::http2::FirstRequest::Incomplete
        {
            return false;
        }
        let timer = cork.get_or_insert_with(|| Box::pin(tokio::time::sleep(H2_CORK_TIMEOUT)));
        timer.as_mut().poll(cx).is_pending()
    }

    fn start(&mut self) {
        if let StreamState::Buffering {
            cfg,
            target,
            buf,
            keys,
            shortcut,
            ..
        } = &mut self.state
        {
            let cfg = cfg.clone();
            let target = target.clone();
            let request = std::mem::take(buf);
            let p = self.protocol;
            self.state =
                StreamState::Connecting(match (keys.take(), shortcut.take()) {
                    (_, Some(lookup)) => Box::pin(async move {
                        establish_shortcut(cfg, &target, p, request, lookup).await
                    }),
                    (Some(keys), None) => Box::pin(async move {
                        establish_when_keys_as(&cfg, &target, p, &request, keys).await
                    }),
                    (None, None) => {
                        Box::pin(async move { establish_as(&cfg, &target, p, &request).await })
                    }
                });
        }
    }

    /// Drive the handshake; `Ready(Ok)` once the connection is usable.
    fn poll_connected(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.state {
            StreamState::Buffering { .. } => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "nothing written yet",
            ))),
            StreamState::Connecting(fut) => match fut.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok((conn, info))) => {
                    *self.info.lock().unwrap_or_else(|p| p.into_inner()) = Some(info);
                    self.state = StreamState::Ready(conn);
                    if let Some(w) = self.read_waker.take() {
                        w.wake();
                    }
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(e)) => {
                    let e = io::Error::from(e);
                    self.state = StreamState::Failed(e.kind(), e.to_string());
                    if let Some(w) = self.read_waker.take() {
                        w.wake();
                    }
                    Poll::Ready(Err(e))
                }
            },
            StreamState::Ready(_) => Poll::Ready(Ok(())),
            StreamState::Failed(kind, msg) => Poll::Ready(Err(io::Error::new(*kind, msg.clone()))),
        }
    }
}

macro_rules! conn_call {
    ($conn:expr, $method:ident, $cx:expr $(, $arg:expr)*) => {
        match $conn {
            Conn::Zrtt(s) => Pin::new(s.as_mut()).$method($cx $(, $arg)*),
            Conn::Tls(s) => Pin::new(s.as_mut()).$method($cx $(, $arg)*),
            Conn::Answer(s) => Pin::new(s.as_mut()).$method($cx $(, $arg)*),
        }
    };
}

impl AsyncRead for ZrttStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let StreamState::Buffering { buf, .. } = &this.state {
            // HTTP/2: a corked preface goes out when the cork timer fires
            // (hyper's connection task keeps reading).
            let h2 = this.protocol == AppProtocol::Http2;
            if buf.is_empty() || !h2 || this.corked(cx) {
                this.read_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            this.start();
        }
        std::task::ready!(this.poll_connected(cx))?;
        match &mut this.state {
            StreamState::Ready(conn) => conn_call!(conn, poll_read, cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl AsyncWrite for ZrttStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let StreamState::Buffering { buf, .. } = &mut this.state {
            if buf.len() + data.len() <= MAX_BUFFERED_REQUEST {
                buf.extend_from_slice(data);
                return Poll::Ready(Ok(data.len()));
            }
            this.start();
        }
        std::task::ready!(this.poll_connected(cx))?;
        match &mut this.state {
            StreamState::Ready(conn) => conn_call!(conn, poll_write, cx, data),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let StreamState::Buffering { buf, .. } = &this.state {
            if buf.is_empty() || this.corked(cx) {
                return Poll::Ready(Ok(()));
            }
            this.start();
        }
        std::task::ready!(this.poll_connected(cx))?;
        match &mut this.state {
            StreamState::Ready(conn) => conn_call!(conn, poll_flush, cx),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, StreamState::Buffering { .. }) {
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(this.poll_connected(cx))?;
        match &mut this.state {
            StreamState::Ready(conn) => conn_call!(conn, poll_shutdown, cx),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}
