//! Provenance verifiers (ASAP §2.2-2.4): the `zrtt pv` service and the
//! client's certificate store. The certificate logic is sans-IO in
//! `zrtt_proto::provenance`; this is the thin TCP shell.
//!
//! Protocol over one TCP connection (the verifier reads nothing before the
//! handshake completes, which proves the client's address):
//!
//! ```text
//! request:  "ZPV1" | client static key (32) | u32 requested seconds | u8 has_previous | [previous certificate]
//! response: u8 status (0 ok, 1 bad request, 2 no key can sign) | [certificate]
//! ```
//!
//! The verifier signs through an [`Issuer`]: one key ([`VerifierSigner`]),
//! or the keys of a rotating verifier key store ([`SharedIssuer`], replaced
//! at run time when the store rotates).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zrtt_proto::codec::{Put, Reader};
use zrtt_proto::crypto::{SecureRandom, X25519KeyPair};
use zrtt_proto::provenance::{
    decode_certificates, encode_certificates, Certificate, IssuePolicy, VerifierKey, VerifierKeys,
    VerifierSigner,
};
use zrtt_proto::UnixTime;

use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"ZPV1";
const MAX_REQUEST: usize = 4 + 32 + 4 + 1 + 98;

/// Counters of a verifier.
#[derive(Debug, Default)]
pub struct PvStats {
    /// Certificates issued.
    pub issued: std::sync::atomic::AtomicU64,
    /// Of those, refreshes that doubled a previous certificate's duration.
    pub refreshed: std::sync::atomic::AtomicU64,
    /// Requests refused as malformed or timed out.
    pub bad_requests: std::sync::atomic::AtomicU64,
}

/// What signs certificates: a single key, or a verifier's current key
/// among its rotating keys.
pub trait Issuer: Send + Sync {
    /// A certificate for `client_static` at `address` (see
    /// [`VerifierSigner::issue`]); `None` when no key can sign now.
    fn issue(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        now: UnixTime,
    ) -> Option<Certificate>;
}

impl Issuer for VerifierSigner {
    fn issue(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        now: UnixTime,
    ) -> Option<Certificate> {
        Some(VerifierSigner::issue(
            self,
            policy,
            client_static,
            address,
            requested_secs,
            previous,
            now,
        ))
    }
}

/// Keys replaced while serving: a verifier key store's signing keys, set
/// again after every reload or rotation ([`SharedIssuer::set`]).
#[derive(Debug, Default)]
pub struct SharedIssuer(RwLock<Option<Arc<VerifierKeys>>>);

impl SharedIssuer {
    /// Start with `keys` (`None`: refuse until set).
    pub fn new(keys: Option<VerifierKeys>) -> Self {
        Self(RwLock::new(keys.map(Arc::new)))
    }

    /// Replace the keys.
    pub fn set(&self, keys: Option<VerifierKeys>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = keys.map(Arc::new);
    }

