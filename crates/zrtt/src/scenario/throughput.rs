//! `zrtt lab throughput`: what one new secure connection per request costs
//! the server, on loopback inside one lab namespace (no hub): nginx plain
//! HTTP, nginx TLS 1.3 full handshakes, nginx TLS 1.3 resumed, and `zrtt
//! gateway` answering early in front of nginx plain HTTP, for responses of
//! 1, 10 and 100 KB.
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

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zrtt_lab::{Lab, LabChild, Topology};
use zrtt_net::client::{CertKeySource, ClientConfig, KeySource, Target, ZrttStream};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

use super::report::{round3, Axis, Chart, Progress, Report, Series, Summary, Table};
use super::stack::{self, Children, Nginx, NginxServer, NginxTls, Site};

const NAME: &str = "www.example.com";
/// The one lab host; everything runs on its loopback.
const HOST: &str = "bench";
const SERVER_CPU: usize = 0;
const CLIENT_CPU: usize = 1;
/// nginx plain HTTP: the plain case and the gateway's backend.
const HTTP_PORT: u16 = 8080;
const TLS_FULL_PORT: u16 = 8443;
const TLS_RESUMED_PORT: u16 = 8444;
const GW_PORT: u16 = 4433;
const ADMIN_PORT: u16 = 9090;
/// A request that takes longer than this counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Error messages kept per cell.
const MAX_ERROR_EXAMPLES: usize = 5;

pub struct ThroughputOpts {
    /// Response sizes in KB (1 KB = 1024 bytes).
    pub sizes_kb: Vec<usize>,
    /// Measured seconds per cell (after a warm-up of a quarter of that, 0.5-2 s).
    pub seconds: f64,
    /// Connections in flight.
    pub concurrency: usize,
    pub keep: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Http,
    TlsFull,
    TlsResumed,
    Zrtt,
}

const CASES: [Case; 4] = [Case::Http, Case::TlsFull, Case::TlsResumed, Case::Zrtt];

impl Case {
    fn id(self) -> &'static str {
        match self {
            Case::Http => "nginx-http",
            Case::TlsFull => "nginx-tls13-full",
            Case::TlsResumed => "nginx-tls13-resumed",
            Case::Zrtt => "zrtt-gateway",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Case::Http => "nginx, plain HTTP",
            Case::TlsFull => "nginx, TLS 1.3 full handshake",
            Case::TlsResumed => "nginx, TLS 1.3 resumed (ticket)",
            Case::Zrtt => "zrtt gateway (answered early) + nginx backend",
        }
    }

    fn port(self) -> u16 {
        match self {
            Case::Http => HTTP_PORT,
            Case::TlsFull => TLS_FULL_PORT,
            Case::TlsResumed => TLS_RESUMED_PORT,
            Case::Zrtt => GW_PORT,
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

fn fmt_range((lo, hi): (f64, f64)) -> String {
    if (hi - lo).abs() < 0.5 {
        format!("{lo:.0}")
    } else {
        format!("{lo:.0}-{hi:.0}")
    }
}

fn page_path(kb: usize) -> String {
    format!("{kb}k.html")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

// ---------------------------------------------------------------------------
// Pure helpers (unit-tested).

/// utime + stime (clock ticks) from the text of `/proc/<pid>/stat` or
/// `/proc/<pid>/task/<tid>/stat`. The command name may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_stat_cpu(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); utime and stime are
    // fields 14 and 15.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks of CPU `cpu` from `/proc/stat`: (busy, of which irq +
/// softirq). Busy is user + nice + system + irq + softirq + steal (not idle,
/// not iowait).
fn parse_core_busy(proc_stat: &str, cpu: usize) -> Option<(u64, u64)> {
    let name = format!("cpu{cpu}");
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 8 {
        return None;
    }
    Some((v[0] + v[1] + v[2] + v[5] + v[6] + v[7], v[5] + v[6]))
}

/// The gateway's admin page (`zrtt_gateway_<name> <value>` lines, possibly
/// after an HTTP head) as a map.
fn parse_metrics(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(' ')?;
            Some((
                k.strip_prefix("zrtt_gateway_")?.to_string(),
                v.trim().parse().ok()?,
            ))
        })
        .collect()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of a chunked body, which must be complete (ends with the 0 chunk).
fn dechunked_len(mut body: &[u8]) -> Result<usize, String> {
    let mut total = 0usize;
    loop {
        let eol = find(body, b"\r\n").ok_or("truncated chunk size")?;
        let line = std::str::from_utf8(&body[..eol]).map_err(|_| "bad chunk size")?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(hex, 16).map_err(|_| format!("bad chunk size {hex:?}"))?;
        body = &body[eol + 2..];
        if n == 0 {
            return Ok(total);
        }
        if body.len() < n + 2 || &body[n..n + 2] != b"\r\n" {
            return Err("truncated chunk".into());
        }
        total += n;
        body = &body[n + 2..];
    }
}

/// Checks one complete HTTP/1.x response (everything read until the server
/// closed): status 200 and a body of exactly `expect` bytes (by
/// Content-Length and by count, or chunked).
fn check_response(resp: &[u8], expect: usize) -> Result<(), String> {
    let end = find(resp, b"\r\n\r\n")
        .ok_or_else(|| format!("no complete response head in {} bytes", resp.len()))?;
    let head = std::str::from_utf8(&resp[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    if !status.starts_with("HTTP/1.") || status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("status line {status:?}"));
    }
    let (mut length, mut chunked) = (None, false);
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            length = Some(
                v.parse::<usize>()
                    .map_err(|_| format!("Content-Length {v:?}"))?,
            );
        } else if k.eq_ignore_ascii_case("transfer-encoding")
            && v.to_ascii_lowercase().contains("chunked")
        {
            chunked = true;
        }
    }
    let body = &resp[end + 4..];
    let got = if chunked {
        dechunked_len(body)?
    } else {
        if let Some(n) = length {
            if n != body.len() {
                return Err(format!("Content-Length {n} but {} body bytes", body.len()));
            }
        }
        body.len()
    };
    if got != expect {
        return Err(format!("body of {got} bytes, expected {expect}"));
    }
    Ok(())
}

