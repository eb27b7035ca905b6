//! The soak's events, on schedule from a thread in the client host:
//!
//! - **key rotation** every period: `zrtt keys rotate --keystore DIR` as a
//!   process (the store's rotation period is shorter than the soak's, so
//!   each run makes exactly one new key), then SIGHUP to the gateway (by
//!   PID); a probe connection that holds only the new key must then be
//!   answered over zrtt without a refusal, which proves the gateway serves
//!   it; then the clients' view (their "DNS") switches to the new records;
//! - **certificate replacement** half a period later: a new certificate and
//!   key (made at the start by `zrtt keys cert`, another test CA each) are
//!   written over the store's `cert.pem` and `cert.key` (atomic renames),
//!   `zrtt keys rotate` re-signs the key records with them, SIGHUP; a TLS
//!   probe must see the new certificate and a zrtt probe the re-signed
//!   record, then the view switches;
//! - **token keys** rotate by themselves: the gateway runs with
//!   `--token-rotation` equal to the period, so a new sealing key is due at
//!   each multiple of the period (Unix time) and taken at the next re-read
//!   (SIGHUP or `--refresh`); each event notes the key ids of the tokens
//!   the kept clients hold and the store's token key epochs.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use zrtt_net::client::{system_clock, ClientConfig};

use super::view::{OneKey, Published, View};
use crate::faults::load::{request, Attempts};
use crate::proc::run_capture;

/// Longest wait for the gateway to serve what an event changed.
const PROBE_BOUND: Duration = Duration::from_secs(10);
const PROBE_PAUSE: Duration = Duration::from_millis(20);
/// A probe's wait for the zrtt answer.
const PROBE_REPLY: Duration = Duration::from_millis(500);

pub(super) struct Spec {
    pub(super) zrtt: PathBuf,
    pub(super) ks: PathBuf,
    /// Replacement certificates (`cert.pem`, `cert.key`), in order.
    pub(super) certs: Vec<PathBuf>,
    pub(super) gateway_pid: u32,
    pub(super) view: Arc<View>,
    pub(super) kept: Vec<Arc<ClientConfig>>,
    pub(super) tls: Arc<rustls::ClientConfig>,
    pub(super) attempts: Attempts,
    pub(super) client_ip: IpAddr,
    pub(super) t0: Instant,
    pub(super) period: Duration,
    pub(super) duration: Duration,
    pub(super) stop: Arc<AtomicBool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    KeyRotation,
    CertReplacement,
}

impl Kind {
    pub(super) fn id(self) -> &'static str {
        match self {
            Kind::KeyRotation => "key-rotation",
            Kind::CertReplacement => "cert-replacement",
        }
    }
}

/// One event and what showed it took effect.
#[derive(Debug)]
pub(super) struct Event {
    pub(super) kind: Kind,
    pub(super) at_s: f64,
    pub(super) key_before: u32,
    pub(super) key_after: u32,
    /// Served: the probes saw the change within [`PROBE_BOUND`].
    pub(super) served: bool,
    /// From the SIGHUP to the probe that saw it, milliseconds.
    pub(super) served_ms: Option<f64>,
    /// Token key ids in the kept clients' tokens after the event.
    pub(super) token_ids: Vec<u32>,
    /// The store's token key epochs after the event.
    pub(super) token_epochs: Vec<u64>,
    pub(super) error: Option<String>,
}

impl Event {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "kind": self.kind.id(), "at_s": (self.at_s * 1000.0).round() / 1000.0,
            "key_before": format!("{:08x}", self.key_before),
            "key_after": format!("{:08x}", self.key_after),
            "served": self.served, "served_ms": self.served_ms,
            "token_ids": self.token_ids.iter().map(|i| format!("{i:08x}")).collect::<Vec<_>>(),
            "token_epochs": self.token_epochs, "error": self.error,
        })
    }
}

/// When each event is due, seconds from the start: key rotations at every
/// whole period, certificate replacements half a period after each
/// (the first at half a period), before `duration`.
pub(super) fn schedule(period: Duration, duration: Duration) -> Vec<(f64, Kind)> {
    let (p, d) = (period.as_secs_f64(), duration.as_secs_f64());
    let mut out = Vec::new();
    let mut k = 0.0;
    while k * p + p / 2.0 < d {
        out.push((k * p + p / 2.0, Kind::CertReplacement));
        if (k + 1.0) * p < d {
            out.push(((k + 1.0) * p, Kind::KeyRotation));
        }
        k += 1.0;
    }
    out
}

