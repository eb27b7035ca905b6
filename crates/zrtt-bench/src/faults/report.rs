//! The faults table, chart and JSON.

use std::collections::BTreeMap;

use serde_json::json;

use super::{ClientKind, Fault, FaultsOpts, Row, ATTEMPT_TIMEOUT, BACKOFF, KINDS};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};

/// Counts of one row.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) requests: usize,
    pub(super) ok: usize,
    pub(super) bad_gateway: usize,
    pub(super) failed: usize,
    /// Request retries (no HTTP answer) plus the client library's own.
    pub(super) retries: usize,
    pub(super) tls_fallback: usize,
    pub(super) early: usize,
}

impl Row {
    pub(super) fn counts(&self) -> Counts {
        let s = &self.samples;
        Counts {
            requests: s.len(),
            ok: s.iter().filter(|s| s.status == Some(200)).count(),
            bad_gateway: s.iter().filter(|s| s.status == Some(502)).count(),
            failed: self.failed(),
            retries: s
                .iter()
                .map(|s| (s.attempts - 1 + s.inner_retries) as usize)
                .sum(),
            tls_fallback: s.iter().filter(|s| s.tls_fallback()).count(),
            early: s.iter().filter(|s| s.early()).count(),
        }
    }

    /// Times of the requests that got an HTTP answer, milliseconds.
    fn answered_ms(&self) -> Vec<f64> {
        self.samples
            .iter()
            .filter(|s| s.status.is_some())
            .map(|s| s.ms)
            .collect()
    }

    /// Why requests failed: each distinct reason (the last attempt's error,
    /// or the status) with its count.
    fn failure_reasons(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in &self.samples {
            let why = match s.status {
                Some(200 | 502) => continue,
                Some(st) => format!("status {st}"),
                None => s.errors.last().cloned().unwrap_or_default(),
            };
            *m.entry(why).or_default() += 1;
        }
        m
    }

    /// Errors of attempts that were retried, with their counts.
    fn retried_errors(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.status.is_some()) {
            for e in &s.errors {
                *m.entry(e.clone()).or_default() += 1;
            }
        }
        m
    }
}

fn ms(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        "–".into()
    }
}

fn penalty(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if x.is_finite() && b.is_finite() => format!("{:+.0}", x - b),
        _ => "–".into(),
    }
}