    /// The keys in force.
    pub fn get(&self) -> Option<Arc<VerifierKeys>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Issuer for SharedIssuer {
    fn issue(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        now: UnixTime,
    ) -> Option<Certificate> {
        self.get()?.issue(
            policy,
            client_static,
            address,
            requested_secs,
            previous,
            now,
        )
    }
}

/// Serve certificates on `listener` until `stop` resolves. Each connection
/// is bounded in time and size; at most `max_concurrent` are served at once.
pub async fn serve(
    listener: TcpListener,
    signer: Arc<dyn Issuer>,
    policy: IssuePolicy,
    clock: fn() -> UnixTime,
    stats: Arc<PvStats>,
    max_concurrent: usize,
    stop: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max_concurrent.max(1)));
    tokio::pin!(stop);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((tcp, peer)) = accepted else { continue };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    continue; // over capacity: drop, the client retries or goes gated
                };
                let (signer, stats) = (signer.clone(), stats.clone());
                tasks.spawn(async move {
                    let _permit = permit;
                    if handle(tcp, peer, &signer, &policy, clock, &stats).await.is_err() {
                        stats.bad_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
}

async fn handle(
    mut tcp: TcpStream,
    peer: SocketAddr,
    signer: &Arc<dyn Issuer>,
    policy: &IssuePolicy,
    clock: fn() -> UnixTime,
    stats: &PvStats,
) -> Result<()> {
    let mut buf = [0u8; MAX_REQUEST];
    let mut n = 0;
    let req = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let got = tcp
                .read(&mut buf[n..])
                .await
                .map_err(Error::io("verifier read"))?;
            if got == 0 {
                return Err(Error::Protocol("verifier request truncated"));
            }
            n += got;
            if let Some(r) = parse_request(&buf[..n])? {
                return Ok(r);
            }
            if n == buf.len() {
                return Err(Error::Protocol("verifier request too large"));
            }
        }
    })
    .await
    .map_err(|_| Error::Protocol("verifier request timed out"))?;
    let (client_static, requested, previous) = match req {
        Ok(r) => r,
        Err(e) => {
            let _ = tcp.write_all(&[1]).await;
            return Err(e);
        }
    };
    let Some(cert) = signer.issue(
        policy,
        &client_static,
        peer.ip().to_canonical(),
        requested,
        previous.as_ref(),
        clock(),
    ) else {
        let _ = tcp.write_all(&[2]).await;
        return Err(Error::Protocol("verifier has no key that can sign"));
    };
    if previous
        .as_ref()
        .is_some_and(|p| cert.duration > p.duration)
    {
        stats
            .refreshed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    stats
        .issued
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut out = vec![0u8];
    cert.encode(&mut out);
    tcp.write_all(&out)
        .await
        .map_err(Error::io("verifier write"))?;
    let _ = tcp.shutdown().await;
    Ok(())
}

type Request = ([u8; 32], u32, Option<Certificate>);

/// `Ok(None)` while incomplete.
fn parse_request(b: &[u8]) -> Result<Option<Request>> {
    let mut r = Reader::new(b);
    let parsed = (|| {
        if r.take(4)? != MAGIC {
            return Ok(Err(Error::Protocol("not a zrtt verifier request")));
        }
        let key = r.array::<32>()?;
        let requested = r.u32()?;
        let prev = match r.u8()? {
            0 => None,
            1 => {
                let rest = r.rest();
                let mut wrapped = vec![1u8];
                wrapped.extend_from_slice(rest);
                match decode_certificates(&wrapped) {
                    Ok(mut c) => c.pop(),
                    Err(zrtt_proto::provenance::ProvenanceError::Malformed(
                        zrtt_proto::InvalidMessage::Truncated { .. },
                    )) => {
                        return Err(zrtt_proto::InvalidMessage::Truncated {
                            needed: 1,
                            available: 0,
                        })
                    }
                    Err(_) => return Ok(Err(Error::Protocol("bad previous certificate"))),
                }
            }
            _ => return Ok(Err(Error::Protocol("bad request flag"))),
        };
        Ok(Ok((key, requested, prev)))
    })();
    match parsed {
        Ok(Ok(req)) => Ok(Some(req)),
        Ok(Err(e)) => Err(e),
        Err(zrtt_proto::InvalidMessage::Truncated { .. }) => Ok(None),
        Err(_) => Err(Error::Protocol("malformed verifier request")),
    }
}

