//! The load generator: one thread pinned to the client's CPU, a tokio
//! current-thread runtime, N connection loops each opening a new
//! connection per request (plain TCP, TLS 1.3 with rustls, or zrtt), every
//! response checked, and CPU snapshots at the measured window's edges.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zrtt_net::client::{ClientConfig, KeySource, Target, ZrttStream};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

use super::cpu::{pin_this_thread, Snapshot};
use super::{CLIENT_CPU, MAX_ERROR_EXAMPLES, REQUEST_TIMEOUT};

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
pub(super) fn tls_config(
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
pub(super) struct Preverified(pub(super) VerifiedKeyRecord);

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

pub(super) enum Client {
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

pub(super) struct Job {
    pub(super) client: Client,
    pub(super) addr: SocketAddr,
    pub(super) request: Vec<u8>,
    pub(super) body_len: usize,
    /// The negotiated TLS cipher suite and group, from the first connection.
    pub(super) tls_info: OnceLock<String>,
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

/// One request on a new connection; `Ok(true)` if it resumed (a TLS
/// session, a zrtt ticket).
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
            // A zrtt connection that resumed a ticket.
            let info = s.info();
            let resumed = info
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .is_some_and(|i| i.resumed);
            resumed
        }
    };
    check_response(&buf, job.body_len)?;
    Ok(resumed)
}

/// Start times shared by the workers of a fixed-rate cell: the `k`-th
/// connection starts at `start + k / rate` (open loop: a late start does
/// not push the next ones back, so the offered rate holds while there are
/// workers free).
pub(super) struct Pace {
    start: tokio::time::Instant,
    interval: Duration,
    next: std::sync::atomic::AtomicU32,
}

impl Pace {
    fn new(start: tokio::time::Instant, rate: f64) -> Pace {
        Pace {
            start,
            interval: Duration::from_secs_f64(1.0 / rate),
            next: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The next start time.
    fn slot(&self) -> tokio::time::Instant {
        let k = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.start + self.interval * k
    }
}

async fn worker(
    job: Arc<Job>,
    stop: tokio::time::Instant,
    pace: Option<Arc<Pace>>,
) -> (Vec<Sample>, Vec<String>) {
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    while tokio::time::Instant::now() < stop {
        if let Some(p) = &pace {
            let at = p.slot();
            if at >= stop {
                break;
            }
            tokio::time::sleep_until(at).await;
        }
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

/// What the generator measured in one cell's window.
pub(super) struct GenOut {
    pub(super) window_s: f64,
    pub(super) latencies_ms: Vec<f64>,
    pub(super) resumed: u64,
    pub(super) failed: u64,
    /// Requests completed (or failed) over the whole run, warm-up included.
    pub(super) total: usize,
    pub(super) errors: Vec<String>,
    /// CPU ticks per server process over the window.
    pub(super) server_ticks: Vec<u64>,
    pub(super) client_ticks: u64,
    /// Busy ticks of CPU 0 and CPU 1, and CPU 0's irq + softirq ticks.
    pub(super) core_ticks: [u64; 3],
    pub(super) tls_info: Option<String>,
}

/// Runs on a thread inside the lab host: pins itself, drives `concurrency`
/// connection loops for `warmup + measure` (as fast as they go, or
/// starting `rate` connections per second between them), and snapshots CPU
/// counters at the window's edges.
pub(super) fn generate(
    job: Job,
    concurrency: usize,
    rate: Option<f64>,
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
        let pace = rate.map(|r| Arc::new(Pace::new(start, r)));
        let workers: Vec<_> = (0..concurrency)
            .map(|_| tokio::spawn(worker(job.clone(), to, pace.clone())))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
