//! Provenance verifiers (ASAP §2.2-2.4): the `zrtt verifier` service, the
//! client's request for a certificate ([`fetch_certificate`]; the client's
//! certificate store is [`crate::client::ProvenanceStore`]), and the
//! gateway's verifier keys learned from DNS ([`DnsVerifiers`]). The
//! certificate logic is sans-IO in `zrtt_proto::provenance`; this is the
//! thin TCP shell.
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

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zrtt_dns::resolver::{ResolveError, ResolvedVerifier, Resolver};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::provenance::{
    decode_verifier_response, encode_verifier_response, Certificate, IssuePolicy, VerifierKey,
    VerifierKeys, VerifierRequest, VerifierSigner, VerifierWireError, MAX_VERIFIER_REQUEST,
    STATUS_BAD_REQUEST, STATUS_NO_KEY,
};
use zrtt_proto::provenance::{TrustPolicy, TrustedKey};
use zrtt_proto::UnixTime;

use crate::error::{Error, Result};

pub use crate::client::ProvenanceStore;

/// The port a provenance verifier serves on (`zrtt verifier serve`'s
/// default), and where a client reaches a verifier that a key record names
/// (at the name's address).
pub const VERIFIER_PORT: u16 = 4480;

const MAX_REQUEST: usize = MAX_VERIFIER_REQUEST;

