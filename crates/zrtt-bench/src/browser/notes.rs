//! What the browser report says beside its table: the proxy's and the
//! gateways' counters per load (kept in the JSON), the gateways' own
//! account of how each flight was answered, the protocol Chromium used,
//! and how busy the machine was.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{chromium, Sample, MODES};
use crate::report::Summary;

/// The proxy counters the report keeps (by the metric's name and labels).
const PROXY_COUNTERS: [&str; 11] = [
    "zrtt_proxy_zrtt_requests_total",
    "zrtt_proxy_passthrough_requests_total",
    "zrtt_proxy_tunnels_total",
    "zrtt_proxy_bad_gateway_total",
    "zrtt_proxy_zrtt_connections_total{mode=\"zrtt_early\"}",
    "zrtt_proxy_zrtt_connections_total{mode=\"zrtt_gated\"}",
    "zrtt_proxy_zrtt_connections_total{mode=\"tls_fallback\"}",
    "zrtt_proxy_connections_total",
    "zrtt_proxy_h2_connections_total",
    "zrtt_proxy_tls_failures_total",
    "zrtt_proxy_tls_unused_total",
];

pub(super) fn proxy_json(m: &BTreeMap<String, f64>) -> Value {
    let mut v = serde_json::Map::new();
    for k in PROXY_COUNTERS {
        let short = k
            .trim_start_matches("zrtt_proxy_")
            .replace("_total{mode=\"", "_")
            .replace("\"}", "")
            .replace("_total", "");
        v.insert(short, json!(m.get(k).copied().unwrap_or(0.0) as u64));
    }
    Value::Object(v)
}

/// The gateway counters the report keeps: how each zrtt flight was
/// answered and, for those answered after the handshake, why.
const GATEWAY_COUNTERS: [&str; 8] = [
    "zrtt_accepted",
    "zrtt_answered_early",
    "zrtt_answered_in_syn_recv",
    "zrtt_answered_gated",
    "early_withheld_budget",
    "early_withheld_cooldown",
    "zrtt_forced_gating",
    "amplification_holds",
];

pub(super) fn gateways_json(m: &BTreeMap<String, f64>) -> Value {
    GATEWAY_COUNTERS
        .iter()
        .map(|k| {
            (
                k.to_string(),
                json!(m.get(*k).copied().unwrap_or(0.0) as u64),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The gateways' own account of one RTT's loads through the proxy in one
/// mode (`how`: e.g. "over HTTP/1.1 to the proxy").
pub(super) fn gateways_note(rtt: u64, how: &str, samples: &[Sample]) -> Option<String> {
    let mut sum: BTreeMap<&str, f64> = BTreeMap::new();
    for g in samples.iter().filter_map(|s| s.gateways.as_ref()) {
        for k in GATEWAY_COUNTERS {
            *sum.entry(k).or_default() += g.get(k).copied().unwrap_or(0.0);
        }
    }
    let get = |k: &str| sum.get(k).copied().unwrap_or(0.0) as u64;
    (get("zrtt_accepted") > 0).then(|| {
        format!(
            "Gateways' own count at RTT {rtt} ms (all {} loads through the proxy, {how}): {} flights accepted; {} answered as proven ({} of them while the socket was still in SYN_RECV, i.e. with the flight in the SYN and the reply before the client's ACK), {} after the handshake (withheld for the per-destination budget {}, cooling down {}, forced by soft limits {}); answers cut at the per-connection window before the handshake, the rest sent after it: {}.",
            samples.len(),
            get("zrtt_accepted"),
            get("zrtt_answered_early"),
            get("zrtt_answered_in_syn_recv"),
            get("zrtt_answered_gated"),
            get("early_withheld_budget"),
            get("early_withheld_cooldown"),
            get("zrtt_forced_gating"),
            get("amplification_holds"),
        )
    })
}

/// The protocol Chromium used for the HTML in each mode (Navigation
/// Timing's `nextHopProtocol`: to the server directly, to the proxy
/// through it), over all loads.
pub(super) fn protocols_note(samples: &[Vec<Vec<Sample>>]) -> String {
    let per_mode: Vec<String> = MODES
        .iter()
        .enumerate()
        .map(|(mi, m)| {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for s in samples.iter().flat_map(|r| r[mi].iter()) {
                let p = s.timing.raw["next_hop_protocol"]
                    .as_str()
                    .unwrap_or("unknown");
                *seen.entry(p.to_string()).or_default() += 1;
            }
            let seen: Vec<String> = seen.iter().map(|(p, n)| format!("{p} {n}x")).collect();
            format!("{} {}", m.id(), seen.join(" and "))
        })
        .collect();
    format!(
        "Protocol of the page's HTML as Chromium reports it (nextHopProtocol; through a proxy, the protocol to the proxy): {}.",
        per_mode.join(", ")
    )
}

/// How busy the machine was during the loads, per mode, and how long
/// Chromium took to settle before each navigation.
pub(super) fn machine_note(samples: &[Vec<Vec<Sample>>]) -> String {
    let busy: Vec<String> = MODES
        .iter()
        .enumerate()
        .map(|(mi, m)| {
            let v: Vec<f64> = samples
                .iter()
                .flat_map(|r| r[mi].iter().filter_map(|s| s.cpu_busy))
                .collect();
            if v.is_empty() {
                format!("{} unknown", m.id())
            } else {
                format!("{} {:.0}%", m.id(), Summary::of(&v).median * 100.0)
            }
        })
        .collect();
    let all: Vec<&Sample> = samples.iter().flatten().flatten().collect();
    let settle: Vec<f64> = all.iter().map(|s| s.settle.as_secs_f64() * 1e3).collect();
    format!(
        "The machine's CPUs (both cores) were busy, from the navigation to the load event (median of every RTT's loads): {}. Before each navigation Chromium had started on about:blank and the machine had settled (a {} ms window at most {:.0}% busy) after a median {:.0} ms; {} of {} loads settled within the {} s limit.",
        busy.join(", "),
        chromium::QUIET_WINDOW.as_millis(),
        chromium::QUIET_BUSY * 100.0,
        Summary::of(&settle).median,
        all.iter().filter(|s| s.settled).count(),
        all.len(),
        chromium::SETTLE_MAX.as_secs(),
    )
}
