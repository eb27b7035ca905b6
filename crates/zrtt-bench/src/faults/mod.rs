//! `zrtt lab faults`: a stream of idempotent HTTPS requests (the zrtt
//! client library with its TLS fallback, a new connection per request)
//! through the lab at one RTT, against a `zrtt gateway` in front of a small
//! in-process HTTP backend, under each fault in turn: loss, reordering,
//! duplication, middleboxes that drop or strip SYN data or let only TLS
//! through, the backend down or slow, the gateway restarted under load.
//! Each fault runs twice: with a new client per request (no state: every
//! request a first contact) and with one client that keeps its state
//! (path memory, address tokens) across the stream.
//!
//! Reported per fault and client: requests, answered 200, clean 502s,
//! failures (no answer after the retries, or another status), retries,
//! TLS fallbacks, early answers, and median / p95 time against the
//! no-fault row. docs/RELIABILITY.md has the method and the reading.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zrtt_lab::{HubStats, Lab, Link, SynData, Topology};
use zrtt_net::client::{ClientConfig, TokenStore};

pub(crate) mod backend;
pub(crate) mod gateway;
pub(crate) mod load;
mod report;

use crate::proc::{self, WorkDir};
use crate::progress::Progress;
use crate::report::Report;
use crate::stack::{Site, BACKEND};
use crate::Bench;
use backend::Backend;
#[cfg(test)]
use gateway::parse_metrics;
use gateway::{delta, scrape, GatewayProc, GW_PORT};
use load::{Attempts, Load, Sample};

const HOST: &str = "www.example.com";

/// One fault of the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// 1% random loss both ways.
    Loss1,
    /// 5% random loss both ways.
    Loss5,
    /// 10% of packets both ways held back a quarter RTT (later ones overtake).
    Reorder,
    /// 10% of packets both ways delivered twice.
    Duplicate,
    /// A middlebox drops the client's SYNs that carry data.
    SynDrop,
    /// A middlebox strips the data from the client's SYNs.
    SynStrip,
    /// A middlebox lets only TLS through after the handshake: zrtt's
    /// frames after the SYN are dropped both ways.
    TlsOnly,
    /// The backend is down (its port closed): clean 502s expected.
    BackendDown,
    /// The backend answers after a delay.
    BackendSlow,
    /// The gateway is stopped (SIGTERM, by PID) and started again a third
    /// of the way into the stream, keeping its replay filter.
    GatewayRestart,
    /// A new gateway process takes over from the running one a third of
    /// the way into the stream (`--handover`: the listening sockets and
    /// the replay filter passed over; the old one drains and exits).
    GatewayHandover,
}

impl Fault {
    /// Every fault, in the order run.
    pub const ALL: [Fault; 12] = [
        Fault::None,
        Fault::Loss1,
        Fault::Loss5,
        Fault::Reorder,
        Fault::Duplicate,
        Fault::SynDrop,
        Fault::SynStrip,
        Fault::TlsOnly,
        Fault::BackendDown,
        Fault::BackendSlow,
        Fault::GatewayRestart,
        Fault::GatewayHandover,
    ];