/// Samples whose completion lies in `[from, to]`: (latencies in ms, how many
/// succeeded resumed, how many failed).
fn window(samples: &[Sample], from: Instant, to: Instant) -> (Vec<f64>, u64, u64) {
    let mut ok = Vec::new();
    let (mut resumed, mut failed) = (0, 0);
    for s in samples.iter().filter(|s| s.end >= from && s.end <= to) {
        match s.outcome {
            Outcome::Ok => ok.push(s.ms),
            Outcome::Resumed => {
                ok.push(s.ms);
                resumed += 1;
            }
            Outcome::Failed => failed += 1,
        }
    }
    (ok, resumed, failed)
}

// ---------------------------------------------------------------------------
// The load generator.

/// A TLS verifier for the lean client: the server must present exactly the
/// pinned certificate, and its handshake signature is verified; no chain.
#[derive(Debug)]
struct PinnedCert {
    cert: pki_types::CertificateDer<'static>,
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _server_name: &pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// TLS 1.3 only, ring, ALPN http/1.1, the pinned certificate; session
/// resumption (in-memory tickets) only when `resume`.
fn tls_config(
    cert: &pki_types::CertificateDer<'static>,
    resume: bool,
) -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinnedCert {
        cert: cert.clone(),
        algs: provider.signature_verification_algorithms,
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        cfg.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Arc::new(cfg))
}

/// A key record verified once, as a client holds it after a DNS lookup
/// (the load generator should not pay a signature check per connection).
struct Preverified(VerifiedKeyRecord);

impl KeySource for Preverified {
    fn lookup(&self, _host: &str, _now: UnixTime) -> Option<VerifiedKeyRecord> {
        Some(self.0.clone())
    }

    fn verify_retry(
        &self,
        _host: &str,
        _records: &[KeyRecord],
        _now: UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        None
    }
}

enum Client {
    Http,
    Tls {
        connector: tokio_rustls::TlsConnector,
        name: pki_types::ServerName<'static>,
    },
    Zrtt {
        cfg: Arc<ClientConfig>,
        target: Target,
    },
}

struct Job {
    client: Client,
    addr: SocketAddr,
    request: Vec<u8>,
    body_len: usize,
    /// The negotiated TLS cipher suite and group, from the first connection.
    tls_info: OnceLock<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Resumed,
    Failed,
}

struct Sample {
    end: Instant,
    ms: f64,
    outcome: Outcome,
}

/// Sends the request and reads until the server closes.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: &[u8],
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<(), String> {
    s.write_all(request)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    s.flush().await.map_err(|e| format!("sending: {e}"))?;
    loop {
        match s.read_buf(buf).await {
            Ok(0) => return Ok(()),
            Ok(_) if buf.len() > limit => return Err(format!("response over {limit} bytes")),
            Ok(_) => {}
            // A TLS peer that closes without close_notify: the response
            // check decides.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading: {e}")),
        }
    }
}

/// One request on a new connection; `Ok(true)` if TLS resumed a session.
async fn one(job: &Job) -> Result<bool, String> {
    let limit = job.body_len + 64 * 1024;
    let mut buf = Vec::with_capacity(job.body_len + 4096);
    let resumed = match &job.client {
        Client::Http => {
            let mut s = tokio::net::TcpStream::connect(job.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = s.set_nodelay(true);
            exchange(&mut s, &job.request, &mut buf, limit).await?;
            false
        }
        Client::Tls { connector, name } => {
            let tcp = tokio::net::TcpStream::connect(job.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let mut s = connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            exchange(&mut s, &job.request, &mut buf, limit).await?;
            let conn = s.get_ref().1;
            if job.tls_info.get().is_none() {
                let suite = conn
                    .negotiated_cipher_suite()
                    .map(|c| format!("{:?}", c.suite()))
                    .unwrap_or_default();
                let group = conn
                    .negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name()))
                    .unwrap_or_default();
                let _ = job.tls_info.set(format!("{suite}, {group}"));
            }
            conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
        }
        Client::Zrtt { cfg, target } => {
            let mut s = ZrttStream::new(cfg.clone(), target.clone());
            exchange(&mut s, &job.request, &mut buf, limit).await?;
            false
        }
    };
    check_response(&buf, job.body_len)?;
    Ok(resumed)
}

