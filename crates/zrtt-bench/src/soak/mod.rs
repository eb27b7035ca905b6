//! `zrtt lab soak`: a long run of new connections at a fixed rate through
//! the lab at one RTT (or, `colocated`, from the server's own host over
//! the kernel's loopback path), against a `zrtt gateway` (in front of the faults
//! scenario's small in-process backend) whose keys rotate every period,
//! whose token keys rotate every period and whose certificate is replaced
//! on disk every period, while the gateway's memory and open files are
//! sampled (issue 11, "Prove: soak").
//!
//! The load is open loop (`load.rs`): requests start when due whatever the
//! answers' latency, on two threads in the client host, each request a new
//! connection (zrtt in the SYN, the library's TLS fallback, the faults
//! scenario's retries of a GET that got no answer). The events are in
//! `events.rs`; the report and its verdicts (0 failed requests, memory
//! drift within the bound, every event served) in `report.rs`.
//! docs/RELIABILITY.md ("Soak") has the method and the reading.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, Topology};
use zrtt_net::client::{ClientConfig, TokenStore};

mod events;
mod load;
mod report;
mod view;

use crate::faults::backend::Backend;
use crate::faults::gateway::{delta, scrape, GatewayProc, GW_PORT};
use crate::faults::kernel_counters;
use crate::faults::load::Attempts;
use crate::proc::{self, run_capture, WorkDir};
use crate::progress::Progress;
use crate::report::Report;
use crate::stack::BACKEND;
use crate::Bench;
use view::{Published, View};

const HOST: &str = "www.example.com";
/// Generator threads (one current-thread runtime each).
const THREADS: usize = 2;
/// The first retry's pause (doubled for each next one).
const BACKOFF: Duration = Duration::from_millis(250);
/// Bound on one attempt (the client's own bounds are 10 s).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for the requests in flight after the run's end.
const DRAIN_BOUND: Duration = Duration::from_secs(120);

/// Options of `zrtt lab soak`.
#[derive(Clone, Debug)]
pub struct SoakOpts {
    /// New connections per second asked (open loop).
    pub rate: f64,
    /// Length of the run.
    pub duration: Duration,
    /// Period of key rotation, token-key rotation and certificate
    /// replacement.
    pub period: Duration,
    /// Round-trip time between client and server, milliseconds.
    pub rtt_ms: u64,
    /// Run the load and the events in the server's host, to the server's
    /// own lab address (the kernel's loopback path, no hub, no RTT): for
    /// rates whose packets the lab's hub cannot carry (its one thread
    /// writes every packet of both hosts into their TUN devices). `rtt_ms`
    /// is not used then.
    pub colocated: bool,
    /// Share of requests from clients that keep their state (tokens).
    pub kept_share: f64,
    /// How many such clients.
    pub kept_clients: usize,
    /// Response body size, bytes.
    pub body_bytes: usize,
    /// Retries of a request that got no HTTP answer at all.
    pub retries: u32,
    /// Requests in flight beyond which a due request is skipped (counted).
    pub max_in_flight: usize,
    /// Time between two samples of the gateway's memory.
    pub sample_every: Duration,
    /// Largest memory drift (last minute against the first, %) that passes.
    pub max_drift_pct: f64,
    /// Keep the working directory (key store, gateway log) for inspection.
    pub keep: bool,
}

impl Default for SoakOpts {
    fn default() -> Self {
        SoakOpts {
            rate: 1000.0,
            duration: Duration::from_secs(600),
            period: Duration::from_secs(60),
            rtt_ms: 20,
            colocated: false,
            kept_share: 0.5,
            kept_clients: 16,
            body_bytes: 512,
            retries: 3,
            max_in_flight: 4000,
            sample_every: Duration::from_secs(2),
            max_drift_pct: 10.0,
            keep: false,
        }
    }
}

/// The report and whether every verdict passed.
pub struct SoakOutcome {
    /// Markdown, SVG and JSON.
    pub report: Report,
    /// Every verdict passed: 0 failed requests, memory drift within the
    /// bound, every event served.
    pub passed: bool,
}

/// The key store's policy for a soak period `p` (whole seconds): rotation
/// `R` = 3p/4, so a `zrtt keys rotate` run every `p` makes exactly one key
/// and the one re-signing the records half a period after a rotation makes
/// none; TTL `T` = p/12; lifetime `L` = 2p + 4T, so `R <= L - 4T` and a
/// key is still held when the clients switch away from it.
pub(crate) fn key_policy(period: Duration) -> (u64, u64, u64) {
    let p = period.as_secs().max(4);
    let rotation = (3 * p / 4).max(1);
    let ttl = (p / 12).max(1);
    (2 * p + 4 * ttl, ttl, rotation)
}

