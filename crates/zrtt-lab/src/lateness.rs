//! Lateness of the hub's packet transmissions (write time minus deadline):
//! a 1 µs histogram and the statistics reported in [`HubStats`](crate::HubStats).

use std::time::Duration;

/// Histogram resolution and range for lateness percentiles.
const HIST_BUCKET_NS: u64 = 1_000;
const HIST_BUCKETS: usize = 50_000; // 50 ms at 1 µs; later samples go to overflow

/// Lateness of packet transmissions: actual write time minus scheduled
/// deadline. Percentiles have 1 µs resolution (values above 50 ms are
/// reported as the maximum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatenessStats {
    /// Number of packets sent.
    pub count: u64,
    /// Mean lateness.
    pub mean: Duration,
    /// Median lateness.
    pub p50: Duration,
    /// 99th percentile lateness.
    pub p99: Duration,
    /// Maximum lateness.
    pub max: Duration,
}

impl std::fmt::Display for LatenessStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} mean={:.1}µs p50={:.1}µs p99={:.1}µs max={:.1}µs",
            self.count,
            self.mean.as_secs_f64() * 1e6,
            self.p50.as_secs_f64() * 1e6,
            self.p99.as_secs_f64() * 1e6,
            self.max.as_secs_f64() * 1e6
        )
    }
}

pub(crate) struct Histogram {
    buckets: Vec<u64>,
    overflow: u64,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl Histogram {
    pub(crate) fn new() -> Self {
        Histogram {
            buckets: vec![0; HIST_BUCKETS],
            overflow: 0,
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    pub(crate) fn record(&mut self, ns: u64) {
        let b = (ns / HIST_BUCKET_NS) as usize;
        match self.buckets.get_mut(b) {
            Some(c) => *c += 1,
            None => self.overflow += 1,
        }
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    fn percentile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // Upper edge of the bucket, but never above the true maximum.
                let ns = ((i as u64) + 1) * HIST_BUCKET_NS;
                return Duration::from_nanos(ns.min(self.max_ns));
            }
        }
        Duration::from_nanos(self.max_ns)
    }

    pub(crate) fn stats(&self) -> LatenessStats {
        let mean = if self.count == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos((self.sum_ns / u128::from(self.count)) as u64)
        };
        LatenessStats {
            count: self.count,
            mean,
            p50: self.percentile(0.50),
            p99: self.percentile(0.99),
            max: Duration::from_nanos(self.max_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles() {
        let mut h = Histogram::new();
        for us in 1..=100u64 {
            h.record(us * 1_000 - 500);
        }
        let s = h.stats();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, Duration::from_micros(50));
        assert_eq!(s.p99, Duration::from_micros(99));
        assert_eq!(s.max, Duration::from_nanos(99_500));
        h.record(10_000_000_000);
        assert_eq!(h.stats().max, Duration::from_secs(10));
    }
}
