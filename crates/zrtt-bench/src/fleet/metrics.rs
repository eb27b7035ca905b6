//! The gateways' admin endpoints: counters and the replay check's
//! histogram (`zrtt_gateway_replay_store_check_seconds`), summed over the
//! fleet and taken apart per phase.

use std::collections::BTreeMap;

use zrtt_lab::Lab;

use super::ADMIN;

const CHECK: &str = "zrtt_gateway_replay_store_check_seconds";

/// One gateway's page, read: counters (`*_total`, name without the
/// `zrtt_gateway_` prefix and `_total`) and the check histogram.
#[derive(Clone, Debug, Default)]
pub(super) struct Scrape {
    pub(super) counters: BTreeMap<String, f64>,
    /// Cumulative buckets: (upper bound in seconds, count).
    pub(super) buckets: Vec<(f64, f64)>,
}

/// Reads `gateway`'s admin page (an empty scrape if it is down).
pub(super) fn scrape(lab: &Lab, gateway: &str) -> Scrape {
    match crate::admin_page::fetch(lab, gateway, ADMIN) {
        Ok(t) => parse(&t),
        Err(_) => Scrape::default(),
    }
}

pub(super) fn parse(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, v)) = l.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = v.trim().parse::<f64>() else {
            continue;
        };
        if let Some(le) = name
            .strip_prefix(CHECK)
            .and_then(|r| r.strip_prefix("_bucket{le=\""))
            .and_then(|r| r.strip_suffix("\"}"))
        {
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            s.buckets.push((le, v));
        } else if let Some(c) = name
            .strip_prefix("zrtt_gateway_")
            .and_then(|n| n.strip_suffix("_total"))
        {
            s.counters.insert(c.to_string(), v);
        }
    }
    s.buckets
        .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    s
}

impl Scrape {
    /// What happened between `before` and `self` on one gateway; a
    /// gateway restarted in between (counts went down) counts from zero.
    pub(super) fn since(&self, before: &Scrape) -> Scrape {
        let total = |s: &Scrape| s.buckets.last().map_or(0.0, |b| b.1);
        let restarted = total(self) < total(before)
            || self
                .counters
                .iter()
                .any(|(k, v)| before.counters.get(k).is_some_and(|b| v < b));
        if restarted {
            return self.clone();
        }
        let counters = self
            .counters
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v - before.counters.get(k).copied().unwrap_or(0.0),
                )
            })
            .collect();
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, c)| {
                let b = before
                    .buckets
                    .iter()
                    .find(|x| x.0 == le)
                    .map_or(0.0, |x| x.1);
                (le, c - b)
            })
            .collect();
        Scrape { counters, buckets }
    }

    /// The sum of two (gateways' or phases') scrapes.
    pub(super) fn add(&mut self, other: &Scrape) {
        for (k, v) in &other.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        for &(le, c) in &other.buckets {
            match self.buckets.iter_mut().find(|x| x.0 == le) {
                Some(x) => x.1 += c,
                None => self.buckets.push((le, c)),
            }
        }
        self.buckets
            .sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    }

    pub(super) fn counter(&self, name: &str) -> f64 {
        self.counters.get(name).copied().unwrap_or(0.0)
    }

    /// Checks observed.
    pub(super) fn checks(&self) -> f64 {
        self.buckets.last().map_or(0.0, |b| b.1)
    }

    /// The upper bound of the bucket holding quantile `q` of the checks,
    /// seconds (`None` without checks).
    pub(super) fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.checks();
        if n <= 0.0 {
            return None;
        }
        self.buckets.iter().find(|b| b.1 >= q * n).map(|b| b.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP x\n\
        zrtt_gateway_replay_store_replays_total 2\n\
        zrtt_gateway_replay_store_check_seconds_bucket{le=\"0.000025\"} 0\n\
        zrtt_gateway_replay_store_check_seconds_bucket{le=\"0.00005\"} 50\n\
        zrtt_gateway_replay_store_check_seconds_bucket{le=\"0.0001\"} 98\n\
        zrtt_gateway_replay_store_check_seconds_bucket{le=\"+Inf\"} 100\n\
        zrtt_gateway_replay_store_check_seconds_count 100\n";

    #[test]
    fn histogram_quantiles_deltas_and_restarts() {
        let s = parse(PAGE);
        assert_eq!(s.counter("replay_store_replays"), 2.0);
        assert_eq!(s.checks(), 100.0);
        assert_eq!(s.quantile(0.5), Some(0.00005));
        assert_eq!(s.quantile(0.98), Some(0.0001));
        assert_eq!(s.quantile(0.99), Some(f64::INFINITY));
        let later = parse(&PAGE.replace("} 98", "} 198").replace("} 100", "} 200"));
        let d = later.since(&s);
        assert_eq!(d.checks(), 100.0);
        assert_eq!(d.quantile(0.99), Some(0.0001));
        // A restarted gateway counts from zero.
        assert_eq!(s.since(&later).checks(), 100.0);
        let mut sum = d.clone();
        sum.add(&s);
        assert_eq!(sum.checks(), 200.0);
        assert_eq!(Scrape::default().quantile(0.5), None);
    }
}
