//! A request body on its way to a backend: streamed frame by frame (never
//! buffered whole), cut at the site's size limit (413) and when the client
//! sends nothing for the body timeout (408), and shareable by handle, so
//! that a request whose backend connection failed before any byte of the
//! body was taken can be sent to another backend with the same body
//! (`started` says whether that is still safe).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::{lock, Body};

/// Why a request body ended before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyFault {
    /// More bytes than the limit (413).
    TooLarge,
    /// Nothing from the client for the body timeout (408).
    TimedOut,
    /// The client's stream failed (reset, malformed chunking).
    Client,
    /// The gateway answered (502, 504) and took the unread rest away: a
    /// backend still reading the upload must see it fail, not end (an h2c
    /// upload would otherwise send END_STREAM: a cut body as a whole one).
    Abandoned,
}

/// The error a [`RequestBody`] ends with.
#[derive(Debug)]
pub(super) struct BodyError(pub(super) BodyFault);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            BodyFault::TooLarge => "request body over the size limit",
            BodyFault::TimedOut => "request body timed out",
            BodyFault::Client => "request body failed",
            BodyFault::Abandoned => "request body abandoned: the gateway answered",
        })
    }
}

impl std::error::Error for BodyError {}

struct State {
    /// `None` once the body ended.
    inner: Option<Body>,
    limit: Option<u64>,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    received: u64,
    started: bool,
    fault: Option<BodyFault>,
}

/// A request body for a backend (see the module docs). Clones are handles
/// to the same stream.
#[derive(Clone)]
pub(super) struct RequestBody(Arc<Mutex<State>>);

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.0);
        f.debug_struct("RequestBody")
            .field("received", &s.received)
            .field("started", &s.started)
            .field("fault", &s.fault)
            .finish()
    }
}

impl RequestBody {
    /// `inner` cut after `limit` bytes (`None`: no limit) or when no frame
    /// comes for `timeout`.
    pub(super) fn new(inner: Body, limit: Option<u64>, timeout: Duration) -> Self {
        Self(Arc::new(Mutex::new(State {
            inner: Some(inner),
            limit,
            timeout,
            sleep: None,
            received: 0,
            started: false,
            fault: None,
        })))
    }

    /// A body held in memory (an early request's, kept for a 425 retry).
    pub(super) fn full(b: Bytes) -> Self {
        let body = Full::new(b).map_err(|never| match never {}).boxed();
        Self::new(body, None, Duration::MAX)
    }

    /// No body (health checks).
    pub(super) fn empty() -> Self {
        let body = Empty::new().map_err(|never| match never {}).boxed();
        Self::new(body, None, Duration::MAX)
    }

    /// Whether a backend connection has asked for the body yet: until then
    /// nothing of it left the gateway and it may go to another backend.
    pub(super) fn started(&self) -> bool {
        lock(&self.0).started
    }

