//! `zrtt lab fleet`: three `zrtt gateway` processes behind one anycast
//! address (the hub spreads flows by 5-tuple hash, like ECMP), sharing
//! one key store, one token key and a three-node Redis Cluster as replay
//! store, each in front of its own backend; new connections at a target
//! rate from a client host; and during the run, in order: replays of
//! served first flights to another gateway than the one that served them,
//! one gateway killed (SIGKILL) and restarted, one Redis master killed and
//! restarted, one key rotation (`zrtt keys rotate` and SIGHUP).
//!
//! Reported per phase: requests made, succeeded, failed, answered early,
//! the replay check's latency from the gateways' histograms; the replays
//! sent and accepted (must be 0). docs/FLEET.md has the method.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_dns::{KeyStore, Policy};
use zrtt_lab::{Lab, LabChild, Link, Topology};
use zrtt_net::client::{system_clock, ClientConfig};
use zrtt_proto::record::KeyRecord;

mod flights;
mod load;
mod metrics;
mod redis;
mod report;

use crate::faults::backend::Backend;
use crate::faults::load::Attempts;
use crate::proc::{self, WorkDir};
use crate::report::Report;
use crate::stack::{Site, BACKEND};
use crate::Bench;
use flights::{Answer, Ports};
use metrics::Scrape;

const HOST: &str = "www.example.com";
const GW_PORT: u16 = 443;
const CLIENT: &str = "client";
const VIP: &str = "vip";
const GATEWAYS: [&str; 3] = ["gw1", "gw2", "gw3"];
/// Each gateway's admin endpoint, on its host's loopback.
const ADMIN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9090));
/// The gateway killed and restarted.
const VICTIM: usize = 1;
/// Bound on waits for a gateway to serve zrtt (its store guard included).
const READY: Duration = Duration::from_secs(30);

/// Options of `zrtt lab fleet`.
#[derive(Clone, Debug)]
pub struct FleetOpts {
    /// Target new connections per second.
    pub rate: f64,
    /// Seconds of load.
    pub seconds: f64,
    /// Replays sent (each of a flight served by one gateway, to another).
    pub replays: usize,
    /// Round-trip time between the client and the gateways, ms.
    pub rtt_ms: u64,
    /// Requests running at once at most (the rate falls below the target
    /// when the machine cannot keep up).
    pub max_in_flight: usize,
    /// `--replay-store-timeout` of the gateways, ms.
    pub store_timeout_ms: f64,
    /// `--replay-store-skew` of the gateways, s (they share one clock
    /// here; the guard after a store failure is 2 s plus this).
    pub store_skew_s: u64,
    /// Retries of a request that got no HTTP answer.
    pub retries: u32,
    /// Keep the working directory.
    pub keep: bool,
}

impl Default for FleetOpts {
    fn default() -> Self {
        FleetOpts {
            rate: 1000.0,
            seconds: 60.0,
            replays: 30,
            rtt_ms: 20,
            max_in_flight: 256,
            store_timeout_ms: 1.0,
            store_skew_s: 5,
            retries: 3,
            keep: false,
        }
    }
}

/// The first retry's pause (doubled for each next one).
const BACKOFF: Duration = Duration::from_millis(100);
/// Bound on one attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The steps of the run, in order; each starts a phase.
const PHASES: [&str; 5] = [
    "steady",
    "replays",
    "gateway killed + restarted",
    "Redis master killed + restarted",
    "key rotation",
];
/// When each step after the first starts, as a share of the run.
const AT: [f64; 4] = [0.1, 0.3, 0.5, 0.75];

/// One gateway process, restartable.
struct Gw {
    name: &'static str,
    args: Vec<String>,
    log: PathBuf,
    child: Option<LabChild>,
}

impl Gw {
    fn spawn(&mut self, lab: &Lab, zrtt: &Path) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut c = lab.command(self.name, zrtt)?;
        c.args(&self.args).stdout(Stdio::null()).stderr(log);
        self.child = Some(lab.spawn(self.name, c)?);
        proc::wait_listening(lab, self.name, SocketAddr::from((lab.addr(VIP)?, GW_PORT)))?;
        proc::wait_listening(lab, self.name, ADMIN)
    }
}

/// A step's outcome, for the events table.
#[derive(Clone, Debug)]
struct Event {
    phase: usize,
    at_s: f64,
    what: String,
    result: String,
}

