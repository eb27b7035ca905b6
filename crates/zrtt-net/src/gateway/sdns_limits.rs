//! How many shortcut runs the SDNS starts for queriers it cannot prove
//! (docs/GATEWAY.md, "The DNS shortcut"): a query's source is a resolver
//! shared by many clients, or a spoofed address, so no run is ever owed
//! to it. Runs are counted per source prefix (/24, /48: the prefixes of
//! the gateway's connection limits, [`source_prefix`]) rather than per
//! address, in all (below the SDNS's UDP task limit, so other queries
//! keep being answered), and rate-limited per prefix. A query over any
//! bound gets FETCH without a run: the client's TCP form then runs the
//! flight from its own, handshake-proven address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use zrtt_proto::admission::{source_prefix, TokenBucket};

/// Prefixes whose run budget is remembered at most; beyond it (after
/// forgetting the full ones) a new prefix gets no run (FETCH).
const MAX_BUDGETS: usize = 1 << 16;

/// Why a query got FETCH without a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deferred {
    /// Its source prefix has as many runs going as allowed.
    PrefixRunning,
    /// The SDNS has as many runs going as allowed.
    AllRunning,
    /// Its source prefix has used its runs per second.
    PrefixBudget,
    /// The gateway is over its soft load limit (`Admission::intake`):
    /// unproven first flights wait for their handshake.
    Load,
}

/// The bounds, and what is running.
#[derive(Debug)]
pub(super) struct RunLimits {
    max_per_prefix: usize,
    max_total: usize,
    per_prefix_rate: f64,
    running: HashMap<IpAddr, usize>,
    total: usize,
    /// Each prefix's run budget and when it was last used: a bucket unused
    /// for its refill time is full and may be forgotten.
    budgets: HashMap<IpAddr, (TokenBucket, Instant)>,
}

impl RunLimits {
    /// At most `max_per_prefix` runs per source prefix and `max_total` in
    /// all at once, `per_prefix_rate` new runs per second per prefix
    /// (bursts of as many; 0: unlimited).
    pub(super) fn new(max_per_prefix: usize, max_total: usize, per_prefix_rate: f64) -> Self {
        Self {
            max_per_prefix,
            max_total,
            per_prefix_rate,
            running: HashMap::new(),
            total: 0,
            budgets: HashMap::new(),
        }
    }

    /// Start a run for a query from `source` at `now`, or say why not.
    /// Every `Ok` is matched by one [`Self::end`] with the same source.
    pub(super) fn try_start(&mut self, source: IpAddr, now: Instant) -> Result<(), Deferred> {
        let prefix = source_prefix(source);
        if self.running.get(&prefix).copied().unwrap_or(0) >= self.max_per_prefix {
            return Err(Deferred::PrefixRunning);
        }
        if self.total >= self.max_total {
            return Err(Deferred::AllRunning);
        }
        if self.per_prefix_rate > 0.0 {
            if !self.budgets.contains_key(&prefix) && self.budgets.len() >= MAX_BUDGETS {
                // Bursts are one second of the rate: a bucket untouched for
                // that long is full again, and forgetting it loses nothing.
                self.budgets
                    .retain(|_, (_, last)| now.saturating_duration_since(*last) < REFILL);
                if self.budgets.len() >= MAX_BUDGETS {
                    return Err(Deferred::PrefixBudget);
                }
            }
            let rate = self.per_prefix_rate;
            let (bucket, last) = self
                .budgets
                .entry(prefix)
                .or_insert_with(|| (TokenBucket::new(rate, now), now));
            *last = now;
            if !bucket.try_take(now) {
                return Err(Deferred::PrefixBudget);
            }
        }
        *self.running.entry(prefix).or_insert(0) += 1;
        self.total += 1;
        Ok(())
    }

    /// A run started by [`Self::try_start`] for `source` ended.
    pub(super) fn end(&mut self, source: IpAddr) {
        let prefix = source_prefix(source);
        if let Some(n) = self.running.get_mut(&prefix) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(&prefix);
            }
        }
        self.total = self.total.saturating_sub(1);
    }
}

/// A token bucket's refill time from empty (its burst is one second).
const REFILL: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn runs_are_counted_per_prefix_and_in_all() {
        let now = Instant::now();
        let mut l = RunLimits::new(2, 3, 0.0);
        assert_eq!(l.try_start(ip("192.0.2.1"), now), Ok(()));
        // Another address of the same /24 shares the bound.
        assert_eq!(l.try_start(ip("192.0.2.200"), now), Ok(()));
        assert_eq!(
            l.try_start(ip("192.0.2.7"), now),
            Err(Deferred::PrefixRunning)
        );
        // IPv6: one /48 is one source, whatever the /64.
        assert_eq!(l.try_start(ip("2001:db8:1:2::1"), now), Ok(()));
        assert_eq!(
            l.try_start(ip("198.51.100.1"), now),
            Err(Deferred::AllRunning)
        );
        l.end(ip("192.0.2.1"));
        assert_eq!(l.try_start(ip("192.0.2.9"), now), Ok(()));
        assert_eq!(
            l.try_start(ip("2001:db8:1:ffff::9"), now),
            Err(Deferred::AllRunning)
        );
        l.end(ip("2001:db8:1:2::1"));
        let mut v6 = RunLimits::new(1, 10, 0.0);
        assert_eq!(v6.try_start(ip("2001:db8:1:2::1"), now), Ok(()));
        assert_eq!(
            v6.try_start(ip("2001:db8:1:ff00::1"), now),
            Err(Deferred::PrefixRunning)
        );
        assert_eq!(v6.try_start(ip("2001:db8:2::1"), now), Ok(()));
    }

    #[test]
    fn each_prefix_has_a_run_budget() {
        let t0 = Instant::now();
        let mut l = RunLimits::new(100, 100, 2.0);
        for _ in 0..2 {
            assert_eq!(l.try_start(ip("203.0.113.5"), t0), Ok(()));
            l.end(ip("203.0.113.5"));
        }
        assert_eq!(
            l.try_start(ip("203.0.113.6"), t0),
            Err(Deferred::PrefixBudget)
        );
        // Other prefixes have their own.
        assert_eq!(l.try_start(ip("198.51.100.5"), t0), Ok(()));
        // Refilled with time.
        let t1 = t0 + Duration::from_millis(600);
        assert_eq!(l.try_start(ip("203.0.113.6"), t1), Ok(()));
    }
}
