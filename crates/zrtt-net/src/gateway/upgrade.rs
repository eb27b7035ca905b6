//! Upgraded connections (RFC 9110 §7.8: WebSocket and any other protocol a
//! client asks for with `Upgrade`): the request goes to the backend with
//! its `Upgrade` field, and once the backend answers `101 Switching
//! Protocols` the gateway relays bytes both ways between the client's
//! connection (zrtt channel or TLS, HTTP/1.1) and the backend's, until
//! either side closes, nothing moved for `timeouts.upgraded_idle`, or the
//! gateway shuts down (after `timeouts.shutdown_grace`). A live stream is
//! not cut by the connection lifetime; an idle one is (nginx's
//! `proxy_read_timeout` plays this part).
//!
//! Upgrades are never served from early data ([`super::relay::early_use`]
//! holds a request carrying `Upgrade` until the client confirms the
//! handshake): a replayed flight opens no stream.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::listener::SourceSlot;
use super::{Metrics, Shared};

pub(super) use crate::http::{restore_upgrade as restore, upgrade_requested as requested};

/// Relay the two upgraded connections once both sides have switched, in a
/// task of its own (the 101 must reach the client first). `slot` keeps the
/// client's place in its source's count while the stream lives.
pub(super) fn relay(
    shared: &Arc<Shared>,
    client: OnUpgrade,
    backend: OnUpgrade,
    slot: Arc<SourceSlot>,
) {
    let shared = shared.clone();
    Metrics::inc(&shared.metrics.upgrades);
    tokio::spawn(async move {
        let (client, backend) = match tokio::try_join!(client, backend) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!("upgrade: {e}");
                return;
            }
        };
        let timeouts = shared.cfg.timeouts;
        let mut shutdown = shared.shutdown.subscribe();
        let copy = copy_until_idle(
            TokioIo::new(client),
            TokioIo::new(backend),
            timeouts.upgraded_idle,
        );
        tokio::select! {
            () = copy => {}
            () = async {
                let _ = shutdown.wait_for(|stopping| *stopping).await;
                tokio::time::sleep(timeouts.shutdown_grace).await;
            } => {}
        }
        drop(slot);
    });
}

/// Copy both ways until either side closes or an error, or until nothing
/// moved for `idle`.
async fn copy_until_idle<A, B>(a: A, b: B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut a = Active {
        inner: a,
        last: last.clone(),
        start,
    };
    let mut b = Active {
        inner: b,
        last: last.clone(),
        start,
    };
    let watchdog = async {
        loop {
            let seen = start + Duration::from_millis(last.load(Ordering::Relaxed));
            if seen.elapsed() >= idle {
                return;
            }
            tokio::time::sleep_until(seen + idle).await;
        }
    };
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut a, &mut b) => {
            if let Err(e) = r {
                tracing::debug!("upgraded stream: {e}");
            }
        }
        () = watchdog => tracing::debug!("upgraded stream idle for {idle:?}: closed"),
    }
}

/// A stream that records when it last read bytes.
struct Active<S> {
    inner: S,
    last: Arc<AtomicU64>,
    start: Instant,
}

impl<S: AsyncRead + Unpin> AsyncRead for Active<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.last.store(ms, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Active<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hyper::header::{self, HeaderMap, HeaderValue};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn upgrade_needs_connection_upgrade_and_an_upgrade_field() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(requested(&h), None, "Upgrade without Connection: upgrade");
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert_eq!(requested(&h).unwrap(), "websocket");
        h.remove(header::UPGRADE);
        assert_eq!(requested(&h), None);
    }

    #[tokio::test(start_paused = true)]
    async fn relays_both_ways_and_closes_when_idle() {
        let (client, mut client_far) = tokio::io::duplex(64);
        let (backend, mut backend_far) = tokio::io::duplex(64);
        let idle = Duration::from_secs(30);
        let task = tokio::spawn(copy_until_idle(client, backend, idle));
        client_far.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        backend_far.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        // Activity within the idle time keeps the stream open.
        tokio::time::sleep(Duration::from_secs(20)).await;
        backend_far.write_all(b"pong").await.unwrap();
        client_far.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!task.is_finished(), "20 s after the last byte");
        // Then silence: closed after the idle time; both far ends see EOF.
        tokio::time::sleep(Duration::from_secs(11)).await;
        task.await.unwrap();
        assert_eq!(client_far.read(&mut buf).await.unwrap(), 0);
        assert_eq!(backend_far.read(&mut buf).await.unwrap(), 0);
    }
}