    /// Why the body was cut, if it was.
    pub(super) fn fault(&self) -> Option<BodyFault> {
        lock(&self.0).fault
    }
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut guard = lock(&self.0);
        let s = &mut *guard;
        s.started = true;
        if let Some(f) = s.fault {
            return Poll::Ready(Some(Err(BodyError(f))));
        }
        let Some(inner) = s.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    s.received = s.received.saturating_add(d.len() as u64);
                    if s.limit.is_some_and(|l| s.received > l) {
                        // The rest stays unread, not dropped (see Holding).
                        s.fault = Some(BodyFault::TooLarge);
                        return Poll::Ready(Some(Err(BodyError(BodyFault::TooLarge))));
                    }
                }
                if let (Some(sleep), Some(at)) =
                    (s.sleep.as_mut(), Instant::now().checked_add(s.timeout))
                {
                    sleep.as_mut().reset(at);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                tracing::debug!("request body: {e}");
                s.fault = Some(BodyFault::Client);
                s.inner = None;
                Poll::Ready(Some(Err(BodyError(BodyFault::Client))))
            }
            Poll::Ready(None) => {
                s.inner = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(at) = Instant::now().checked_add(s.timeout) else {
                    return Poll::Pending;
                };
                let sleep = s
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if sleep.as_mut().poll(cx).is_ready() {
                    s.fault = Some(BodyFault::TimedOut);
                    return Poll::Ready(Some(Err(BodyError(BodyFault::TimedOut))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let s = lock(&self.0);
        s.fault.is_none() && s.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.0)
            .inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

/// Most of an unread request body read and discarded after a response
/// that did not need it, and for how long (nginx's lingering close does
/// the same at the connection level).
const DRAIN_MAX: u64 = 1 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// A response body that keeps the request's unread body until the
/// response ends, then reads and discards up to [`DRAIN_MAX`] of it (for
/// [`DRAIN_TIME`] at most). Over HTTP/2 the client's upload then ends
/// normally after a complete response, instead of a reset of its stream
/// while it still sends (RFC 9113 §8.1 allows RST_STREAM NO_ERROR there,
/// but curl 7.88 reports that as "Stream error in the HTTP/2 framing
/// layer" about half of the time).
pub(super) struct Holding {
    inner: Body,
    held: Option<Body>,
}

impl Holding {
    /// `resp` holding `held` until its body ends.
    pub(super) fn wrap(resp: hyper::Response<Body>, held: Body) -> hyper::Response<Body> {
        resp.map(|inner| {
            Self {
                inner,
                held: Some(held),
            }
            .boxed()
        })
    }

    /// `resp` holding what is left of `body`.
    pub(super) fn wrap_rest(
        resp: hyper::Response<Body>,
        body: &RequestBody,
    ) -> hyper::Response<Body> {
        let mut s = lock(&body.0);
        match s.inner.take() {
            Some(rest) => {
                s.fault.get_or_insert(BodyFault::Abandoned);
                drop(s);
                Self::wrap(resp, rest)
            }
            None => resp,
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let (Some(mut rest), Ok(rt)) = (self.held.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        if rest.is_end_stream() {
            return;
        }
        // Bounded in bytes and time: ends on its own.
        rt.spawn(async move {
            let drain = async {
                let mut n = 0u64;
                while let Some(Ok(frame)) = rest.frame().await {
                    n += frame.data_ref().map_or(0, |d| d.len() as u64);
                    if n > DRAIN_MAX {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that calls `on_frame` for each frame hyper takes and
/// keeps what the closure captured until the body is dropped. Unlike
/// `BodyExt::map_frame` it passes on the size hint and the end of the
/// body: a hidden size makes hyper chunk an HTTP/1.1 answer, and a client
/// that sent `Connection: close` then waits for the close.
pub(super) struct OnFrame {
    inner: Body,
    on_frame: Box<dyn Fn() + Send + Sync>,
}

impl OnFrame {
    /// `resp` with its body watched by `on_frame`.
    pub(super) fn wrap(
        resp: hyper::Response<Body>,
        on_frame: impl Fn() + Send + Sync + 'static,
    ) -> hyper::Response<Body> {
        resp.map(|inner| {
            Self {
                inner,
                on_frame: Box::new(on_frame),
            }
            .boxed()
        })
    }
}

impl HttpBody for OnFrame {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame {
            (self.on_frame)();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A client that sends nothing more.
    struct Silent;

    impl HttpBody for Silent {
        type Data = Bytes;
        type Error = hyper::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
            Poll::Pending
        }
    }

    fn bytes(n: usize) -> Body {
        Full::new(Bytes::from(vec![b'x'; n]))
            .map_err(|never| match never {})
            .boxed()
    }

    #[tokio::test]
    async fn a_body_within_the_limit_passes_and_one_over_it_is_cut() {
        let ok = RequestBody::new(bytes(5), Some(5), Duration::from_secs(5));
        assert!(!ok.started());
        assert_eq!(ok.clone().collect().await.unwrap().to_bytes().len(), 5);
        assert!(ok.started() && ok.fault().is_none());
        let big = RequestBody::new(bytes(6), Some(5), Duration::from_secs(5));
        assert!(big.clone().collect().await.is_err());
        assert_eq!(big.fault(), Some(BodyFault::TooLarge));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_times_out() {
        let b = RequestBody::new(Silent.boxed(), None, Duration::from_secs(60));
        let e = b.clone().collect().await.unwrap_err();
        assert_eq!(e.0, BodyFault::TimedOut);
        assert_eq!(b.fault(), Some(BodyFault::TimedOut));
    }
}
