//! A served connection lives as long as bytes move: no byte either way for
//! `Timeouts::stream_idle` and it is shut down gracefully (HTTP/1.1: after
//! the request in progress; HTTP/2: GOAWAY), then dropped after the
//! shutdown grace. There is no cut of a live stream (a long download, a
//! slow upload, server-sent events that keep talking). Between two
//! HTTP/1.1 requests `Timeouts::request_head` applies (hyper's header read
//! timeout; relay.rs answers 408 to a head begun and not finished).
//!
//! Each response is watched too ([`StreamWatch`]): one whose body makes
//! no progress toward the client for `Timeouts::stream_idle` (the client
//! withholds flow-control credit or stops reading, or the backend sends
//! nothing) is cancelled, as nginx's `send_timeout` does per request:
//! on HTTP/2 its stream alone ([`StreamExec`]: RST_STREAM to the client,
//! the connection's other streams go on), on HTTP/1.1 the connection
//! ([`drive`]). Its backend request is dropped with it (a half-read
//! backend connection is closed, not reused).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When bytes last moved on a connection.
#[derive(Debug)]
pub(super) struct Activity {
    base: Instant,
    /// Milliseconds after `base`.
    last_ms: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once nothing moved for `idle`.
    pub(super) async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// An I/O stream that records its activity.
pub(super) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, b);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Drive the hyper connection `conn` until it ends, or until nothing moved
/// on it for `idle`: then `graceful` starts its shutdown and it has `grace`
/// to finish. If `stalled` resolves first (an HTTP/1.1 response that made
/// no progress), the connection is dropped at once.
pub(super) async fn drive<F>(
    mut conn: Pin<&mut F>,
    graceful: impl FnOnce(Pin<&mut F>),
    (activity, stalled): (&Activity, impl Future<Output = ()>),
    idle: Duration,
    grace: Duration,
) -> hyper::Result<()>
where
    F: Future<Output = hyper::Result<()>>,
{
    tokio::pin!(stalled);
    // A stalled response also leaves the connection idle: say which.
    tokio::select! {
        biased;
        r = conn.as_mut() => return r,
        () = &mut stalled => {
            tracing::debug!("response without progress for {idle:?}: connection closed");
            return Ok(());
        }
        () = activity.idle_for(idle) => {}
    }
    tracing::debug!("closing a connection idle for {idle:?}");
    graceful(conn.as_mut());
    tokio::select! {
        biased;
        r = tokio::time::timeout(grace, conn) => r.unwrap_or(Ok(())),
        () = stalled => Ok(()),
    }
}

tokio::task_local! {
    /// The HTTP/2 stream whose task is being polled ([`StreamExec`]).
    static STREAM: Arc<StreamWatch>;
}

/// The progress of the responses on their way to a client: an HTTP/2
/// stream's (one each), or an HTTP/1.1 connection's (one at a time).
#[derive(Debug)]
pub(super) struct StreamWatch {
    activity: Arc<Activity>,
    /// Responses whose head is out and whose body is not dropped yet
    /// (before the head, the backend and request body timeouts apply).
    open: AtomicUsize,
    armed: tokio::sync::Notify,
}

/// Ends a response's watch when its body is dropped.
struct InResponse(Arc<StreamWatch>);

impl Drop for InResponse {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl StreamWatch {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            activity: Activity::new(),
            open: AtomicUsize::new(0),
            armed: tokio::sync::Notify::new(),
        })
    }

    /// The watch of the HTTP/2 stream being served, `None` outside an
    /// HTTP/2 stream task.
    pub(super) fn current() -> Option<Arc<Self>> {
        STREAM.try_with(Arc::clone).ok()
    }

    /// `resp`'s body, counted as progress when hyper takes a frame of it
    /// (which it does only once the client made room: HTTP/2 flow-control
    /// credit, HTTP/1.1 a write buffer with space); watched from now until
    /// the body is dropped.
    pub(super) fn watch(
        self: &Arc<Self>,
        resp: hyper::Response<super::Body>,
    ) -> hyper::Response<super::Body> {
        self.activity.touch();
        self.open.fetch_add(1, Ordering::AcqRel);
        self.armed.notify_one();
        let guard = InResponse(self.clone());
        super::body::OnFrame::wrap(resp, move || guard.0.activity.touch())
    }

    /// Resolves once a response is out and no frame of it was taken for
    /// `idle`.
    pub(super) async fn stalled(&self, idle: Duration) {
        loop {
            if self.open.load(Ordering::Acquire) == 0 {
                self.armed.notified().await;
                continue;
            }
            let deadline = self.activity.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// The executor of an HTTP/2 connection's streams: each stream's task
/// runs with its [`StreamWatch`] and is dropped (RST_STREAM CANCEL to the
/// client, the backend request with it) once its response stalls for
/// `idle`.
#[derive(Clone)]
pub(super) struct StreamExec {
    pub(super) idle: Duration,
    /// Counts the cancelled streams.
    pub(super) stalled: prometheus_client::metrics::counter::Counter,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let watch = StreamWatch::new();
        let (idle, stalled) = (self.idle, self.stalled.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = STREAM.scope(watch.clone(), fut) => {}
                () = watch.stalled(idle) => {
                    stalled.inc();
                    tracing::debug!("response without progress for {idle:?}: stream cancelled");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_a_connection_where_nothing_moves_is_idle() {
        let a = Activity::new();
        let idle = Duration::from_secs(60);
        let start = Instant::now();
        // Bytes every 50 s keep it alive.
        let talker = async {
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                a.touch();
            }
        };
        tokio::join!(talker, a.idle_for(idle));
        assert_eq!(Instant::now() - start, Duration::from_secs(260));
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_stalls_only_while_out_and_not_taken() {
        use http_body_util::BodyExt;
        let w = StreamWatch::new();
        let idle = Duration::from_secs(60);
        let never = Duration::from_secs(600);
        // No response out yet (waiting for the backend): not stalled.
        assert!(tokio::time::timeout(never, w.stalled(idle)).await.is_err());
        let body = http_body_util::Full::new(bytes::Bytes::from_static(b"abc"))
            .map_err(|e| match e {})
            .boxed();
        let start = Instant::now();
        let mut body = w.watch(hyper::Response::new(body)).into_body();
        // A frame taken at 30 s: stalled 60 s later.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(body.frame().await.is_some());
        w.stalled(idle).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(90));
        // Its body dropped (answered): nothing is stalled any more.
        drop(body);
        assert!(tokio::time::timeout(never, w.stalled(idle)).await.is_err());
    }
}
