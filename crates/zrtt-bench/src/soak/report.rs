//! The soak's report: totals, a row per minute (per period for runs under
//! two minutes), the gateway's memory and open files, the events and the
//! token keys seen, and the verdicts.

use std::collections::BTreeMap;

use serde_json::json;

use super::events::{Event, Kind};
use super::load::{Out, Req};
use super::{ProcSample, SoakOpts, SoakOutcome};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};

pub(super) struct Input<'a> {
    pub(super) opts: &'a SoakOpts,
    pub(super) outs: &'a [Out],
    pub(super) events: &'a [Event],
    /// Token key ids the kept clients held at the end of the run.
    pub(super) final_token_ids: &'a [u32],
    pub(super) samples: &'a [ProcSample],
    pub(super) metrics: &'a [(f64, BTreeMap<String, f64>)],
    pub(super) gateway_log: &'a str,
    /// Kernel TCP counters over the run, per host (`server.ListenDrops`, ...).
    pub(super) kernel: &'a BTreeMap<String, f64>,
    pub(super) gateway_died: bool,
    pub(super) backend_served: u64,
    /// (lifetime, ttl, rotation) of the key store, seconds.
    pub(super) key_policy: (u64, u64, u64),
}

/// Counts over a set of requests.
#[derive(Default)]
struct Counts {
    made: usize,
    ok: usize,
    failed: usize,
    early: usize,
    gated: usize,
    fallback: usize,
    fresh_keys: usize,
    retries: u64,
    kept: usize,
    ms: Vec<f64>,
}

impl Counts {
    fn of<'a>(reqs: impl Iterator<Item = &'a Req>) -> Counts {
        let mut c = Counts::default();
        for r in reqs {
            let s = &r.sample;
            c.made += 1;
            c.kept += usize::from(r.kept);
            if s.status == Some(200) {
                c.ok += 1;
                c.ms.push(s.ms);
            } else {
                c.failed += 1;
            }
            c.early += usize::from(s.early());
            c.gated += usize::from(s.mode == Some("0rtt-gated"));
            c.fallback += usize::from(s.tls_fallback());
            c.fresh_keys += usize::from(s.fresh_keys);
            c.retries += u64::from(s.attempts.saturating_sub(1) + s.inner_retries);
        }
        c
    }
}

/// Why a request failed, as one short line.
fn reason(r: &Req) -> String {
    match (r.sample.status, r.sample.errors.last()) {
        (Some(s), _) => format!("HTTP {s}"),
        (None, Some(e)) => e.chars().take(120).collect(),
        (None, None) => "no answer".into(),
    }
}

/// Mean of `f` over the samples whose time lies in `[from, to]`.
fn mean_in(samples: &[ProcSample], from: f64, to: f64, f: impl Fn(&ProcSample) -> u64) -> f64 {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.at_s >= from && s.at_s <= to)
        .map(|s| f(s) as f64)
        .collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The memory levels: warm-up, window, first level, last level (kB).
pub(super) struct Memory {
    pub(super) warmup_s: f64,
    pub(super) window_s: f64,
    pub(super) first_kb: f64,
    pub(super) last_kb: f64,
    pub(super) max_kb: u64,
    pub(super) drift_pct: f64,
}

pub(super) fn memory(samples: &[ProcSample], duration_s: f64) -> Memory {
    let warmup_s = (duration_s / 20.0).clamp(2.0, 30.0);
    let window_s = (duration_s / 4.0).min(60.0);
    let first_kb = mean_in(samples, warmup_s, warmup_s + window_s, |s| s.rss_kb);
    let last_kb = mean_in(samples, duration_s - window_s, duration_s, |s| s.rss_kb);
    Memory {
        warmup_s,
        window_s,
        first_kb,
        last_kb,
        max_kb: samples.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        drift_pct: (last_kb - first_kb) / first_kb * 100.0,
    }
}

/// Counter `name`'s growth between the snapshots nearest `from` and `to`.
fn counter_delta(metrics: &[(f64, BTreeMap<String, f64>)], name: &str, from: f64, to: f64) -> f64 {
    let at = |t: f64| {
        metrics
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .and_then(|m| m.1.get(name).copied())
            .unwrap_or(0.0)
    };
    at(to) - at(from)
}