    /// Name on the command line and in the JSON.
    pub fn id(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Loss1 => "loss-1",
            Fault::Loss5 => "loss-5",
            Fault::Reorder => "reorder",
            Fault::Duplicate => "duplicate",
            Fault::SynDrop => "syn-drop",
            Fault::SynStrip => "syn-strip",
            Fault::TlsOnly => "tls-only",
            Fault::BackendDown => "backend-down",
            Fault::BackendSlow => "backend-slow",
            Fault::GatewayRestart => "gateway-restart",
            Fault::GatewayHandover => "gateway-handover",
        }
    }

    fn label(self, o: &FaultsOpts) -> String {
        match self {
            Fault::None => "none".into(),
            Fault::Loss1 => "loss 1%".into(),
            Fault::Loss5 => "loss 5%".into(),
            Fault::Reorder => format!("reordering 10% by {} ms", reorder_delay(o).as_millis()),
            Fault::Duplicate => "duplication 10%".into(),
            Fault::SynDrop => "middlebox drops SYN data".into(),
            Fault::SynStrip => "middlebox strips SYN data".into(),
            Fault::TlsOnly => "zrtt frames dropped after the handshake".into(),
            Fault::BackendDown => "backend down".into(),
            Fault::BackendSlow => format!("backend slow ({} ms)", o.slow_ms),
            Fault::GatewayRestart => "gateway restart under load".into(),
            Fault::GatewayHandover => "gateway hand-over under load".into(),
        }
    }

    /// Parses a fault name.
    pub fn parse(s: &str) -> Result<Fault> {
        Fault::ALL
            .into_iter()
            .find(|f| f.id() == s)
            .with_context(|| {
                format!(
                    "unknown fault {s:?} (known: {})",
                    Fault::ALL.map(Fault::id).join(", ")
                )
            })
    }

    /// Links (client to server, server to client) for this fault.
    fn links(self, o: &FaultsOpts) -> (Link, Link) {
        let clean = Link::delay(Duration::from_millis(o.rtt_ms) / 2);
        let both = |l: Link| (l, l);
        match self {
            Fault::Loss1 => both(clean.with_loss(0.01)),
            Fault::Loss5 => both(clean.with_loss(0.05)),
            Fault::Reorder => both(clean.with_reorder(0.1, reorder_delay(o))),
            Fault::Duplicate => both(clean.with_duplicate(0.1)),
            Fault::SynDrop => (clean.with_syn_data(SynData::Drop), clean),
            Fault::SynStrip => (clean.with_syn_data(SynData::Strip), clean),
            Fault::TlsOnly => both(clean.with_tls_only(true)),
            _ => both(clean),
        }
    }
}

fn reorder_delay(o: &FaultsOpts) -> Duration {
    Duration::from_millis((o.rtt_ms / 4).max(2))
}

/// Which client sends the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientKind {
    /// A new client per request: no path memory, no token (each request a
    /// first contact, like one `zrtt get`).
    New,
    /// One client across the stream: its path memory and address tokens.
    Kept,
}

const KINDS: [ClientKind; 2] = [ClientKind::New, ClientKind::Kept];

impl ClientKind {
    fn id(self) -> &'static str {
        match self {
            ClientKind::New => "new",
            ClientKind::Kept => "kept",
        }
    }
    fn label(self) -> &'static str {
        match self {
            ClientKind::New => "new per request",
            ClientKind::Kept => "kept (memory, token)",
        }
    }
}

/// Options of `zrtt lab faults`.
#[derive(Clone, Debug)]
pub struct FaultsOpts {
    /// Round-trip time between client and server, milliseconds.
    pub rtt_ms: u64,
    /// Requests per fault and client.
    pub requests: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// The faults to run, in order (empty: all of [`Fault::ALL`]).
    pub faults: Vec<Fault>,
    /// Response body size, bytes. Small by default so that the kept
    /// client's stream (four in flight, about 70 answers a second) stays
    /// within the gateway's per-destination budget for early answers (six
    /// initial windows a second): its no-fault row is then answered early
    /// throughout, and the penalties measure the faults, not the budget.
    pub body_bytes: usize,
    /// The slow backend's delay, milliseconds.
    pub slow_ms: u64,
    /// Retries of a request that got no HTTP answer at all.
    pub retries: u32,
    /// Keep the working directory (keys, gateway log) for inspection.
    pub keep: bool,
}

impl Default for FaultsOpts {
    fn default() -> Self {
        FaultsOpts {
            rtt_ms: 50,
            requests: 100,
            concurrency: 4,
            faults: Fault::ALL.to_vec(),
            body_bytes: 512,
            slow_ms: 250,
            retries: 3,
            keep: false,
        }
    }
}

/// The first retry's pause (doubled for each next one).
const BACKOFF: Duration = Duration::from_millis(250);
/// Bound on one attempt (the client's own bounds are 10 s).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// One fault and client: what the stream got.
pub(crate) struct Row {
    fault: Fault,
    kind: ClientKind,
    samples: Vec<Sample>,
    hub: HubStats,
    /// Gateway counters over the row (since the restart for the restart row).
    metrics: BTreeMap<String, f64>,
    /// The restart row: milliseconds from SIGTERM to the new gateway listening.
    restart_gap_ms: Option<f64>,
    /// Kernel TCP counters over the row, per host (`client.OutRsts`, ...).
    kernel: BTreeMap<String, f64>,
}

