//! The throughput report: a table per response size, the papers' figures
//! beside ours, two charts, and every cell in JSON.

use std::time::Duration;

use serde_json::{json, Value};

use super::cell::Cell;
use super::notes::{notes, store_notes};
use super::{Case, ThroughputOpts, CASES, CLIENT_CPU, SERVER_CPU};
use crate::report::{round3, Axis, Chart, Report, Series, Table};

/// A reference range as text: one number when low and high agree.
fn fmt_range((lo, hi): (f64, f64)) -> String {
    if (hi - lo).abs() < 0.5 {
        format!("{lo:.0}")
    } else {
        format!("{lo:.0}-{hi:.0}")
    }
}

/// `x` with `decimals` decimals, or a dash when not finite.
pub(super) fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "–".into()
    }
}

fn jnum(x: f64) -> Value {
    if x.is_finite() {
        json!(round3(x))
    } else {
        Value::Null
    }
}

/// The usable cell of `case` at `kb`, if any.
pub(super) fn cell(cells: &[Cell], case: Case, kb: usize) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.case == case && c.kb == kb && c.usable())
}

/// Tables, charts, notes and JSON of a run.
pub(super) fn report(
    o: &ThroughputOpts,
    cells: &[Cell],
    rated: &[Cell],
    tck: u64,
    warmup: Duration,
    store_keys: Option<u64>,
) -> Report {
    let mut r = Report::new(
        "throughput",
        "New connections per second and server CPU per request on one core (`zrtt lab throughput`)",
    );
    let sizes = o
        .sizes_kb
        .iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(",");
    r.standard_setup();
    r.setup.push(format!(
        "Per cell: {:.1} s warm-up, then {:.1} s measured; {} connections in flight; one new TCP connection per request; responses of {} KB.",
        warmup.as_secs_f64(),
        o.seconds,
        o.concurrency,
        sizes
    ));
    let tls_info = cells
        .iter()
        .find_map(|c| c.tls_info.clone())
        .unwrap_or_else(|| "not observed".into());
    r.setup.push(format!(
        "Servers on CPU {SERVER_CPU}, load generator on CPU {CLIENT_CPU}; CPU times at CLK_TCK {tck}; TLS negotiated: {tls_info}."
    ));
    let rates = o
        .rates
        .iter()
        .map(|r| format!("{r}"))
        .collect::<Vec<_>>()
        .join(",");
    if !o.rates.is_empty() {
        r.setup.push(format!(
            "Fixed rates: {rates} new connections per second, started open-loop (the k-th at k / rate) by up to {} connections in flight, for the cases in the rate table, at the smallest size.",
            o.concurrency.max(super::RATE_WORKERS)
        ));
    }
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab throughput --sizes {sizes} --seconds {} --concurrency {} --rates {rates}`.",
        o.seconds, o.concurrency
    ));

    let headers = [
        "case",
        "req/s",
        "p50 ms",
        "p99 ms",
        "server µs/req",
        "incl. backend µs/req",
        "CPU ÷ TLS full",
        "req/s ÷ TLS full",
        "CPU 0 busy: all (servers)",
        "load-gen core busy",
        "failed",
        "reference µs/req",
    ];
    for &kb in &o.sizes_kb {
        let mut t = Table::new(format!("{kb} KB responses"), &headers);
        let full = cell(cells, Case::TlsFull, kb);
        for case in CASES {
            let Some(c) = cells.iter().find(|c| c.case == case && c.kb == kb) else {
                continue;
            };
            let reference = match case.reference_us(kb) {
                Some(range) if case == Case::TlsResumed => {
                    format!("{} (10-17% below full)", fmt_range(range))
                }
                Some(range) => fmt_range(range),
                None => "–".into(),
            };
            if !c.usable() {
                let why = c
                    .failure
                    .clone()
                    .or_else(|| c.errors.first().cloned())
                    .unwrap_or_default();
                let mut row = vec![case.label().to_string(), "failed".into()];
                row.extend(std::iter::repeat_n("–".to_string(), headers.len() - 4));
                row.push(format!("{} ({})", c.failed, why.replace('|', "/")));
                row.push(reference);
                t.row(row);
                continue;
            }
            let cpu_ratio = match (full, c.with_backend_us) {
                (Some(f), Some(all)) => format!(
                    "{} (incl. backend {})",
                    num(c.server_us / f.server_us, 2),
                    num(all / f.server_us, 2)
                ),
                (Some(f), None) => num(c.server_us / f.server_us, 2),
                (None, _) => "–".into(),
            };
            // The Redis case beside the in-process filter (issue 14).
            let cpu_ratio = match (case, cell(cells, Case::Zrtt, kb)) {
                (Case::ZrttRedis, Some(z)) => format!(
                    "{cpu_ratio}; ÷ in-process filter {}",
                    num(c.server_us / z.server_us, 2)
                ),
                _ => cpu_ratio,
            };
            t.row(vec![
                case.label().to_string(),
                num(c.rps(), 0),
                num(c.latency.median, 2),
                num(c.latency.p99, 2),
                num(c.server_us, 1),
                c.with_backend_us.map_or("–".into(), |v| num(v, 1)),
                cpu_ratio,
                full.map_or("–".into(), |f| num(c.rps() / f.rps(), 2)),
                format!(
                    "{}% ({}%)",
                    num(c.cpu0_busy * 100.0, 0),
                    num(c.server_busy * 100.0, 0)
                ),
                format!("{}%", num(c.loadgen_busy * 100.0, 0)),
                c.failed.to_string(),
                reference,
            ]);
        }
        r.tables.push(t);
    }

    if !rated.is_empty() {
        r.tables.push(rate_table(o, rated));
    }

    // Beside the papers.
    let mut p = Table::new(
        "Beside the papers' figures",
        &["figure", "paper / reference", "this run"],
    );
    p.numeric = vec![];
    if let (Some(z), Some(f)) = (cell(cells, Case::Zrtt, 1), cell(cells, Case::TlsFull, 1)) {
        p.row(vec![
            "HTTPCrypt vs nginx TLS: new encrypted requests/s, 1 KB, one core".into(),
            "~20,000 vs ~6,000 (3.3x)".into(),
            format!(
                "measured {:.0} vs {:.0} req/s ({:.2}x); by server CPU (requests per core-second): gateway alone {:.0} vs {:.0} ({:.2}x), gateway + backend {:.0} ({:.2}x)",
                z.rps(),
                f.rps(),
                z.rps() / f.rps(),
                1e6 / z.server_us,
                1e6 / f.server_us,
                f.server_us / z.server_us,
                1e6 / z.with_backend_us.unwrap_or(f64::NAN),
                f.server_us / z.with_backend_us.unwrap_or(f64::NAN),
            ),
        ]);
    }
    if let (Some(r), Some(z)) = (
        cell(cells, Case::ZrttResumed, 1),
        cell(cells, Case::Zrtt, 1),
    ) {
        p.row(vec![
            "zrtt resumed vs a zrtt first contact: gateway CPU per connection, 1 KB (issue 15 target <= 0.7x)".into(),
            "(no paper figure; HTTPCrypt's session cache)".into(),
            format!(
                "gateway alone {:.0} vs {:.0} µs ({:.2}x); with the backend {:.0} vs {:.0} µs ({:.2}x)",
                r.server_us,
                z.server_us,
                r.server_us / z.server_us,
                r.with_backend_us.unwrap_or(f64::NAN),
                z.with_backend_us.unwrap_or(f64::NAN),
                r.with_backend_us.unwrap_or(f64::NAN) / z.with_backend_us.unwrap_or(f64::NAN),
            ),
        ]);
    }
    if let Some(row) = store_vs_filter(cells, rated) {
        p.row(row);
    }
    if let (Some(z), Some(f)) = (
        cell(cells, Case::ZrttStatic, 1),
        cell(cells, Case::TlsFull, 1),
    ) {
        let t = cell(cells, Case::TlsStatic, 1);
        p.row(vec![
            "HTTPCrypt (serving files itself) vs nginx TLS: new requests per core-second, 1 KB".into(),
            "~20,000 vs ~6,000 (3.3x)".into(),
            format!(
                "gateway --root, zrtt: {:.0} vs nginx TLS full {:.0} ({:.2}x); gateway --root over TLS full: {}",
                1e6 / z.server_us,
                1e6 / f.server_us,
                f.server_us / z.server_us,
                t.map_or("–".into(), |t| format!(
                    "{:.0} ({:.2}x)",
                    1e6 / t.server_us,
                    f.server_us / t.server_us
                )),
            ),
        ]);
    }
    let series_of = |case: Case| -> String {
        o.sizes_kb
            .iter()
            .map(|&kb| cell(cells, case, kb).map_or("–".into(), |c| num(c.server_us, 0)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let refs_of = |case: Case| -> String {
        o.sizes_kb
            .iter()
            .map(|&kb| case.reference_us(kb).map_or("–".into(), fmt_range))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    p.row(vec![
        format!("nginx plain HTTP, µs per connection ({sizes} KB)"),
        refs_of(Case::Http),
        series_of(Case::Http),
    ]);
    p.row(vec![
        format!(
            "nginx TLS 1.3 full handshake, ECDSA P-256, X25519, µs per connection ({sizes} KB)"
        ),
        refs_of(Case::TlsFull),
        series_of(Case::TlsFull),
    ]);
    let below: Vec<String> = o
        .sizes_kb
        .iter()
        .map(|&kb| {
            match (
                cell(cells, Case::TlsResumed, kb),
                cell(cells, Case::TlsFull, kb),
            ) {
                (Some(res), Some(full)) => {
                    format!("{:.0}%", (1.0 - res.server_us / full.server_us) * 100.0)
                }
                _ => "–".into(),
            }
        })
        .collect();
    p.row(vec![
        format!("nginx TLS 1.3 resumed, below full ({sizes} KB)"),
        "~10-17% (1 KB)".into(),
        below.join(" / "),
    ]);
    r.tables.push(p);

    // Charts.
    let cats: Vec<String> = o.sizes_kb.iter().map(|k| format!("{k} KB")).collect();
    let val = |case: Case, f: &dyn Fn(&Cell) -> f64| -> Vec<Option<f64>> {
        o.sizes_kb
            .iter()
            .map(|&kb| cell(cells, case, kb).map(f).filter(|v| v.is_finite()))
            .collect()
    };
    let mut cpu_series: Vec<Series> = CASES
        .iter()
        .map(|&c| Series {
            name: match c {
                Case::Zrtt => "zrtt gateway alone".into(),
                _ => c.label().replace("nginx, ", "nginx "),
            },
            values: val(c, &|x| x.server_us),
            reference: false,
        })
        .collect();
    cpu_series.push(Series {
        name: "zrtt gateway + nginx backend".into(),
        values: val(Case::Zrtt, &|x| x.with_backend_us.unwrap_or(f64::NAN)),
        reference: false,
    });
    for (case, name) in [
        (Case::Http, "reference: nginx HTTP"),
        (Case::TlsFull, "reference: nginx TLS 1.3 full"),
    ] {
        cpu_series.push(Series {
            name: name.into(),
            values: o
                .sizes_kb
                .iter()
                .map(|&kb| case.reference_us(kb).map(|(a, b)| (a + b) / 2.0))
                .collect(),
            reference: true,
        });
    }
    r.charts.push(Chart {
        title: "Server CPU per request, one new connection each (lower is better; dashed: reference lab)".into(),
        x_label: "response size".into(),
        y_label: "server CPU µs per request".into(),
        x: Axis::Categories(cats.clone()),
        series: cpu_series,
    });
    r.charts.push(Chart {
        title: "Completed requests per second (server on one core, load on the other)".into(),
        x_label: "response size".into(),
        y_label: "requests/s".into(),
        x: Axis::Categories(cats),
        series: CASES
            .iter()
            .map(|&c| Series {
                name: c.label().replace("nginx, ", "nginx "),
                values: val(c, &|x| x.rps()),
                reference: false,
            })
            .collect(),
    });

    r.notes = notes(o, cells);
    r.notes.extend(store_notes(cells, rated));
    let reference: Vec<Value> = CASES
        .iter()
        .filter(|&&c| c.reference_us(1).is_some())
        .map(|&c| {
            let by_size: Vec<Value> = [1, 10, 100]
                .iter()
                .map(|&kb| json!({"kb": kb, "us": c.reference_us(kb).map(|(a, b)| [a, b])}))
                .collect();
            json!({"case": c.id(), "by_size": by_size})
        })
        .collect();
    r.data = json!({
        "sizes_kb": o.sizes_kb, "seconds": o.seconds, "warmup_seconds": round3(warmup.as_secs_f64()),
        "concurrency": o.concurrency, "clk_tck": tck, "server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU,
        "tls": tls_info,
        "reference": {
            "source": "../shared/reference/baselines.md",
            "httpcrypt_1kb_requests_per_sec": {"httpcrypt": 20000, "nginx_tls": 6000, "ratio": 3.3},
            "nginx_us_per_connection": reference,
        },
        "cells": cells.iter().map(|c| json!({
            "case": c.case.id(), "label": c.case.label(), "size_kb": c.kb, "body_bytes": c.kb * 1024,
            "failure": c.failure, "requests_ok": c.ok, "requests_resumed": c.resumed, "requests_failed": c.failed,
            "requests_whole_run": c.total, "window_s": round3(c.window_s),
            "requests_per_sec": jnum(c.rps()), "latency_ms": c.latency.to_json(),
            "server_us_per_request": jnum(c.server_us),
            "server_with_backend_us_per_request": c.with_backend_us.map(jnum),
            "replay_store_us_per_request": c.store_us.map(jnum),
            "server_core_busy": jnum(c.server_busy), "loadgen_core_busy": jnum(c.loadgen_busy),
            "cpu0_busy": jnum(c.cpu0_busy),
            "cpu0_all_us_per_request": jnum(c.core_us[0]), "cpu1_all_us_per_request": jnum(c.core_us[1]),
            "cpu0_irq_softirq_us_per_request": jnum(c.cpu0_softirq_us),
            "errors": c.errors, "tls": c.tls_info, "gateway_counters": c.gateway,
        })).collect::<Vec<_>>(),
        "rates": o.rates,
        "rated_cells": rated.iter().map(|c| json!({
            "case": c.case.id(), "size_kb": c.kb, "offered_per_sec": c.rate,
            "failure": c.failure, "requests_ok": c.ok, "requests_failed": c.failed,
            "requests_per_sec": jnum(c.rps()), "latency_ms": c.latency.to_json(),
            "server_us_per_request": jnum(c.server_us),
            "server_with_backend_us_per_request": c.with_backend_us.map(jnum),
            "replay_store_us_per_request": c.store_us.map(jnum),
            "server_core_busy": jnum(c.server_busy), "gateway_counters": c.gateway,
        })).collect::<Vec<_>>(),
        "replay_store_keys_at_end": store_keys,
    });
    r
}

/// Server CPU per request at each fixed rate, side by side with nginx TLS
/// full handshakes at the same rate.
fn rate_table(o: &ThroughputOpts, rated: &[Cell]) -> Table {
    let kb = rated.first().map_or(1, |c| c.kb);
    let mut headers = vec!["case".to_string()];
    for r in &o.rates {
        headers.push(format!("{r:.0}/s: reached"));
        headers.push(format!("{r:.0}/s: server µs/req (÷ TLS full)"));
    }
    let refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(
        format!("Server CPU per request at fixed rates of new connections, {kb} KB (the operator's view)"),
        &refs,
    );
    let at = |case: Case, rate: f64| {
        rated
            .iter()
            .find(|c| c.case == case && c.rate == Some(rate) && c.usable())
    };
    for case in super::RATE_CASES {
        let mut row = vec![case.label().to_string()];
        for &r in &o.rates {
            match at(case, r) {
                Some(c) => {
                    // The gateway's figure includes its backend.
                    let us = c.with_backend_us.unwrap_or(c.server_us);
                    row.push(num(c.rps(), 0));
                    let mut s = match at(Case::TlsFull, r) {
                        Some(f) => format!("{} ({})", num(us, 1), num(us / f.server_us, 2)),
                        None => num(us, 1),
                    };
                    if let (Case::ZrttRedis, Some(z)) = (case, at(Case::Zrtt, r)) {
                        s.push_str(&format!(
                            "; gateway alone ÷ in-process filter {}",
                            num(c.server_us / z.server_us, 2)
                        ));
                    }
                    row.push(s);
                }
                None => {
                    row.push("failed".into());
                    row.push("–".into());
                }
            }
        }
        t.row(row);
    }
    t
}

/// The Redis case against the in-process filter at the smallest size:
/// new connections per core-second of the gateway (issue 14's target,
/// at least 90%), at saturation and at each fixed rate.
fn store_vs_filter(cells: &[Cell], rated: &[Cell]) -> Option<Vec<String>> {
    let pairs = cells
        .iter()
        .chain(rated)
        .filter(|c| c.case == Case::ZrttRedis && c.usable())
        .filter_map(|r| {
            let z = cells
                .iter()
                .chain(rated)
                .find(|z| z.case == Case::Zrtt && z.kb == r.kb && z.rate == r.rate && z.usable())?;
            let at = r.rate.map_or(format!("{} KB, saturation", r.kb), |x| {
                format!("{} KB at {x:.0}/s", r.kb)
            });
            Some(format!(
                "{at}: {:.0} vs {:.0} ({:.0}%)",
                1e6 / r.server_us,
                1e6 / z.server_us,
                100.0 * z.server_us / r.server_us
            ))
        })
        .collect::<Vec<_>>();
    (!pairs.is_empty()).then(|| {
        vec![
            "zrtt with its replay store in Redis vs the in-process filter: new connections per core-second of the gateway (issue 14 target >= 90%)".into(),
            "(no paper figure)".into(),
            pairs.join("; "),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_match_baselines() {
        assert_eq!(Case::TlsFull.reference_us(1), Some((243.0, 243.0)));
        assert_eq!(Case::Http.reference_us(100), Some((44.0, 48.0)));
        assert_eq!(Case::Zrtt.reference_us(1), None);
        assert_eq!(Case::TlsFull.reference_us(7), None);
        assert_eq!(fmt_range((33.0, 37.0)), "33-37");
        assert_eq!(fmt_range((243.0, 243.0)), "243");
    }
}
