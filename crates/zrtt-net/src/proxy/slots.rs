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
//! been sent (or dropped). Origins are keyed by scheme and authority; the
//! map holds weak references, so an origin without requests in flight
//! costs nothing once the map is swept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::Body;

/// Map entries above which dead ones are swept on the next insert.
const SWEEP_ABOVE: usize = 256;

/// Per-origin semaphores, `limit` permits each (0: no bound).
#[derive(Debug)]
pub(crate) struct OriginSlots {
    limit: usize,
    map: Mutex<HashMap<String, Weak<Semaphore>>>,
}

/// What [`OriginSlots::acquire`] got.
pub(crate) enum Slot {
    /// No bound, or not an HTTP/1.1 origin.
    Unbounded,
    /// A slot was free.
    Free(OwnedSemaphorePermit),
    /// The request waited for a slot.
    Waited(OwnedSemaphorePermit),
}

impl Slot {
    fn permit(self) -> Option<OwnedSemaphorePermit> {
        match self {
            Slot::Unbounded => None,
            Slot::Free(p) | Slot::Waited(p) => Some(p),
        }
    }
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
    /// `https://www.example.com:443`), waiting while `limit` requests are
    /// in flight to it. Cancel-safe: dropping the future gives up the wait.
    pub(crate) async fn acquire(&self, origin: &str) -> Slot {
        let Some(s) = self.semaphore(origin) else {
            return Slot::Unbounded;
        };
        match s.clone().try_acquire_owned() {
            Ok(p) => Slot::Free(p),
            // The semaphore is never closed.
            Err(_) => match s.acquire_owned().await {
                Ok(p) => Slot::Waited(p),
                Err(_) => Slot::Unbounded,
            },
        }
    }

    /// Origins in the map (live or not yet swept).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// `body`, holding `slot` until the body is dropped (after its last frame
/// was sent, or when the client went away).
pub(crate) fn hold(body: Body, slot: Slot) -> Body {
    match slot.permit() {
        None => body,
        Some(permit) => body
            .map_frame(move |f| {
                let _held = &permit;
                f
            })
            .boxed(),
    }
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

    /// One poll of `f`: its slot if one was free.
    fn poll_once<F: Future<Output = Slot>>(f: Pin<&mut F>) -> Option<Slot> {
        match f.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(s) => Some(s),
            Poll::Pending => None,
        }
    }

    #[tokio::test]
    async fn bounds_requests_per_origin_until_bodies_drop() {
        let slots = OriginSlots::new(2);
        let a = slots.acquire("http://a:80").await;
        let b = slots.acquire("http://a:80").await;
        assert!(matches!(a, Slot::Free(_)) && matches!(b, Slot::Free(_)));
        // Another origin has its own slots.
        assert!(matches!(slots.acquire("http://b:80").await, Slot::Free(_)));
        // The third request to a waits ...
        let third = slots.acquire("http://a:80");
        tokio::pin!(third);
        assert!(poll_once(third.as_mut()).is_none());
        // ... while a body holds a slot, until that body is dropped.
        let held = hold(body(), a);
        assert!(poll_once(third.as_mut()).is_none());
        drop(held);
        assert!(matches!(poll_once(third.as_mut()), Some(Slot::Waited(_))));
        drop(b);
    }

    #[tokio::test]
    async fn a_finished_body_releases_its_slot() {
        let slots = OriginSlots::new(1);
        let held = hold(body(), slots.acquire("http://a:80").await);
        let next = slots.acquire("http://a:80");
        tokio::pin!(next);
        assert!(poll_once(next.as_mut()).is_none());
        let bytes = held.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"x");
        // `collect` consumed (dropped) the body.
        assert!(matches!(poll_once(next.as_mut()), Some(Slot::Waited(_))));
    }

    #[tokio::test]
    async fn zero_is_unbounded_and_dead_origins_are_swept() {
        let none = OriginSlots::new(0);
        let all: Vec<_> = (0..10).map(|_| none.acquire("http://a:80")).collect();
        for f in all {
            assert!(matches!(f.await, Slot::Unbounded));
        }
        assert_eq!(none.len(), 0);
        let slots = OriginSlots::new(1);
        let live = slots.acquire("http://live:80").await;
        for i in 0..(SWEEP_ABOVE + 10) {
            drop(slots.acquire(&format!("http://h{i}:80")).await);
        }
        assert!(slots.len() <= SWEEP_ABOVE + 1, "{}", slots.len());
        // The live origin survived the sweep: its one slot is still taken.
        let again = slots.acquire("http://live:80");
        tokio::pin!(again);
        assert!(poll_once(again.as_mut()).is_none());
        drop(live);
        assert!(matches!(poll_once(again.as_mut()), Some(Slot::Waited(_))));
    }
}
