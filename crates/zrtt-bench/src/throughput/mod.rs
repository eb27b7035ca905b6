//! `zrtt lab throughput`: what one new secure connection per request costs
//! the server, on loopback inside one lab namespace (no hub): nginx plain
//! HTTP, nginx TLS 1.3 full handshakes, nginx TLS 1.3 resumed, and `zrtt
//! gateway` answering early in front of nginx plain HTTP, and a second
//! gateway serving the same files itself (`--root`, static-file mode) to
//! zrtt clients (answered early) and to TLS 1.3 clients (full handshakes),
//! for responses of 1, 10 and 100 KB. A third gateway, like the first but
//! checking every first flight against a shared replay store in Redis
//! (`--replay-store`, a `redis-server` on the host's loopback), is the
//! Redis case, read against the first (issue 14: at least 90% of its new
//! connections per core-second).
//!
//! The servers run pinned to CPU 0 (`taskset -c 0`), the load generator (one
//! thread with a tokio current-thread runtime, inside the namespace) pinned
//! to CPU 1, as in `../shared/reference/baselines.md` ("How to measure
//! fairly on 2 cores"). The generator keeps N connections in flight, each a
//! new TCP connection carrying one request with `Connection: close`, and
//! checks every response (status 200, exact body length). Per cell it
//! reports completed requests/s, p50/p99 latency, and the server's CPU per
//! request: utime+stime of the server processes from `/proc/<pid>/stat`
//! over the measured window, divided by the requests completed in it.
//!
//! docs/LAB.md (section throughput) has the method and the reading.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, Topology};
use zrtt_net::client::{system_clock, ClientConfig, KeySource, Target};

mod cell;
mod cpu;
mod loadgen;
mod notes;
mod report;
mod store;

use crate::proc::{self, WorkDir};
use crate::progress::Progress;
use crate::report::Report;
use crate::stack::{Gateway, NginxTls, Site, SiteStack, BACKEND};
use crate::Bench;
use cell::{build_cell, Cell};
use cpu::{check_server, clk_tck};
use loadgen::{generate, tls_config, Client, Job, Preverified};

const NAME: &str = "www.example.com";
/// The one lab host; everything runs on its loopback.
const HOST: &str = "bench";
const SERVER_CPU: usize = 0;
const CLIENT_CPU: usize = 1;
/// nginx plain HTTP: the plain case and the gateway's backend.
const HTTP_PORT: u16 = BACKEND.port();
const TLS_FULL_PORT: u16 = 8443;
const TLS_RESUMED_PORT: u16 = 8444;
const GW_PORT: u16 = 4433;
/// The gateway in static-file mode (`--root`): zrtt and TLS.
const GW_STATIC_PORT: u16 = 4434;
const ADMIN_PORT: u16 = 9090;
/// The gateway with its replay store in Redis, and its admin port.
const GW_REDIS_PORT: u16 = 4435;
const ADMIN_REDIS_PORT: u16 = 9091;
/// A request that takes longer than this counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Error messages kept per cell.
const MAX_ERROR_EXAMPLES: usize = 5;

/// Options of `zrtt lab throughput`.
#[derive(Clone, Debug)]
pub struct ThroughputOpts {
    /// Response sizes in KB (1 KB = 1024 bytes).
    pub sizes_kb: Vec<usize>,
    /// Measured seconds per cell (after a warm-up of a quarter of that, 0.5-2 s).
    pub seconds: f64,
    /// Connections in flight (each request on a new connection).
    pub concurrency: usize,
    /// Fixed rates (new connections per second) at which the operator's
    /// view is measured besides saturation: server CPU per request for
    /// nginx TLS full and resumed, the gateway with its backend and the
    /// gateway serving files, at the smallest size. Empty: saturation only.
    pub rates: Vec<f64>,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
}

impl Default for ThroughputOpts {
    fn default() -> Self {
        ThroughputOpts {
            sizes_kb: vec![1, 10, 100],
            seconds: 4.0,
            concurrency: 16,
            rates: vec![500.0, 2000.0],
            keep: false,
        }
    }
}

/// What serves the requests of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Http,
    TlsFull,
    TlsResumed,
    Zrtt,
    /// The same gateway, zrtt clients resuming (a ticket each, Noise NNpsk0).
    ZrttResumed,
    /// The gateway serving files itself, zrtt clients answered early.
    ZrttStatic,
    /// The same gateway, TLS 1.3 clients with full handshakes.
    TlsStatic,
    /// The same gateway, TLS 1.3 clients resuming (its session tickets).
    TlsStaticResumed,
    /// As `Zrtt`, the gateway checking every flight against a replay store
    /// in Redis (`--replay-store`).
    ZrttRedis,
}