async fn worker(job: Arc<Job>, stop: tokio::time::Instant) -> (Vec<Sample>, Vec<String>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    while tokio::time::Instant::now() < stop {
        let t0 = Instant::now();
        let r = tokio::time::timeout(REQUEST_TIMEOUT, one(&job)).await;
        let end = Instant::now();
        let outcome = match r {
            Ok(Ok(true)) => Outcome::Resumed,
            Ok(Ok(false)) => Outcome::Ok,
            Ok(Err(e)) => {
                if errors.len() < MAX_ERROR_EXAMPLES {
                    errors.push(e);
                }
                Outcome::Failed
            }
            Err(_) => {
                if errors.len() < MAX_ERROR_EXAMPLES {
                    errors.push(format!("no complete response within {REQUEST_TIMEOUT:?}"));
                }
                Outcome::Failed
            }
        };
        samples.push(Sample {
            end,
            ms: (end - t0).as_secs_f64() * 1000.0,
            outcome,
        });
        if outcome == Outcome::Failed {
            // Do not spin on a refused port.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    (samples, errors)
}

/// CPU counters at one moment, in clock ticks.
struct Snapshot {
    at: Instant,
    /// Per server process, in the order given.
    pids: Vec<u64>,
    /// The generator thread itself.
    me: u64,
    /// CPU 0 and CPU 1: busy time (everything that ran there), and irq +
    /// softirq time (loopback packet processing).
    cores: [(u64, u64); 2],
}

impl Snapshot {
    /// Must run on the generator thread (reads `/proc/thread-self`).
    fn take(pids: &[u32]) -> Result<Snapshot> {
        let mut v = Vec::with_capacity(pids.len());
        for pid in pids {
            let path = format!("/proc/{pid}/stat");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {path} (server gone?)"))?;
            v.push(parse_stat_cpu(&text).with_context(|| format!("parsing {path}"))?);
        }
        let me = parse_stat_cpu(&std::fs::read_to_string("/proc/thread-self/stat")?)
            .context("parsing /proc/thread-self/stat")?;
        let stat = std::fs::read_to_string("/proc/stat")?;
        let core = |c| parse_core_busy(&stat, c).unwrap_or((0, 0));
        Ok(Snapshot {
            at: Instant::now(),
            pids: v,
            me,
            cores: [core(SERVER_CPU), core(CLIENT_CPU)],
        })
    }
}

/// What the generator measured in one cell's window.
struct GenOut {
    window_s: f64,
    latencies_ms: Vec<f64>,
    resumed: u64,
    failed: u64,
    /// Requests completed (or failed) over the whole run, warm-up included.
    total: usize,
    errors: Vec<String>,
    /// CPU ticks per server process over the window.
    server_ticks: Vec<u64>,
    client_ticks: u64,
    /// Busy ticks of CPU 0 and CPU 1, and CPU 0's irq + softirq ticks.
    core_ticks: [u64; 3],
    tls_info: Option<String>,
}

/// Pins the calling thread to `cpu` (`taskset -p` on its thread id; the
/// crate has no `unsafe`) and returns its allowed-CPU list.
fn pin_this_thread(cpu: usize) -> Result<String> {
    let link = std::fs::read_link("/proc/thread-self")?;
    let tid = link
        .file_name()
        .and_then(|t| t.to_str())
        .context("no thread id in /proc/thread-self")?
        .to_string();
    let mut c = Command::new("taskset");
    c.args(["-p", "-c", &cpu.to_string(), &tid])
        .stdout(Stdio::null());
    stack::run_capture(c).context("pinning the load generator")?;
    cpus_allowed("/proc/thread-self/status")
}

fn cpus_allowed(status_path: &str) -> Result<String> {
    let s = std::fs::read_to_string(status_path)?;
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("no Cpus_allowed_list in {status_path}"))
}

/// Runs on a thread inside the lab host: pins itself, drives `concurrency`
/// connection loops for `warmup + measure`, and snapshots CPU counters at
/// the window's edges.
fn generate(
    job: Job,
    concurrency: usize,
    warmup: Duration,
    measure: Duration,
    pids: Vec<u32>,
) -> Result<GenOut> {
    let client_cpus = pin_this_thread(CLIENT_CPU)?;
    if client_cpus != CLIENT_CPU.to_string() {
        bail!("load generator thread allowed on CPUs {client_cpus}, not {CLIENT_CPU}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let job = Arc::new(job);
        let start = tokio::time::Instant::now();
        let (from, to) = (start + warmup, start + warmup + measure);
        let workers: Vec<_> = (0..concurrency)
            .map(|_| tokio::spawn(worker(job.clone(), to)))
            .collect();
        tokio::time::sleep_until(from).await;
        let a = Snapshot::take(&pids)?;
        tokio::time::sleep_until(to).await;
        let b = Snapshot::take(&pids)?;
        let mut samples = Vec::new();
        let mut errors = Vec::new();
        for w in workers {
            let (s, e) = w.await.context("load generator task")?;
            samples.extend(s);
            for m in e {
                if errors.len() < MAX_ERROR_EXAMPLES && !errors.contains(&m) {
                    errors.push(m);
                }
            }
        }
        let (latencies_ms, resumed, failed) = window(&samples, a.at, b.at);
        Ok(GenOut {
            window_s: (b.at - a.at).as_secs_f64(),
            latencies_ms,
            resumed,
            failed,
            total: samples.len(),
            errors,
            server_ticks: b.pids.iter().zip(&a.pids).map(|(y, x)| y - x).collect(),
            client_ticks: b.me - a.me,
            core_ticks: [
                b.cores[0].0 - a.cores[0].0,
                b.cores[1].0 - a.cores[1].0,
                b.cores[0].1 - a.cores[0].1,
            ],
            tls_info: job.tls_info.get().cloned(),
        })
    })
}

// ---------------------------------------------------------------------------
// Servers.

/// `taskset -c <cpu> <program>` inside the lab host (taskset execs the
/// program, so the child's PID is the server's).
fn pinned(lab: &Lab, cpu: usize, program: impl AsRef<std::ffi::OsStr>) -> Result<Command> {
    let mut c = lab.command(HOST, "taskset")?;
    c.args(["-c", &cpu.to_string()]).arg(program);
    Ok(c)
}

fn spawn_nginx(lab: &Lab, site: &Site, nginx: &Nginx) -> Result<LabChild> {
    let prefix = site.dir.join("nginx");
    std::fs::create_dir_all(&prefix)?;
    let conf = prefix.join("nginx.conf");
    std::fs::write(&conf, nginx.conf(site, &prefix))?;
    let mut c = pinned(lab, SERVER_CPU, "nginx")?;
    c.arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(prefix.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    lab.spawn(HOST, c)
}

fn spawn_gateway(lab: &Lab, site: &Site, dir: &Path) -> Result<LabChild> {
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(dir.join("gateway.log"))?;
    let mut c = pinned(lab, SERVER_CPU, exe)?;
    c.args([
        "gateway",
        "--listen",
        &loopback(GW_PORT).to_string(),
        "--backend",
        &loopback(HTTP_PORT).to_string(),
        "--trust",
        "127.0.0.1/32",
        "--admin",
        &loopback(ADMIN_PORT).to_string(),
        "--keystore",
    ])
    .arg(&site.keystore)
    .stdout(Stdio::null())
    .stderr(log);
    lab.spawn(HOST, c)
}

/// Fails unless `pid` runs `comm` and is allowed on `SERVER_CPU` only.
fn check_server(pid: u32, comm: &str) -> Result<()> {
    let got = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if got.trim() != comm {
        bail!(
            "pid {pid} runs {:?}, expected {comm} (did it exit?)",
            got.trim()
        );
    }
    let cpus = cpus_allowed(&format!("/proc/{pid}/status"))?;
    if cpus != SERVER_CPU.to_string() {
        bail!("{comm} (pid {pid}) is allowed on CPUs {cpus}, not {SERVER_CPU}");
    }
    Ok(())
}

/// The gateway's counters, read from its admin port inside the lab host.
fn scrape_metrics(lab: &Lab) -> Result<BTreeMap<String, u64>> {
    let text = lab.in_host(HOST, || -> std::io::Result<String> {
        let mut s =
            std::net::TcpStream::connect_timeout(&loopback(ADMIN_PORT), Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })??;
    Ok(parse_metrics(&text))
}

/// Clock ticks per second for `/proc` CPU times.
fn clk_tck() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

// ---------------------------------------------------------------------------
// The scenario.

/// One (size, case) measurement.
struct Cell {
    case: Case,
    kb: usize,
    /// Why the cell produced nothing, if so.
    failure: Option<String>,
    ok: u64,
    resumed: u64,
    failed: u64,
    window_s: f64,
    latency: Summary,
    /// The case's own server: nginx, or the gateway alone.
    server_us: f64,
    /// Gateway + its nginx backend (zrtt only).
    with_backend_us: Option<f64>,
    /// Share of one core used by every server process of the case.
    server_busy: f64,
    /// Share of one core used by the load generator thread.
    loadgen_busy: f64,
    /// Everything that ran on CPU 0 / CPU 1, per request (µs).
    core_us: [f64; 2],
    /// CPU 0's irq + softirq time per request (µs): mostly loopback receive
    /// processing of the packets the servers send.
    cpu0_softirq_us: f64,
    /// Share of CPU 0 busy with anything.
    cpu0_busy: f64,
    total: usize,
    errors: Vec<String>,
    tls_info: Option<String>,
    gateway: Option<BTreeMap<String, u64>>,
}

impl Cell {
    fn failed(case: Case, kb: usize, why: String) -> Cell {
        Cell {
            case,
            kb,
            failure: Some(why),
            ok: 0,
            resumed: 0,
            failed: 0,
            window_s: 0.0,
            latency: Summary::of(&[]),
            server_us: f64::NAN,
            with_backend_us: None,
            server_busy: f64::NAN,
            loadgen_busy: f64::NAN,
            core_us: [f64::NAN; 2],
            cpu0_softirq_us: f64::NAN,
            cpu0_busy: f64::NAN,
            total: 0,
            errors: Vec::new(),
            tls_info: None,
            gateway: None,
        }
    }

    fn rps(&self) -> f64 {
        if self.window_s > 0.0 {
            self.ok as f64 / self.window_s
        } else {
            f64::NAN
        }
    }

    fn usable(&self) -> bool {
        self.failure.is_none() && self.ok > 0
    }
}

fn build_cell(
    case: Case,
    kb: usize,
    g: GenOut,
    tck: u64,
    gateway: Option<BTreeMap<String, u64>>,
) -> Cell {
    let us = |ticks: u64| ticks as f64 * 1e6 / tck as f64;
    let ok = g.latencies_ms.len() as u64;
    let per = |ticks: u64| {
        if ok > 0 {
            us(ticks) / ok as f64
        } else {
            f64::NAN
        }
    };
    // server_ticks: [nginx, gateway].
    let (nginx, gw) = (g.server_ticks[0], g.server_ticks[1]);
    let (own, all) = match case {
        Case::Zrtt => (gw, gw + nginx),
        _ => (nginx, nginx),
    };
    let busy = |ticks: u64| {
        if g.window_s > 0.0 {
            us(ticks) / 1e6 / g.window_s
        } else {
            f64::NAN
        }
    };
    Cell {
        case,
        kb,
        failure: None,
        ok,
        resumed: g.resumed,
        failed: g.failed,
        window_s: g.window_s,
        latency: Summary::of(&g.latencies_ms),
        server_us: per(own),
        with_backend_us: (case == Case::Zrtt).then(|| per(all)),
        server_busy: busy(all),
        loadgen_busy: busy(g.client_ticks),
        core_us: [per(g.core_ticks[0]), per(g.core_ticks[1])],
        cpu0_softirq_us: per(g.core_ticks[2]),
        cpu0_busy: busy(g.core_ticks[0]),
        total: g.total,
        errors: g.errors,
        tls_info: g.tls_info,
        gateway,
    }
}

pub fn run(o: ThroughputOpts) -> Result<Report> {
    if o.sizes_kb.is_empty() || o.sizes_kb.contains(&0) {
        bail!("need at least one response size, each at least 1 KB");
    }
    if !o.seconds.is_finite() || o.seconds <= 0.0 || o.concurrency == 0 {
        bail!("need a positive duration and at least one connection in flight");
    }
    stack::require_tools(&["nginx", "taskset", "getconf"])?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        bail!("throughput pins the servers to CPU 0 and the load to CPU 1: needs 2 cores, have {cores}");
    }
    let tck = clk_tck();
    let measure = Duration::from_secs_f64(o.seconds);
    let warmup = Duration::from_secs_f64((o.seconds / 4.0).clamp(0.5, 2.0));

    let work = stack::WorkDir::new("throughput", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(&dir, NAME)?;
    for &kb in &o.sizes_kb {
        site.page(&page_path(kb), kb * 1024)?;
    }
    // One host, no WAN traffic: the hub idles, and needs no real-time priority.
    let lab = Lab::up(Topology::new().host(HOST).realtime_priority(None))?;
    let mut children = Children::default();
    // ~10k connections/s for a minute: widen the ephemeral range; let
    // connects reuse TIME_WAIT ports.
    stack::sysctl(&lab, &[HOST], "net.ipv4.ip_local_port_range", "1024 65535")?;
    stack::sysctl(&lab, &[HOST], "net.ipv4.tcp_tw_reuse", "1")?;
    let tls = |resumption| {
        Some(NginxTls {
            protocols: "TLSv1.3",
            resumption,
            early_data: false,
        })
    };
    let server = |port, tls| NginxServer {
        listen: loopback(port),
        tls,
        fast_open: false,
    };
    // Keep-alive stays on so that the gateway's backend connections are
    // pooled; clients send `Connection: close`, so each of their requests
    // gets its own connection.
    let nginx = Nginx {
        servers: vec![
            server(HTTP_PORT, None),
            server(TLS_FULL_PORT, tls(false)),
            server(TLS_RESUMED_PORT, tls(true)),
        ],
        keepalive_requests: 100_000,
    };
    let ngx = spawn_nginx(&lab, &site, &nginx)?;
    let nginx_pid = ngx.pid();
    children.0.push(ngx);
    let gw = spawn_gateway(&lab, &site, &dir)?;
    let gw_pid = gw.pid();
    children.0.push(gw);
    let started = Instant::now();
    for port in [
        HTTP_PORT,
        TLS_FULL_PORT,
        TLS_RESUMED_PORT,
        GW_PORT,
        ADMIN_PORT,
    ] {
        stack::wait_listening(&lab, HOST, loopback(port))?;
    }
    check_server(nginx_pid, "nginx")?;
    let exe_name = std::env::current_exe()?
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect::<String>())
        .unwrap_or_default();
    check_server(gw_pid, &exe_name)?;
    stack::settle_gateways(started);

    let cert = crate::util::load_cert(&site.cert)?;
    let records = crate::keys::load_records(&site.records)?;
    let record = CertKeySource::new(cert.to_vec(), records)
        .lookup(NAME, crate::util::now())
        .context("the site's key record does not verify")?;
    let mut zcfg = ClientConfig::builder(Arc::new(Preverified(record)))
        .with_tls_config(tls_config(&cert, false)?);
    // zrtt or an error: a silent TLS fallback would measure something else.
    zcfg.tls_fallback = false;
    let zcfg = Arc::new(zcfg);
    let name = pki_types::ServerName::try_from(NAME)?.to_owned();

    let mut cells = Vec::new();
    let mut progress = Progress::new("throughput", o.sizes_kb.len() * CASES.len());
    for &kb in &o.sizes_kb {
        for case in CASES {
            progress.tick(&format!("{kb} KB {}", case.id()));
            let client = match case {
                Case::Http => Client::Http,
                Case::TlsFull | Case::TlsResumed => Client::Tls {
                    // A fresh session cache per cell: the warm-up fills it.
                    connector: tokio_rustls::TlsConnector::from(tls_config(
                        &cert,
                        case == Case::TlsResumed,
                    )?),
                    name: name.clone(),
                },
                Case::Zrtt => Client::Zrtt {
                    cfg: zcfg.clone(),
                    target: Target {
                        host: NAME.into(),
                        addr: loopback(GW_PORT),
                    },
                },
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
            let before = (case == Case::Zrtt).then(|| scrape_metrics(&lab));
            let conc = o.concurrency;
            let pids = vec![nginx_pid, gw_pid];
            let out = lab
                .spawn_in_host(HOST, move || generate(job, conc, warmup, measure, pids))
                .and_then(|t| t.join());
            let gateway = match (before, case) {
                (Some(Ok(b)), Case::Zrtt) => scrape_metrics(&lab).ok().map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.clone(), v.saturating_sub(b.get(k).copied().unwrap_or(0))))
                        .collect()
                }),
                _ => None,
            };
            let cell = match out {
                Ok(g) => build_cell(case, kb, g, tck, gateway),
                Err(e) => Cell::failed(case, kb, format!("{e:#}")),
            };
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
            cells.push(cell);
        }
    }
    drop(children);
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
    Ok(report(&o, &cells, tck, warmup))
}

