//! [`ZrttStream`]: an `AsyncRead + AsyncWrite` client stream for hyper that
//! connects lazily. The bytes written before the first flush (one request)
//! become the early data; the handshake ([`establish`]) runs at that flush.
//! Only idempotent requests without a body (GET, HEAD, OPTIONS) travel as
//! early data by default; any other request goes inside the channel once
//! the server's reply arrived (one round trip later, already forward
//! secret).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::config::ClientConfig;
use super::connect::{establish, Conn, ConnInfo, Target};
use super::key_race::establish_when_keys;
use super::keys::PrefetchFuture;
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

impl ZrttStream {
    /// A stream to `target`; nothing is sent until the first flush.
    pub fn new(cfg: Arc<ClientConfig>, target: Target) -> Self {
        Self {
            state: StreamState::Buffering {
                cfg,
                target,
                buf: Vec::new(),
                keys: None,
            },
            info: Arc::new(Mutex::new(None)),
            read_waker: None,
        }
    }

    /// A stream to `target` whose key records are still being fetched by
    /// `keys`: at the first flush TLS starts beside them and whichever is
    /// ready first carries the request ([`establish_when_keys`]).
    pub fn with_pending_keys(cfg: Arc<ClientConfig>, target: Target, keys: PrefetchFuture) -> Self {
        let mut s = Self::new(cfg, target);
        if let StreamState::Buffering { keys: k, .. } = &mut s.state {
            *k = Some(keys);
        }
        s
    }

    /// What happened while connecting (`None` until connected).
    pub fn info(&self) -> ConnInfoHandle {
        self.info.clone()
    }

    fn start(&mut self) {
        if let StreamState::Buffering {
            cfg,
            target,
            buf,
            keys,
        } = &mut self.state
        {
            let cfg = cfg.clone();
            let target = target.clone();
            let request = std::mem::take(buf);
            self.state = StreamState::Connecting(match keys.take() {
                Some(keys) => {
                    Box::pin(
                        async move { establish_when_keys(&cfg, &target, &request, keys).await },
                    )
                }
                None => Box::pin(async move { establish(&cfg, &target, &request).await }),
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
        if matches!(this.state, StreamState::Buffering { .. }) {
            this.read_waker = Some(cx.waker().clone());
            return Poll::Pending;
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
            if buf.is_empty() {
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
