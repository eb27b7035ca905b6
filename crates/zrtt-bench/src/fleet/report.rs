//! The fleet tables, chart and JSON.

use serde_json::json;

use super::load::Req;
use super::metrics::Scrape;
use super::{Run, ATTEMPT_TIMEOUT, BACKOFF, PHASES};
use crate::report::{round3, Axis, Chart, Report, Series, Table};
use zrtt_net::client::Mode;

/// Counts of a set of requests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) requests: usize,
    pub(super) ok: usize,
    pub(super) failed: usize,
    pub(super) retried: usize,
    pub(super) early: usize,
    pub(super) gated: usize,
    pub(super) tls: usize,
}

pub(super) fn counts<'a>(reqs: impl Iterator<Item = &'a Req>) -> Counts {
    let mut c = Counts::default();
    for r in reqs {
        let s = &r.sample;
        c.requests += 1;
        if s.status == Some(200) {
            c.ok += 1;
        } else {
            c.failed += 1;
        }
        c.retried += usize::from(s.attempts > 1);
        match s.mode {
            Some(m) if m == Mode::ZrttEarly.as_str() => c.early += 1,
            Some(m) if m == Mode::ZrttGated.as_str() => c.gated += 1,
            Some(m) if m == Mode::TlsFallback.as_str() => c.tls += 1,
            _ => {}
        }
    }
    c
}

/// The phase a request started in.
fn phase_of(run: &Run, r: &Req) -> usize {
    run.phase_at
        .iter()
        .rposition(|&t| t <= r.start_s)
        .unwrap_or(0)
}

fn us(x: Option<f64>) -> String {
    match x {
        Some(s) if s.is_finite() => format!("≤ {:.0} µs", s * 1e6),
        Some(_) => "> 100 ms".into(),
        None => "–".into(),
    }
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        "–".into()
    } else {
        format!("{} ({:.0} %)", n, 100.0 * n as f64 / of as f64)
    }
}