pub(super) fn report(o: &FaultsOpts, rows: &[Row], backend_served: u64) -> Report {
    let mut r = Report::new(
        "faults",
        "Idempotent requests under faults (`zrtt lab faults`)",
    );
    r.standard_setup();
    r.setup.push(format!(
        "Client and server {} ms apart (RTT) through the lab's hub; `zrtt gateway` (defaults, --replay-state, admin endpoint) in front of an in-process HTTP/1.1 backend ({} B bodies, `Connection: close`); per fault and client {} GETs, each on a new connection, {} in flight, through the zrtt client library (Fast Open, its retries, TLS 1.3 fallback on the same port).",
        o.rtt_ms, o.body_bytes, o.requests, o.concurrency
    ));
    r.setup.push(format!(
        "A request without any HTTP answer is sent again up to {} times ({} ms, then doubling); an attempt is abandoned after {} s. Failed = no 200 or 502 in the end. Times: first attempt to the whole answer, requests with an answer; penalty against the no-fault row of the same client.",
        o.retries,
        BACKOFF.as_millis(),
        ATTEMPT_TIMEOUT.as_secs()
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab faults --rtt {} --requests {} --concurrency {} --faults {}`.",
        o.rtt_ms,
        o.requests,
        o.concurrency,
        o.faults
            .iter()
            .map(|f| f.id())
            .collect::<Vec<_>>()
            .join(",")
    ));
    let mut t = Table::new(
        "Requests per fault and client; time in ms (penalty against no fault)",
        &[
            "fault",
            "client",
            "requests",
            "200",
            "502",
            "failed",
            "retries",
            "TLS fallback",
            "answered early",
            "median",
            "p95",
            "median penalty",
            "p95 penalty",
        ],
    );
    t.numeric = (2..13).collect();
    let base = |kind: ClientKind| {
        rows.iter()
            .find(|r| r.fault == Fault::None && r.kind == kind)
            .map(|r| Summary::of(&r.answered_ms()))
    };
    let mut series: Vec<Series> = KINDS
        .iter()
        .map(|k| Series {
            name: format!("median, client {}", k.label()),
            values: Vec::new(),
            reference: false,
        })
        .collect();
    let mut categories = Vec::new();
    let mut js = Vec::new();
    let mut notes = Vec::new();
    for row in rows {
        let c = row.counts();
        let s = Summary::of(&row.answered_ms());
        let b = base(row.kind);
        t.row(vec![
            row.fault.label(o),
            row.kind.label().into(),
            c.requests.to_string(),
            c.ok.to_string(),
            c.bad_gateway.to_string(),
            c.failed.to_string(),
            c.retries.to_string(),
            c.tls_fallback.to_string(),
            c.early.to_string(),
            ms(s.median),
            ms(s.p95),
            penalty(s.median, b.map(|b| b.median)),
            penalty(s.p95, b.map(|b| b.p95)),
        ]);
        if !categories.contains(&row.fault.id().to_string()) {
            categories.push(row.fault.id().to_string());
        }
        if let Some(k) = KINDS.iter().position(|k| *k == row.kind) {
            series[k]
                .values
                .push(s.median.is_finite().then_some(s.median));
        }
        let reasons = row.failure_reasons();
        if !reasons.is_empty() {
            notes.push(format!(
                "{} / client {}: {} failed: {}.",
                row.fault.label(o),
                row.kind.label(),
                c.failed,
                reasons
                    .iter()
                    .map(|(w, n)| format!("{n} × {w}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let retried = row.retried_errors();
        if !retried.is_empty() {
            let n = row
                .samples
                .iter()
                .filter(|s| s.status.is_some() && s.attempts > 1)
                .count();
            notes.push(format!(
                "{} / client {}: {n} answered only after the application's retry (failed attempts: {}).",
                row.fault.label(o),
                row.kind.label(),
                retried
                    .iter()
                    .map(|(w, n)| format!("{n} × {w}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        if let Some(gap) = row.restart_gap_ms {
            let kind = row.kind.label();
            let what = if row.fault == Fault::GatewayHandover {
                format!("Gateway hand-over / client {kind}: {gap:.0} ms from starting the new gateway to the old one's exit (its drain; the port stayed open)")
            } else {
                format!("Gateway restart / client {kind}: {gap:.0} ms from SIGTERM to the new gateway listening")
            };
            notes.push(format!(
                "{what}; the new gateway's counters: {}.",
                key_metrics(&row.metrics)
            ));
        }
        let modes = row.samples.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.mode.unwrap_or("none")).or_insert(0usize) += 1;
            m
        });
        let statuses = row.samples.iter().fold(BTreeMap::new(), |mut m, s| {
            let k = s.status.map_or("none".to_string(), |x| x.to_string());
            *m.entry(k).or_insert(0usize) += 1;
            m
        });
        js.push(json!({
            "fault": row.fault.id(),
            "fault_label": row.fault.label(o),
            "client": row.kind.id(),
            "requests": c.requests,
            "ok": c.ok,
            "bad_gateway": c.bad_gateway,
            "failed": c.failed,
            "retries": c.retries,
            "request_retries": row.samples.iter().map(|s| (s.attempts - 1) as usize).sum::<usize>(),
            "client_library_retries": row.samples.iter().map(|s| s.inner_retries as usize).sum::<usize>(),
            "tls_fallback": c.tls_fallback,
            "answered_early": c.early,
            "statuses": statuses,
            "modes": modes,
            "failures": reasons,
            "retried_errors": retried,
            "summary_ms": s.to_json(),
            "samples_ms": row.samples.iter().map(|s| round3(s.ms)).collect::<Vec<_>>(),
            "restart_gap_ms": row.restart_gap_ms.map(round3),
            "gateway_metrics": row.metrics,
            "kernel_tcp": row.kernel,
            "hub": {
                "forwarded": row.hub.forwarded,
                "dropped_loss": row.hub.dropped_loss,
                "dropped_syn_data": row.hub.dropped_syn_data,
                "stripped_syn_data": row.hub.stripped_syn_data,
                "dropped_tls_only": row.hub.dropped_tls_only,
                "duplicated": row.hub.duplicated,
                "reordered": row.hub.reordered,
                "dropped_queue": row.hub.dropped_queue,
            },
        }));
    }
    r.tables.push(t);
    let total_failed: usize = rows.iter().map(|r| r.failed()).sum();
    notes.insert(
        0,
        if total_failed == 0 {
            "No request failed in any row.".to_string()
        } else {
            format!("{total_failed} requests failed in all; the reasons per row follow.")
        },
    );
    r.notes = notes;
    r.charts.push(Chart {
        title: "Median time per request by fault".into(),
        x_label: "fault".into(),
        y_label: "ms".into(),
        x: Axis::Categories(categories),
        series,
    });
    r.data = json!({
        "rtt_ms": o.rtt_ms,
        "requests": o.requests,
        "concurrency": o.concurrency,
        "body_bytes": o.body_bytes,
        "slow_ms": o.slow_ms,
        "retries": o.retries,
        "backend_served": backend_served,
        "rows": js,
    });
    r
}

/// The gateway counters worth a note.
fn key_metrics(m: &BTreeMap<String, f64>) -> String {
    let keys = [
        "zrtt_answered_early",
        "zrtt_answered_gated",
        "zrtt_rejects_sent",
        "tls_connections",
        "gate_timeouts",
        "backend_errors",
    ];
    keys.iter()
        .map(|k| format!("{k} {}", m.get(*k).copied().unwrap_or(0.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::load::Sample;
    use super::*;
    use zrtt_lab::HubStats;

    fn sample(status: Option<u16>, attempts: u32, mode: Option<&'static str>) -> Sample {
        Sample {
            ms: 100.0,
            status,
            attempts,
            mode,
            inner_retries: u32::from(mode == Some("0rtt-gated")),
            fresh_keys: false,
            errors: (1..attempts).map(|_| "refused".to_string()).collect(),
        }
    }

    #[test]
    fn counts_and_reasons() {
        let row = Row {
            fault: Fault::BackendDown,
            kind: ClientKind::New,
            samples: vec![
                sample(Some(200), 1, Some("0rtt-early")),
                sample(Some(502), 2, Some("0rtt-gated")),
                sample(Some(200), 1, Some("tls-fallback")),
                sample(Some(504), 1, Some("0rtt-gated")),
                sample(None, 4, None),
            ],
            hub: HubStats::default(),
            metrics: BTreeMap::new(),
            restart_gap_ms: None,
            kernel: BTreeMap::new(),
        };
        assert_eq!(
            row.counts(),
            Counts {
                requests: 5,
                ok: 2,
                bad_gateway: 1,
                failed: 2,
                retries: 1 + 1 + 1 + 3,
                tls_fallback: 1,
                early: 1,
            }
        );
        let why = row.failure_reasons();
        assert_eq!(why["status 504"], 1);
        assert_eq!(why["refused"], 1);
        assert_eq!(row.retried_errors()["refused"], 1);
        let r = report(&FaultsOpts::default(), &[row], 3);
        let md = r.markdown();
        assert!(
            md.contains("| backend down | new per request | 5 | 2 | 1 | 2 | 6 | 1 | 1 |"),
            "{md}"
        );
        assert!(md.contains("2 requests failed in all"), "{md}");
        assert!(
            md.contains(
                "1 answered only after the application's retry (failed attempts: 1 × refused)"
            ),
            "{md}"
        );
    }
}