/// One replay: a flight served by one gateway, sent again to another.
#[derive(Clone, Debug)]
struct Replay {
    path: String,
    original_gw: String,
    replay_gw: String,
    /// Fresh flights sent until one was served (the original).
    original_tries: u32,
    original: String,
    replay: String,
    /// The replay's gateway counted it as a replay (`replay_store_replays`).
    counted_there: bool,
    /// Backends that ran the request, in order (must be one).
    ran_on: Vec<String>,
}

impl Replay {
    fn accepted(&self) -> bool {
        self.replay == Answer::Reply.label() || self.ran_on.len() > 1
    }
}

/// Everything the report needs.
struct Run {
    opts: FleetOpts,
    requests: Vec<load::Req>,
    /// Seconds the starts took (the target rate's schedule, or longer).
    starting_s: f64,
    /// Phase start times, seconds since the load's start.
    phase_at: Vec<f64>,
    load_end_s: f64,
    /// Per phase: the fleet's metrics over the phase.
    phase_metrics: Vec<Scrape>,
    events: Vec<Event>,
    replays: Vec<Replay>,
    /// Requests each gateway's backend answered.
    served: Vec<(String, u64)>,
    redis_keys: usize,
}

/// Runs the scenario. Needs root, `redis-server` and `redis-cli`.
pub fn run(bench: &Bench, o: &FleetOpts) -> Result<Report> {
    proc::require_tools(&["redis-server", "redis-cli"])?;
    if o.rate <= 0.0 || o.seconds <= 0.0 {
        bail!("need a positive --rate and --seconds");
    }
    let work = WorkDir::new(&bench.console, "fleet", o.keep)?;
    let dir = work.path.clone();
    // Keys: the site's store, with a rotation period of 1 s so that the
    // one `zrtt keys rotate` of the run makes a new key (nobody else
    // rotates: the gateways only read the store).
    let policy = Policy {
        rotation_period: Some(Duration::from_secs(1)),
        ..Policy::default()
    };
    let site = Site::create_with(bench, &dir.join("site"), HOST, policy)?;
    let token_key = dir.join("token.key");
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| anyhow::anyhow!("no randomness"))?;
    zrtt_dns::fsutil::write_atomic(
        &token_key,
        zrtt_proto::record::hex(&secret).as_bytes(),
        true,
    )?;

    let half = Link::delay(Duration::from_millis(o.rtt_ms) / 2);
    let mut topo = Topology::new()
        .host(CLIENT)
        .host(redis::HOST)
        .default_delay(Duration::ZERO);
    for g in GATEWAYS {
        topo = topo.host(g).link(CLIENT, g, half);
    }
    let lab = Lab::up(topo.anycast(VIP, &GATEWAYS))?;
    let mut cluster = redis::Cluster::start(&lab, &dir)?;
    let backends: Vec<Backend> = GATEWAYS
        .iter()
        .map(|g| Backend::start(&lab, g, BACKEND, vec![b'x'; 512]))
        .collect::<Result<_>>()?;
    let client_addr = lab.addr(CLIENT)?;
    let listen = SocketAddr::from((lab.addr(VIP)?, GW_PORT));
    let mut gws: Vec<Gw> = GATEWAYS
        .iter()
        .map(|&name| Gw {
            name,
            args: gateway_args(
                o,
                listen,
                &site.keystore,
                &token_key,
                &cluster.url(),
                client_addr,
            ),
            log: dir.join(format!("{name}.log")),
            child: None,
        })
        .collect();
    for g in &mut gws {
        g.spawn(&lab, &bench.zrtt)?;
    }
    let ports = Ports::new();
    let rec = site.key_records[0].clone();
    for g in GATEWAYS {
        let s = flights::until_served(&lab, &ports, g, &rec, &format!("/ready/{g}"), READY)?;
        if s.answer != Answer::Reply {
            bail!(
                "{g} does not serve zrtt after {READY:?}: {}",
                s.answer.label()
            );
        }
    }

    let mut roots = rustls::RootCertStore::empty();
    roots.add(site.ca_der()?)?;
    let tls = zrtt_net::client::tls_client_config(roots)?;
    let keys = Arc::new(site.key_source()?);
    let client: Arc<dyn Fn() -> Arc<ClientConfig> + Send + Sync> = Arc::new(move || {
        Arc::new(ClientConfig::builder(keys.clone()).with_tls_config(tls.clone()))
    });
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let spec = load::RateLoad {
        attempts: Attempts {
            host: HOST.into(),
            addr: listen,
            retries: o.retries,
            backoff: BACKOFF,
            attempt_timeout: ATTEMPT_TIMEOUT,
            agent: "zrtt-lab-fleet",
            retry_status: true,
        },
        rate: o.rate,
        duration: Duration::from_secs_f64(o.seconds),
        max_in_flight: o.max_in_flight,
        client,
        origin,
        started: Arc::new(AtomicUsize::new(0)),
        stop: stop.clone(),
    };
    let scrape_all =
        |lab: &Lab| -> Vec<Scrape> { GATEWAYS.iter().map(|g| metrics::scrape(lab, g)).collect() };
    let mut marks = vec![scrape_all(&lab)];
    let mut phase_at = vec![0.0];
    let t = lab.spawn_in_host(CLIENT, move || load::run(spec))?;
    let mut events = Vec::new();
    let mut replays = Vec::new();
    let at = |share: f64| Duration::from_secs_f64(o.seconds * share);
    let steps = (|| -> Result<()> {
        for (k, &share) in AT.iter().enumerate() {
            let phase = k + 1;
            while origin.elapsed() < at(share) && !t.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            marks.push(scrape_all(&lab));
            phase_at.push(origin.elapsed().as_secs_f64());
            let ev = |what: &str, result: String| Event {
                phase,
                at_s: origin.elapsed().as_secs_f64(),
                what: what.into(),
                result,
            };
            match phase {
                1 => {
                    for n in 0..o.replays {
                        replays.push(replay(&lab, &ports, &rec, n)?);
                    }
                    let bad = replays
                        .iter()
                        .filter(|r| r.replay == Answer::Reply.label())
                        .count();
                    events.push(ev(
                        "replays",
                        format!("{} sent, {bad} answered", replays.len()),
                    ));
                }
                2 => events.extend(kill_gateway(&lab, &mut gws[VICTIM], bench, origin, phase)?),
                3 => {
                    let victim = cluster.victim(&lab, "zrtt:settings")?;
                    let node = cluster.node(victim);
                    cluster.kill(victim)?;
                    events.push(ev("Redis master SIGKILL", node));
                    // Long enough for the cluster to mark it failed (node
                    // timeout 3 s), bounded by the phase.
                    let until =
                        origin.elapsed() + at((AT[3] - AT[2]) / 2.0).max(Duration::from_secs(1));
                    while origin.elapsed() < until && !t.is_finished() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let ok = cluster.restart(&lab, victim)?;
                    events.push(ev(
                        "Redis master restarted (empty)",
                        format!("cluster ok {:.1} s after the restart", ok.as_secs_f64()),
                    ));
                }
                _ => events.extend(rotate(
                    &lab,
                    &ports,
                    &gws,
                    &site.keystore,
                    bench,
                    origin,
                    phase,
                )?),
            }
        }
        Ok(())
    })();
    if steps.is_err() {
        stop.store(true, Ordering::SeqCst);
    }
    let (requests, starting_s) = t.join()?;
    steps?;
    let load_end_s = origin.elapsed().as_secs_f64();
    marks.push(scrape_all(&lab));
    // Let late executions of a replay reach the backends before counting.
    std::thread::sleep(Duration::from_millis(500));
    for r in &mut replays {
        r.ran_on = GATEWAYS
            .iter()
            .zip(&backends)
            .flat_map(|(g, b)| {
                b.seen()
                    .into_iter()
                    .filter(|p| *p == r.path)
                    .map(|_| g.to_string())
            })
            .collect();
    }
    let phase_metrics = (0..PHASES.len())
        .map(|p| {
            let mut sum = Scrape::default();
            for (g, after) in marks[p + 1].iter().enumerate() {
                sum.add(&after.since(&marks[p][g]));
            }
            sum
        })
        .collect();
    let served = GATEWAYS
        .iter()
        .zip(&backends)
        .map(|(g, b)| (g.to_string(), b.served()))
        .collect();
    let redis_keys = cluster.keys(&lab);
    let run = Run {
        opts: o.clone(),
        requests,
        starting_s,
        phase_at,
        load_end_s,
        phase_metrics,
        events,
        replays,
        served,
        redis_keys,
    };
    for g in &mut gws {
        if let Some(c) = g.child.take() {
            let _ = c.terminate(Duration::from_secs(5));
        }
    }
    drop(backends);
    drop(cluster);
    lab.down()?;
    Ok(report::report(&run))
}