/// The kernel's TCP counters worth watching per row (/proc/net/snmp `Tcp:`
/// and /proc/net/netstat `TcpExt:`).
const KERNEL_COUNTERS: [&str; 16] = [
    "OutRsts",
    "EstabResets",
    "AttemptFails",
    "RetransSegs",
    "TCPAbortOnData",
    "TCPAbortOnClose",
    "TCPSynRetrans",
    "TCPTimeouts",
    "TCPFastOpenActive",
    "TCPFastOpenActiveFail",
    "TCPFastOpenPassive",
    "TCPFastOpenPassiveFail",
    "TCPFastOpenListenOverflow",
    "ListenOverflows",
    "ListenDrops",
    "TCPReqQFullDrop",
];

/// [`KERNEL_COUNTERS`] of both hosts, as `host.name`.
pub(crate) fn kernel_counters(lab: &Lab) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for host in ["client", "server"] {
        let mut c = lab.command(host, "cat")?;
        c.args(["/proc/net/snmp", "/proc/net/netstat"]);
        let text = proc::run_capture(c)?;
        for (name, v) in parse_proc_net(&text) {
            if KERNEL_COUNTERS.contains(&name.as_str()) {
                out.insert(format!("{host}.{name}"), v);
            }
        }
    }
    Ok(out)
}

/// `Tcp:`/`TcpExt:` header and value line pairs of /proc/net/snmp and
/// /proc/net/netstat, as (counter, value).
fn parse_proc_net(text: &str) -> Vec<(String, f64)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for pair in lines.windows(2) {
        let (h, v) = (pair[0], pair[1]);
        let Some((hp, names)) = h.split_once(':') else {
            continue;
        };
        let Some((vp, values)) = v.split_once(':') else {
            continue;
        };
        if hp != vp
            || !matches!(hp, "Tcp" | "TcpExt")
            || names.trim_start().starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        if !values
            .trim_start()
            .starts_with(|c: char| c.is_ascii_digit() || c == '-')
        {
            continue;
        }
        for (n, x) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(x) = x.parse() {
                out.push((n.to_string(), x));
            }
        }
    }
    out
}

