//! [`SessionCache`]: the gateway's TLS session store, bounded, oldest
//! evicted first, every operation O(1) (amortised).
//!
//! rustls's `ServerSessionMemoryCache` finds a removed key by a linear scan
//! of its insertion order, and the gateway's tickets are single-use (taken
//! on every resumption, the anti-replay TLS 0-RTT needs, RFC 8446 §8.1): at
//! its 32,768 sessions that scan cost more than a whole handshake
//! (`zrtt lab throughput`, 2026-11-26: 388 µs per resumed connection
//! against 248 µs for a full one; a profile showed `memcmp` under
//! `LimitedCache::remove` at 36 % of the gateway thread).
//!
//! Eviction keeps rustls's rule (the oldest insert goes first). A taken
//! or replaced key leaves a stale entry in the insertion order: dropped at
//! once when it reaches the front, else swept (under the lock, a pass over
//! the order) once the order holds twice the capacity.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rustls::server::StoresServerSessions;
use zeroize::Zeroizing;

/// A bounded TLS session store (see the module docs). Its `Debug` shows
/// the capacity and the number of sessions held, never their keys or
/// secrets (rustls's `ServerConfig` prints its store).
pub(crate) struct SessionCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.inner.try_lock().map(|i| i.map.len()).ok();
        f.debug_struct("SessionCache")
            .field("capacity", &self.capacity)
            .field("held", &held)
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    /// Key → (insert number, value: session secrets, zeroed when evicted,
    /// taken or dropped).
    map: HashMap<Vec<u8>, (u64, Zeroizing<Vec<u8>>)>,
    /// Keys in insert order, with their insert number (stale once the key
    /// was taken or put again).
    order: VecDeque<(u64, Vec<u8>)>,
    next: u64,
}

impl Inner {
    fn current(&self, n: u64, key: &[u8]) -> bool {
        self.map.get(key).is_some_and(|(m, _)| *m == n)
    }
}

impl SessionCache {
    /// A store of at most `capacity` sessions (at least one).
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remove and return every session held (a hand-over at restart).
    pub(crate) fn drain(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut i = self.lock();
        i.order.clear();
        i.map.drain().map(|(k, (_, v))| (k, v.to_vec())).collect()
    }

    /// Drop sessions from the oldest insert on while `expired` says so of
    /// their value (and stale order entries on the way); stops at the first
    /// live one. Inserts come in issue order (a hand-over's sessions come
    /// first, with their older times), so this drops every expired session
    /// but a few that follow a live one: the store holds about the sessions
    /// of the last TTL rather than filling to its capacity with dead ones,
    /// which a long run saw as memory that never stopped rising. Returns how
    /// many sessions went.
    pub(crate) fn expire_oldest(&self, expired: impl Fn(&[u8]) -> bool) -> usize {
        let mut i = self.lock();
        let Inner { map, order, .. } = &mut *i;
        let mut n = 0;
        while let Some((m, k)) = order.front() {
            match map.get(k) {
                Some((c, v)) if c == m => {
                    if !expired(v) {
                        break;
                    }
                    map.remove(k);
                    n += 1;
                }
                _ => {}
            }
            order.pop_front();
        }
        n
    }