fn gateway_args(
    o: &FleetOpts,
    listen: SocketAddr,
    keystore: &Path,
    token_key: &Path,
    store: &str,
    client: Ipv4Addr,
) -> Vec<String> {
    [
        "gateway",
        "--listen",
        &listen.to_string(),
        "--backend",
        &BACKEND.to_string(),
        "--keystore",
        &keystore.to_string_lossy(),
        "--token-key",
        &token_key.to_string_lossy(),
        "--trust",
        &format!("{client}/32"),
        "--admin",
        &ADMIN.to_string(),
        "--replay-store",
        store,
        "--replay-store-timeout",
        &format!("{}us", (o.store_timeout_ms * 1000.0).round() as u64),
        "--replay-store-skew",
        &format!("{}s", o.store_skew_s),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Replay number `n`: a flight served by gateway `n mod 3`, then the same
/// bytes from a source port the hub gives to the next gateway.
fn replay(lab: &Lab, ports: &Ports, rec: &KeyRecord, n: usize) -> Result<Replay> {
    let a = GATEWAYS[n % GATEWAYS.len()];
    let b = GATEWAYS[(n + 1) % GATEWAYS.len()];
    let prefix = format!("{}{n}", crate::faults::backend::ONCE);
    let served = flights::until_served(lab, ports, a, rec, &prefix, READY)?;
    let before = metrics::scrape(lab, b).counter("replay_store_replays");
    let port = ports.towards(lab, b)?;
    if lab.anycast_route(VIP, SocketAddrV4::new(lab.addr(CLIENT)?, port), GW_PORT)? == a {
        bail!("the replay's flow would reach the original gateway");
    }
    let answer = flights::send(lab, port, &served.flight)?;
    let after = metrics::scrape(lab, b).counter("replay_store_replays");
    Ok(Replay {
        path: served.path,
        original_gw: a.into(),
        replay_gw: b.into(),
        original_tries: served.tries,
        original: served.answer.label(),
        replay: answer.label(),
        counted_there: after > before,
        ran_on: Vec::new(),
    })
}

/// SIGKILL the gateway, take it out of the anycast set (the health
/// check), start it again, put it back once it listens.
fn kill_gateway(
    lab: &Lab,
    g: &mut Gw,
    bench: &Bench,
    origin: Instant,
    phase: usize,
) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    let t0 = Instant::now();
    if let Some(c) = g.child.take() {
        c.kill()?;
    }
    events.push(Event {
        phase,
        at_s: origin.elapsed().as_secs_f64(),
        what: format!("{} SIGKILL", g.name),
        result: "taken out of the anycast set".into(),
    });
    let others: Vec<&str> = GATEWAYS.iter().copied().filter(|n| *n != g.name).collect();
    lab.set_anycast_members(VIP, &others)?;
    g.spawn(lab, &bench.zrtt)?;
    lab.set_anycast_members(VIP, &GATEWAYS)?;
    events.push(Event {
        phase,
        at_s: origin.elapsed().as_secs_f64(),
        what: format!("{} restarted", g.name),
        result: format!(
            "listening and back in the anycast set {:.0} ms after the kill",
            t0.elapsed().as_secs_f64() * 1000.0
        ),
    });
    Ok(events)
}

/// `zrtt keys rotate`, SIGHUP to every gateway, then a flight to the new
/// key to each gateway until one is served (bounded).
fn rotate(
    lab: &Lab,
    ports: &Ports,
    gws: &[Gw],
    keystore: &Path,
    bench: &Bench,
    origin: Instant,
    phase: usize,
) -> Result<Vec<Event>> {
    let before = KeyStore::open(keystore)?.published_records(system_clock());
    let mut c = std::process::Command::new(&bench.zrtt);
    c.args(["keys", "rotate", "--keystore"]).arg(keystore);
    proc::run_capture(c).context("zrtt keys rotate")?;
    let after = KeyStore::open(keystore)?.published_records(system_clock());
    let new = after
        .iter()
        .find(|r| !before.iter().any(|b| b.body.key_id == r.body.key_id))
        .cloned()
        .context("zrtt keys rotate made no new key")?;
    for g in gws {
        if let Some(c) = &g.child {
            c.hangup()?;
        }
    }
    let mut events = vec![Event {
        phase,
        at_s: origin.elapsed().as_secs_f64(),
        what: "zrtt keys rotate + SIGHUP".into(),
        result: format!("new key {:08x}", new.body.key_id),
    }];
    for g in GATEWAYS {
        let s = flights::until_served(lab, ports, g, &new, &format!("/newkey/{g}"), READY)?;
        events.push(Event {
            phase,
            at_s: origin.elapsed().as_secs_f64(),
            what: format!("flight to the new key at {g}"),
            result: format!(
                "{} after {} tries, {:.0} ms",
                s.answer.label(),
                s.tries,
                s.ms
            ),
        });
    }
    Ok(events)
}