/// Runs every fault of `o` with both clients. Needs root.
pub fn run(bench: &Bench, o: &FaultsOpts) -> Result<Report> {
    if o.requests == 0 || o.faults.is_empty() {
        bail!("need at least one request and one fault");
    }
    let work = WorkDir::new(&bench.console, "faults", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(bench, &dir.join("site"), HOST)?;
    let rtt = Duration::from_millis(o.rtt_ms);
    let lab = Lab::up(
        Topology::new()
            .host("client")
            .host("server")
            .rtt("client", "server", rtt),
    )?;
    let backend = Backend::start(&lab, "server", BACKEND, vec![b'x'; o.body_bytes])?;
    let handover = vec!["--handover".into(), dir.join("handover.sock").into()];
    let mut gateway = GatewayProc::start(bench, &lab, &site.keystore, &dir, handover)?;
    // A fresh gateway refuses flights stamped before its start + 2 s.
    std::thread::sleep(Duration::from_millis(2500));
    let addr = SocketAddr::from((lab.addr("server")?, GW_PORT));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(site.ca_der()?)?;
    let tls = zrtt_net::client::tls_client_config(roots)?;
    let keys = Arc::new(site.key_source()?);
    let fresh = move || -> Arc<ClientConfig> {
        Arc::new(ClientConfig::builder(keys.clone()).with_tls_config(tls.clone()))
    };

    let mut rows = Vec::new();
    let mut progress = Progress::new(&bench.console, "faults", o.faults.len() * KINDS.len());
    for (fi, &fault) in o.faults.iter().enumerate() {
        if fi > 0 {
            // A fresh gateway per fault (its replay filter kept): the
            // admission state (cool-downs, budgets) a fault leaves behind
            // must not spill into the next row.
            gateway.restart(&lab)?;
        }
        let (up, down) = fault.links(o);
        lab.set_link("client", "server", up)?;
        lab.set_link("server", "client", down)?;
        backend.set_down(fault == Fault::BackendDown)?;
        backend.set_delay(if fault == Fault::BackendSlow {
            Duration::from_millis(o.slow_ms)
        } else {
            Duration::ZERO
        });
        for kind in KINDS {
            progress.tick(&format!("{} / {}", fault.id(), kind.id()));
            let client: Box<dyn Fn() -> Arc<ClientConfig> + Send + Sync> = match kind {
                ClientKind::New => Box::new(fresh.clone()),
                ClientKind::Kept => {
                    let mut cfg = ClientConfig::builder(Arc::new(site.key_source()?))
                        .with_tls_config(fresh().tls.clone());
                    cfg.tokens = Some(Arc::new(TokenStore::new()));
                    let cfg = Arc::new(cfg);
                    Box::new(move || cfg.clone())
                }
            };
            let done = Arc::new(AtomicUsize::new(0));
            let spec = Load {
                attempts: Attempts {
                    host: HOST.into(),
                    addr,
                    retries: o.retries,
                    backoff: BACKOFF,
                    attempt_timeout: ATTEMPT_TIMEOUT,
                    agent: "zrtt-lab-faults",
                    retry_status: false,
                },
                requests: o.requests,
                concurrency: o.concurrency,
                client,
                done: done.clone(),
            };
            let before = scrape(&lab)?;
            let kernel_before = kernel_counters(&lab)?;
            lab.reset_hub_stats();
            let mut restart_gap_ms = None;
            let samples = if matches!(fault, Fault::GatewayRestart | Fault::GatewayHandover) {
                let t = lab.spawn_in_host("client", move || load::run(spec))?;
                while done.load(Ordering::SeqCst) < o.requests / 3 && !t.is_finished() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let gap = if fault == Fault::GatewayRestart {
                    gateway.restart(&lab)
                } else {
                    gateway.hand_over(&lab)
                };
                let samples = t.join();
                restart_gap_ms = Some(gap?);
                samples?
            } else {
                lab.in_host("client", move || load::run(spec))??
            };
            let hub = lab.hub_stats();
            let after = scrape(&lab)?;
            let kernel = delta(&kernel_before, &kernel_counters(&lab)?);
            let metrics = if restart_gap_ms.is_some() {
                after
            } else {
                delta(&before, &after)
            };
            let row = Row {
                fault,
                kind,
                samples,
                hub,
                metrics,
                restart_gap_ms,
                kernel,
            };
            let bad = row.failed();
            if bad > 0 {
                progress.note(&format!(
                    "faults: {} / {}: {bad} of {} requests failed",
                    fault.id(),
                    kind.id(),
                    o.requests
                ));
            }
            rows.push(row);
        }
    }
    let served = backend.served();
    drop(gateway);
    drop(backend);
    lab.down()?;
    Ok(report::report(o, &rows, served))
}

impl Row {
    /// Requests without a 200 or a 502.
    fn failed(&self) -> usize {
        self.samples
            .iter()
            .filter(|s| !matches!(s.status, Some(200 | 502)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_metrics_read() {
        for f in Fault::ALL {
            assert_eq!(Fault::parse(f.id()).unwrap(), f);
        }
        assert!(Fault::parse("flood").is_err());
        let m = parse_metrics(
            "# HELP x\nzrtt_gateway_gate_timeouts_total 3\nzrtt_gateway_requests_total 10\n\
             zrtt_gateway_answer_seconds_bucket{le=\"1\"} 4\nother_total 1\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m["gate_timeouts"], 3.0);
        let before = BTreeMap::from([("requests".to_string(), 4.0)]);
        let d = delta(&before, &m);
        assert_eq!(d["requests"], 6.0);
        assert_eq!(d["gate_timeouts"], 3.0);
    }

    #[test]
    fn proc_net_counters() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm OutRsts\nTcp: 1 7\n\
                    TcpExt: SyncookiesSent TCPAbortOnData\nTcpExt: 0 3\n";
        assert_eq!(
            parse_proc_net(text),
            [
                ("RtoAlgorithm".to_string(), 1.0),
                ("OutRsts".to_string(), 7.0),
                ("SyncookiesSent".to_string(), 0.0),
                ("TCPAbortOnData".to_string(), 3.0)
            ]
        );
    }

    #[test]
    fn fault_links() {
        let o = FaultsOpts::default();
        let (up, down) = Fault::SynDrop.links(&o);
        assert_eq!(up.syn_data, SynData::Drop);
        assert_eq!(down.syn_data, SynData::Pass);
        assert_eq!(up.delay, Duration::from_millis(25));
        let (up, down) = Fault::TlsOnly.links(&o);
        assert!(up.tls_only && down.tls_only);
        assert_eq!(Fault::Loss5.links(&o).1.loss, 0.05);
        assert_eq!(
            Fault::None.links(&o).0,
            Link::delay(Duration::from_millis(25))
        );
    }
}