    /// Sessions held and order entries (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        let i = self.lock();
        (i.map.len(), i.order.len())
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut i = self.lock();
        let n = i.next;
        i.next += 1;
        i.map.insert(key.clone(), (n, Zeroizing::new(value)));
        i.order.push_back((n, key));
        while i.map.len() > self.capacity {
            let Some((m, k)) = i.order.pop_front() else {
                break;
            };
            if i.current(m, &k) {
                i.map.remove(&k);
            }
        }
        let Inner { map, order, .. } = &mut *i;
        // Stale entries that reached the front go at once; a sweep takes
        // the rest when they are as many as the live ones.
        while order
            .front()
            .is_some_and(|(m, k)| map.get(k).is_none_or(|(c, _)| c != m))
        {
            order.pop_front();
        }
        if order.len() > 2 * self.capacity {
            order.retain(|(m, k)| map.get(k).is_some_and(|(c, _)| c == m));
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lock().map.get(key).map(|(_, v)| v.to_vec())
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lock().map.remove(key).map(|(_, v)| v.to_vec())
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn k(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn single_use_and_oldest_evicted_first() {
        let c = SessionCache::new(3);
        for i in 0..3 {
            assert!(c.put(k(i), vec![i as u8]));
        }
        assert_eq!(c.get(&k(0)), Some(vec![0]));
        assert_eq!(c.take(&k(1)), Some(vec![1]));
        assert_eq!(c.take(&k(1)), None, "single use");
        // Room for two more: the oldest (0) goes only when a fourth is held.
        c.put(k(3), vec![3]);
        assert_eq!(c.get(&k(0)), Some(vec![0]));
        c.put(k(4), vec![4]);
        assert_eq!(c.get(&k(0)), None);
        assert_eq!(c.get(&k(2)), Some(vec![2]));
        // A key put again counts from its new insert.
        c.put(k(2), vec![22]);
        c.put(k(5), vec![5]);
        assert_eq!(c.get(&k(3)), None);
        assert_eq!(c.get(&k(2)), Some(vec![22]));
        assert_eq!(c.len().0, 3);
    }

    #[test]
    fn a_ticket_is_taken_once_whatever_the_threads() {
        for round in 0..20u32 {
            let c = SessionCache::new(64);
            c.put(k(round), vec![7]);
            let got: usize = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| usize::from(c.take(&k(round)).is_some())))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(got, 1, "round {round}");
        }
    }

    #[test]
    fn tickets_taken_in_issue_order_need_no_sweep() {
        let c = SessionCache::new(100);
        for i in 0..10_000u32 {
            c.put(k(i), vec![0]);
            if i >= 10 {
                c.take(&k(i - 10));
            }
            let (held, order) = c.len();
            assert!(held <= 11 && order <= 12, "{held} {order} at {i}");
        }
    }

    #[test]
    fn expired_sessions_go_from_the_oldest_until_a_live_one() {
        let c = SessionCache::new(100);
        // Values: their first byte is an "issue time".
        for i in 0..6u32 {
            c.put(k(i), vec![i as u8]);
        }
        c.take(&k(1));
        c.put(k(0), vec![9]); // put again: now the newest
        let gone = c.expire_oldest(|v| v[0] < 4);
        // 2 and 3 expired; 1 was taken, 0's first insert is stale; 4 is live.
        assert_eq!(gone, 2);
        assert_eq!(c.get(&k(2)), None);
        assert_eq!(c.get(&k(3)), None);
        assert_eq!(c.get(&k(4)), Some(vec![4]));
        assert_eq!(c.get(&k(0)), Some(vec![9]));
        assert_eq!(c.len(), (3, 3));
        assert_eq!(c.expire_oldest(|_| false), 0);
        assert_eq!(c.expire_oldest(|_| true), 3);
        assert_eq!(c.len(), (0, 0));
    }

    #[test]
    fn debug_shows_no_secrets() {
        let c = SessionCache::new(4);
        c.put(b"ticket-id".to_vec(), b"resumption secret".to_vec());
        let text = format!("{c:?}");
        assert!(!text.contains("secret") && !text.contains("116"), "{text}");
        assert!(text.contains("held: Some(1)"), "{text}");
    }

    #[test]
    fn stays_bounded_under_churn() {
        let c = SessionCache::new(100);
        for i in 0..100_000u32 {
            c.put(k(i), vec![0; 8]);
            if i % 2 == 0 {
                c.take(&k(i));
            }
            c.put(k(i % 7), vec![1]);
            let (held, order) = c.len();
            assert!(held <= 100 && order <= 201, "{held} {order} at {i}");
        }
    }
}