/// Ask one verifier for a certificate for `key`, refreshing `previous`.
pub async fn fetch_certificate(
    verifier: SocketAddr,
    key: &X25519KeyPair,
    requested_secs: u32,
    previous: Option<&Certificate>,
    timeout: Duration,
) -> Result<Certificate> {
    let work = async {
        let mut tcp = TcpStream::connect(verifier)
            .await
            .map_err(Error::io("connecting to the verifier"))?;
        let mut req = MAGIC.to_vec();
        req.extend_from_slice(key.public());
        req.put_u32(requested_secs);
        match previous {
            Some(p) => {
                req.put_u8(1);
                p.encode(&mut req);
            }
            None => req.put_u8(0),
        }
        tcp.write_all(&req)
            .await
            .map_err(Error::io("verifier write"))?;
        let mut resp = Vec::with_capacity(128);
        tcp.read_to_end(&mut resp)
            .await
            .map_err(Error::io("verifier read"))?;
        match resp.split_first() {
            Some((0, cert)) => {
                let mut wrapped = vec![1u8];
                wrapped.extend_from_slice(cert);
                let mut certs = decode_certificates(&wrapped)
                    .map_err(|_| Error::Protocol("verifier sent a malformed certificate"))?;
                certs
                    .pop()
                    .ok_or(Error::Protocol("verifier sent no certificate"))
            }
            Some((2, _)) => Err(Error::Protocol("verifier has no key that can sign now")),
            _ => Err(Error::Protocol("verifier refused the request")),
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| Error::Protocol("verifier timed out"))?
}

/// A client's certificates, per local address, each address with its own
/// static key (ASAP's privacy note: a key does not follow the client from
/// network to network).
///
/// The store remembers which verifier (by address) issued which
/// certificate, so a refresh presents each verifier its own certificate
/// and replaces it, also when the verifier rotated to a key with another id.
#[derive(Debug, Default)]
pub struct ProvenanceStore {
    by_local: Mutex<HashMap<IpAddr, (X25519KeyPair, Vec<Certificate>)>>,
    /// The verifier id of the certificate each verifier last issued.
    issued_by: Mutex<HashMap<SocketAddr, u32>>,
}

/// Prefix of the state file lines that record which verifier issued which
/// certificate (a comment to readers that do not know it).
const ISSUER_LINE: &str = "#zrtt-issuer ";

impl ProvenanceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Obtain (or refresh) certificates for `local` from every verifier in
    /// parallel. Verifiers that fail are skipped (reported in the result);
    /// the store keeps what succeeded. A new local address gets a new key.
    pub async fn refresh(
        &self,
        local: IpAddr,
        verifiers: &[SocketAddr],
        requested_secs: u32,
        timeout: Duration,
        rng: &dyn SecureRandom,
    ) -> Result<Vec<(SocketAddr, Result<u32>)>> {
        let (key, previous) = {
            let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
            if !m.contains_key(&local) {
                // Address changed (or first use): drop the others, fresh key.
                m.clear();
                lock(&self.issued_by).clear();
                m.insert(local, (X25519KeyPair::generate(rng)?, Vec::new()));
            }
            let (k, c) = m.get(&local).ok_or(Error::Protocol("provenance store"))?;
            (k.clone(), c.clone())
        };
        let issued_by = lock(&self.issued_by).clone();
        let jobs = verifiers.iter().map(|v| {
            let key = key.clone();
            // Refresh the certificate this verifier issued; when that is not
            // known (an older state file), one no other verifier claims.
            let mine = match issued_by.get(v) {
                Some(id) => previous.iter().find(|c| c.verifier_id == *id).cloned(),
                None => previous
                    .iter()
                    .find(|c| !issued_by.values().any(|id| *id == c.verifier_id))
                    .cloned(),
            };
            let v = *v;
            async move {
                let r = fetch_certificate(v, &key, requested_secs, mine.as_ref(), timeout).await;
                (v, r)
            }
        });
        let results = futures_join_all(jobs).await;
        let mut fresh = Vec::new();
        let mut report = Vec::new();
        for (v, r) in results {
            match r {
                Ok(c) => {
                    report.push((v, Ok(c.duration)));
                    fresh.push((v, c));
                }
                Err(e) => report.push((v, Err(e))),
            }
        }
        let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let mut issued_by = lock(&self.issued_by);
        if let Some((_, certs)) = m.get_mut(&local) {
            for (v, c) in fresh {
                // The verifier's previous certificate goes, whatever key signed it.
                let before = issued_by.insert(v, c.verifier_id);
                certs.retain(|o| o.verifier_id != c.verifier_id && Some(o.verifier_id) != before);
                certs.push(c);
            }
        }
        Ok(report)
    }

    /// Whether `local` needs new certificates at `now`: none held for it (or
    /// the client moved), or one has less than half its duration left, so
    /// refreshing (which doubles the duration) happens well before expiry.
    pub fn needs_refresh(&self, local: IpAddr, now: UnixTime) -> bool {
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let Some((_, certs)) = m.get(&local) else {
            return true;
        };
        let now = now.as_secs();
        certs.is_empty()
            || certs
                .iter()
                .any(|c| now.saturating_add(u64::from(c.duration) / 2) >= c.end())
    }

    /// Put certificates for `local` directly (e.g. obtained out of band);
    /// replaces what the store held for any address.
    pub fn insert(&self, local: IpAddr, key: X25519KeyPair, certs: Vec<Certificate>) {
        let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        m.clear();
        lock(&self.issued_by).clear();
        m.insert(local, (key, certs));
    }

    /// The static key and the PROVENANCE extension value for `local`, with
    /// the certificates still valid at `now`.
    pub fn for_local(&self, local: IpAddr, now: UnixTime) -> Option<(X25519KeyPair, Vec<u8>)> {
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let (key, certs) = m.get(&local)?;
        let valid: Vec<Certificate> = certs
            .iter()
            .filter(|c| c.start <= now.as_secs() && now.as_secs() < c.end())
            .cloned()
            .collect();
        (!valid.is_empty()).then(|| (key.clone(), encode_certificates(&valid)))
    }

    /// Save to a file (owner-only): `ip key-hex cert-hex...` per line.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        use std::fmt::Write as _;
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let mut s =
            String::from("# zrtt provenance state: local address, static key, certificates\n");
        for (ip, (key, certs)) in m.iter() {
            let _ = write!(s, "{ip} {}", zrtt_proto::record::hex(key.private()));
            for c in certs {
                let mut b = Vec::new();
                c.encode(&mut b);
                let _ = write!(s, " {}", zrtt_proto::record::hex(&b));
            }
            s.push('\n');
        }
        for (v, id) in lock(&self.issued_by).iter() {
            let _ = writeln!(s, "{ISSUER_LINE}{v} {id:08x}");
        }
        crate::error::write_private(path, s.as_bytes())
            .map_err(Error::io("writing the provenance state"))
    }

    /// Load a file written by [`Self::save`]; a missing file is an empty store.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let store = Self::new();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(e) => return Err(Error::io("reading the provenance state")(e)),
        };
        let bad = || Error::Protocol("malformed provenance state file");
        let mut m = store.by_local.lock().unwrap_or_else(|p| p.into_inner());
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(ISSUER_LINE) {
                let mut parts = rest.split_whitespace();
                let v: Option<SocketAddr> = parts.next().and_then(|p| p.parse().ok());
                let id = parts.next().and_then(|p| u32::from_str_radix(p, 16).ok());
                if let (Some(v), Some(id)) = (v, id) {
                    lock(&store.issued_by).insert(v, id);
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let ip: IpAddr = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
            let key: [u8; 32] = parts
                .next()
                .and_then(zrtt_proto::record::unhex)
                .and_then(|k| k.try_into().ok())
                .ok_or_else(bad)?;
            let mut certs = Vec::new();
            for c in parts {
                let mut wrapped = vec![1u8];
                wrapped.extend_from_slice(&zrtt_proto::record::unhex(c).ok_or_else(bad)?);
                certs.extend(decode_certificates(&wrapped).map_err(|_| bad())?);
            }
            m.insert(ip, (X25519KeyPair::from_private(key), certs));
        }
        drop(m);
        Ok(store)
    }
}

async fn futures_join_all<F, T>(jobs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut n = 0;
    for (i, j) in jobs.enumerate() {
        set.spawn(async move { (i, j.await) });
        n += 1;
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    while let Some(Ok((i, v))) = set.join_next().await {
        out[i] = Some(v);
    }
    out.into_iter().flatten().collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Parse a verifier public key given as 64 hex digits.
pub fn parse_verifier_key(s: &str) -> Option<VerifierKey> {
    let b: [u8; 32] = zrtt_proto::record::unhex(s)?.try_into().ok()?;
    Some(VerifierKey::new(b))
}