fn mb(kb: f64) -> String {
    format!("{:.1}", kb / 1024.0)
}

fn ms(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.1}")
    } else {
        "-".into()
    }
}

pub(super) fn build(i: &Input) -> SoakOutcome {
    let o = i.opts;
    let d = o.duration.as_secs_f64();
    let reqs: Vec<&Req> = i.outs.iter().flat_map(|g| g.reqs.iter()).collect();
    let skipped: u64 = i.outs.iter().map(|g| g.skipped).sum();
    let all = Counts::of(reqs.iter().copied());
    let lat = Summary::of(&all.ms);
    let reached = all.made as f64 / d;
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    for r in reqs.iter().filter(|r| r.sample.status != Some(200)) {
        *failures.entry(reason(r)).or_default() += 1;
    }

    let mut r = Report::new(
        "soak",
        "Soak: new connections under key, token-key and certificate rotation",
    );
    r.standard_setup();
    let (lifetime, ttl, rotation) = i.key_policy;
    let path = if o.colocated {
        "--colocated".to_string()
    } else {
        format!("--rtt {}", o.rtt_ms)
    };
    r.setup.push(format!(
        "`zrtt lab soak --rate {} --duration {}s --period {}s {path}`: open-loop load, {} generator threads, {:.0}% of requests from {} clients that keep their state (tokens), the rest a new client each; body {} bytes; {} retries of a GET without an answer",
        o.rate, o.duration.as_secs(), o.period.as_secs(), super::THREADS,
        o.kept_share * 100.0, o.kept_clients, o.body_bytes, o.retries
    ));
    if o.colocated {
        r.setup.push(
            "Colocated: the load, the probes and the events run in the server's host and connect to its own lab address (the kernel's loopback path: no hub, no RTT, MTU 65,536); the client and the gateway share the machine's cores"
                .into(),
        );
    }
    r.setup.push(format!(
        "Key store: lifetime {lifetime} s, TTL {ttl} s, rotation {rotation} s; `zrtt keys rotate` every {p} s then SIGHUP; certificate replaced every {p} s (half a period after each rotation); gateway `--token-rotation {p}s --token-lifetime {}s`, `--refresh` 10 s",
        2 * o.period.as_secs(), p = o.period.as_secs()
    ));

    let mut t = Table::new(
        "Totals",
        &[
            "asked /s",
            "started /s",
            "requests",
            "answered 200",
            "failed",
            "answered early",
            "gated",
            "TLS fallback",
            "fresh-key retries",
            "retries",
            "skipped (in-flight cap)",
            "p50 ms",
            "p99 ms",
        ],
    );
    t.row(vec![
        format!("{:.0}", o.rate),
        format!("{reached:.1}"),
        all.made.to_string(),
        all.ok.to_string(),
        all.failed.to_string(),
        all.early.to_string(),
        all.gated.to_string(),
        all.fallback.to_string(),
        all.fresh_keys.to_string(),
        all.retries.to_string(),
        skipped.to_string(),
        ms(lat.median),
        ms(lat.p99),
    ]);
    r.tables.push(t);

    // Per minute (per period for short runs).
    let bucket = if d >= 120.0 {
        60.0
    } else {
        o.period.as_secs_f64()
    };
    let n = (d / bucket).ceil() as usize;
    let mut t = Table::new(
        if bucket == 60.0 {
            "Per minute"
        } else {
            "Per period"
        },
        &[
            "from s",
            "requests",
            "answered 200",
            "failed",
            "early",
            "gated",
            "TLS fallback",
            "fresh-key retries",
            "retries",
            "gateway rejects",
            "gateway silent drops",
            "p50 ms",
            "p99 ms",
            "RSS MB (end)",
            "fds (end)",
        ],
    );
    let mut rows = Vec::new();
    for b in 0..n {
        let (from, to) = (b as f64 * bucket, ((b + 1) as f64 * bucket).min(d));
        let c = Counts::of(
            reqs.iter()
                .copied()
                .filter(|r| r.at_s >= from && r.at_s < to),
        );
        let s = Summary::of(&c.ms);
        let rejects = counter_delta(i.metrics, "zrtt_rejects_sent", from, to)
            + counter_delta(i.metrics, "zrtt_busy", from, to);
        let drops = counter_delta(i.metrics, "zrtt_silent_drops", from, to);
        let end = i.samples.iter().rev().find(|x| x.at_s <= to);
        t.row(vec![
            format!("{from:.0}"),
            c.made.to_string(),
            c.ok.to_string(),
            c.failed.to_string(),
            c.early.to_string(),
            c.gated.to_string(),
            c.fallback.to_string(),
            c.fresh_keys.to_string(),
            c.retries.to_string(),
            format!("{rejects:.0}"),
            format!("{drops:.0}"),
            ms(s.median),
            ms(s.p99),
            end.map_or("-".into(), |x| mb(x.rss_kb as f64)),
            end.map_or("-".into(), |x| x.fds.to_string()),
        ]);
        rows.push(json!({
            "from_s": from, "to_s": to, "requests": c.made, "ok": c.ok, "failed": c.failed,
            "early": c.early, "gated": c.gated, "tls_fallback": c.fallback,
            "fresh_key_retries": c.fresh_keys, "retries": c.retries, "kept": c.kept,
            "gateway_rejects": rejects, "gateway_silent_drops": drops, "latency_ms": s.to_json(),
            "rss_kb_end": end.map(|x| x.rss_kb), "fds_end": end.map(|x| x.fds),
        }));
    }
    r.tables.push(t);

    let m = memory(i.samples, d);
    let fds_first = mean_in(i.samples, m.warmup_s, m.warmup_s + m.window_s, |s| s.fds);
    let fds_last = mean_in(i.samples, d - m.window_s, d, |s| s.fds);
    let fds_max = i.samples.iter().map(|s| s.fds).max().unwrap_or(0);
    let hwm = i.samples.iter().map(|s| s.hwm_kb).max().unwrap_or(0);
    let mut t = Table::new(
        "Gateway memory and open files",
        &["", "first window", "last window", "max", "drift"],
    );
    t.row(vec![
        "RSS MB".into(),
        mb(m.first_kb),
        mb(m.last_kb),
        mb(m.max_kb as f64),
        format!("{:+.1}%", m.drift_pct),
    ]);
    t.row(vec![
        "VmHWM MB".into(),
        "".into(),
        "".into(),
        mb(hwm as f64),
        "".into(),
    ]);
    t.row(vec![
        "open fds".into(),
        format!("{fds_first:.0}"),
        format!("{fds_last:.0}"),
        fds_max.to_string(),
        format!("{:+.1}%", (fds_last - fds_first) / fds_first * 100.0),
    ]);
    r.tables.push(t);

    let mut t = Table::new(
        "Events",
        &[
            "at s",
            "event",
            "key id before",
            "key id after",
            "served",
            "ms to served",
            "token key ids held by kept clients",
            "error",
        ],
    );
    for e in i.events {
        t.row(vec![
            format!("{:.1}", e.at_s),
            e.kind.id().into(),
            format!("{:08x}", e.key_before),
            format!("{:08x}", e.key_after),
            if e.served { "yes" } else { "NO" }.into(),
            e.served_ms.map_or("-".into(), ms),
            e.token_ids
                .iter()
                .map(|x| format!("{x:08x}"))
                .collect::<Vec<_>>()
                .join(" "),
            e.error.clone().unwrap_or_default(),
        ]);
    }
    r.tables.push(t);

    let rotations = i
        .events
        .iter()
        .filter(|e| e.kind == Kind::KeyRotation)
        .collect::<Vec<_>>();
    let certs = i
        .events
        .iter()
        .filter(|e| e.kind == Kind::CertReplacement)
        .count();
    let new_keys = rotations
        .iter()
        .filter(|e| e.served && e.key_after != e.key_before)
        .count();
    let mut token_ids: Vec<u32> = i
        .events
        .iter()
        .flat_map(|e| e.token_ids.iter().copied())
        .chain(i.final_token_ids.iter().copied())
        .collect();
    token_ids.sort_unstable();
    token_ids.dedup();
    let unserved = i.events.iter().filter(|e| !e.served).count();
    let log_count = |pat: &str| i.gateway_log.lines().filter(|l| l.contains(pat)).count();
    let cert_reloads = log_count("certificate reloaded");
    let log_errors = log_count("ERROR");

    let failed_ok = all.failed == 0 && all.made > 0;
    let drift_ok = m.drift_pct.is_finite() && m.drift_pct <= o.max_drift_pct;
    let events_ok = unserved == 0 && new_keys == rotations.len() && !i.gateway_died;
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let mut notes = vec![
        format!(
            "**Verdict: {}** failed requests: {} of {} (needed: 0){}.",
            verdict(failed_ok),
            all.failed,
            all.made,
            if failures.is_empty() {
                String::new()
            } else {
                format!("; reasons: {}", failures.iter().map(|(k, v)| format!("{v} × {k}")).collect::<Vec<_>>().join("; "))
            }
        ),
        format!(
            "**Verdict: {}** gateway memory drift: {:+.1}% (RSS {} MB over {:.0}-{:.0} s against {} MB over the last {:.0} s; needed: at most {:+.0}%).",
            verdict(drift_ok),
            m.drift_pct,
            mb(m.first_kb),
            m.warmup_s,
            m.warmup_s + m.window_s,
            mb(m.last_kb),
            m.window_s,
            o.max_drift_pct
        ),
        format!(
            "**Verdict: {}** events: {} key rotations, {} made a new key the gateway served; {} certificate replacements ({} certificate reloads logged: on each SIGHUP and when the 10 s poll saw the files change); {} events not served within 10 s; {} token key ids in the kept clients' tokens; gateway {}.",
            verdict(events_ok),
            rotations.len(),
            new_keys,
            certs,
            cert_reloads,
            unserved,
            token_ids.len(),
            if i.gateway_died { "DIED" } else { "ran throughout" }
        ),
        format!(
            "Rate: asked {:.0}/s, started {reached:.1}/s ({} due requests skipped at the in-flight cap of {}); backend served {}; {} error lines in the gateway's log.",
            o.rate, skipped, o.max_in_flight, i.backend_served, log_errors
        ),
    ];
    if !i.kernel.is_empty() {
        notes.push(format!(
            "Kernel TCP counters over the run: {}.",
            i.kernel
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if skipped > 0 {
        notes.push("The in-flight cap was reached: the asked rate was not sustained.".into());
    }
    let gw_total = match (i.metrics.first(), i.metrics.last()) {
        (Some(a), Some(b)) => crate::faults::gateway::delta(&a.1, &b.1),
        _ => BTreeMap::new(),
    };
    if !gw_total.is_empty() {
        let c = |k: &str| gw_total.get(k).copied().unwrap_or(0.0);
        notes.push(format!(
            "The gateway's counters over the run: {:.0} flights accepted, {:.0} answered before the TCP handshake completed, {:.0} after it, {:.0} resumed with a ticket, {:.0} tokens accepted, {:.0} TLS connections.{}",
            c("zrtt_accepted"),
            c("zrtt_answered_early"),
            c("zrtt_answered_gated"),
            c("zrtt_resumed"),
            c("tokens_accepted"),
            c("tls_connections"),
            if o.colocated {
                " Colocated, the clients' early/gated columns mean little: they infer the path from timing, and the loopback path has no RTT to time; these counters are the gateway's own."
            } else {
                ""
            }
        ));
    }
    r.notes = notes;

    let xs: Vec<f64> = i.samples.iter().map(|s| round3(s.at_s)).collect();
    r.charts.push(Chart {
        title: "Gateway memory over the run".into(),
        x_label: "seconds".into(),
        y_label: "MB".into(),
        x: Axis::Numbers {
            xs: xs.clone(),
            log: false,
        },
        series: vec![
            Series {
                name: "VmRSS".into(),
                values: i
                    .samples
                    .iter()
                    .map(|s| Some(s.rss_kb as f64 / 1024.0))
                    .collect(),
                reference: false,
            },
            Series {
                name: "VmHWM".into(),
                values: i
                    .samples
                    .iter()
                    .map(|s| Some(s.hwm_kb as f64 / 1024.0))
                    .collect(),
                reference: false,
            },
        ],
    });
    r.charts.push(Chart {
        title: "Gateway open files over the run".into(),
        x_label: "seconds".into(),
        y_label: "fds".into(),
        x: Axis::Numbers { xs, log: false },
        series: vec![Series {
            name: "open fds".into(),
            values: i.samples.iter().map(|s| Some(s.fds as f64)).collect(),
            reference: false,
        }],
    });
    r.data = json!({
        "rate": o.rate, "duration_s": d, "period_s": o.period.as_secs(), "rtt_ms": o.rtt_ms, "colocated": o.colocated,
        "kept_share": o.kept_share, "kept_clients": o.kept_clients, "body_bytes": o.body_bytes,
        "retries": o.retries, "max_in_flight": o.max_in_flight, "max_drift_pct": o.max_drift_pct,
        "key_policy": {"lifetime_s": lifetime, "ttl_s": ttl, "rotation_s": rotation},
        "totals": {
            "requests": all.made, "ok": all.ok, "failed": all.failed, "early": all.early,
            "gated": all.gated, "tls_fallback": all.fallback, "fresh_key_retries": all.fresh_keys,
            "retries": all.retries, "kept": all.kept, "skipped": skipped,
            "started_per_s": reached, "latency_ms": lat.to_json(),
        },
        "failures": failures,
        "buckets_s": bucket, "buckets": rows,
        "memory": {
            "warmup_s": m.warmup_s, "window_s": m.window_s, "first_rss_kb": m.first_kb,
            "last_rss_kb": m.last_kb, "max_rss_kb": m.max_kb, "max_hwm_kb": hwm,
            "drift_pct": m.drift_pct, "fds_first": fds_first, "fds_last": fds_last, "fds_max": fds_max,
            "samples": i.samples.iter().map(|s| json!([round3(s.at_s), s.rss_kb, s.hwm_kb, s.fds, s.threads])).collect::<Vec<_>>(),
            "sample_fields": ["at_s", "rss_kb", "hwm_kb", "fds", "threads"],
        },
        "events": i.events.iter().map(Event::to_json).collect::<Vec<_>>(),
        "key_rotations": rotations.len(), "new_keys_served": new_keys,
        "cert_replacements": certs, "cert_reloads_logged": cert_reloads,
        "token_key_ids": token_ids.iter().map(|x| format!("{x:08x}")).collect::<Vec<_>>(),
        "gateway_counters": gw_total, "kernel_counters": i.kernel, "gateway_died": i.gateway_died,
        "gateway_log_errors": log_errors, "backend_served": i.backend_served,
        "verdicts": {"failed": failed_ok, "memory": drift_ok, "events": events_ok},
    });
    SoakOutcome {
        report: r,
        passed: failed_ok && drift_ok && events_ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_levels_and_drift() {
        let s = |at_s: f64, rss_kb| ProcSample {
            at_s,
            rss_kb,
            ..ProcSample::default()
        };
        // 600 s: warm-up 30 s, windows of 60 s.
        let samples: Vec<ProcSample> = (0..=300)
            .map(|k| {
                let t = k as f64 * 2.0;
                s(
                    t,
                    if t < 30.0 {
                        5000
                    } else if t < 540.0 {
                        10_000
                    } else {
                        10_500
                    },
                )
            })
            .collect();
        let m = memory(&samples, 600.0);
        assert_eq!((m.warmup_s, m.window_s), (30.0, 60.0));
        assert_eq!(m.first_kb, 10_000.0);
        assert!((m.last_kb - 10_500.0).abs() < 1e-9);
        assert!((m.drift_pct - 5.0).abs() < 1e-9);
        assert_eq!(m.max_kb, 10_500);
        // Too few samples: no level, no pass.
        assert!(memory(&[], 20.0).drift_pct.is_nan());
    }

    #[test]
    fn counters_between_snapshots() {
        let snap = |t: f64, v: f64| (t, BTreeMap::from([("zrtt_busy".to_string(), v)]));
        let m = [snap(0.0, 0.0), snap(2.0, 3.0), snap(4.1, 10.0)];
        assert_eq!(counter_delta(&m, "zrtt_busy", 0.0, 4.0), 10.0);
        assert_eq!(counter_delta(&m, "zrtt_busy", 2.0, 4.0), 7.0);
        assert_eq!(counter_delta(&m, "other", 0.0, 4.0), 0.0);
    }
}
