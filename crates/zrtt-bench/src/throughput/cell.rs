//! One (size, case) measurement: the generator's counters turned into
//! requests per second and CPU per request.

use std::collections::BTreeMap;

use super::loadgen::GenOut;
use super::Case;
use crate::report::Summary;

/// One (size, case) measurement.
pub(super) struct Cell {
    pub(super) case: Case,
    pub(super) kb: usize,
    /// The offered rate of a fixed-rate cell (new connections per second);
    /// `None` at saturation.
    pub(super) rate: Option<f64>,
    /// Why the cell produced nothing, if so.
    pub(super) failure: Option<String>,
    pub(super) ok: u64,
    pub(super) resumed: u64,
    pub(super) failed: u64,
    pub(super) window_s: f64,
    pub(super) latency: Summary,
    /// The case's own server: nginx, the gateway alone, or the gateway
    /// serving files.
    pub(super) server_us: f64,
    /// Gateway + its nginx backend (zrtt only).
    pub(super) with_backend_us: Option<f64>,
    /// The Redis case's `redis-server` (on the load generator's CPU, not
    /// in `server_us`).
    pub(super) store_us: Option<f64>,
    /// Share of one core used by every server process of the case.
    pub(super) server_busy: f64,
    /// Share of one core used by the load generator thread.
    pub(super) loadgen_busy: f64,
    /// Everything that ran on CPU 0 / CPU 1, per request (µs).
    pub(super) core_us: [f64; 2],
    /// CPU 0's irq + softirq time per request (µs): mostly loopback receive
    /// processing of the packets the servers send.
    pub(super) cpu0_softirq_us: f64,
    /// Share of CPU 0 busy with anything.
    pub(super) cpu0_busy: f64,
    pub(super) total: usize,
    pub(super) errors: Vec<String>,
    pub(super) tls_info: Option<String>,
    pub(super) gateway: Option<BTreeMap<String, u64>>,
}

impl Cell {
    pub(super) fn failed(case: Case, kb: usize, why: String) -> Cell {
        Cell {
            case,
            kb,
            rate: None,
            failure: Some(why),
            ok: 0,
            resumed: 0,
            failed: 0,
            window_s: 0.0,
            latency: Summary::of(&[]),
            server_us: f64::NAN,
            with_backend_us: None,
            store_us: None,
            server_busy: f64::NAN,
            loadgen_busy: f64::NAN,
            core_us: [f64::NAN; 2],
            cpu0_softirq_us: f64::NAN,
            cpu0_busy: f64::NAN,
            total: 0,
            errors: Vec::new(),
            tls_info: None,
            gateway: None,
        }
    }

    pub(super) fn rps(&self) -> f64 {
        if self.window_s > 0.0 {
            self.ok as f64 / self.window_s
        } else {
            f64::NAN
        }
    }

    pub(super) fn usable(&self) -> bool {
        self.failure.is_none() && self.ok > 0
    }
}

pub(super) fn build_cell(
    case: Case,
    kb: usize,
    g: GenOut,
    tck: u64,
    gateway: Option<BTreeMap<String, u64>>,
) -> Cell {
    let us = |ticks: u64| ticks as f64 * 1e6 / tck as f64;
    let ok = g.latencies_ms.len() as u64;
    let per = |ticks: u64| {
        if ok > 0 {
            us(ticks) / ok as f64
        } else {
            f64::NAN
        }
    };
    // server_ticks: [nginx, gateway, static-file gateway, Redis-store
    // gateway, redis-server].
    let t = |i: usize| g.server_ticks.get(i).copied().unwrap_or(0);
    let (nginx, gw, files, redis_gw) = (t(0), t(1), t(2), t(3));
    let with_backend = matches!(case, Case::Zrtt | Case::ZrttResumed | Case::ZrttRedis);
    let (own, all) = match case {
        Case::Zrtt | Case::ZrttResumed => (gw, gw + nginx),
        Case::ZrttRedis => (redis_gw, redis_gw + nginx),
        Case::ZrttStatic | Case::TlsStatic | Case::TlsStaticResumed => (files, files),
        _ => (nginx, nginx),
    };
    let busy = |ticks: u64| {
        if g.window_s > 0.0 {
            us(ticks) / 1e6 / g.window_s
        } else {
            f64::NAN
        }
    };
    Cell {
        case,
        kb,
        rate: None,
        failure: None,
        ok,
        resumed: g.resumed,
        failed: g.failed,
        window_s: g.window_s,
        latency: Summary::of(&g.latencies_ms),
        server_us: per(own),
        with_backend_us: with_backend.then(|| per(all)),
        store_us: (case == Case::ZrttRedis).then(|| per(t(4))),
        server_busy: busy(all),
        loadgen_busy: busy(g.client_ticks),
        core_us: [per(g.core_ticks[0]), per(g.core_ticks[1])],
        cpu0_softirq_us: per(g.core_ticks[2]),
        cpu0_busy: busy(g.core_ticks[0]),
        total: g.total,
        errors: g.errors,
        tls_info: g.tls_info,
        gateway,
    }
}
