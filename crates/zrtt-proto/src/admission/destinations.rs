//! Bytes sent before the TCP handshake completes, budgeted per destination
//! (address and prefix) and in all, with feedback from the handshake: an
//! address whose early answers are not followed by a completed handshake
//! (a reset, a timeout) gets none for a cool-down that doubles on
//! repetition, whatever proof it shows (docs/PROTOCOL.md §8).
//!
//! This bounds what a stale or stolen proof, or a spoofed trusted source,
//! can reflect at one victim and from one gateway, whatever the
//! per-connection window: per victim address, the burst plus the rate
//! times the time to notice the failure, then nothing for the cool-down.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::canonical_ip;
use super::sources::source_prefix;

/// Limits of the pre-handshake byte budgets. Rates in bytes per second,
/// bursts in bytes; a rate of 0 means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct DestinationLimits {
    /// Per destination address: sustained rate.
    pub address_rate: f64,
    /// Per destination address: burst (a browser's six first connections
    /// with one initial window each).
    pub address_burst: f64,
    /// Per destination prefix (/24, /48): rate.
    pub prefix_rate: f64,
    /// Per destination prefix: burst.
    pub prefix_burst: f64,
    /// The whole gateway: rate.
    pub global_rate: f64,
    /// The whole gateway: burst.
    pub global_burst: f64,
    /// First cool-down after an early answer whose handshake failed.
    pub cooldown: Duration,
    /// Longest cool-down (it doubles on each failure in a row).
    pub max_cooldown: Duration,
    /// Early answers to one address whose handshakes are still pending, at
    /// most (a browser's six first connections); one while the address is
    /// on probation (it failed a handshake and has not completed one since).
    pub max_pending_per_address: u32,
    /// Destinations remembered at most; beyond it, new destinations get no
    /// early answers until old entries expire (safe: they are served
    /// after the handshake).
    pub max_entries: usize,
}

impl Default for DestinationLimits {
    fn default() -> Self {
        Self {
            address_rate: 6.0 * super::INITIAL_WINDOW as f64,
            address_burst: 6.0 * super::INITIAL_WINDOW as f64,
            prefix_rate: 262_144.0,
            prefix_burst: 24.0 * super::INITIAL_WINDOW as f64,
            global_rate: 64.0 * 1024.0 * 1024.0,
            global_burst: 8.0 * 1024.0 * 1024.0,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(600),
            max_pending_per_address: 6,
            max_entries: 100_000,
        }
    }
}

/// A byte bucket: refills at `rate`, holds at most `burst`.
#[derive(Clone, Debug)]
struct Bytes {
    rate: f64,
    burst: f64,
    level: f64,
    last: Instant,
}

impl Bytes {
    fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            level: burst,
            last: now,
        }
    }

    fn level(&mut self, now: Instant) -> f64 {
        if self.rate <= 0.0 {
            return f64::INFINITY;
        }
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        if now > self.last {
            self.last = now;
        }
        self.level = (self.level + dt * self.rate).min(self.burst);
        self.level
    }

    fn take(&mut self, n: f64) {
        if self.rate > 0.0 {
            self.level -= n;
        }
    }

    fn give_back(&mut self, n: f64) {
        if self.rate > 0.0 {
            self.level = (self.level + n).min(self.burst);
        }
    }

    fn full(&mut self, now: Instant) -> bool {
        self.level(now) >= self.burst
    }
}

#[derive(Clone, Debug)]
struct Destination {
    bytes: Bytes,
    /// Early answers in a row whose handshake failed.
    strikes: u32,
    cooldown_until: Option<Instant>,
    /// Early answers granted and not yet reported.
    outstanding: u32,
}

/// Why an early answer to a destination was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withheld {
    /// The address is cooling down after early answers it did not follow
    /// with a completed handshake.
    CoolingDown,
    /// Its address, prefix or the gateway's budget is used up for now.
    OverBudget,
    /// Too many destinations are remembered.
    Full,
}

/// The per-destination budgets of one gateway.
#[derive(Debug)]
pub struct DestinationBudgets {
    limits: DestinationLimits,
    addresses: HashMap<IpAddr, Destination>,
    prefixes: HashMap<IpAddr, Bytes>,
    global: Bytes,
}

impl DestinationBudgets {
    /// Budgets under `limits`, full at `now`.
    pub fn new(limits: DestinationLimits, now: Instant) -> Self {
        Self {
            global: Bytes::new(limits.global_rate, limits.global_burst, now),
            limits,
            addresses: HashMap::new(),
            prefixes: HashMap::new(),
        }
    }