/// The cases measured at fixed rates.
const RATE_CASES: [Case; 6] = [
    Case::TlsFull,
    Case::TlsResumed,
    Case::Zrtt,
    Case::ZrttRedis,
    Case::ZrttResumed,
    Case::ZrttStatic,
];

/// Workers of a fixed-rate cell (at least).
const RATE_WORKERS: usize = 64;

const CASES: [Case; 9] = [
    Case::Http,
    Case::TlsFull,
    Case::TlsResumed,
    Case::Zrtt,
    Case::ZrttRedis,
    Case::ZrttResumed,
    Case::ZrttStatic,
    Case::TlsStatic,
    Case::TlsStaticResumed,
];

impl Case {
    fn id(self) -> &'static str {
        match self {
            Case::Http => "nginx-http",
            Case::TlsFull => "nginx-tls13-full",
            Case::TlsResumed => "nginx-tls13-resumed",
            Case::Zrtt => "zrtt-gateway",
            Case::ZrttResumed => "zrtt-gateway-resumed",
            Case::ZrttStatic => "zrtt-gateway-static",
            Case::TlsStatic => "gateway-static-tls13-full",
            Case::TlsStaticResumed => "gateway-static-tls13-resumed",
            Case::ZrttRedis => "zrtt-gateway-redis-store",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Case::Http => "nginx, plain HTTP",
            Case::TlsFull => "nginx, TLS 1.3 full handshake",
            Case::TlsResumed => "nginx, TLS 1.3 resumed (ticket)",
            Case::Zrtt => "zrtt gateway (answered early) + nginx backend",
            Case::ZrttResumed => "zrtt gateway, resumed (ticket) + nginx backend",
            Case::ZrttStatic => "zrtt gateway --root (answered early), no backend",
            Case::TlsStatic => "gateway --root, TLS 1.3 full handshake",
            Case::TlsStaticResumed => "gateway --root, TLS 1.3 resumed (ticket)",
            Case::ZrttRedis => "zrtt, replay store in Redis (answered early) + nginx backend",
        }
    }

    fn port(self) -> u16 {
        match self {
            Case::Http => HTTP_PORT,
            Case::TlsFull => TLS_FULL_PORT,
            Case::TlsResumed => TLS_RESUMED_PORT,
            Case::Zrtt | Case::ZrttResumed => GW_PORT,
            Case::ZrttStatic | Case::TlsStatic | Case::TlsStaticResumed => GW_STATIC_PORT,
            Case::ZrttRedis => GW_REDIS_PORT,
        }
    }

    /// The gateway's admin port, for the cases whose counters are kept.
    fn admin(self) -> Option<u16> {
        match self {
            Case::Zrtt | Case::ZrttResumed => Some(ADMIN_PORT),
            Case::ZrttRedis => Some(ADMIN_REDIS_PORT),
            _ => None,
        }
    }

    /// nginx's server CPU per connection in the reference lab
    /// (`../shared/reference/baselines.md`), µs, as (low, high).
    fn reference_us(self, kb: usize) -> Option<(f64, f64)> {
        let full = match kb {
            1 => 243.0,
            10 => 282.0,
            100 => 385.0,
            _ => return None,
        };
        match (self, kb) {
            (Case::Http, 1 | 10) => Some((33.0, 37.0)),
            (Case::Http, _) => Some((44.0, 48.0)),
            (Case::TlsFull, _) => Some((full, full)),
            // "~10-17% below full", given for 1 KB only.
            (Case::TlsResumed, 1) => Some((full * 0.83, full * 0.90)),
            _ => None,
        }
    }
}

