//! What the client remembers per destination address (RFC 8305's spirit):
//! the path's smoothed RTT, which sets how long to wait before racing TLS,
//! and what failed on it, so the next connection skips it for a while.
//!
//! - **Fast Open** failed (no SYN-ACK to a SYN with data, or the data was
//!   not acknowledged: a middlebox drops or strips it): plain connects for
//!   [`FAST_OPEN_COOLDOWN`], as Linux's own Fast Open blackhole detection
//!   does.
//! - **zrtt** failed (the first flight went unacknowledged while TLS on the
//!   same port completed, so something on the path drops zrtt's bytes):
//!   TLS directly for a cool-down that starts at [`ZRTT_FIRST_COOLDOWN`] and
//!   doubles on each repeated failure up to [`ZRTT_MAX_COOLDOWN`]; a zrtt
//!   success clears it. A Reply that was overdue once the raced TLS
//!   handshake completed (the server took the flight, nothing came back)
//!   counts only on the [`OVERDUE_STRIKES`]th time in a row: one lost
//!   segment (the client's ACK, or the Reply) can do that once, a path that
//!   drops zrtt's bytes after the SYN does it every time.
//!
//! Bounded: at most `max_entries` destinations; when full, expired entries
//! go first, then everything (the memory is an optimisation, never a
//! correctness condition).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a path that broke Fast Open goes without it.
pub const FAST_OPEN_COOLDOWN: Duration = Duration::from_secs(600);
/// First cool-down after zrtt's bytes were dropped on a path.
pub const ZRTT_FIRST_COOLDOWN: Duration = Duration::from_secs(60);
/// Longest cool-down for zrtt on a path that keeps dropping it.
pub const ZRTT_MAX_COOLDOWN: Duration = Duration::from_secs(3600);
/// Overdue Replies in a row (no zrtt success between) that mark the path.
pub const OVERDUE_STRIKES: u32 = 2;
/// Shortest wait before racing TLS (RFC 8305 §8's minimum is 100 ms; a
/// gated zrtt answer needs two round trips, so zrtt gets a little more).
pub const MIN_RACE_DELAY: Duration = Duration::from_millis(250);
/// Round trips a zrtt answer may take before TLS starts in parallel: two
/// for a gated answer, one of margin.
pub const RACE_RTTS: u32 = 3;

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    srtt: Option<Duration>,
    fast_open_until: Option<Instant>,
    zrtt_until: Option<Instant>,
    zrtt_failures: u32,
    zrtt_overdue: u32,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        self.srtt.is_none()
            && self.zrtt_overdue == 0
            && self.fast_open_until.is_none_or(|t| t <= now)
            && self.zrtt_until.is_none_or(|t| t <= now)
    }
}

/// Per-destination memory of RTTs and failures; share one per client.
#[derive(Debug)]
pub struct PathMemory {
    max_entries: usize,
    entries: Mutex<HashMap<SocketAddr, Entry>>,
}

