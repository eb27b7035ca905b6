//! Caps on what TLS sessions cost a fleet's store (docs/FLEET.md, TLS
//! sessions, Capacity): the store also holds the replay keys, which must
//! never be crowded out nor delayed by sessions.
//!
//! - **Writes**: at most `puts_per_second` sessions kept per gateway
//!   (a token bucket, bursts of as many). Over it the session is not kept,
//!   so rustls issues no ticket (the client resumes with another ticket or
//!   makes a full handshake next time): a flood of full handshakes cannot
//!   fill Redis faster than `puts_per_second x TTL` sessions per gateway.
//! - **Look-ups**: a ClientHello's identity is looked up (a Redis round
//!   trip, and a tombstone on a miss) at most `lookups_per_second` times
//!   per gateway and `lookups_per_source_per_second` per client address
//!   (IPv6 by /64); over it the connection gets a full handshake without
//!   a look-up. A ClientHello that came before the TCP handshake completed
//!   (in a Fast Open SYN: its source may be spoofed, so the per-source cap
//!   does not hold it) draws on a bucket of its own, a quarter of the
//!   global rate, so that a spoofed flood never spends the look-ups of
//!   clients whose handshake completed.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use zrtt_proto::admission::{canonical_ip, TokenBucket};

/// The caps (module docs); a rate of 0 is no cap.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SessionLimits {
    /// Sessions kept per second by this gateway (bursts of as many).
    pub puts_per_second: f64,
    /// Look-ups in the fleet's store per second by this gateway (and a
    /// quarter of it more for ClientHellos before their TCP handshake).
    pub lookups_per_second: f64,
    /// Look-ups per second for one client address (IPv6: its /64).
    pub lookups_per_source_per_second: f64,
}

impl Default for SessionLimits {
    /// 200 sessions kept a second per gateway (a full handshake costs
    /// about 1 ms of CPU: a loaded gateway makes ~1000 a second, most of
    /// them by clients that never come back), 2000 look-ups a second, 20
    /// per client address.
    fn default() -> Self {
        Self {
            puts_per_second: 200.0,
            lookups_per_second: 2000.0,
            lookups_per_source_per_second: 20.0,
        }
    }
}

/// Buckets of per-source look-ups: addresses hash (with a per-process
/// random key) onto this many buckets; two sources sharing one share its
/// rate, never more.
const SOURCE_BUCKETS: usize = 4096;

/// The caps' state for one gateway.
pub(super) struct Limiter {
    limits: SessionLimits,
    puts: Mutex<TokenBucket>,
    lookups: Mutex<TokenBucket>,
    /// Look-ups before the TCP handshake completed.
    early_lookups: Mutex<TokenBucket>,
    sources: Mutex<Vec<TokenBucket>>,
    hasher: RandomState,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Limiter {
    pub(super) fn new(limits: SessionLimits, now: Instant) -> Self {
        Self {
            limits,
            puts: Mutex::new(TokenBucket::new(limits.puts_per_second, now)),
            lookups: Mutex::new(TokenBucket::new(limits.lookups_per_second, now)),
            early_lookups: Mutex::new(TokenBucket::new(limits.lookups_per_second / 4.0, now)),
            sources: Mutex::new(vec![
                TokenBucket::new(
                    limits.lookups_per_source_per_second,
                    now
                );
                SOURCE_BUCKETS
            ]),
            hasher: RandomState::new(),
        }
    }

    pub(super) fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// Whether a session may be kept now.
    pub(super) fn put(&self, now: Instant) -> bool {
        lock(&self.puts).try_take(now)
    }

    /// Whether `source` may have its ClientHello's identity looked up now
    /// (`early`: before its TCP handshake completed): its own bucket
    /// first, so that a source over its cap spends none of the global
    /// bucket's tokens (those of the other clients).
    pub(super) fn lookup(&self, source: IpAddr, early: bool, now: Instant) -> bool {
        let key = match canonical_ip(source) {
            IpAddr::V4(a) => u128::from(a.to_bits()),
            IpAddr::V6(a) => a.to_bits() >> 64,
        };
        let i = (self.hasher.hash_one(key) % SOURCE_BUCKETS as u64) as usize;
        let mut sources = lock(&self.sources);
        if !sources[i].try_take(now) {
            return false;
        }
        drop(sources);
        if early {
            lock(&self.early_lookups).try_take(now)
        } else {
            lock(&self.lookups).try_take(now)
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an Instant to start from
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn writes_and_lookups_are_capped() {
        let t0 = Instant::now();
        let l = Limiter::new(
            SessionLimits {
                puts_per_second: 3.0,
                lookups_per_second: 5.0,
                lookups_per_source_per_second: 2.0,
            },
            t0,
        );
        assert_eq!((0..10).filter(|_| l.put(t0)).count(), 3);
        assert!(l.put(t0 + Duration::from_millis(400)), "refilled");
        let a: IpAddr = "198.18.0.1".parse().unwrap_or_else(|_| unreachable!());
        let a6: IpAddr = "2001:db8::1".parse().unwrap_or_else(|_| unreachable!());
        let same64: IpAddr = "2001:db8::2".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(
            (0..10).filter(|_| l.lookup(a, false, t0)).count(),
            2,
            "per source"
        );
        assert!(l.lookup(a6, false, t0));
        assert!(l.lookup(same64, false, t0), "same /64, second token");
        assert!(!l.lookup(a6, false, t0), "the /64's bucket is empty");
        // The global cap: 5 a second, 4 spent.
        let mut others = (1..=200u8).map(|i| IpAddr::from([10, 0, 0, i]));
        let granted = others
            .by_ref()
            .take(50)
            .filter(|ip| l.lookup(*ip, false, t0))
            .count();
        assert_eq!(granted, 1, "global");
        // Before the handshake (a spoofable source): a bucket of its own,
        // a quarter of the rate (burst at least one); the completed
        // handshakes' bucket is not touched.
        let l = Limiter::new(
            SessionLimits {
                puts_per_second: 0.0,
                lookups_per_second: 40.0,
                lookups_per_source_per_second: 0.0,
            },
            t0,
        );
        let early = others
            .by_ref()
            .take(50)
            .filter(|ip| l.lookup(*ip, true, t0))
            .count();
        assert_eq!(early, 10);
        let late = others
            .by_ref()
            .take(50)
            .filter(|ip| l.lookup(*ip, false, t0))
            .count();
        assert_eq!(late, 40);
        let unlimited = Limiter::new(
            SessionLimits {
                puts_per_second: 0.0,
                lookups_per_second: 0.0,
                lookups_per_source_per_second: 0.0,
            },
            t0,
        );
        assert!((0..10_000).all(|_| unlimited.put(t0) && unlimited.lookup(a, true, t0)));
    }
}