fn page_path(kb: usize) -> String {
    format!("{kb}k.html")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Measures every case at every size on loopback, servers on CPU 0, load
/// on CPU 1. Needs root, nginx, taskset and two cores.
pub fn run(bench: &Bench, o: &ThroughputOpts) -> Result<Report> {
    if o.sizes_kb.is_empty() || o.sizes_kb.contains(&0) {
        bail!("need at least one response size, each at least 1 KB");
    }
    if !o.seconds.is_finite() || o.seconds <= 0.0 || o.concurrency == 0 {
        bail!("need a positive duration and at least one connection in flight");
    }
    if o.rates.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        bail!("rates are positive numbers of new connections per second");
    }
    proc::require_tools(&["nginx", "taskset", "getconf", "redis-server", "redis-cli"])?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        bail!("throughput pins the servers to CPU 0 and the load to CPU 1: needs 2 cores, have {cores}");
    }
    let tck = clk_tck();
    let measure = Duration::from_secs_f64(o.seconds);
    let warmup = Duration::from_secs_f64((o.seconds / 4.0).clamp(0.5, 2.0));

    let work = WorkDir::new(&bench.console, "throughput", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(bench, &dir, NAME)?;
    for &kb in &o.sizes_kb {
        site.page(&page_path(kb), kb * 1024)?;
    }
    // One host, no WAN traffic: the hub idles, and needs no real-time priority.
    let lab = Lab::up(Topology::new().host(HOST).realtime_priority(None))?;
    // ~10k connections/s for a minute: widen the ephemeral range; let
    // connects reuse TIME_WAIT ports.
    proc::sysctl(&lab, &[HOST], "net.ipv4.ip_local_port_range", "1024 65535")?;
    proc::sysctl(&lab, &[HOST], "net.ipv4.tcp_tw_reuse", "1")?;
    // Before the gateways: the Redis case's gateway connects at start.
    let store = store::Store::start(&lab, &dir.join("redis"))?;
    // The backend listener is the plain HTTP case. Keep-alive stays on so
    // that the gateway's backend connections are pooled; clients send
    // `Connection: close`, so each of their requests gets its own connection.
    let servers = SiteStack::new(bench, HOST, &site)
        .tls(loopback(TLS_FULL_PORT), NginxTls::TLS13, false)
        .tls(
            loopback(TLS_RESUMED_PORT),
            NginxTls {
                resumption: true,
                ..NginxTls::TLS13
            },
            false,
        )
        .keepalive_requests(100_000)
        .gateway(Gateway {
            trust: Some(std::net::Ipv4Addr::LOCALHOST),
            admin: Some(loopback(ADMIN_PORT)),
            log: Some(dir.join("gateway.log")),
            ..Gateway::new(loopback(GW_PORT))
        })
        .gateway(Gateway {
            trust: Some(std::net::Ipv4Addr::LOCALHOST),
            root: Some(site.www.clone()),
            ..Gateway::new(loopback(GW_STATIC_PORT))
        })
        .gateway(Gateway {
            trust: Some(std::net::Ipv4Addr::LOCALHOST),
            admin: Some(loopback(ADMIN_REDIS_PORT)),
            replay_store: Some(store::Store::url()),
            ..Gateway::new(loopback(GW_REDIS_PORT))
        })
        .pinned_to(SERVER_CPU)
        .start(&lab, HOST)?;
    let nginx_pid = servers.nginx_pid.context("nginx did not start")?;
    let gw_pid = *servers.gateway_pids.first().context("no gateway")?;
    let static_pid = *servers.gateway_pids.get(1).context("no static gateway")?;
    let redis_gw_pid = *servers
        .gateway_pids
        .get(2)
        .context("no Redis-store gateway")?;
    check_server(nginx_pid, "nginx")?;
    let exe_name = bench
        .zrtt
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect::<String>())
        .unwrap_or_default();
    check_server(gw_pid, &exe_name)?;
    check_server(static_pid, &exe_name)?;
    check_server(redis_gw_pid, &exe_name)?;
    servers.settle();

    let cert = site.cert_der()?;
    let record = site
        .key_source()?
        .lookup(NAME, system_clock())
        .context("the site's key record does not verify")?;
    let mut zcfg = ClientConfig::builder(Arc::new(Preverified(record)))
        .with_tls_config(tls_config(&cert, false)?);
    // zrtt or an error: a silent TLS fallback would measure something else.
    zcfg.tls_fallback = false;
    // Resuming clients: a ticket store with room for every connection in
    // flight (the warm-up's first contacts fill it; each resumed Reply
    // brings the next ticket).
    let mut rcfg = ClientConfig::builder(zcfg.keys.clone()).with_tls_config(zcfg.tls.clone());
    rcfg.tls_fallback = false;
    rcfg.tokens = Some(Arc::new(
        zrtt_net::client::TokenStore::with_tickets_per_server(o.concurrency.max(RATE_WORKERS) * 2),
    ));
    let rcfg = Arc::new(rcfg);
    let zcfg = Arc::new(zcfg);
    let name = pki_types::ServerName::try_from(NAME)?.to_owned();

    let mut cells = Vec::new();
    let mut rated = Vec::new();
    // Saturation: every size and case; then each fixed rate at the
    // smallest size for the cases an operator compares.
    let smallest = o.sizes_kb.iter().copied().min().unwrap_or(1);
    let runs: Vec<(usize, Case, Option<f64>)> = o
        .sizes_kb
        .iter()
        .flat_map(|&kb| CASES.map(|c| (kb, c, None)))
        .chain(
            o.rates
                .iter()
                .flat_map(|&r| RATE_CASES.map(|c| (smallest, c, Some(r)))),
        )
        .collect();
    let mut progress = Progress::new(&bench.console, "throughput", runs.len());
    for (kb, case, rate) in runs {
        {
            match rate {
                Some(r) => progress.tick(&format!("{kb} KB {} at {r}/s", case.id())),
                None => progress.tick(&format!("{kb} KB {}", case.id())),
            }
            let client = match case {
                Case::Http => Client::Http,
                Case::TlsFull | Case::TlsResumed | Case::TlsStatic | Case::TlsStaticResumed => {
                    Client::Tls {
                        // A fresh session cache per cell: the warm-up fills it.
                        connector: tokio_rustls::TlsConnector::from(tls_config(
                            &cert,
                            matches!(case, Case::TlsResumed | Case::TlsStaticResumed),
                        )?),
                        name: name.clone(),
                    }
                }
                Case::Zrtt | Case::ZrttResumed | Case::ZrttStatic | Case::ZrttRedis => {
                    Client::Zrtt {
                        cfg: if case == Case::ZrttResumed {
                            rcfg.clone()
                        } else {
                            zcfg.clone()
                        },
                        target: Target {
                            host: NAME.into(),
                            addr: loopback(case.port()),
                        },
                    }
                }
            };
            let job = Job {
                client,
                addr: loopback(case.port()),
                request: format!(
                    "GET /{} HTTP/1.1\r\nHost: {NAME}\r\nUser-Agent: zrtt-throughput\r\nConnection: close\r\n\r\n",
                    page_path(kb)
                )
                .into_bytes(),
                body_len: kb * 1024,
                tls_info: OnceLock::new(),
            };
            let before = case.admin().map(|port| scrape_metrics(&lab, port));
            // At a fixed rate, enough workers that a slow answer does not
            // hold the next start back.
            let conc = match rate {
                Some(_) => o.concurrency.max(RATE_WORKERS),
                None => o.concurrency,
            };
            let pids = vec![nginx_pid, gw_pid, static_pid, redis_gw_pid, store.pid];
            let out = lab
                .spawn_in_host(HOST, move || {
                    generate(job, conc, rate, warmup, measure, pids)
                })
                .and_then(|t| t.join());
            let gateway = match (before, case.admin()) {
                (Some(Ok(b)), Some(port)) => scrape_metrics(&lab, port).ok().map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.clone(), v.saturating_sub(b.get(k).copied().unwrap_or(0))))
                        .collect()
                }),
                _ => None,
            };
            let mut cell = match out {
                Ok(g) => build_cell(case, kb, g, tck, gateway),
                Err(e) => Cell::failed(case, kb, format!("{e:#}")),
            };
            cell.rate = rate;
            if let Some(f) = &cell.failure {
                progress.note(&format!("throughput: {kb} KB {}: {f}", case.id()));
            } else if cell.failed > 0 {
                progress.note(&format!(
                    "throughput: {kb} KB {}: {} failed requests, e.g. {}",
                    case.id(),
                    cell.failed,
                    cell.errors.first().map_or("?", String::as_str)
                ));
            }
            match rate {
                Some(_) => rated.push(cell),
                None => cells.push(cell),
            }
        }
    }
    let store_keys = store
        .cli(&lab, &["DBSIZE"])
        .ok()
        .and_then(|s| s.parse().ok());
    drop(servers);
    drop(store);
    lab.down()?;
    if !cells.iter().any(Cell::usable) {
        let why: Vec<String> = cells
            .iter()
            .map(|c| {
                format!(
                    "{} KB {}: {}",
                    c.kb,
                    c.case.id(),
                    c.failure
                        .clone()
                        .or_else(|| c.errors.first().cloned())
                        .unwrap_or_default()
                )
            })
            .collect();
        bail!("no cell completed a request: {}", why.join("; "));
    }
    Ok(report::report(o, &cells, &rated, tck, warmup, store_keys))
}