/// One sample of the gateway process.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProcSample {
    pub(crate) at_s: f64,
    pub(crate) rss_kb: u64,
    pub(crate) hwm_kb: u64,
    pub(crate) fds: u64,
    pub(crate) threads: u64,
}

/// VmRSS, VmHWM, Threads of /proc/PID/status and the entries of /proc/PID/fd.
pub(crate) fn proc_sample(pid: u32, at_s: f64) -> Result<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    Ok(ProcSample {
        at_s,
        rss_kb: field("VmRSS:"),
        hwm_kb: field("VmHWM:"),
        fds,
        threads: field("Threads:"),
    })
}

fn zrtt(bench: &Bench, args: &[&str], paths: &[&Path]) -> Result<String> {
    let mut c = Command::new(&bench.zrtt);
    c.args(args);
    for p in paths {
        c.arg(p);
    }
    run_capture(c).with_context(|| format!("zrtt {}", args.join(" ")))
}

/// Certificates (one per replacement, plus the first) and the key store.
fn setup_keys(bench: &Bench, dir: &Path, o: &SoakOpts) -> Result<(PathBuf, Vec<PathBuf>)> {
    // One spare: the schedule counts from the first key, made before the run.
    let replacements = events::schedule(o.period, o.duration + o.period)
        .iter()
        .filter(|e| e.1 == events::Kind::CertReplacement)
        .count();
    let mut pki = Vec::new();
    for i in 0..=replacements {
        let d = dir.join(format!("pki-{i}"));
        std::fs::create_dir_all(&d)?;
        zrtt(
            bench,
            &[
                "keys",
                "cert",
                "--name",
                HOST,
                "--alg",
                "ecdsa-p256",
                "--days",
                "30",
                "--out-dir",
            ],
            &[&d],
        )?;
        pki.push(d);
    }
    let (lifetime, ttl, rotation) = key_policy(o.period);
    let ks = dir.join("ks");
    let mut c = Command::new(&bench.zrtt);
    c.args(["keys", "init", "--keystore"])
        .arg(&ks)
        .args(["--name", HOST, "--cert"])
        .arg(pki[0].join("cert.pem"))
        .arg("--cert-key")
        .arg(pki[0].join("cert.key"))
        .args(["--lifetime", &format!("{lifetime}s")])
        .args(["--ttl", &format!("{ttl}s")])
        .args(["--rotation", &format!("{rotation}s")]);
    run_capture(c).context("zrtt keys init")?;
    Ok((ks, pki))
}

