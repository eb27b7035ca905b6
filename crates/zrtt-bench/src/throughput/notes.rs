//! The reading computed from a run's cells: CPU per request side by side,
//! HTTPCrypt's claim against a threshold, the backend's share, resumption,
//! gateway counters, and which cells were bound by something else than the
//! server. Why each of these matters is in docs/LAB.md (section throughput).

use super::cell::Cell;
use super::report::cell;
use super::{Case, ThroughputOpts, CLIENT_CPU, SERVER_CPU};

/// The notes below a throughput report, each computed from the numbers.
pub(super) fn notes(o: &ThroughputOpts, cells: &[Cell]) -> Vec<String> {
    let mut n = Vec::new();
    let mut per_size = Vec::new();
    // (kb, gateway alone ÷ TLS full, gateway + backend ÷ TLS full, backend µs)
    let mut ratios = Vec::new();
    for &kb in &o.sizes_kb {
        let (Some(z), Some(f)) = (cell(cells, Case::Zrtt, kb), cell(cells, Case::TlsFull, kb))
        else {
            continue;
        };
        let all = z.with_backend_us.unwrap_or(f64::NAN);
        ratios.push((
            kb,
            z.server_us / f.server_us,
            all / f.server_us,
            all - z.server_us,
        ));
        let mut s = format!(
            "{kb} KB: gateway {:.0} µs alone, {:.0} µs with its backend, against nginx TLS 1.3 full {:.0} µs ({:.2}x / {:.2}x the CPU)",
            z.server_us,
            all,
            f.server_us,
            z.server_us / f.server_us,
            all / f.server_us
        );
        if let Some(res) = cell(cells, Case::TlsResumed, kb) {
            s.push_str(&format!(", resumed {:.0} µs", res.server_us));
        }
        if let Some(h) = cell(cells, Case::Http, kb) {
            s.push_str(&format!(", plain HTTP {:.0} µs", h.server_us));
        }
        per_size.push(s);
    }
    if !per_size.is_empty() {
        n.push(format!("Server CPU per request: {}.", per_size.join("; ")));
    }
    if let (Some(z), Some(f)) = (cell(cells, Case::Zrtt, 1), cell(cells, Case::TlsFull, 1)) {
        let alone = f.server_us / z.server_us;
        let all = f.server_us / z.with_backend_us.unwrap_or(f64::NAN);
        n.push(format!(
            "HTTPCrypt's claim (about 3.3x nginx TLS's new encrypted requests/s, 1 KB) {}: per second of server CPU the gateway alone serves {alone:.2}x, gateway + backend {all:.2}x the requests of nginx TLS 1.3 with full handshakes.",
            httpcrypt_verdict(alone, all)
        ));
    }
    if let (Some(first), Some(last)) = (ratios.first(), ratios.last()) {
        let backend = ratios
            .iter()
            .map(|r| format!("{:.0} µs at {} KB", r.3, r.0))
            .collect::<Vec<_>>()
            .join(", ");
        n.push(format!(
            "The backend nginx's own share of the gateway's cost (the 'incl. backend' column): {backend}."
        ));
        if ratios.len() > 1 {
            // The gap: how far the ratio is from parity.
            let (gap_first, gap_last) = ((1.0 - first.2).abs(), (1.0 - last.2).abs());
            let trend = if gap_last < gap_first {
                "the gap narrows with response size"
            } else {
                "the gap does not narrow with response size"
            };
            n.push(format!(
                "Gateway + backend ÷ TLS full: {:.2} at {} KB, {:.2} at {} KB: {trend}.",
                first.2, first.0, last.2, last.0
            ));
        }
    }
    // Resumption against the reference's 10-17 %.
    let saved: Vec<String> = o
        .sizes_kb
        .iter()
        .filter_map(|&kb| {
            let (res, full) = (
                cell(cells, Case::TlsResumed, kb)?,
                cell(cells, Case::TlsFull, kb)?,
            );
            Some(format!(
                "{:.0}% at {kb} KB",
                (1.0 - res.server_us / full.server_us) * 100.0
            ))
        })
        .collect();
    if !saved.is_empty() {
        n.push(format!(
            "TLS 1.3 resumption saved nginx {} of the full handshake's CPU (reference: 10-17%).",
            saved.join(", ")
        ));
    }
    for c in cells
        .iter()
        .filter(|c| c.case == Case::TlsResumed && c.usable())
    {
        if c.resumed < c.ok {
            n.push(format!(
                "TLS resumed, {} KB: {} of {} requests resumed a session ({:.1}%); the rest were full handshakes.",
                c.kb,
                c.resumed,
                c.ok,
                c.resumed as f64 * 100.0 / c.ok as f64
            ));
        }
    }
    for c in cells.iter().filter(|c| {
        matches!(c.case, Case::Zrtt | Case::ZrttResumed | Case::ZrttRedis) && c.usable()
    }) {
        if let Some(g) = &c.gateway {
            let get = |k: &str| g.get(k).copied().unwrap_or(0);
            let acc = get("zrtt_accepted").max(1) as f64;
            n.push(format!(
                "Gateway counters, {} KB {} cell (warm-up included): {} flights accepted ({} resumed a ticket), {:.1}% answered early ({:.1}% while the socket was still SYN_RECV), {} gated, {} forced to gating by soft limits, {} busy (hard limits), {} refused Busy by the replay store, {} TLS connections.",
                c.kb,
                c.case.id(),
                get("zrtt_accepted"),
                get("zrtt_resumed"),
                get("zrtt_answered_early") as f64 * 100.0 / acc,
                get("zrtt_answered_in_syn_recv") as f64 * 100.0 / acc,
                get("zrtt_answered_gated"),
                get("zrtt_forced_gating"),
                get("zrtt_busy"),
                get("replay_store_unavailable"),
                get("tls_connections"),
            ));
        }
    }
    let list = |keep: &dyn Fn(&Cell) -> bool| -> Vec<String> {
        cells
            .iter()
            .filter(|c| c.usable() && keep(c))
            .map(|c| format!("{} KB {}", c.kb, c.case.id()))
            .collect()
    };
    let bound = list(&|c| c.loadgen_busy > 0.9 && c.cpu0_busy < 0.9);
    if !bound.is_empty() {
        n.push(format!(
            "Load-generator-bound cells (its thread above 90% of CPU {CLIENT_CPU}, CPU {SERVER_CPU} below 90%): {}; compare server µs per request there, not req/s.",
            bound.join(", ")
        ));
    }
    let idle = list(&|c| c.loadgen_busy <= 0.9 && c.cpu0_busy < 0.9);
    if !idle.is_empty() {
        n.push(format!(
            "Neither core saturated in: {}; req/s there understates capacity.",
            idle.join(", ")
        ));
    }
    let soft: Vec<String> = cells
        .iter()
        .filter(|c| c.usable())
        .map(|c| format!("{:.0} µs at {} KB {}", c.cpu0_softirq_us, c.kb, c.case.id()))
        .collect();
    n.push(format!(
        "CPU {SERVER_CPU}'s irq + softirq per request (not in the server µs): {}.",
        soft.join(", ")
    ));
    let other: Vec<String> = cells
        .iter()
        .filter(|c| c.usable())
        .filter_map(|c| {
            let extra = c.core_us[0] - c.with_backend_us.unwrap_or(c.server_us) - c.cpu0_softirq_us;
            (extra > 0.2 * c.server_us)
                .then(|| format!("{} KB {} (+{extra:.0} µs/request)", c.kb, c.case.id()))
        })
        .collect();
    if !other.is_empty() {
        n.push(format!(
            "CPU {SERVER_CPU} also ran other processes or kernel threads during: {}; req/s and latency there are affected.",
            other.join(", ")
        ));
    }
    let failed: Vec<String> = cells
        .iter()
        .filter(|c| c.failed > 0 || c.failure.is_some())
        .map(|c| {
            format!(
                "{} KB {}: {} failed{}",
                c.kb,
                c.case.id(),
                c.failed,
                c.failure
                    .clone()
                    .or_else(|| c.errors.first().cloned())
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if failed.is_empty() {
        n.push(
            "Every response in every measured window was a 200 with the exact body length.".into(),
        );
    } else {
        n.push(format!("Failures: {}.", failed.join("; ")));
    }
    n
}

/// Per Redis-case cell (saturation and fixed rates): did the store check
/// every flight the gateway accepted, and did it refuse any (`Busy`: no
/// answer within the gateway's `--replay-store-timeout`)? From the
/// gateway's counters over the cell, warm-up included.
pub(super) fn store_notes(cells: &[Cell], rated: &[Cell]) -> Vec<String> {
    cells
        .iter()
        .chain(rated)
        .filter(|c| c.case == Case::ZrttRedis)
        .map(|c| {
            let at = c
                .rate
                .map_or(format!("{} KB, saturation", c.kb), |r| format!("{} KB at {r:.0}/s", c.kb));
            let Some(g) = &c.gateway else {
                return format!("Replay store in Redis, {at}: the gateway's counters could not be read; whether the store checked every flight is unknown.");
            };
            let get = |k: &str| g.get(k).copied().unwrap_or(0);
            let (checks, accepted) = (get("replay_store_check_seconds_count"), get("zrtt_accepted"));
            let (replays, busy) = (get("replay_store_replays"), get("replay_store_unavailable"));
            let verdict = if checks == accepted + replays + busy && busy == 0 && accepted > 0 {
                "the store checked every flight and refused none".to_string()
            } else if busy > 0 {
                format!("THE STORE REFUSED {busy} FLIGHTS BUSY (no answer in time: the clients saw Reject Busy, counted as failed requests)")
            } else {
                "the counts do not match: not every accepted flight was checked".to_string()
            };
            format!(
                "Replay store in Redis, {at}: {checks} store checks for {accepted} flights accepted, {replays} replays, {busy} refused Busy: {verdict}; redis-server's own CPU {} µs per request (on CPU {CLIENT_CPU}, not in the gateway's figure).",
                c.store_us.map_or("–".into(), |u| format!("{u:.1}")),
            )
        })
        .collect()
}

/// HTTPCrypt's claim (about 3.3x nginx TLS's new encrypted requests per
/// second) against the measured ratios of requests per server-CPU second
/// at 1 KB: the gateway alone, and with its backend.
fn httpcrypt_verdict(alone: f64, with_backend: f64) -> &'static str {
    if with_backend >= 2.5 {
        "is reproduced"
    } else if alone >= 2.5 {
        "is reproduced only if the backend's cost is left out"
    } else if alone > 1.1 {
        "is not reproduced: zrtt is cheaper per new connection, but by far less"
    } else {
        "is not reproduced: the zrtt gateway costs about as much CPU per new connection as nginx TLS 1.3, or more"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn httpcrypt_thresholds() {
        assert_eq!(httpcrypt_verdict(3.0, 2.6), "is reproduced");
        assert!(httpcrypt_verdict(3.0, 2.0).contains("only if the backend"));
        assert!(httpcrypt_verdict(1.57, 1.41).contains("by far less"));
        assert!(httpcrypt_verdict(1.0, 0.9).contains("about as much CPU"));
    }
}