    /// Reserve bytes for an early answer to `dest`: `want` if every budget
    /// has it, else as much as all have if that is at least `floor`, else
    /// nothing. Every grant must be followed by [`Self::completed`] or
    /// [`Self::failed`] for the same destination.
    pub fn reserve(
        &mut self,
        dest: IpAddr,
        want: usize,
        floor: usize,
        now: Instant,
    ) -> Result<usize, Withheld> {
        let dest = canonical_ip(dest);
        let prefix = source_prefix(dest);
        let full = |b: &Self| {
            (!b.addresses.contains_key(&dest) && b.addresses.len() >= b.limits.max_entries)
                || (!b.prefixes.contains_key(&prefix) && b.prefixes.len() >= b.limits.max_entries)
        };
        if full(self) {
            self.expire(now);
            if full(self) {
                return Err(Withheld::Full);
            }
        }
        let l = self.limits;
        let d = self.addresses.entry(dest).or_insert_with(|| Destination {
            bytes: Bytes::new(l.address_rate, l.address_burst, now),
            strikes: 0,
            cooldown_until: None,
            outstanding: 0,
        });
        if d.cooldown_until.is_some_and(|t| now < t) {
            return Err(Withheld::CoolingDown);
        }
        let pending_cap = if d.strikes > 0 {
            1
        } else {
            l.max_pending_per_address.max(1)
        };
        if d.outstanding >= pending_cap {
            return Err(Withheld::OverBudget);
        }
        let p = self
            .prefixes
            .entry(prefix)
            .or_insert_with(|| Bytes::new(l.prefix_rate, l.prefix_burst, now));
        let available = d
            .bytes
            .level(now)
            .min(p.level(now))
            .min(self.global.level(now));
        let grant = if available >= want as f64 {
            want
        } else if available >= floor as f64 {
            available as usize
        } else {
            return Err(Withheld::OverBudget);
        };
        d.bytes.take(grant as f64);
        p.take(grant as f64);
        self.global.take(grant as f64);
        d.outstanding += 1;
        Ok(grant)
    }

    /// An early answer's handshake completed; `unused` of its grant was
    /// not sent and goes back. The address keeps its budget and its
    /// failures are forgiven.
    pub fn completed(&mut self, dest: IpAddr, unused: usize, now: Instant) {
        let dest = canonical_ip(dest);
        if let Some(d) = self.addresses.get_mut(&dest) {
            d.outstanding = d.outstanding.saturating_sub(1);
            d.strikes = 0;
            d.cooldown_until = None;
            d.bytes.give_back(unused as f64);
        }
        if let Some(p) = self.prefixes.get_mut(&source_prefix(dest)) {
            p.give_back(unused as f64);
        }
        self.global.give_back(unused as f64);
        self.forget_if_idle(dest, now);
    }

    /// A grant that sent nothing and never will: the connection was closed
    /// before its answer for a reason of the gateway's own (the source at
    /// its connection cap, an error setting it up). The `granted` bytes go
    /// back and the answer stops counting as pending; strikes and
    /// cool-down stay as they are (nothing shows the address is real).
    pub fn released(&mut self, dest: IpAddr, granted: usize, now: Instant) {
        let dest = canonical_ip(dest);
        if let Some(d) = self.addresses.get_mut(&dest) {
            d.outstanding = d.outstanding.saturating_sub(1);
            d.bytes.give_back(granted as f64);
        }
        if let Some(p) = self.prefixes.get_mut(&source_prefix(dest)) {
            p.give_back(granted as f64);
        }
        self.global.give_back(granted as f64);
        self.forget_if_idle(dest, now);
    }

    /// An early answer was not followed by a completed handshake (reset,
    /// timeout, unreachable): the address gets no early answers for a
    /// cool-down, doubled for each failure in a row.
    pub fn failed(&mut self, dest: IpAddr, now: Instant) {
        let dest = canonical_ip(dest);
        let l = self.limits;
        if let Some(d) = self.addresses.get_mut(&dest) {
            d.outstanding = d.outstanding.saturating_sub(1);
            d.strikes = d.strikes.saturating_add(1);
            let factor = 1u32 << d.strikes.saturating_sub(1).min(16);
            let cooldown = l.cooldown.saturating_mul(factor).min(l.max_cooldown);
            d.cooldown_until = Some(now + cooldown);
        }
    }

    /// Whether `dest` is cooling down at `now`.
    pub fn cooling_down(&self, dest: IpAddr, now: Instant) -> bool {
        self.addresses
            .get(&canonical_ip(dest))
            .and_then(|d| d.cooldown_until)
            .is_some_and(|t| now < t)
    }

