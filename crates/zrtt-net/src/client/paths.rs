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
//! - **Raced TLS handshakes** are budgeted per destination, as retries
//!   are in Finagle and Envoy: [`RACE_BUDGET_BURST`] at once, refilled by
//!   [`RACE_BUDGET_PER_SEC`] a second and by [`RACE_BUDGET_SHARE_PERCENT`] % of each
//!   zrtt connection started. A gateway so loaded that most answers are
//!   late would otherwise get a TLS handshake beside nearly every flight,
//!   twice the work, which keeps it overloaded (docs/RELIABILITY.md, the
//!   loaded soak). Past the budget a late zrtt answer is waited for; TLS
//!   still follows if zrtt fails.
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

/// Raced TLS handshakes a destination allows at once.
pub const RACE_BUDGET_BURST: u64 = 10;
/// Raced TLS handshakes a destination allows per second, whatever its load.
pub const RACE_BUDGET_PER_SEC: u64 = 1;
/// Share of a destination's zrtt connections that may race TLS beyond the
/// steady rate, in percent (Finagle's retry budget: 20%; zrtt's race is
/// not a retry of a failure, only a hedge against lateness, so less).
pub const RACE_BUDGET_SHARE_PERCENT: u64 = 10;

/// The budget's unit: a thousandth of a raced handshake.
const MILLI: u64 = 1000;

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    srtt: Option<Duration>,
    fast_open_until: Option<Instant>,
    zrtt_until: Option<Instant>,
    zrtt_failures: u32,
    zrtt_overdue: u32,
    /// Raced handshakes still allowed, in thousandths, and when that was
    /// counted (`None`: a full budget).
    race_budget: Option<(u64, Instant)>,
}

impl Entry {
    fn expired(&self, now: Instant, b: RaceBudget) -> bool {
        self.srtt.is_none()
            && self.zrtt_overdue == 0
            && self.fast_open_until.is_none_or(|t| t <= now)
            && self.zrtt_until.is_none_or(|t| t <= now)
            && self.race_tokens(now, b) >= b.burst * MILLI
    }

    fn race_tokens(&self, now: Instant, b: RaceBudget) -> u64 {
        // At least one raced handshake can be saved up, whatever the burst.
        let cap = b.burst.max(1) * MILLI;
        match self.race_budget {
            None => b.burst * MILLI,
            Some((tokens, at)) => {
                let ms = u64::try_from(now.saturating_duration_since(at).as_millis())
                    .unwrap_or(u64::MAX);
                tokens.saturating_add(ms.saturating_mul(b.per_sec)).min(cap)
            }
        }
    }
}

/// The race budget of a [`PathMemory`] (module docs).
#[derive(Clone, Copy, Debug)]
struct RaceBudget {
    burst: u64,
    per_sec: u64,
}

/// Per-destination memory of RTTs and failures; share one per client.
#[derive(Debug)]
pub struct PathMemory {
    max_entries: usize,
    race: RaceBudget,
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
            race: RaceBudget {
                burst: RACE_BUDGET_BURST,
                per_sec: RACE_BUDGET_PER_SEC,
            },
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The same memory with another race budget per destination: `burst`
    /// raced handshakes at once, `per_sec` more a second (plus
    /// [`RACE_BUDGET_SHARE_PERCENT`] % of each zrtt connection). `0, 0`
    /// allows a race only for every tenth zrtt connection.
    pub fn with_race_budget(mut self, burst: u64, per_sec: u64) -> Self {
        self.race = RaceBudget { burst, per_sec };
        self
    }

    fn with<R>(&self, addr: SocketAddr, now: Instant, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&addr) && map.len() >= self.max_entries {
            let b = self.race;
            map.retain(|_, e| !e.expired(now, b));
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

    /// A zrtt connection to `addr` starts: it adds
    /// [`RACE_BUDGET_SHARE_PERCENT`] % of a raced handshake to the budget.
    pub fn zrtt_started(&self, addr: SocketAddr, now: Instant) {
        let b = self.race;
        self.with(addr, now, |e| {
            let t = (e.race_tokens(now, b) + RACE_BUDGET_SHARE_PERCENT * MILLI / 100)
                .min(b.burst.max(1) * MILLI);
            e.race_budget = Some((t, now));
        });
    }

    /// Whether a late zrtt answer from `addr` may race a TLS handshake
    /// now; `true` spends one from the budget (module docs).
    pub fn take_race(&self, addr: SocketAddr, now: Instant) -> bool {
        let b = self.race;
        self.with(addr, now, |e| {
            let t = e.race_tokens(now, b);
            let allowed = t >= MILLI;
            let left = if allowed { t - MILLI } else { t };
            e.race_budget = Some((left, now));
            allowed
        })
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
    fn raced_handshakes_are_budgeted_per_destination() {
        let m = PathMemory::default();
        let t = Instant::now();
        // A burst, then nothing more at the same instant.
        for i in 0..10 {
            assert!(m.take_race(a(1), t), "race {i} of the burst");
        }
        assert!(!m.take_race(a(1), t));
        assert!(m.take_race(a(2), t), "per destination");
        // One a second comes back.
        assert!(!m.take_race(a(1), t + Duration::from_millis(999)));
        assert!(m.take_race(a(1), t + Duration::from_millis(1000)));
        assert!(!m.take_race(a(1), t + Duration::from_millis(1000)));
        // And a tenth of one per zrtt connection started.
        let t2 = t + Duration::from_millis(1000);
        for _ in 0..10 {
            m.zrtt_started(a(1), t2);
        }
        assert!(m.take_race(a(1), t2));
        assert!(!m.take_race(a(1), t2));
        // Refills stop at the burst.
        let later = t + Duration::from_secs(3600);
        for _ in 0..100 {
            m.zrtt_started(a(1), later);
        }
        let taken = (0..20).filter(|_| m.take_race(a(1), later)).count();
        assert_eq!(taken, 10);
        // No burst, no steady rate: one race per ten zrtt connections.
        let m = PathMemory::default().with_race_budget(0, 0);
        let mut raced = 0;
        for i in 0..30 {
            m.zrtt_started(a(1), t + Duration::from_secs(i));
            raced += usize::from(m.take_race(a(1), t + Duration::from_secs(i)));
        }
        assert_eq!(raced, 3);
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