// ---------------------------------------------------------------------------
// The report.

fn num(x: f64, decimals: usize) -> String {
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

fn cell(cells: &[Cell], case: Case, kb: usize) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.case == case && c.kb == kb && c.usable())
}

fn report(o: &ThroughputOpts, cells: &[Cell], tck: u64, warmup: Duration) -> Report {
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
    r.setup = super::machine_lines();
    r.setup.push(format!(
        "One lab namespace, loopback only (no hub). Servers pinned to CPU {SERVER_CPU} (`taskset -c {SERVER_CPU}`), the load generator (one thread, tokio current-thread) pinned to CPU {CLIENT_CPU}."
    ));
    r.setup.push(format!(
        "Per cell: {:.1} s warm-up, then {:.1} s measured; {} connections in flight; one new TCP connection per request (`Connection: close`, the server closes); responses of {} KB (1 KB = 1024 bytes). Every response is checked: status 200 and the exact body length; failures are counted, never as successes.",
        warmup.as_secs_f64(),
        o.seconds,
        o.concurrency,
        sizes
    ));
    r.setup.push(format!(
        "Server CPU per request: utime+stime of the server processes from `/proc/<pid>/stat` (CLK_TCK {tck}) over the measured window, divided by the requests completed in it. Latency: connect to the server's close, per request."
    ));
    let tls_info = cells
        .iter()
        .find_map(|c| c.tls_info.clone())
        .unwrap_or_else(|| "not observed".into());
    r.setup.push(format!(
        "nginx: one worker, no master process, TLS 1.3 only, ECDSA P-256 certificate (negotiated: {tls_info}); full handshakes: session tickets and cache off, client resumption off; resumed: tickets on, the client (rustls, in-memory cache) resumes (PSK with DHE)."
    ));
    r.setup.push(format!(
        "zrtt: `zrtt gateway --trust 127.0.0.1/32` (proven address: answered before the TCP handshake completes), the request in the SYN (Fast Open, no cookie), backend nginx plain HTTP on 127.0.0.1:{HTTP_PORT} over pooled keep-alive connections, everything else at the gateway's defaults."
    ));
    r.setup.push("Load generator: a lean client. TLS: rustls 0.23 (ring) pinning the server's certificate and verifying its handshake signature, no chain. zrtt: the `zrtt get` client with the key record verified once (as after a DNS lookup), no TLS fallback.".into());
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab throughput --sizes {sizes} --seconds {} --concurrency {}`.",
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
    let reference: Vec<Value> = CASES
        .iter()
        .filter(|&&c| c != Case::Zrtt)
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
            "server_core_busy": jnum(c.server_busy), "loadgen_core_busy": jnum(c.loadgen_busy),
            "cpu0_busy": jnum(c.cpu0_busy),
            "cpu0_all_us_per_request": jnum(c.core_us[0]), "cpu1_all_us_per_request": jnum(c.core_us[1]),
            "cpu0_irq_softirq_us_per_request": jnum(c.cpu0_softirq_us),
            "errors": c.errors, "tls": c.tls_info, "gateway_counters": c.gateway,
        })).collect::<Vec<_>>(),
    });
    r
}

/// The honest reading, from the numbers.
fn notes(o: &ThroughputOpts, cells: &[Cell]) -> Vec<String> {
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
        let verdict = if all >= 2.5 {
            "is reproduced"
        } else if alone >= 2.5 {
            "is reproduced only if the backend's cost is left out"
        } else if alone > 1.1 {
            "is not reproduced: zrtt is cheaper per new connection, but by far less"
        } else {
            "is not reproduced: the zrtt gateway costs about as much CPU per new connection as nginx TLS 1.3, or more"
        };
        n.push(format!(
            "HTTPCrypt's claim (about 3.3x nginx TLS's new encrypted requests/s, 1 KB) {verdict}: per second of server CPU the gateway alone serves {alone:.2}x, gateway + backend {all:.2}x the requests of nginx TLS 1.3 with full handshakes (req/s ratios are in the tables; they also depend on the load generator)."
        ));
    }
    if let (Some(first), Some(last)) = (ratios.first(), ratios.last()) {
        let backend = ratios
            .iter()
            .map(|r| format!("{:.0} µs at {} KB", r.3, r.0))
            .collect::<Vec<_>>()
            .join(", ");
        n.push(format!(
            "What the gateway pays that nginx TLS does not: it is a reverse proxy. Every request crosses hyper's HTTP/1 server inside the channel, hyper's client, and a second loopback TCP exchange with nginx (a pooled keep-alive connection), where nginx TLS serves the file itself. The backend nginx's own share ({backend}) is in the 'incl. backend' column, the fair comparison for a deployment; the gateway's 'server µs' alone is what HTTPCrypt-style numbers (a server without a proxy hop) would compare with."
        ));
        let trend = if ratios.len() > 1 {
            format!(
                " The gap narrows with response size (gateway + backend ÷ TLS full: {:.2} at {} KB, {:.2} at {} KB): the bulk transfer, encrypted once either way and copied once more through the proxy hop, outweighs the handshake.",
                first.2, first.0, last.2, last.0
            )
        } else {
            String::new()
        };
        n.push(format!(
            "Where a difference comes from: not from lighter cryptography. zrtt's answer costs three X25519 operations (curve25519-dalek through snow: ephemeral keygen, es, ee) plus AEAD; a TLS 1.3 full handshake costs one X25519 keygen + DH and one ECDSA P-256 signature (15-17 µs) plus the certificate. On the same gateway, TLS 1.3 (rustls) cost about as much as zrtt per connection (docs/GATEWAY.md: 375 vs 424 µs), so a gateway advantage over nginx here is an implementation difference (ring and tokio in one process against OpenSSL's handshake machinery in nginx), not the protocol's.{trend} zrtt's gain is round trips on first contact (`zrtt lab ladder`), not server CPU."
        ));
    }
    n.push(format!(
        "Latency here is load, not round trips: with {} connections always in flight on loopback, p50 ≈ connections ÷ req/s (Little's law), so the latency columns mirror throughput. Round trips to the first byte are `zrtt lab ladder`'s subject.",
        o.concurrency
    ));
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
            "TLS 1.3 resumption saved nginx {} of the full handshake's CPU (reference: 10-17%). A TLS 1.3 resumption (PSK with DHE, what rustls offers) still does the X25519 exchange; it skips the certificate and the ECDSA signature, a small part of the total.",
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
    for c in cells.iter().filter(|c| c.case == Case::Zrtt && c.usable()) {
        if let Some(g) = &c.gateway {
            let get = |k: &str| g.get(k).copied().unwrap_or(0);
            let acc = get("zrtt_accepted").max(1) as f64;
            n.push(format!(
                "Gateway counters, {} KB cell (warm-up included): {} flights accepted, {:.1}% answered early ({:.1}% while the socket was still SYN_RECV: on loopback the client's ACK usually lands before the flight is decrypted), {} gated, {} forced to gating by soft limits, {} busy, {} TLS connections.",
                c.kb,
                get("zrtt_accepted"),
                get("zrtt_answered_early") as f64 * 100.0 / acc,
                get("zrtt_answered_in_syn_recv") as f64 * 100.0 / acc,
                get("zrtt_answered_gated"),
                get("zrtt_forced_gating"),
                get("zrtt_busy"),
                get("tls_connections"),
            ));
        }
    }
    let bound: Vec<String> = cells
        .iter()
        .filter(|c| c.usable() && c.loadgen_busy > 0.9 && c.cpu0_busy < 0.9)
        .map(|c| format!("{} KB {}", c.kb, c.case.id()))
        .collect();
    if !bound.is_empty() {
        n.push(format!(
            "Load-generator-bound cells (its thread above 90% of CPU {CLIENT_CPU}, CPU {SERVER_CPU} below 90%): {}. Their req/s measure the client, not the server; compare server µs per request (requests per server core-second = 10^6 ÷ µs).",
            bound.join(", ")
        ));
    }
    let idle: Vec<String> = cells
        .iter()
        .filter(|c| c.usable() && c.loadgen_busy <= 0.9 && c.cpu0_busy < 0.9)
        .map(|c| format!("{} KB {}", c.kb, c.case.id()))
        .collect();
    if !idle.is_empty() {
        n.push(format!(
            "Neither core saturated in: {}; other processes on the machine (or wake-up latency) held the load back there, so req/s understates capacity; server µs per request still holds.",
            idle.join(", ")
        ));
    }
    let soft: Vec<String> = cells
        .iter()
        .filter(|c| c.usable())
        .map(|c| format!("{:.0} µs at {} KB {}", c.cpu0_softirq_us, c.kb, c.case.id()))
        .collect();
    n.push(format!(
        "Server µs are per process (utime + stime of nginx, the gateway); they leave out interrupt and softirq time, where the kernel runs loopback delivery: a sender's CPU processes the receiver's side of each packet, so the responses' receive path runs on CPU {SERVER_CPU} and the requests' on CPU {CLIENT_CPU}. CPU {SERVER_CPU}'s irq + softirq per request: {}. Same rule for nginx and the gateway; the JSON has every core figure.",
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
            "CPU {SERVER_CPU} also ran other processes or kernel threads during: {}. The machine was shared; per-process server CPU is little affected, req/s and latency are.",
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
    n.push("Reference: Debian nginx 1.22.1 + OpenSSL 3.0 on another 2-core VM, one worker pinned to one core, load from the other (`../shared/reference/baselines.md`); absolute µs differ between machines, ratios travel better. HTTPCrypt's figure: wrk with 10 connections, keep-alive off, loopback, one core.".into());
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_counts_fields_after_the_name() {
        // Field 14 (utime) = 1500, field 15 (stime) = 250; the name holds
        // spaces and a parenthesis.
        let s = "4242 (ngi nx) (x)) S 1 4242 4242 0 -1 4194624 100 0 0 0 1500 250 0 0 20 0 1 0 123 456 789";
        assert_eq!(parse_stat_cpu(s), Some(1750));
        assert_eq!(parse_stat_cpu("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat_cpu("garbage"), None);
        // The real thing parses.
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_cpu(&me).is_some(), "{me}");
    }

    #[test]
    fn core_busy_excludes_idle_and_iowait() {
        let s = "cpu  10 10 10 10 10 10 10 10 0 0\ncpu0 1 2 3 1000 500 4 5 6 0 0\ncpu1 7 0 0 9 0 0 0 0 0 0\n";
        assert_eq!(parse_core_busy(s, 0), Some((1 + 2 + 3 + 4 + 5 + 6, 4 + 5)));
        assert_eq!(parse_core_busy(s, 1), Some((7, 0)));
        assert_eq!(parse_core_busy(s, 2), None);
        assert_eq!(parse_core_busy("cpu0 1 2\n", 0), None);
    }

    #[test]
    fn responses_are_checked_exactly() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
        assert_eq!(check_response(ok, 5), Ok(()));
        assert!(check_response(ok, 4).is_err());
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhell";
        assert!(check_response(short, 5)
            .unwrap_err()
            .contains("Content-Length 5"));
        let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nhello";
        assert!(check_response(not_found, 5).unwrap_err().contains("404"));
        assert!(check_response(b"HTTP/1.1 200 OK\r\nContent-Le", 5).is_err());
        assert!(check_response(b"", 0).is_err());
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n";
        assert_eq!(check_response(chunked, 5), Ok(()));
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nl";
        assert!(check_response(cut, 5).is_err());
        // Without a length the body runs to the close.
        assert_eq!(check_response(b"HTTP/1.0 200 OK\r\n\r\nabc", 3), Ok(()));
    }

    #[test]
    fn metrics_parse() {
        let m = parse_metrics(
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nzrtt_gateway_requests 12\nzrtt_gateway_tls_connections 0\nother 3\n",
        );
        assert_eq!(m.get("requests"), Some(&12));
        assert_eq!(m.get("tls_connections"), Some(&0));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn window_counts_only_completions_inside() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let s = |ms, outcome| Sample {
            end: at(ms),
            ms: ms as f64,
            outcome,
        };
        let samples = [
            s(5, Outcome::Ok),
            s(10, Outcome::Ok),
            s(15, Outcome::Resumed),
            s(16, Outcome::Failed),
            s(20, Outcome::Ok),
            s(25, Outcome::Failed),
        ];
        let (ok, resumed, failed) = window(&samples, at(10), at(20));
        assert_eq!(ok, vec![10.0, 15.0, 20.0]);
        assert_eq!((resumed, failed), (1, 1));
    }

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
