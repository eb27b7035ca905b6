//! A bound on the HTTP/1.1 requests the proxy has in flight to one origin
//! ([`ProxyConfig::max_conns_per_origin`](super::ProxyConfig::max_conns_per_origin)).
//!
//! An HTTP/1.1 origin connection carries one request at a time, so the
//! requests in flight to an origin are the connections it holds open for
//! the proxy. A client speaking HTTP/2 to the proxy (the HTTPS proxy mode)
//! can send a hundred requests at once; without a bound each would open its
//! own origin connection, and a zrtt gateway answers at most six early
//! answers per client address before the handshake (docs/PROTOCOL.md §8):
//! the rest would wait for the handshake anyway, on connections the
//! gateway must also hold. With the bound a request waits here for a slot,
//! and hyper-util's pool hands it the connection that slot's last request
//! left idle, already past slow start's first window.
//!
//! A slot is an owned semaphore permit, held until the response body has
//! been sent (or dropped), but for at most [`HOLD_LIMIT`]: a long poll, an
//! event stream or a reader that stopped reading must not keep an origin
//! from every other client of the proxy. Origins are keyed by scheme and
//! authority; the map holds weak references, so an origin without requests
//! in flight costs nothing once the map is swept. Plain HTTP origins are
//! bounded too (RFC 9112 §9.4: a client ought to limit its simultaneous
//! connections to a server).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::Uri;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ProxyMetrics;
use crate::http::Body;

/// Map entries above which dead ones are swept on the next insert.
const SWEEP_ABOVE: usize = 256;

/// The longest a response holds its slot; after it the body goes on
/// without counting against the bound.
pub(crate) const HOLD_LIMIT: Duration = Duration::from_secs(10);

/// Per-origin semaphores, `limit` permits each (0: no bound).
#[derive(Debug)]
pub(crate) struct OriginSlots {
    limit: usize,
    map: Mutex<HashMap<String, Weak<Semaphore>>>,
}

/// A request's place in its origin's bound.
#[derive(Debug)]
pub(crate) enum Slot {
    /// No bound (0, or not an HTTP/1.1 origin).
    Unbounded,
    /// One of the origin's slots.
    Held(OwnedSemaphorePermit),
}

/// What [`OriginSlots::try_acquire`] found.
enum Acquire {
    /// A slot (or no bound).
    Ready(Slot),
    /// Every slot is taken: [`wait`] on this.
    Wait(Arc<Semaphore>),
}

