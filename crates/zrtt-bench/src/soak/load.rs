//! The soak's open-loop load: one thread in the client host, a tokio
//! current-thread runtime, a new request task started whenever one is due
//! at the asked rate (whatever the answers' latency), each a new connection
//! through the zrtt client library with its TLS fallback and the faults
//! scenario's request retries. A share of the requests come from clients
//! that keep their state (path memory, static key, address tokens), the
//! rest from a new client each (a first contact).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use zrtt_net::client::ClientConfig;

use super::view::View;
use crate::faults::load::{request, Attempts, Sample};

/// One generator thread's share of the load.
pub(super) struct Spec {
    pub(super) attempts: Attempts,
    /// This thread's name in the request paths (`/s/<thread>-<n>`).
    pub(super) thread: usize,
    /// Requests per second this thread starts.
    pub(super) rate: f64,
    /// When the whole run started (every thread paces from it).
    pub(super) t0: Instant,
    pub(super) duration: Duration,
    /// Requests in flight beyond which a due request is skipped (counted).
    pub(super) max_in_flight: usize,
    /// Share of requests sent by a client that keeps its state.
    pub(super) kept_share: f64,
    pub(super) view: Arc<View>,
    pub(super) tls: Arc<rustls::ClientConfig>,
    pub(super) kept: Vec<Arc<ClientConfig>>,
}

/// One request: when it was due, from which client, its fate.
pub(super) struct Req {
    /// Seconds from the run's start to when it was due.
    pub(super) at_s: f64,
    pub(super) kept: bool,
    pub(super) sample: Sample,
}

/// What one thread did.
pub(super) struct Out {
    pub(super) reqs: Vec<Req>,
    /// Due requests not started because `max_in_flight` were in flight.
    pub(super) skipped: u64,
}

/// Whether request `i` of a stream goes to a kept client: spreads `share`
/// evenly over the stream.
pub(super) fn is_kept(i: u64, share: f64) -> bool {
    let share = share.clamp(0.0, 1.0);
    ((i + 1) as f64 * share).floor() > (i as f64 * share).floor()
}

/// Runs in the calling thread (which must be in the client's namespace)
/// until `duration` from `t0`, then waits for the requests in flight.
pub(super) fn run(spec: Spec) -> Result<Out> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let spec = Arc::new(spec);
    rt.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        let mut reqs = Vec::new();
        let (mut sent, mut skipped, mut kept_n) = (0u64, 0u64, 0usize);
        loop {
            let now = spec.t0.elapsed();
            if now >= spec.duration {
                break;
            }
            let due = (now.as_secs_f64() * spec.rate) as u64;
            while sent < due {
                let i = sent;
                sent += 1;
                if tasks.len() >= spec.max_in_flight {
                    skipped += 1;
                    continue;
                }
                let at_s = i as f64 / spec.rate;
                let kept = is_kept(i, spec.kept_share) && !spec.kept.is_empty();
                let path = format!("/s/{}-{i}", spec.thread);
                let s = spec.clone();
                let client = kept.then(|| {
                    kept_n += 1;
                    s.kept[kept_n % s.kept.len()].clone()
                });
                tasks.spawn(async move {
                    let sample = match client {
                        Some(c) => request(&s.attempts, &move || c.clone(), &path).await,
                        None => {
                            let fresh = || {
                                Arc::new(
                                    ClientConfig::builder(s.view.clone())
                                        .with_tls_config(s.tls.clone()),
                                )
                            };
                            request(&s.attempts, &fresh, &path).await
                        }
                    };
                    Req { at_s, kept, sample }
                });
            }
            while let Some(r) = tasks.try_join_next() {
                reqs.push(r.map_err(|e| anyhow!("request task: {e}"))?);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        while let Some(r) = tasks.join_next().await {
            reqs.push(r.map_err(|e| anyhow!("request task: {e}"))?);
        }
        Ok(Out { reqs, skipped })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_share_is_spread_evenly() {
        let kept = |share| (0..1000).filter(|&i| is_kept(i, share)).count();
        assert_eq!(kept(0.5), 500);
        assert_eq!(kept(0.0), 0);
        assert_eq!(kept(1.0), 1000);
        assert_eq!(kept(0.25), 250);
        // Alternating at one half.
        assert!(!is_kept(0, 0.5) && is_kept(1, 0.5) && !is_kept(2, 0.5));
    }
}