pub(super) fn report(run: &Run) -> Report {
    let o = &run.opts;
    let mut r = Report::new(
        "fleet",
        "A fleet of gateways under faults (`zrtt lab fleet`)",
    );
    r.standard_setup();
    let all = counts(run.requests.iter());
    let reached = all.requests as f64 / run.starting_s.max(1e-9);
    r.setup.push(format!(
        "Three `zrtt gateway` processes (gw1–gw3, each in its own lab host, in front of its own in-process HTTP/1.1 backend) hold one anycast address; the lab's hub gives each flow to one of them by a hash of its 5-tuple (ECMP). They share one key store, one token key and a three-node Redis Cluster (three masters, no replicas, `cluster-require-full-coverage no`, in the lab host `redis`, 0 ms from the gateways) through `--replay-store redis+cluster://…`, with `--replay-store-timeout {} ms --replay-store-skew {} s`, and trust the client's address (answers before the handshake). Client to gateways: {} ms RTT.",
        o.store_timeout_ms, o.store_skew_s, o.rtt_ms
    ));
    r.setup.push(format!(
        "Load: new connections at a target of {:.0}/s for {:.0} s (at most {} at once), each one GET through the zrtt client library (a new client per request: Fast Open, its retries, TLS 1.3 fallback); a request without an HTTP 200 is sent again up to {} times ({} ms, doubling; attempts bounded to {} s). **Rate reached: {:.0} new connections/s** ({} started in {:.1} s).",
        o.rate,
        o.seconds,
        o.max_in_flight,
        o.retries,
        BACKOFF.as_millis(),
        ATTEMPT_TIMEOUT.as_secs(),
        reached,
        all.requests,
        run.starting_s
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab fleet --rate {} --seconds {} --replays {} --rtt {}`.",
        o.rate, o.seconds, o.replays, o.rtt_ms
    ));

    let mut t = Table::new(
        "Requests by the phase they started in, and the replay check (all gateways' `zrtt_gateway_replay_store_check_seconds`; quantiles are bucket upper bounds)",
        &[
            "phase",
            "from (s)",
            "requests",
            "succeeded",
            "failed",
            "retried",
            "answered early (client's view)",
            "0-RTT after handshake",
            "TLS fallback",
            "store checks",
            "refused Busy",
            "check p50",
            "check p99",
        ],
    );
    t.numeric = (1..13).collect();
    let mut js_phases = Vec::new();
    let mut series: Vec<Series> = ["answered early", "0-RTT after handshake", "TLS fallback"]
        .iter()
        .map(|n| Series {
            name: n.to_string(),
            values: Vec::new(),
            reference: false,
        })
        .collect();
    let mut total = Scrape::default();
    for (p, name) in PHASES.iter().enumerate() {
        let c = counts(run.requests.iter().filter(|q| phase_of(run, q) == p));
        let m = &run.phase_metrics[p];
        total.add(m);
        t.row(row(name, run.phase_at[p], &c, m));
        for (s, v) in series.iter_mut().zip([c.early, c.gated, c.tls]) {
            s.values.push(Some(v as f64));
        }
        js_phases.push(phase_json(name, run.phase_at[p], &c, m));
    }
    t.row(row("whole run", 0.0, &all, &total));
    r.tables.push(t);

    let mut e = Table::new("Events", &["at (s)", "phase", "what", "result"]);
    e.numeric = vec![0];
    for ev in &run.events {
        e.row(vec![
            format!("{:.1}", ev.at_s),
            PHASES[ev.phase].into(),
            ev.what.clone(),
            ev.result.clone(),
        ]);
    }
    r.tables.push(e);

    let accepted = run.replays.iter().filter(|x| x.accepted()).count();
    let mut rt = Table::new(
        "Replays: a flight served by one gateway, the same bytes sent to another (the hub's hash decides; the source port is chosen so)",
        &[
            "replays sent",
            "accepted",
            "refused Replay",
            "refused Busy",
            "counted as replay at the second gateway",
            "requests run twice",
        ],
    );
    rt.numeric = (0..6).collect();
    let refused = |what: &str| run.replays.iter().filter(|x| x.replay == what).count();
    rt.row(vec![
        run.replays.len().to_string(),
        accepted.to_string(),
        refused("reject replay").to_string(),
        refused("reject busy").to_string(),
        run.replays
            .iter()
            .filter(|x| x.counted_there)
            .count()
            .to_string(),
        run.replays
            .iter()
            .filter(|x| x.ran_on.len() > 1)
            .count()
            .to_string(),
    ]);
    r.tables.push(rt);

    r.charts.push(Chart {
        title: "How requests were answered, by phase".into(),
        x_label: "phase".into(),
        y_label: "requests".into(),
        x: Axis::Categories(PHASES.iter().map(|s| s.to_string()).collect()),
        series,
    });
    r.notes.push(format!(
        "Replays accepted: **{accepted} of {}**. Failed requests: **{}** of {} (retried: {}). Answered early: {}. Backends served: {}. Keys in Redis at the end: {}.",
        run.replays.len(),
        all.failed,
        all.requests,
        all.retried,
        pct(all.early, all.requests),
        run.served
            .iter()
            .map(|(g, n)| format!("{g} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        run.redis_keys
    ));
    r.notes.push(format!(
        "\"Answered early\" is the client's view (the answer within 1.5 RTT of the first packet); on this loaded machine answers the gateways sent before the handshake often arrive later and count as \"0-RTT after handshake\". The gateways (sum over the run): {:.0} flights accepted by the core, {:.0} answered before the handshake, {:.0} after it; early answers withheld by the pre-handshake byte budget {:.0} and by cool-downs {:.0}; connections closed at a source's cap {:.0}; store `Busy` {:.0}, store replays {:.0}.",
        total.counter("zrtt_accepted"),
        total.counter("zrtt_answered_early"),
        total.counter("zrtt_answered_gated"),
        total.counter("early_withheld_budget"),
        total.counter("early_withheld_cooldown"),
        total.counter("source_limited"),
        total.counter("replay_store_unavailable"),
        total.counter("replay_store_replays"),
    ));
    let retried: std::collections::BTreeMap<String, usize> = run
        .requests
        .iter()
        .filter(|q| q.sample.status == Some(200))
        .flat_map(|q| q.sample.errors.iter())
        .fold(Default::default(), |mut m, e| {
            *m.entry(e.clone()).or_default() += 1;
            m
        });
    if !retried.is_empty() {
        r.notes.push(format!(
            "Attempts retried (the request then succeeded): {}.",
            retried
                .iter()
                .map(|(w, n)| format!("{n} × {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let failures: std::collections::BTreeMap<String, usize> = run
        .requests
        .iter()
        .filter(|q| q.sample.status != Some(200))
        .fold(Default::default(), |mut m, q| {
            *m.entry(q.sample.errors.last().cloned().unwrap_or_default())
                .or_default() += 1;
            m
        });
    if !failures.is_empty() {
        r.notes.push(format!(
            "Failures: {}.",
            failures
                .iter()
                .map(|(w, n)| format!("{n} × {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    r.data = json!({
        "target_rate": o.rate,
        "rate_reached": round3(reached),
        "seconds": o.seconds,
        "load_end_s": round3(run.load_end_s),
        "requests": all.requests,
        "succeeded": all.ok,
        "failed": all.failed,
        "retried": all.retried,
        "answered_early": all.early,
        "zrtt_gated": all.gated,
        "tls_fallback": all.tls,
        "replays_sent": run.replays.len(),
        "replays_accepted": accepted,
        "check_p50_s": total.quantile(0.5),
        "check_p99_s": total.quantile(0.99),
        "store_checks": total.checks(),
        "phases": js_phases,
        "events": run.events.iter().map(|e| json!({
            "at_s": round3(e.at_s), "phase": PHASES[e.phase], "what": e.what, "result": e.result,
        })).collect::<Vec<_>>(),
        "replays": run.replays.iter().map(|x| json!({
            "path": x.path, "original_gateway": x.original_gw, "replay_gateway": x.replay_gw,
            "original_tries": x.original_tries, "original": x.original, "replay": x.replay,
            "counted_at_replay_gateway": x.counted_there, "ran_on": x.ran_on,
            "accepted": x.accepted(),
        })).collect::<Vec<_>>(),
        "served": run.served.iter().map(|(g, n)| json!({"gateway": g, "requests": n})).collect::<Vec<_>>(),
    });
    r
}

fn row(name: &str, from: f64, c: &Counts, m: &Scrape) -> Vec<String> {
    vec![
        name.into(),
        format!("{from:.1}"),
        c.requests.to_string(),
        c.ok.to_string(),
        c.failed.to_string(),
        c.retried.to_string(),
        pct(c.early, c.requests),
        c.gated.to_string(),
        c.tls.to_string(),
        format!("{:.0}", m.checks()),
        format!("{:.0}", m.counter("replay_store_unavailable")),
        us(m.quantile(0.5)),
        us(m.quantile(0.99)),
    ]
}

fn phase_json(name: &str, from: f64, c: &Counts, m: &Scrape) -> serde_json::Value {
    json!({
        "phase": name, "from_s": round3(from), "requests": c.requests, "succeeded": c.ok,
        "failed": c.failed, "retried": c.retried, "answered_early": c.early,
        "zrtt_gated": c.gated, "tls_fallback": c.tls, "store_checks": m.checks(),
        "refused_busy": m.counter("replay_store_unavailable"),
        "store_replays": m.counter("replay_store_replays"),
        "check_p50_s": m.quantile(0.5), "check_p99_s": m.quantile(0.99),
        "gateway_counters": m.counters,
    })
}
