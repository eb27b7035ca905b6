//! New connections at a target rate: one idempotent GET per connection
//! through the zrtt client library (a new client per request: every
//! request a first contact), started on a fixed schedule (open loop) from
//! one current-thread runtime in the client's namespace. At most
//! `max_in_flight` requests run at once; when the machine cannot keep up,
//! starts wait for a slot and the rate reached falls below the target
//! (reported, not hidden). A request without any HTTP answer is sent
//! again (new connection, so a new source port and possibly another
//! gateway), as an application does with an idempotent GET.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use zrtt_net::client::ClientConfig;

use crate::faults::load::{request, Attempts, Sample};

/// The load's parameters.
pub(super) struct RateLoad {
    /// Where each request goes and how it is retried.
    pub(super) attempts: Attempts,
    /// Target new connections per second.
    pub(super) rate: f64,
    pub(super) duration: Duration,
    pub(super) max_in_flight: usize,
    /// The client configuration of each request (a fresh one each time).
    pub(super) client: Arc<dyn Fn() -> Arc<ClientConfig> + Send + Sync>,
    /// Start times are measured from here (the scenario's clock).
    pub(super) origin: Instant,
    /// Requests started so far (the scenario watches it).
    pub(super) started: Arc<AtomicUsize>,
    /// Set to stop starting requests early.
    pub(super) stop: Arc<AtomicBool>,
}

/// One request: when it started (seconds since the origin) and its fate.
#[derive(Clone, Debug)]
pub(super) struct Req {
    pub(super) start_s: f64,
    pub(super) sample: Sample,
}

/// Runs the load in the calling thread (inside the client's namespace);
/// the requests in start order, and the seconds the starts took.
pub(super) fn run(load: RateLoad) -> Result<(Vec<Req>, f64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let load = Rc::new(load);
    local.block_on(&rt, async move {
        let t0 = tokio::time::Instant::now();
        let gap = Duration::from_secs_f64(1.0 / load.rate.max(0.001));
        let in_flight = Arc::new(tokio::sync::Semaphore::new(load.max_in_flight.max(1)));
        let mut tasks = Vec::new();
        let mut i = 0usize;
        loop {
            let due = t0 + gap.mul_f64(i as f64);
            // The load lasts `duration` of wall time: when the machine
            // falls behind the schedule, fewer requests start.
            if due.duration_since(t0) >= load.duration
                || t0.elapsed() >= load.duration
                || load.stop.load(Ordering::SeqCst)
            {
                break;
            }
            tokio::time::sleep_until(due).await;
            let Ok(permit) = in_flight.clone().acquire_owned().await else {
                break;
            };
            let start_s = load.origin.elapsed().as_secs_f64();
            let l = load.clone();
            load.started.fetch_add(1, Ordering::SeqCst);
            tasks.push(tokio::task::spawn_local(async move {
                let sample = request(&l.attempts, &*l.client, &format!("/r/{i}")).await;
                drop(permit);
                Req { start_s, sample }
            }));
            i += 1;
        }
        let starting = t0.elapsed().as_secs_f64();
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(t.await?);
        }
        Ok((out, starting))
    })
}