/// When the store's newest key was made, as an `Instant` (its
/// `not_before`, whole seconds): the schedule counts from there, so that
/// each rotation finds the newest key a whole period old and each
/// certificate replacement half a period, whatever the setup took.
fn anchor(ks: &Path, host: &str) -> Result<Instant> {
    let p = Published::read(ks)?;
    let rec = p.best(host, system_clock()).context("no valid record")?;
    let now = system_clock().as_millis() as f64 / 1000.0;
    let age = (now - rec.body().not_before as f64).max(0.0);
    Ok(Instant::now() - Duration::from_secs_f64(age))
}

/// The events, and the token key ids the kept clients hold at the end.
pub(super) struct Out {
    pub(super) events: Vec<Event>,
    pub(super) final_token_ids: Vec<u32>,
}

/// Runs the schedule (in the client's namespace) until `duration` after
/// `t0`; stops early on `stop`.
pub(super) fn run(spec: Spec) -> Result<Out> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut events = Vec::new();
        let mut certs = spec.certs.iter();
        let anchor = anchor(&spec.ks, spec.host())?.min(spec.t0);
        let span = spec.duration + (spec.t0 - anchor);
        for (at, kind) in schedule(spec.period, span) {
            let due = anchor + Duration::from_secs_f64(at);
            if !spec.wait_until(due).await {
                break;
            }
            let key_before = spec.view_key();
            let at_s = spec.t0.elapsed().as_secs_f64();
            let r = match kind {
                Kind::KeyRotation => spec.rotate_keys().await,
                Kind::CertReplacement => match certs.next() {
                    Some(dir) => spec.replace_cert(dir).await,
                    None => Err(anyhow::anyhow!("no replacement certificate left")),
                },
            };
            let (served_ms, error) = match r {
                Ok(ms) => (Some(ms), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            if let Ok(p) = Published::read(&spec.ks) {
                spec.view.set(p);
            }
            events.push(Event {
                kind,
                at_s,
                key_before,
                key_after: spec.view_key(),
                served: served_ms.is_some(),
                served_ms,
                token_ids: spec.token_ids(),
                token_epochs: token_epochs(&spec.ks),
                error,
            });
        }
        // The tokens held near the end (after the last token-key epoch).
        spec.wait_until(spec.t0 + spec.duration.saturating_sub(Duration::from_millis(500)))
            .await;
        Ok(Out {
            events,
            final_token_ids: spec.token_ids(),
        })
    })
}