impl Default for PathMemory {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl PathMemory {
    /// A memory of at most `max_entries` destinations.
    pub fn new(max_entries: usize) -> Self {
        Self {
            max_entries: max_entries.max(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn with<R>(&self, addr: SocketAddr, now: Instant, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&addr) && map.len() >= self.max_entries {
            map.retain(|_, e| !e.expired(now));
            if map.len() >= self.max_entries {
                map.clear();
            }
        }
        f(map.entry(addr).or_default())
    }

    fn get(&self, addr: SocketAddr) -> Entry {
        let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&addr).copied().unwrap_or_default()
    }

    /// Whether Fast Open should be tried towards `addr` at `now`.
    pub fn fast_open_allowed(&self, addr: SocketAddr, now: Instant) -> bool {
        self.get(addr).fast_open_until.is_none_or(|t| t <= now)
    }

    /// Remember that Fast Open to `addr` failed at `now`.
    pub fn fast_open_failed(&self, addr: SocketAddr, now: Instant) {
        self.with(addr, now, |e| {
            e.fast_open_until = Some(now + FAST_OPEN_COOLDOWN)
        });
    }

    /// `None` if zrtt may be tried towards `addr`, else how long it stays
    /// skipped.
    pub fn zrtt_blocked(&self, addr: SocketAddr, now: Instant) -> Option<Duration> {
        self.get(addr)
            .zrtt_until
            .and_then(|t| t.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// Remember that zrtt's bytes were dropped on the path to `addr`; the
    /// cool-down doubles with each failure in a row. Returns it.
    pub fn zrtt_failed(&self, addr: SocketAddr, now: Instant) -> Duration {
        self.with(addr, now, |e| {
            let cooldown = ZRTT_FIRST_COOLDOWN
                .saturating_mul(1 << e.zrtt_failures.min(16))
                .min(ZRTT_MAX_COOLDOWN);
            e.zrtt_failures = e.zrtt_failures.saturating_add(1);
            e.zrtt_until = Some(now + cooldown);
            cooldown
        })
    }

    /// zrtt's Reply was overdue on the path to `addr` (the server took
    /// the flight, none came back by
    /// [`reply_overdue_at`](super::reply_overdue_at)). The
    /// [`OVERDUE_STRIKES`]th time in a row marks the path as
    /// [`zrtt_failed`](Self::zrtt_failed) does and returns the cool-down;
    /// before that `None`.
    pub fn zrtt_reply_overdue(&self, addr: SocketAddr, now: Instant) -> Option<Duration> {
        let strikes = self.with(addr, now, |e| {
            e.zrtt_overdue = e.zrtt_overdue.saturating_add(1);
            e.zrtt_overdue
        });
        (strikes >= OVERDUE_STRIKES).then(|| self.zrtt_failed(addr, now))
    }

    /// zrtt worked on the path to `addr`: forget its failures.
    pub fn zrtt_succeeded(&self, addr: SocketAddr, now: Instant) {
        self.with(addr, now, |e| {
            e.zrtt_failures = 0;
            e.zrtt_until = None;
            e.zrtt_overdue = 0;
        });
    }

    /// Record the smoothed RTT measured on a connection to `addr` (zero,
    /// meaning "not measured", is ignored).
    pub fn observe_rtt(&self, addr: SocketAddr, rtt: Duration, now: Instant) {
        if !rtt.is_zero() {
            self.with(addr, now, |e| e.srtt = Some(rtt));
        }
    }

    /// The RTT last measured towards `addr`, if any.
    pub fn rtt(&self, addr: SocketAddr) -> Option<Duration> {
        self.get(addr).srtt
    }

    /// How long to wait for a zrtt answer before starting TLS in parallel,
    /// given an RTT estimate: `RACE_RTTS` (3) round trips, at least
    /// `MIN_RACE_DELAY` (250 ms), at most `max`. Without an estimate: `max`.
    pub fn race_delay(rtt: Option<Duration>, max: Duration) -> Duration {
        match rtt {
            Some(r) => r
                .saturating_mul(RACE_RTTS)
                .max(MIN_RACE_DELAY)
                .min(max.max(MIN_RACE_DELAY)),
            None => max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    #[test]
    fn fast_open_failure_lasts_its_cooldown() {
        let m = PathMemory::default();
        let t = Instant::now();
        assert!(m.fast_open_allowed(a(1), t));
        m.fast_open_failed(a(1), t);
        assert!(!m.fast_open_allowed(a(1), t + Duration::from_secs(599)));
        assert!(m.fast_open_allowed(a(1), t + FAST_OPEN_COOLDOWN));
        assert!(m.fast_open_allowed(a(2), t), "per destination");
    }

    #[test]
    fn zrtt_cooldown_doubles_and_success_clears_it() {
        let m = PathMemory::default();
        let t = Instant::now();
        assert_eq!(m.zrtt_blocked(a(1), t), None);
        assert_eq!(m.zrtt_failed(a(1), t), Duration::from_secs(60));
        assert_eq!(m.zrtt_blocked(a(1), t), Some(Duration::from_secs(60)));
        assert_eq!(m.zrtt_failed(a(1), t), Duration::from_secs(120));
        assert_eq!(m.zrtt_failed(a(1), t), Duration::from_secs(240));
        for _ in 0..20 {
            m.zrtt_failed(a(1), t);
        }
        assert_eq!(m.zrtt_blocked(a(1), t), Some(ZRTT_MAX_COOLDOWN));
        assert_eq!(m.zrtt_blocked(a(1), t + ZRTT_MAX_COOLDOWN), None);
        m.zrtt_succeeded(a(1), t);
        assert_eq!(m.zrtt_blocked(a(1), t), None);
        assert_eq!(m.zrtt_failed(a(1), t), ZRTT_FIRST_COOLDOWN, "reset");
    }

    #[test]
    fn an_overdue_reply_marks_the_path_the_second_time_in_a_row() {
        let m = PathMemory::default();
        let t = Instant::now();
        assert_eq!(m.zrtt_reply_overdue(a(1), t), None, "one loss");
        assert_eq!(m.zrtt_blocked(a(1), t), None);
        m.zrtt_succeeded(a(1), t);
        assert_eq!(m.zrtt_reply_overdue(a(1), t), None, "a success between");
        assert_eq!(m.zrtt_reply_overdue(a(1), t), Some(ZRTT_FIRST_COOLDOWN));
        assert_eq!(m.zrtt_blocked(a(1), t), Some(ZRTT_FIRST_COOLDOWN));
        // After the cool-down, the next overdue Reply marks it at once,
        // for twice as long.
        let later = t + ZRTT_FIRST_COOLDOWN;
        assert_eq!(
            m.zrtt_reply_overdue(a(1), later),
            Some(2 * ZRTT_FIRST_COOLDOWN)
        );
    }

    #[test]
    fn race_delay_is_three_rtts_within_bounds() {
        let max = Duration::from_secs(1);
        assert_eq!(PathMemory::race_delay(None, max), max);
        let ms = Duration::from_millis;
        assert_eq!(PathMemory::race_delay(Some(ms(20)), max), ms(250));
        assert_eq!(PathMemory::race_delay(Some(ms(100)), max), ms(300));
        assert_eq!(PathMemory::race_delay(Some(ms(500)), max), max);
    }

    #[test]
    fn bounded_and_rtts_remembered() {
        let m = PathMemory::new(2);
        let t = Instant::now();
        m.observe_rtt(a(1), Duration::from_millis(30), t);
        m.observe_rtt(a(2), Duration::ZERO, t);
        assert_eq!(m.rtt(a(1)), Some(Duration::from_millis(30)));
        assert_eq!(m.rtt(a(2)), None);
        m.fast_open_failed(a(3), t);
        m.fast_open_failed(a(4), t);
        assert!(m.entries.lock().map(|e| e.len()).unwrap_or(usize::MAX) <= 2);
    }
}