    /// Destinations remembered.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    fn forget_if_idle(&mut self, dest: IpAddr, now: Instant) {
        let idle = self
            .addresses
            .get_mut(&dest)
            .is_some_and(|d| d.outstanding == 0 && d.strikes == 0 && d.bytes.full(now));
        if idle {
            self.addresses.remove(&dest);
            // A full prefix bucket is the same as none: forgotten with its
            // last address, else prefixes of addresses long forgotten
            // would pile up (no bound but `max_entries`).
            let prefix = source_prefix(dest);
            if self.prefixes.get_mut(&prefix).is_some_and(|p| p.full(now)) {
                self.prefixes.remove(&prefix);
            }
        }
    }

    /// Drop destinations with nothing to remember: no answer outstanding,
    /// no cool-down running, a full bucket; and prefixes with full buckets.
    fn expire(&mut self, now: Instant) {
        self.addresses.retain(|_, d| {
            d.outstanding > 0 || d.cooldown_until.is_some_and(|t| now < t) || !d.bytes.full(now)
        });
        self.prefixes.retain(|_, p| !p.full(now));
    }
}

#[cfg(test)]
// Tests need an Instant to start from; the budgets never read the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn small() -> DestinationLimits {
        DestinationLimits {
            address_rate: 1000.0,
            address_burst: 3000.0,
            prefix_rate: 2000.0,
            prefix_burst: 5000.0,
            global_rate: 100_000.0,
            global_burst: 100_000.0,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(40),
            max_pending_per_address: 6,
            max_entries: 3,
        }
    }

    #[test]
    fn forgotten_addresses_take_their_prefixes_along_and_prefixes_are_bounded() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        // Proven clients in ever new prefixes, each answered and done.
        for i in 0..1000u32 {
            let v = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0001 + (i << 8)));
            let t = t0 + Duration::from_secs(u64::from(i) * 10);
            assert_eq!(b.reserve(v, 100, 50, t), Ok(100));
            b.completed(v, 100, t);
        }
        assert_eq!((b.addresses.len(), b.prefixes.len()), (0, 0));
        // Prefixes with budget in use count against max_entries (3) too:
        // a new address in a new prefix is refused once they are full.
        let t = t0 + Duration::from_secs(20_000);
        for i in 0..3u32 {
            let v = IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0001 + (i << 8)));
            assert_eq!(b.reserve(v, 100, 50, t), Ok(100));
            b.completed(v, 0, t);
        }
        assert_eq!((b.addresses.len(), b.prefixes.len()), (3, 3));
        let v = IpAddr::from(std::net::Ipv4Addr::from(0x0c00_0001));
        assert_eq!(b.reserve(v, 100, 50, t), Err(Withheld::Full));
    }

    #[test]
    fn burst_then_rate_then_floor() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        let v = ip("198.18.0.1");
        assert_eq!(b.reserve(v, 2000, 300, t0), Ok(2000));
        // 1000 left: less than wanted, more than the floor.
        assert_eq!(b.reserve(v, 2000, 300, t0), Ok(1000));
        assert_eq!(b.reserve(v, 2000, 300, t0), Err(Withheld::OverBudget));
        // Half a second refills 500.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.reserve(v, 2000, 300, t1), Ok(500));
    }

    #[test]
    fn prefix_and_global_budgets_bind_too() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        assert_eq!(b.reserve(ip("198.18.0.1"), 3000, 3000, t0), Ok(3000));
        // Same /24: the prefix has 2000 left.
        assert_eq!(b.reserve(ip("198.18.0.2"), 3000, 100, t0), Ok(2000));
        assert_eq!(
            b.reserve(ip("198.18.0.3"), 100, 100, t0),
            Err(Withheld::OverBudget)
        );
        // Another /24 is not affected.
        assert_eq!(b.reserve(ip("198.18.1.3"), 100, 100, t0), Ok(100));
        let mut g = small();
        g.global_rate = 10.0;
        g.global_burst = 150.0;
        let mut b = DestinationBudgets::new(g, t0);
        assert_eq!(b.reserve(ip("10.0.0.1"), 100, 100, t0), Ok(100));
        assert_eq!(
            b.reserve(ip("10.9.0.1"), 100, 100, t0),
            Err(Withheld::OverBudget)
        );
    }

    #[test]
    fn a_released_grant_goes_back_without_forgiving() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        let v = ip("198.18.0.1");
        // Six pending answers at most: released ones stop counting.
        let mut l = small();
        l.max_pending_per_address = 2;
        let mut p = DestinationBudgets::new(l, t0);
        for _ in 0..10 {
            assert_eq!(p.reserve(v, 100, 100, t0), Ok(100));
            assert_eq!(p.reserve(v, 100, 100, t0), Ok(100));
            p.released(v, 100, t0);
            p.released(v, 100, t0);
        }
        // The bytes come back whole (the burst is 3000).
        assert_eq!(b.reserve(v, 3000, 3000, t0), Ok(3000));
        b.released(v, 3000, t0);
        assert_eq!(b.reserve(v, 3000, 3000, t0), Ok(3000));
        // A cool-down is not lifted by a release.
        b.failed(v, t0);
        b.released(v, 0, t0);
        assert!(b.cooling_down(v, t0 + Duration::from_secs(9)));
    }

    #[test]
    fn failed_handshakes_cool_down_growing_and_success_forgives() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        let v = ip("198.18.0.1");
        assert!(b.reserve(v, 100, 100, t0).is_ok());
        b.failed(v, t0);
        assert_eq!(b.reserve(v, 100, 100, t0), Err(Withheld::CoolingDown));
        assert!(b.cooling_down(v, t0 + Duration::from_secs(9)));
        let t1 = t0 + Duration::from_secs(10);
        assert!(b.reserve(v, 100, 100, t1).is_ok(), "10 s later");
        b.failed(v, t1);
        // Second failure in a row: 20 s.
        assert!(b.cooling_down(v, t1 + Duration::from_secs(19)));
        let t2 = t1 + Duration::from_secs(20);
        assert!(b.reserve(v, 100, 100, t2).is_ok());
        b.failed(v, t2);
        // Third: 40 s (the cap).
        let t3 = t2 + Duration::from_secs(40);
        assert!(b.cooling_down(v, t3 - Duration::from_secs(1)));
        assert!(b.reserve(v, 100, 100, t3).is_ok());
        b.failed(v, t3);
        let t4 = t3 + Duration::from_secs(40);
        assert!(!b.cooling_down(v, t4), "capped at max_cooldown");
        assert!(b.reserve(v, 100, 100, t4).is_ok());
        b.completed(v, 0, t4);
        assert!(b.reserve(v, 100, 100, t4).is_ok());
        b.failed(v, t4);
        assert!(
            !b.cooling_down(v, t4 + Duration::from_secs(10)),
            "forgiven: back to the first cool-down"
        );
    }

    #[test]
    fn unused_bytes_go_back_and_idle_destinations_are_forgotten() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        let v = ip("198.18.0.1");
        assert_eq!(b.reserve(v, 3000, 3000, t0), Ok(3000));
        b.completed(v, 2500, t0);
        assert_eq!(b.reserve(v, 3000, 3000, t0), Err(Withheld::OverBudget));
        assert_eq!(b.reserve(v, 2500, 2500, t0), Ok(2500));
        b.completed(v, 2500, t0);
        // Full again with nothing outstanding: forgotten.
        let later = t0 + Duration::from_secs(5);
        assert!(b.reserve(v, 10, 10, later).is_ok());
        b.completed(v, 10, later);
        assert!(b.is_empty(), "{b:?}");
    }

    #[test]
    fn a_full_table_withholds_early_answers_from_new_destinations() {
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(small(), t0);
        for i in 1..=3 {
            let v = ip(&format!("10.0.{i}.1"));
            assert!(b.reserve(v, 100, 100, t0).is_ok());
            b.failed(v, t0);
        }
        assert_eq!(b.len(), 3);
        assert_eq!(b.reserve(ip("10.0.9.1"), 100, 100, t0), Err(Withheld::Full));
        // After the cool-downs and refills, old entries make room.
        let later = t0 + Duration::from_secs(60);
        assert!(b.reserve(ip("10.0.9.1"), 100, 100, later).is_ok());
    }

    /// Bytes a gateway sends one victim in `span` when an attacker replays
    /// the victim's proof every millisecond and each answer fails
    /// `detect` later (a reset after one RTT, or the gate timeout).
    fn reflected(detect: Duration, span: Duration) -> usize {
        let l = DestinationLimits::default();
        let t0 = Instant::now();
        let mut b = DestinationBudgets::new(l, t0);
        let v = ip("198.18.0.1");
        let mut sent = 0usize;
        let mut t = t0;
        let mut pending: Vec<Instant> = Vec::new();
        while t < t0 + span {
            pending.retain(|&at| {
                if at <= t {
                    b.failed(v, t);
                    false
                } else {
                    true
                }
            });
            if let Ok(n) = b.reserve(v, super::super::INITIAL_WINDOW, 600, t) {
                sent += n;
                pending.push(t + detect);
            }
            t += Duration::from_millis(1);
        }
        sent
    }

    #[test]
    fn reflection_at_one_victim_is_bounded() {
        // At most six windows before the first failure is noticed, then
        // one window per cool-down (10, 20, 40, ... 600 s): docs/PROTOCOL.md §8.
        let w = super::super::INITIAL_WINDOW;
        for detect in [Duration::from_millis(100), Duration::from_secs(3)] {
            let first = reflected(detect, Duration::from_secs(5));
            assert_eq!(first, 6 * w, "first {detect:?}");
            let ten_min = reflected(detect, Duration::from_secs(600));
            // 10+3, 20+3, 40+3, 80+3, 160+3, 320+3: six more windows at most.
            assert!(ten_min <= 12 * w, "{detect:?}: {ten_min} B in 10 min");
        }
    }
}