impl Spec {
    /// Sleeps until `due`; false if told to stop first.
    async fn wait_until(&self, due: Instant) -> bool {
        while Instant::now() < due {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50).min(due - Instant::now())).await;
        }
        true
    }

    fn host(&self) -> &str {
        &self.attempts.host
    }

    fn view_key(&self) -> u32 {
        Published::read(&self.ks).map_or(0, |p| p.current_key_id(self.host()))
    }

    fn keys_rotate(&self) -> Result<String> {
        let mut c = Command::new(&self.zrtt);
        c.args(["keys", "rotate", "--keystore"]).arg(&self.ks);
        run_capture(c).context("zrtt keys rotate")
    }

    fn sighup(&self) -> Result<()> {
        let mut c = Command::new("kill");
        c.args(["-HUP", &self.gateway_pid.to_string()]);
        run_capture(c).context("SIGHUP to the gateway")?;
        Ok(())
    }

    /// A new key, then the gateway told; milliseconds until it serves it.
    async fn rotate_keys(&self) -> Result<f64> {
        let before = Published::read(&self.ks)?.current_key_id(self.host());
        self.keys_rotate()?;
        let now = Published::read(&self.ks)?;
        let after = now.current_key_id(self.host());
        if after == before {
            bail!("zrtt keys rotate made no new key (still {before:08x})");
        }
        let t = Instant::now();
        self.sighup()?;
        self.until_served(|| self.probe_key(&now)).await?;
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    }

    /// The next certificate over the store's, records re-signed, the
    /// gateway told; milliseconds until both probes see it.
    async fn replace_cert(&self, dir: &Path) -> Result<f64> {
        let key = std::fs::read(dir.join("cert.key"))?;
        let pem = std::fs::read(dir.join("cert.pem"))?;
        // The key first: a gateway re-reading in between refuses the pair
        // (logged) and keeps the previous one.
        zrtt_dns::fsutil::write_atomic(&self.ks.join("cert.key"), &key, true)?;
        zrtt_dns::fsutil::write_atomic(&self.ks.join("cert.pem"), &pem, false)?;
        self.keys_rotate()?;
        let now = Published::read(&self.ks)?;
        let t = Instant::now();
        self.sighup()?;
        let want = now.cert_der.clone();
        self.until_served(|| self.probe_cert(&want)).await?;
        self.until_served(|| self.probe_key(&now)).await?;
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    }

    /// Repeats `probe` until it succeeds, at most [`PROBE_BOUND`].
    async fn until_served<'a, F, Fut>(&'a self, probe: F) -> Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<()>> + 'a,
    {
        let end = Instant::now() + PROBE_BOUND;
        loop {
            match probe().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= end => {
                    bail!("not served within {PROBE_BOUND:?}: {e:#}")
                }
                Err(_) => tokio::time::sleep(PROBE_PAUSE).await,
            }
        }
    }

    /// One zrtt GET holding only `p`'s newest record, without TLS
    /// fallback: answered without a refusal means the gateway serves it.
    async fn probe_key(&self, p: &Published) -> Result<()> {
        let rec = p
            .best(self.host(), system_clock())
            .context("no valid record")?;
        let id = rec.body().key_id;
        let mut cfg =
            ClientConfig::builder(Arc::new(OneKey(rec))).with_tls_config(self.tls.clone());
        cfg.tls_fallback = false;
        // A flight the gateway cannot open yet is dropped silently: retry
        // soon rather than after the default 10 s.
        cfg.reply_timeout = PROBE_REPLY;
        let cfg = Arc::new(cfg);
        let a = Attempts {
            retries: 0,
            attempt_timeout: PROBE_REPLY * 2,
            ..self.attempts.clone()
        };
        let s = request(&a, &|| cfg.clone(), "/probe").await;
        if s.status != Some(200) || s.fresh_keys || s.tls_fallback() {
            bail!(
                "key {id:08x}: status {:?}, mode {:?}, fresh keys {}, {:?}",
                s.status,
                s.mode,
                s.fresh_keys,
                s.errors
            );
        }
        Ok(())
    }

    /// One TLS handshake: the certificate served must be `want`.
    async fn probe_cert(&self, want: &[u8]) -> Result<()> {
        let addr: SocketAddr = self.attempts.addr;
        let name = pki_types::ServerName::try_from(self.host().to_string())?;
        let tcp =
            tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
                .await??;
        // A full handshake: a resumed one shows the session's certificate.
        let mut cfg = (*self.tls).clone();
        cfg.resumption = rustls::client::Resumption::disabled();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let s = tokio::time::timeout(Duration::from_secs(5), tls.connect(name, tcp)).await??;
        let served = s
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default();
        if served != want {
            bail!("TLS still serves the previous certificate");
        }
        Ok(())
    }

    /// Key ids of the tokens and resumption tickets the kept clients hold
    /// (distinct, sorted): a ticket names the token key whose ticket key
    /// sealed it (docs/PROTOCOL.md §12.2).
    fn token_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .kept
            .iter()
            .filter_map(|c| c.tokens.as_ref()?.token(self.host(), self.client_ip))
            .filter_map(|t| token_key_id(&t))
            .chain(
                self.kept
                    .iter()
                    .filter_map(|c| c.tokens.as_ref())
                    .flat_map(|s| s.ticket_key_ids(self.host())),
            )
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// A token's key id: `0x02 || key_id (4) || ...` (zrtt_proto::admission::token).
pub(super) fn token_key_id(token: &[u8]) -> Option<u32> {
    let id: [u8; 4] = token.get(1..5)?.try_into().ok()?;
    (token.first() == Some(&2)).then(|| u32::from_be_bytes(id))
}

/// Epochs of the token keys in the store (`tokens/<epoch>.key`), sorted.
fn token_epochs(ks: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(ks.join(zrtt_dns::token_keys::TOKENS_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".key")?.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_alternates_certificates_and_keys() {
        let s = schedule(Duration::from_secs(60), Duration::from_secs(600));
        let keys: Vec<f64> = s
            .iter()
            .filter(|e| e.1 == Kind::KeyRotation)
            .map(|e| e.0)
            .collect();
        let certs = s.iter().filter(|e| e.1 == Kind::CertReplacement).count();
        assert_eq!(keys, (1..10).map(|k| k as f64 * 60.0).collect::<Vec<_>>());
        assert_eq!(certs, 10);
        assert!(s.windows(2).all(|w| w[0].0 < w[1].0));
        let smoke = schedule(Duration::from_secs(5), Duration::from_secs(20));
        assert_eq!(smoke.len(), 7);
        assert_eq!(smoke[0], (2.5, Kind::CertReplacement));
    }

    #[test]
    fn token_key_ids_are_read() {
        assert_eq!(token_key_id(&[2, 0, 0, 1, 2, 9, 9]), Some(0x0102));
        assert_eq!(token_key_id(&[1, 0, 0, 1, 2]), None);
        assert_eq!(token_key_id(&[2, 0]), None);
    }
}