/// Every CA of `pki` as the clients' roots (TLS fallback across replacements).
fn client_tls(pki: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>> {
    use pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for d in pki {
        roots.add(pki_types::CertificateDer::from_pem_file(d.join("ca.pem"))?)?;
    }
    Ok(zrtt_net::client::tls_client_config(roots)?)
}

/// Runs the soak. Needs root.
pub fn run(bench: &Bench, o: &SoakOpts) -> Result<SoakOutcome> {
    if o.rate.is_nan() || o.rate <= 0.0 || o.duration.is_zero() || o.period < Duration::from_secs(4)
    {
        bail!("need a rate above 0, a duration, and a period of at least 4 s");
    }
    let work = WorkDir::new(&bench.console, "soak", o.keep)?;
    let dir = work.path.clone();
    let (ks, pki) = setup_keys(bench, &dir, o)?;
    let lab = Lab::up(Topology::new().host("client").host("server").rtt(
        "client",
        "server",
        Duration::from_millis(o.rtt_ms),
    ))?;
    // A new connection per request at up to thousands a second.
    proc::sysctl(
        &lab,
        &["client", "server"],
        "net.ipv4.ip_local_port_range",
        "1024 65535",
    )?;
    proc::sysctl(&lab, &["client", "server"], "net.ipv4.tcp_tw_reuse", "1")?;
    let backend = Backend::start(&lab, "server", BACKEND, vec![b'x'; o.body_bytes])?;
    let p = o.period.as_secs();
    let extra: Vec<OsString> = vec![
        "--token-rotation".into(),
        format!("{p}s").into(),
        "--token-lifetime".into(),
        format!("{}s", 2 * p).into(),
    ];
    let gateway = GatewayProc::start(bench, &lab, &ks, &dir, extra)?;
    let pid = gateway.pid().context("gateway pid")?;
    // A fresh gateway refuses flights stamped before its start + 2 s.
    std::thread::sleep(Duration::from_millis(2500));
    let addr = SocketAddr::from((lab.addr("server")?, GW_PORT));
    let load_host = if o.colocated { "server" } else { "client" };
    let client_ip = std::net::IpAddr::V4(lab.addr(load_host)?);
    let tls = client_tls(&pki)?;
    let view = Arc::new(View::new(HOST, Published::read(&ks)?));
    let kept: Vec<Arc<ClientConfig>> = (0..o.kept_clients)
        .map(|_| {
            let mut c = ClientConfig::builder(view.clone()).with_tls_config(tls.clone());
            c.tokens = Some(Arc::new(TokenStore::new()));
            Arc::new(c)
        })
        .collect();
    let attempts = Attempts {
        host: HOST.into(),
        addr,
        retries: o.retries,
        backoff: BACKOFF,
        attempt_timeout: ATTEMPT_TIMEOUT,
        agent: "zrtt-lab-soak",
        retry_status: false,
    };
    let kernel_before = kernel_counters(&lab)?;
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let ev = lab.spawn_in_host(load_host, {
        let spec = events::Spec {
            zrtt: bench.zrtt.clone(),
            ks: ks.clone(),
            certs: pki[1..].to_vec(),
            gateway_pid: pid,
            view: view.clone(),
            kept: kept.clone(),
            tls: tls.clone(),
            attempts: attempts.clone(),
            client_ip,
            t0,
            period: o.period,
            duration: o.duration,
            stop: stop.clone(),
        };
        move || events::run(spec)
    })?;
    let mut gens = Vec::new();
    for thread in 0..THREADS {
        let spec = load::Spec {
            attempts: attempts.clone(),
            thread,
            rate: o.rate / THREADS as f64,
            t0,
            duration: o.duration,
            max_in_flight: o.max_in_flight / THREADS,
            kept_share: o.kept_share,
            view: view.clone(),
            tls: tls.clone(),
            kept: kept.clone(),
        };
        gens.push(lab.spawn_in_host(load_host, move || load::run(spec))?);
    }
    let mut progress = Progress::new(
        &bench.console,
        "soak",
        (o.duration.as_secs_f64() / o.sample_every.as_secs_f64()).ceil() as usize,
    );
    let mut samples = Vec::new();
    let mut metrics: Vec<(f64, BTreeMap<String, f64>)> = Vec::new();
    let mut next = t0;
    let end = t0 + o.duration + DRAIN_BOUND;
    let mut gateway_died = false;
    while gens.iter().any(|g| !g.is_finished()) && Instant::now() < end {
        let at_s = t0.elapsed().as_secs_f64();
        if !gateway.running() {
            gateway_died = true;
            stop.store(true, Ordering::SeqCst);
            break;
        }
        if let Ok(s) = proc_sample(pid, at_s) {
            if at_s <= o.duration.as_secs_f64() {
                progress.tick(&format!(
                    "{:.0} s, gateway RSS {:.1} MB, {} fds",
                    at_s,
                    s.rss_kb as f64 / 1024.0,
                    s.fds
                ));
            }
            samples.push(s);
        }
        if let Ok(m) = scrape(&lab) {
            metrics.push((at_s, m));
        }
        next += o.sample_every;
        while Instant::now() < next {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    stop.store(true, Ordering::SeqCst);
    if gens.iter().any(|g| !g.is_finished()) {
        bail!("the load did not finish within {DRAIN_BOUND:?} after the run");
    }
    let mut outs = Vec::new();
    for g in gens {
        outs.push(g.join()?);
    }
    let events = ev.join()?;
    if let Ok(m) = scrape(&lab) {
        metrics.push((t0.elapsed().as_secs_f64(), m));
    }
    let kernel = delta(&kernel_before, &kernel_counters(&lab)?);
    let log = std::fs::read_to_string(dir.join("gateway.log")).unwrap_or_default();
    let served = backend.served();
    drop(gateway);
    drop(backend);
    lab.down()?;
    let input = report::Input {
        opts: o,
        outs: &outs,
        events: &events.events,
        final_token_ids: &events.final_token_ids,
        samples: &samples,
        metrics: &metrics,
        gateway_log: &log,
        kernel: &kernel,
        gateway_died,
        backend_served: served,
        key_policy: key_policy(o.period),
    };
    Ok(report::build(&input))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_policy_meets_the_store_rules() {
        for p in [4, 8, 10, 60, 300] {
            let (l, t, r) = key_policy(Duration::from_secs(p));
            assert!(
                t >= 1 && l > 4 * t && r >= 1 && r <= l - 4 * t,
                "{p}: {l} {t} {r}"
            );
            // One new key per rotation run every period, none half a period later.
            assert!(r <= p && 2 * r > p, "{p}: rotation {r}");
            // Still held when the clients switch away a period later.
            assert!(l - 2 * t > p, "{p}");
        }
    }

    #[test]
    fn proc_samples_read_this_process() {
        let s = proc_sample(std::process::id(), 1.0).unwrap();
        assert!(s.rss_kb > 0 && s.hwm_kb >= s.rss_kb && s.fds > 0 && s.threads >= 1);
    }
}
