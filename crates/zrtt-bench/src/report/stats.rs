//! Order statistics of a set of samples, and rounding for JSON.

use serde_json::{json, Value};

/// Order statistics of one set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
    pub(crate) n: usize,
    pub(crate) median: f64,
    pub(crate) mean: f64,
    pub(crate) p5: f64,
    pub(crate) p95: f64,
    pub(crate) p99: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// The `q` quantile (0..=1) of sorted `v` by the nearest-rank method.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Summary {
    /// Statistics of `samples` (NaN everywhere when empty). The median of an
    /// even count is the mean of the two middle samples.
    pub(crate) fn of(samples: &[f64]) -> Summary {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Summary {
            n,
            median,
            mean: if n == 0 {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / n as f64
            },
            p5: quantile(&v, 0.05),
            p95: quantile(&v, 0.95),
            p99: quantile(&v, 0.99),
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }

    pub(crate) fn to_json(self) -> Value {
        let f = |x: f64| {
            if x.is_finite() {
                json!(round3(x))
            } else {
                Value::Null
            }
        };
        json!({"n": self.n, "median": f(self.median), "mean": f(self.mean), "p5": f(self.p5),
               "p95": f(self.p95), "p99": f(self.p99), "min": f(self.min), "max": f(self.max)})
    }
}

/// `x` rounded to three decimals (for JSON).
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            (s.n, s.median, s.mean, s.min, s.max),
            (5, 3.0, 3.0, 1.0, 5.0)
        );
        let even = Summary::of(&[1.0, 2.0, 3.0, 10.0]);
        assert_eq!(even.median, 2.5);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Summary::of(&v);
        assert_eq!((p.p5, p.p95, p.p99), (5.0, 95.0, 99.0));
        let e = Summary::of(&[f64::NAN]);
        assert_eq!(e.n, 0);
        assert!(e.median.is_nan());
        assert_eq!(e.to_json()["median"], Value::Null);
    }
}