mod metrics;
pub use metrics::{Refusal, VerifierMetrics};

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
    metrics: Arc<VerifierMetrics>,
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
                metrics.request();
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    // Over capacity: drop, the client retries or goes gated.
                    metrics.refused(Refusal::Busy);
                    continue;
                };
                let (signer, metrics) = (signer.clone(), metrics.clone());
                tasks.spawn(async move {
                    let _permit = permit;
                    match handle(tcp, peer, &signer, &policy, clock, &metrics).await {
                        Ok(refresh) => metrics.issued(refresh),
                        Err((why, e)) => {
                            tracing::debug!("verifier request from {peer}: {e}");
                            metrics.refused(why);
                        }
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
    metrics: &VerifierMetrics,
) -> std::result::Result<bool, (Refusal, Error)> {
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
    .map_err(|_| {
        (
            Refusal::Timeout,
            Error::Protocol("verifier request timed out"),
        )
    })?;
    let (client_static, requested, previous) = match req {
        Ok(r) => r,
        Err(e) => {
            let _ = tcp.write_all(&[STATUS_BAD_REQUEST]).await;
            let why = match e {
                Error::Io { .. } => Refusal::Io,
                _ => Refusal::Malformed,
            };
            return Err((why, e));
        }
    };
    let started = std::time::Instant::now();
    let cert = signer.issue(
        policy,
        &client_static,
        peer.ip().to_canonical(),
        requested,
        previous.as_ref(),
        clock(),
    );
    metrics.signed(started.elapsed());
    let Some(cert) = cert else {
        let _ = tcp.write_all(&[STATUS_NO_KEY]).await;
        return Err((
            Refusal::NoKey,
            Error::Protocol("verifier has no key that can sign"),
        ));
    };
    let refresh = previous
        .as_ref()
        .is_some_and(|p| cert.duration > p.duration);
    tcp.write_all(&encode_verifier_response(&cert))
        .await
        .map_err(|e| (Refusal::Io, Error::io("verifier write")(e)))?;
    let _ = tcp.shutdown().await;
    Ok(refresh)
}

type Request = ([u8; 32], u32, Option<Certificate>);

/// `Ok(None)` while incomplete ([`VerifierRequest::decode`]).
fn parse_request(b: &[u8]) -> Result<Option<Request>> {
    match VerifierRequest::decode(b) {
        Ok(Some(r)) => Ok(Some((r.client_static, r.requested_secs, r.previous))),
        Ok(None) => Ok(None),
        Err(e) => Err(Error::Protocol(wire_error(e))),
    }
}

fn wire_error(e: VerifierWireError) -> &'static str {
    match e {
        VerifierWireError::NotARequest => "not a zrtt verifier request",
        VerifierWireError::BadFlag => "bad request flag",
        VerifierWireError::BadPrevious => "bad previous certificate",
        VerifierWireError::BadCertificate => "verifier sent a malformed certificate",
        VerifierWireError::NoKey => "verifier has no key that can sign now",
        VerifierWireError::Refused => "verifier refused the request",
        _ => "malformed verifier request",
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
        let req = VerifierRequest {
            client_static: *key.public(),
            requested_secs,
            previous: previous.cloned(),
        }
        .encode();
        tcp.write_all(&req)
            .await
            .map_err(Error::io("verifier write"))?;
        let mut resp = Vec::with_capacity(128);
        tcp.read_to_end(&mut resp)
            .await
            .map_err(Error::io("verifier read"))?;
        decode_verifier_response(&resp).map_err(|e| Error::Protocol(wire_error(e)))
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| Error::Protocol("verifier timed out"))?
}

/// Provenance verifier keys learned from DNS for `zrtt gateway
/// --verifier-name` (docs/PROVENANCE.md): each name's published keys,
/// verified like key records, refreshed in the background. A failed or
/// empty lookup keeps the keys learned before (each is trusted only until
/// its record's `not_after`), so DNS trouble never stops provenance at once
/// and never stops serving. A refresh costs one TXT (and TLSA) lookup per
/// name, in parallel.
pub struct DnsVerifiers {
    resolver: Arc<Resolver>,
    names: Vec<String>,
    configured: Vec<VerifierKey>,
    quorum: usize,
    /// Per name: the keys of its last lookup that verified anything.
    learned: std::sync::Mutex<Vec<Vec<TrustedKey>>>,
}

/// What one lookup of one verifier name gave.
#[derive(Debug)]
pub enum VerifierLookup {
    /// Verified keys (now trusted, replacing the previous ones).
    Keys(Vec<TrustedKey>),
    /// Nothing usable: why, and how many earlier keys are kept.
    Kept {
        /// Why the lookup gave nothing usable.
        reason: String,
        /// How many keys learned before are still trusted.
        kept: usize,
    },
}

impl DnsVerifiers {
    /// `configured` keys (`--verifier HEX`, each its own verifier) and
    /// `names` (`--verifier-name`, each one verifier whatever its number of
    /// keys), looked up through `resolver`.
    pub fn new(
        resolver: Arc<Resolver>,
        names: Vec<String>,
        configured: Vec<VerifierKey>,
        quorum: usize,
    ) -> Self {
        let learned = std::sync::Mutex::new(vec![Vec::new(); names.len()]);
        Self {
            resolver,
            names: names
                .iter()
                .map(|n| zrtt_proto::record::normalize_name(n))
                .collect(),
            configured,
            quorum,
            learned,
        }
    }

    /// The policy in force at `now`: configured keys, and the learned keys
    /// still valid. Verifier numbers: configured key `i` is `i`, name `j`
    /// is `configured + j`, so keys of one name count once.
    pub fn policy(&self, now: UnixTime) -> TrustPolicy {
        let now_s = now.as_secs();
        let mut keys: Vec<TrustedKey> = self
            .configured
            .iter()
            .enumerate()
            .map(|(i, k)| TrustedKey {
                verifier: i as u32,
                ..TrustedKey::from(*k)
            })
            .collect();
        let learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        keys.extend(
            learned
                .iter()
                .flatten()
                .filter(|k| k.not_before <= now_s && now_s < k.not_after)
                .copied(),
        );
        TrustPolicy {
            keys,
            quorum: self.quorum,
            skew_secs: 5,
        }
    }

    /// Look every name up (in parallel) at `now` and update the learned keys.
    pub async fn refresh(&self, now: UnixTime) -> Vec<(String, VerifierLookup)> {
        let mut set = tokio::task::JoinSet::new();
        for (j, n) in self.names.iter().enumerate() {
            let (resolver, n) = (self.resolver.clone(), n.clone());
            set.spawn(async move { (j, resolver.resolve_verifier(&n, now).await) });
        }
        let mut results: Vec<Option<Result<ResolvedVerifier, ResolveError>>> =
            (0..self.names.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((j, r)) = joined {
                results[j] = Some(r);
            }
        }
        let mut learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        let base = self.configured.len();
        let mut out = Vec::new();
        for (j, (name, r)) in self.names.iter().zip(results).enumerate() {
            let verifier = (base + j) as u32;
            let reason = match r {
                None => "lookup task failed".to_owned(),
                Some(Ok(got)) if !got.keys.is_empty() => {
                    let keys: Vec<TrustedKey> = got
                        .keys
                        .iter()
                        .map(|k| TrustedKey::published(k, verifier))
                        .collect();
                    learned[j] = keys.clone();
                    out.push((name.clone(), VerifierLookup::Keys(keys)));
                    continue;
                }
                Some(Ok(got)) if got.refused.is_empty() => "no verifier key published".to_owned(),
                Some(Ok(got)) => got
                    .refused
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                Some(Err(e)) => e.to_string(),
            };
            let now_s = now.as_secs();
            learned[j].retain(|k| now_s < k.not_after);
            out.push((
                name.clone(),
                VerifierLookup::Kept {
                    reason,
                    kept: learned[j].len(),
                },
            ));
        }
        out
    }
}

/// Parse a verifier public key given as 64 hex digits.
pub fn parse_verifier_key(s: &str) -> Option<VerifierKey> {
    let b: [u8; 32] = zrtt_proto::record::unhex(s)?.try_into().ok()?;
    Some(VerifierKey::new(b))
}
