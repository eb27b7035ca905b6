//! TLS sessions bound to the address they were issued to, as QUIC's
//! NEW_TOKEN binds a token (RFC 9000 §8.1.3): the gateway's Fast Open
//! listener takes SYN data without cookies, so a resumed TLS client may be
//! answered before its TCP handshake completes only if its session was
//! issued to the address it now comes from.
//!
//! The sessions live in [`TlsSessions`] (this process, or a fleet's
//! store), which also makes every TLS 1.3 ticket single-use: the
//! anti-replay rustls requires before it accepts 0-RTT data (RFC 8446
//! §8.1). Each connection sees them through a [`SessionView`] that knows
//! the peer: it stores the peer's address with each session and reports,
//! when a session is resumed, whether it was issued to this address.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rustls::server::StoresServerSessions;

use zeroize::Zeroizing;

use super::super::Metrics;
use super::shared::{address_bytes, Fetched, Stored, TlsSessions};

const UNKNOWN: u8 = 0;
const BOUND: u8 = 1;
const ELSEWHERE: u8 = 2;

/// What a connection's resumption revealed about its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Binding {
    /// No session was resumed (yet).
    None,
    /// A session issued to this very address.
    Bound,
    /// A session issued to another address (resumption is fine; an early
    /// answer is not).
    Elsewhere,
}

/// The gateway's sessions as one connection sees them.
pub(super) struct SessionView {
    sessions: Arc<TlsSessions>,
    metrics: Arc<Metrics>,
    peer: [u8; 16],
    binding: Arc<AtomicU8>,
    /// The session the fleet's store gave this connection: in a fleet, the
    /// only one its rustls may take.
    fetched: Mutex<Option<Fetched>>,
}

impl fmt::Debug for SessionView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionView")
            .field("binding", &self.binding())
            .finish_non_exhaustive()
    }
}

impl SessionView {
    /// A view of `sessions` for a connection from `peer`, with the
    /// session the fleet's store gave it, if any.
    pub(super) fn new(
        sessions: Arc<TlsSessions>,
        metrics: Arc<Metrics>,
        peer: IpAddr,
        fetched: Option<Fetched>,
    ) -> Self {
        Self {
            sessions,
            metrics,
            peer: address_bytes(peer),
            binding: Arc::new(AtomicU8::new(UNKNOWN)),
            fetched: Mutex::new(fetched),
        }
    }

    /// A handle to read the binding after rustls consumed the view.
    pub(super) fn binding_handle(&self) -> Arc<AtomicU8> {
        self.binding.clone()
    }

    fn binding(&self) -> Binding {
        decode(self.binding.load(Ordering::Acquire))
    }

    fn open(&self, stored: Stored) -> Vec<u8> {
        let bound = stored.peer == self.peer;
        self.binding
            .store(if bound { BOUND } else { ELSEWHERE }, Ordering::Release);
        stored.value.to_vec()
    }
}

/// The binding a handle from [`SessionView::binding_handle`] holds.
pub(super) fn decode(v: u8) -> Binding {
    match v {
        BOUND => Binding::Bound,
        ELSEWHERE => Binding::Elsewhere,
        _ => Binding::None,
    }
}

impl StoresServerSessions for SessionView {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = Stored {
            issued: self.sessions.now(),
            peer: self.peer,
            value: Zeroizing::new(value),
        };
        self.sessions.put(key, stored, &self.metrics)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.sessions.get_local(key).map(|s| self.open(s))
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let local = self.sessions.take_local(key);
        let fetched = self
            .fetched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take_if(|f| f.ticket == key);
        match fetched {
            Some(f) => Some(self.open(f.stored)),
            None => local.map(|s| self.open(s)),
        }
    }

    fn can_cache(&self) -> bool {
        !self.sessions.stopped()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sessions_say_whether_they_come_back_to_their_address() {
        let cache = TlsSessions::new(16, super::super::shared::DEFAULT_SESSION_TTL);
        let m = Arc::new(Metrics::default());
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "198.18.0.2".parse().unwrap();
        let issued = SessionView::new(cache.clone(), m.clone(), a, None);
        assert!(issued.put(b"t1".to_vec(), b"secret".to_vec()));
        assert!(issued.put(b"t2".to_vec(), b"secret".to_vec()));
        // Back from the same address (IPv4-mapped on a dual-stack listener).
        let same = SessionView::new(
            cache.clone(),
            m.clone(),
            "::ffff:198.18.0.1".parse().unwrap(),
            None,
        );
        assert_eq!(same.binding(), Binding::None);
        assert_eq!(same.take(b"t1"), Some(b"secret".to_vec()));
        assert_eq!(same.binding(), Binding::Bound);
        // Single use.
        assert_eq!(same.take(b"t1"), None);
        // From elsewhere: resumed, not bound.
        let other = SessionView::new(cache.clone(), m.clone(), b, None);
        assert_eq!(other.take(b"t2"), Some(b"secret".to_vec()));
        assert_eq!(other.binding(), Binding::Elsewhere);
        assert_eq!(
            decode(other.binding_handle().load(Ordering::Acquire)),
            Binding::Elsewhere
        );
    }
}