/// A gateway's counters, read from its admin port inside the lab host.
fn scrape_metrics(lab: &Lab, port: u16) -> Result<BTreeMap<String, u64>> {
    Ok(parse_metrics(&crate::admin_page::fetch(
        lab,
        HOST,
        loopback(port),
    )?))
}

/// The gateway's admin page (`zrtt_gateway_<name>_total <value>` lines,
/// OpenMetrics, possibly after an HTTP head) as a map by `<name>`; a
/// histogram's `zrtt_gateway_<name>_count` (observations, e.g. replay
/// store checks) as `<name>_count`.
fn parse_metrics(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(' ')?;
            let k = k.strip_prefix("zrtt_gateway_")?;
            let k = match k.strip_suffix("_total") {
                Some(name) => name,
                None => k.ends_with("_count").then_some(k)?,
            };
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_parse() {
        let m = parse_metrics(
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n# TYPE zrtt_gateway_requests counter\nzrtt_gateway_requests_total 12\nzrtt_gateway_tls_connections_total 0\nother 3\nzrtt_gateway_replay_store_check_seconds_count 7\nzrtt_gateway_replay_store_check_seconds_sum 0.01\n# EOF\n",
        );
        assert_eq!(m.get("requests"), Some(&12));
        assert_eq!(m.get("tls_connections"), Some(&0));
        assert_eq!(m.get("replay_store_check_seconds_count"), Some(&7));
        assert_eq!(m.len(), 3);
    }
}