impl OriginSlots {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The semaphore of `origin` (created on first use), `None` without a bound.
    fn semaphore(&self, origin: &str) -> Option<Arc<Semaphore>> {
        if self.limit == 0 {
            return None;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(origin).and_then(Weak::upgrade) {
            return Some(s);
        }
        if map.len() >= SWEEP_ABOVE {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let s = Arc::new(Semaphore::new(self.limit));
        map.insert(origin.to_owned(), Arc::downgrade(&s));
        Some(s)
    }

    /// A slot for one request to `origin` (scheme and authority, e.g.
    /// `https://www.example.com:443`) if one is free.
    fn try_acquire(&self, origin: &str) -> Acquire {
        let Some(s) = self.semaphore(origin) else {
            return Acquire::Ready(Slot::Unbounded);
        };
        match s.clone().try_acquire_owned() {
            Ok(p) => Acquire::Ready(Slot::Held(p)),
            Err(_) => Acquire::Wait(s),
        }
    }

    /// A slot for one request to `target`'s origin (its scheme and
    /// authority), waiting first come first served until `deadline` if
    /// none is free (counted in `m.origin_waits`); `None` if none came free
    /// in time (counted in `m.origin_wait_timeouts`). Cancel-safe.
    pub(crate) async fn acquire(
        &self,
        target: &Uri,
        deadline: tokio::time::Instant,
        m: &ProxyMetrics,
    ) -> Option<Slot> {
        let origin = format!(
            "{}://{}",
            target.scheme_str().unwrap_or("http"),
            target.authority().map_or("", |a| a.as_str())
        )
        .to_ascii_lowercase();
        match self.try_acquire(&origin) {
            Acquire::Ready(s) => Some(s),
            Acquire::Wait(sem) => {
                m.origin_waits.inc();
                let got = tokio::time::timeout_at(deadline, wait(sem)).await.ok();
                if got.is_none() {
                    m.origin_wait_timeouts.inc();
                }
                got
            }
        }
    }

    /// Origins in the map (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The next free slot of `s`, first come first served. Cancel-safe:
/// dropping the future gives up the place in the queue.
async fn wait(s: Arc<Semaphore>) -> Slot {
    match s.acquire_owned().await {
        Ok(p) => Slot::Held(p),
        // Never closed.
        Err(_) => Slot::Unbounded,
    }
}

/// Gives the slot back when dropped, or at [`HOLD_LIMIT`] if sooner.
struct Held {
    permit: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    timer: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.timer.abort();
        self.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// `body`, holding `slot` until the body is dropped (after its last frame
/// was sent, or when the client went away), for at most [`HOLD_LIMIT`]
/// (then `long` counts one). Call inside a tokio runtime.
pub(crate) fn hold(body: Body, slot: Slot, long: Counter) -> Body {
    // An empty body (HEAD, 204, 304) is done already: the slot goes back now.
    let (Slot::Held(p), false) = (slot, body.is_end_stream()) else {
        return body;
    };
    let permit = Arc::new(Mutex::new(Some(p)));
    let timer = {
        let permit = permit.clone();
        tokio::spawn(async move {
            tokio::time::sleep(HOLD_LIMIT).await;
            if permit
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .is_some()
            {
                long.inc();
            }
        })
    };
    let held = Held { permit, timer };
    body.map_frame(move |f| {
        let _held = &held;
        f
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    fn body() -> Body {
        Full::new(Bytes::from_static(b"x"))
            .map_err(|never| match never {})
            .boxed()
    }

    /// One poll of `f`: its slot if one came free.
    fn poll_once<F: Future<Output = Slot>>(f: Pin<&mut F>) -> Option<Slot> {
        match f.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(s) => Some(s),
            Poll::Pending => None,
        }
    }

    fn held(slots: &OriginSlots, origin: &str) -> Slot {
        match slots.try_acquire(origin) {
            Acquire::Ready(s @ Slot::Held(_)) => s,
            _ => panic!("no free slot for {origin}"),
        }
    }

    fn waiting(slots: &OriginSlots, origin: &str) -> Arc<Semaphore> {
        match slots.try_acquire(origin) {
            Acquire::Wait(s) => s,
            Acquire::Ready(s) => panic!("{origin}: a slot was free: {s:?}"),
        }
    }

    #[tokio::test]
    async fn bounds_requests_per_origin_until_bodies_drop() {
        let slots = OriginSlots::new(2);
        let a = held(&slots, "http://a:80");
        let b = held(&slots, "http://a:80");
        // Another origin has its own slots.
        let _other = held(&slots, "http://b:80");
        // The third request to a waits ...
        let third = wait(waiting(&slots, "http://a:80"));
        tokio::pin!(third);
        assert!(poll_once(third.as_mut()).is_none());
        // ... while a body holds a slot, until that body is dropped.
        let long = Counter::default();
        let body_a = hold(body(), a, long.clone());
        assert!(poll_once(third.as_mut()).is_none());
        drop(body_a);
        assert!(matches!(poll_once(third.as_mut()), Some(Slot::Held(_))));
        assert_eq!(long.get(), 0);
        drop(b);
    }

    #[tokio::test]
    async fn a_finished_body_releases_its_slot() {
        let slots = OriginSlots::new(1);
        let body = hold(body(), held(&slots, "http://a:80"), Counter::default());
        let next = wait(waiting(&slots, "http://a:80"));
        tokio::pin!(next);
        assert!(poll_once(next.as_mut()).is_none());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"x");
        // `collect` consumed (dropped) the body.
        assert!(matches!(poll_once(next.as_mut()), Some(Slot::Held(_))));
    }

    #[tokio::test]
    async fn an_empty_body_gives_its_slot_back_at_once() {
        let slots = OriginSlots::new(1);
        let empty: Body = http_body_util::Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed();
        let _body = hold(empty, held(&slots, "http://a:80"), Counter::default());
        assert!(matches!(
            slots.try_acquire("http://a:80"),
            Acquire::Ready(Slot::Held(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_gives_its_slot_up_at_the_hold_limit() {
        let slots = OriginSlots::new(1);
        // A body whose next frame never comes (an event stream, a stalled
        // reader).
        let endless: Body = Endless.boxed();
        let long = Counter::default();
        let body = hold(endless, held(&slots, "http://a:80"), long.clone());
        let next = wait(waiting(&slots, "http://a:80"));
        tokio::pin!(next);
        tokio::time::sleep(HOLD_LIMIT - Duration::from_millis(1)).await;
        assert!(poll_once(next.as_mut()).is_none());
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(matches!(poll_once(next.as_mut()), Some(Slot::Held(_))));
        assert_eq!(long.get(), 1);
        // Dropping the body later gives back nothing more.
        drop(body);
        assert_eq!(long.get(), 1);
    }

    /// A body that never yields a frame.
    struct Endless;

    impl hyper::body::Body for Endless {
        type Data = Bytes;
        type Error = hyper::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn zero_is_unbounded_and_dead_origins_are_swept() {
        let none = OriginSlots::new(0);
        for _ in 0..10 {
            assert!(matches!(
                none.try_acquire("http://a:80"),
                Acquire::Ready(Slot::Unbounded)
            ));
        }
        assert_eq!(none.len(), 0);
        let slots = OriginSlots::new(1);
        let live = held(&slots, "http://live:80");
        for i in 0..(SWEEP_ABOVE + 10) {
            drop(held(&slots, &format!("http://h{i}:80")));
        }
        assert!(slots.len() <= SWEEP_ABOVE + 1, "{}", slots.len());
        // The live origin survived the sweep: its one slot is still taken.
        let again = wait(waiting(&slots, "http://live:80"));
        tokio::pin!(again);
        assert!(poll_once(again.as_mut()).is_none());
        drop(live);
        assert!(matches!(poll_once(again.as_mut()), Some(Slot::Held(_))));
    }
}
