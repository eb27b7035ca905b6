//! A token bucket on a caller-supplied clock.

use std::time::Instant;

/// At most `rate` events per second on average, bursts of at most `rate`
/// (at least one). A rate of 0 (or less) means unlimited. Time is an
/// argument: the bucket never reads a clock.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: f64, now: Instant) -> Self {
        Self {
            rate,
            tokens: Self::burst_of(rate),
            last: now,
        }
    }

    fn burst_of(rate: f64) -> f64 {
        rate.max(1.0)
    }

    /// Whether the bucket limits anything.
    pub fn is_unlimited(&self) -> bool {
        self.rate <= 0.0
    }

    /// The configured rate per second (0: unlimited).
    pub fn rate(&self) -> f64 {
        self.rate.max(0.0)
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        if now > self.last {
            self.last = now;
        }
        self.tokens = (self.tokens + dt * self.rate).min(Self::burst_of(self.rate));
    }

    /// Take one token at `now` if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.try_take_n(1.0, now)
    }

    /// Take `n` tokens at `now` if there are that many (all or nothing).
    pub fn try_take_n(&mut self, n: f64, now: Instant) -> bool {
        if self.is_unlimited() {
            return true;
        }
        self.refill(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
// Tests need some Instant to start from; the bucket itself never reads the clock.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, t0);
        assert!((0..10).all(|_| b.try_take(t0)));
        assert!(!b.try_take(t0));
        // 100 ms later one more token.
        assert!(b.try_take(t0 + Duration::from_millis(100)));
        assert!(!b.try_take(t0 + Duration::from_millis(100)));
        // A long pause refills to the burst, no more.
        let later = t0 + Duration::from_secs(60);
        assert!((0..10).all(|_| b.try_take(later)));
        assert!(!b.try_take(later));
    }

    #[test]
    fn unlimited_and_fractional_rates() {
        let t0 = Instant::now();
        let mut u = TokenBucket::new(0.0, t0);
        assert!(u.is_unlimited());
        assert!((0..100_000).all(|_| u.try_take(t0)));
        let mut slow = TokenBucket::new(0.5, t0);
        assert!(slow.try_take(t0), "a burst of at least one");
        assert!(!slow.try_take(t0 + Duration::from_secs(1)));
        assert!(slow.try_take(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = TokenBucket::new(1.0, t0);
        assert!(b.try_take(t0));
        assert!(!b.try_take(t0 - Duration::from_secs(5)));
        assert!(!b.try_take(t0));
        assert!(b.try_take(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn take_n_is_all_or_nothing() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(3.0, t0);
        assert!(!b.try_take_n(4.0, t0));
        assert!(b.try_take_n(2.0, t0));
        assert!(!b.try_take_n(2.0, t0));
        assert!(b.try_take_n(1.0, t0));
    }
}
