//! TLS sessions bound to the address they were issued to, as QUIC's
//! NEW_TOKEN binds a token (RFC 9000 §8.1.3): the gateway's Fast Open
//! listener takes SYN data without cookies, so a resumed TLS client may be
//! answered before its TCP handshake completes only if its session was
//! issued to the address it now comes from.
//!
//! The sessions live in one server-side cache (rustls's
//! `StoresServerSessions`), which also makes every TLS 1.3 ticket
//! single-use: the anti-replay rustls requires before it accepts 0-RTT
//! data (RFC 8446 §8.1). Each connection sees the cache through a
//! [`SessionView`] that knows the peer: it prefixes what it stores with the
//! peer's address and reports, when a session is resumed, whether it was
//! issued to this address.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use rustls::server::StoresServerSessions;
use zrtt_proto::admission::canonical_ip;

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

/// The shared session cache as one connection sees it.
pub(super) struct SessionView {
    cache: Arc<dyn StoresServerSessions>,
    peer: [u8; 16],
    binding: Arc<AtomicU8>,
}

impl fmt::Debug for SessionView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionView")
            .field("binding", &self.binding())
            .finish_non_exhaustive()
    }
}

fn address_bytes(ip: IpAddr) -> [u8; 16] {
    match canonical_ip(ip) {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl SessionView {
    /// A view of `cache` for a connection from `peer`.
    pub(super) fn new(cache: Arc<dyn StoresServerSessions>, peer: IpAddr) -> Self {
        Self {
            cache,
            peer: address_bytes(peer),
            binding: Arc::new(AtomicU8::new(UNKNOWN)),
        }
    }

    /// A handle to read the binding after rustls consumed the view.
    pub(super) fn binding_handle(&self) -> Arc<AtomicU8> {
        self.binding.clone()
    }

    fn binding(&self) -> Binding {
        decode(self.binding.load(Ordering::Acquire))
    }

    fn open(&self, stored: Vec<u8>) -> Option<Vec<u8>> {
        if stored.len() < 16 {
            return None;
        }
        let bound = stored[..16] == self.peer;
        self.binding
            .store(if bound { BOUND } else { ELSEWHERE }, Ordering::Release);
        Some(stored[16..].to_vec())
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
        let mut stored = Vec::with_capacity(16 + value.len());
        stored.extend_from_slice(&self.peer);
        stored.extend_from_slice(&value);
        self.cache.put(key, stored)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.get(key).and_then(|v| self.open(v))
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.take(key).and_then(|v| self.open(v))
    }

    fn can_cache(&self) -> bool {
        self.cache.can_cache()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sessions_say_whether_they_come_back_to_their_address() {
        let cache: Arc<dyn StoresServerSessions> = super::super::SessionCache::new(16);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "198.18.0.2".parse().unwrap();
        let issued = SessionView::new(cache.clone(), a);
        assert!(issued.put(b"t1".to_vec(), b"secret".to_vec()));
        assert!(issued.put(b"t2".to_vec(), b"secret".to_vec()));
        // Back from the same address (IPv4-mapped on a dual-stack listener).
        let same = SessionView::new(cache.clone(), "::ffff:198.18.0.1".parse().unwrap());
        assert_eq!(same.binding(), Binding::None);
        assert_eq!(same.take(b"t1"), Some(b"secret".to_vec()));
        assert_eq!(same.binding(), Binding::Bound);
        // Single use.
        assert_eq!(same.take(b"t1"), None);
        // From elsewhere: resumed, not bound.
        let other = SessionView::new(cache.clone(), b);
        assert_eq!(other.take(b"t2"), Some(b"secret".to_vec()));
        assert_eq!(other.binding(), Binding::Elsewhere);
        assert_eq!(
            decode(other.binding_handle().load(Ordering::Acquire)),
            Binding::Elsewhere
        );
    }
}
