//! Verified key resolution for clients (issue 3 part 4).
//!
//! For a host, [`Resolver::resolve`] asks one recursive resolver (the first
//! `nameserver` of `/etc/resolv.conf`, or a configured address) for the
//! host's HTTPS, A, AAAA and TLSA records **in parallel**, so address and key
//! cost the same round trip as the address alone. Only when the HTTPS answer
//! carries no `key65380` (no HTTPS record, or a resolver stripped the
//! unknown SvcParam, or it does not decode) does it ask for the fallback
//! encodings, TXT at the host and the AAAA tunnel at `_zrtt.<host>`, again in
//! parallel.
//!
//! Queries go over UDP with EDNS0 (payload [`EDNS_PAYLOAD`]), are retried on
//! timeout a bounded number of times and repeated over TCP when the answer
//! is truncated (TC). Every answer must match the question and id.
//!
//! Key records are verified with [`KeyRecord::verify`] against the signing
//! certificate, which is either pinned by the caller ([`Resolver::pin_cert`],
//! e.g. from configuration or from an earlier TLS connection) or taken from
//! the TLSA `3 0 0` record at the host name; a TLSA certificate must chain to
//! the configured CA roots for server authentication and cover the host
//! name (TLSA `2 0 0` records in the same RRset are used as intermediates).
//! Nothing expired, not yet valid or unverifiable is handed out: each refused
//! record comes back in [`Resolved::refused`] with its reason.
//!
//! Answers are cached per (name, type) for their TTL, shortened to the
//! validity of the records or certificate they carry; negative answers for
//! the SOA minimum (RFC 2308) or [`ResolverConfig::negative_ttl`].
//! [`Resolver::expiring`] and [`Resolver::prefetch`] refresh entries before
//! they expire. The clock is always passed in.
//!
//! [`Resolver::resolve_verifier`] looks up a provenance verifier's published
//! keys the same way: TXT and TLSA at `_zrttpv.<name>` in parallel, each
//! `v=zrttpv1` record verified with [`VerifierKeyRecord::verify`] against
//! the pinned certificate for the name or a TLSA certificate that chains to
//! the roots and covers the name.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, ServerName, TrustAnchor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_proto::record::encodings::{self, SvcbRdata, SVC_IPV6HINT};
use zrtt_proto::record::{
    self, KeyRecord, VerifiedKeyRecord, VerifiedVerifierKeyRecord, VerifierKeyRecord,
};
use zrtt_proto::{RecordError, UnixTime};

pub use crate::client::EDNS_PAYLOAD;

/// The CA bundle used when none is configured (Debian, Ubuntu, Alpine).
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The resolver configuration file read by [`ResolverConfig::system`].
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Where a key record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// The HTTPS record's `key65380` SvcParam at the host name.
    Https,
    /// A `v=zrtt1` TXT record at the host name.
    Txt,
    /// The AAAA tunnel at `_zrtt.<host>`.
    AaaaTunnel,
    /// A `v=zrttpv1` TXT record at `_zrttpv.<verifier name>`.
    VerifierTxt,
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoding::Https => "HTTPS key65380",
            Encoding::Txt => "TXT",
            Encoding::AaaaTunnel => "AAAA tunnel",
            Encoding::VerifierTxt => "TXT at _zrttpv",
        })
    }
}

/// What a [`Refusal`] is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// One key record.
    Key {
        /// Its key id.
        key_id: u32,
        /// Where it came from.
        encoding: Encoding,
    },
    /// A whole encoding (it did not decode, or its lookup failed).
    Encoding(Encoding),
    /// A certificate from TLSA (first 4 bytes of its SHA-256, hex).
    Certificate(String),
    /// One verifier key record.
    VerifierKey {
        /// Its verifier id.
        verifier_id: u32,
    },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Key { key_id, encoding } => write!(f, "key {key_id:#010x} ({encoding})"),
            Refused::Encoding(e) => write!(f, "{e}"),
            Refused::Certificate(h) => write!(f, "TLSA certificate {h}"),
            Refused::VerifierKey { verifier_id } => {
                write!(f, "verifier key {verifier_id:08x}")
            }
        }
    }
}

/// Why something was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The record did not decode or did not verify (signature, name,
    /// certificate hash, validity…).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The certificate that signs the record is neither pinned nor published
    /// as TLSA `3 0 0`.
    #[error("its certificate (sha256 {0}…) is neither pinned nor in TLSA")]
    NoCertificate(String),
    /// The certificate that signs the record did not pass the chain check.
    #[error("its certificate is not trusted: {0}")]
    Untrusted(String),
    /// A TLSA certificate did not chain to the CA roots or does not cover
    /// the host.
    #[error("{0}")]
    Chain(String),
    /// Another record that verifies under the same key id has different
    /// content; neither is used.
    #[error("duplicate key id with different content")]
    DuplicateKeyId,
    /// The lookup for this encoding failed.
    #[error("lookup failed: {0}")]
    Lookup(String),
}

/// One refused record, encoding or certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What.
    pub what: Refused,
    /// Why.
    pub reason: RefusalReason,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.reason)
    }
}

/// The outcome of [`Resolver::resolve`].
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The host, normalised (lowercase, no trailing dot).
    pub host: String,
    /// A and AAAA addresses (A first); the HTTPS hints when there are none.
    pub addrs: Vec<IpAddr>,
    /// Verified key records valid at the time asked, latest expiry first.
    pub keys: Vec<VerifiedKeyRecord>,
    /// Records, encodings and certificates that were not used, and why.
    pub refused: Vec<Refusal>,
    /// The trusted certificate that signs `keys[0]` (or, without keys, the
    /// first trusted certificate).
    pub cert_der: Option<Vec<u8>>,
    /// Where `keys[0]` came from.
    pub key_encoding: Option<Encoding>,
    /// Queries sent to the server (0: everything came from the cache);
    /// UDP retries and TCP repeats count.
    pub lookups: usize,
    /// Lookups that failed (type and reason); their types were not cached.
    pub failed: Vec<(RecordType, LookupError)>,
    /// Wall time spent.
    pub elapsed: Duration,
}

/// The outcome of [`Resolver::resolve_verifier`].
#[derive(Clone, Debug)]
pub struct ResolvedVerifier {
    /// The verifier's name, normalised.
    pub name: String,
    /// Verified verifier key records valid at the time asked, latest expiry first.
    pub keys: Vec<VerifiedVerifierKeyRecord>,
    /// Records and certificates that were not used, and why.
    pub refused: Vec<Refusal>,
    /// The trusted certificate that signs the keys.
    pub cert_der: Option<Vec<u8>>,
    /// Queries sent (0: everything came from the cache).
    pub lookups: usize,
    /// Lookups that failed.
    pub failed: Vec<(RecordType, LookupError)>,
    /// Wall time spent.
    pub elapsed: Duration,
}

/// A failed DNS exchange.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// No answer within the bound after all attempts.
    #[error("{server}: no answer after {attempts} attempt(s) of {timeout:?}")]
    Timeout {
        /// The server.
        server: SocketAddr,
        /// Attempts made.
        attempts: u32,
        /// Per-attempt bound.
        timeout: Duration,
    },
    /// A socket error.
    #[error("{server}: {reason}")]
    Io {
        /// The server.
        server: SocketAddr,
        /// The OS error.
        reason: String,
    },
    /// An answer that does not parse.
    #[error("{server}: malformed answer: {reason}")]
    BadAnswer {
        /// The server.
        server: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The server answered with an error code (SERVFAIL, REFUSED…).
    #[error("{server}: {rcode}")]
    Rcode {
        /// The server.
        server: SocketAddr,
        /// The code.
        rcode: ResponseCode,
    },
    /// Truncated over UDP and truncated again over TCP.
    #[error("{server}: answer truncated over TCP too")]
    Truncated {
        /// The server.
        server: SocketAddr,
    },
}

/// Why a resolution could not be done at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The host is not a valid DNS name.
    #[error("{host:?} is not a valid host name: {reason}")]
    BadName {
        /// The name.
        host: String,
        /// Why.
        reason: String,
    },
    /// No `nameserver` line could be used.
    #[error("{path}: {reason}")]
    NoNameserver {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A CA file could not be read or holds no usable certificate.
    #[error("{path}: {reason}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Every query failed; the first error.
    #[error("DNS lookup of {host} failed: {error}")]
    Lookup {
        /// The host.
        host: String,
        /// The first failure.
        error: LookupError,
    },
}

/// Resolver settings.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// The recursive resolver (or authoritative server) to ask.
    pub server: SocketAddr,
    /// Bound on one UDP attempt, and on the TCP exchange.
    pub timeout: Duration,
    /// UDP attempts per query (at least 1).
    pub udp_attempts: u32,
    /// Negative caching time when the answer carries no SOA.
    pub negative_ttl: u32,
    /// Longest time anything is cached.
    pub max_ttl: u32,
    /// Most cache entries; expired ones go first, then the soonest expiring.
    pub max_entries: usize,
}

impl ResolverConfig {
    /// Defaults for `server`: 1 s per attempt, 2 UDP attempts, negative TTL
    /// 60 s, at most one day, 4096 entries.
    pub fn new(server: SocketAddr) -> Self {
        Self {
            server,
            timeout: Duration::from_secs(1),
            udp_attempts: 2,
            negative_ttl: 60,
            max_ttl: 86400,
            max_entries: 4096,
        }
    }

    /// The first `nameserver` of `/etc/resolv.conf`.
    pub fn system() -> Result<Self, ResolveError> {
        let text =
            std::fs::read_to_string(RESOLV_CONF).map_err(|e| ResolveError::NoNameserver {
                path: RESOLV_CONF.into(),
                reason: e.to_string(),
            })?;
        parse_resolv_conf(&text)
            .map(Self::new)
            .ok_or_else(|| ResolveError::NoNameserver {
                path: RESOLV_CONF.into(),
                reason: "no usable nameserver line".into(),
            })
    }
}

/// The first usable `nameserver` address of resolv.conf text, port 53.
/// IPv6 zone suffixes (`%eth0`) are not supported and such lines skipped.
pub fn parse_resolv_conf(text: &str) -> Option<SocketAddr> {
    text.lines()
        .map(|l| l.split(['#', ';']).next().unwrap_or_default())
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some("nameserver"))
                .then(|| it.next())
                .flatten()
        })
        .find_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
}

/// How certificates from TLSA are trusted.
#[derive(Debug, Default)]
pub struct Trust {
    anchors: Vec<TrustAnchor<'static>>,
}

impl Trust {
    /// No CA roots: only pinned certificates are trusted.
    pub fn none() -> Self {
        Self::default()
    }

    /// CA roots from a PEM file; refuses a file without any usable one.
    pub fn from_pem_file(path: &Path) -> Result<Self, ResolveError> {
        let err = |reason: String| ResolveError::CaFile {
            path: path.display().to_string(),
            reason,
        };
        let iter = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
        let mut t = Self::none();
        for c in iter {
            let c = c.map_err(|e| err(e.to_string()))?;
            t.add_root_der(&c).map_err(err)?;
        }
        if t.anchors.is_empty() {
            return Err(err("no certificates".into()));
        }
        Ok(t)
    }

    /// The system bundle ([`SYSTEM_CA_BUNDLE`]) if present, else no roots.
    pub fn system() -> Self {
        Self::from_pem_file(Path::new(SYSTEM_CA_BUNDLE)).unwrap_or_default()
    }

    /// Add one DER root certificate.
    pub fn add_root_der(&mut self, der: &[u8]) -> Result<(), String> {
        let c = CertificateDer::from(der);
        let a = webpki::anchor_from_trusted_cert(&c).map_err(|e| format!("CA certificate: {e}"))?;
        self.anchors.push(a.to_owned());
        Ok(())
    }

    /// Number of roots.
    pub fn len(&self) -> usize {
        self.anchors.len()
    }

    /// Whether there are no roots.
    pub fn is_empty(&self) -> bool {
        self.anchors.is_empty()
    }

    /// Chain `der` (with `intermediates`) to a root for server
    /// authentication at `now`, and check that it covers `host`.
    pub fn check(
        &self,
        der: &[u8],
        intermediates: &[Vec<u8>],
        host: &str,
        now: UnixTime,
    ) -> Result<(), String> {
        if self.anchors.is_empty() {
            return Err("no CA roots configured".into());
        }
        let c = CertificateDer::from(der);
        let ee =
            webpki::EndEntityCert::try_from(&c).map_err(|e| format!("bad certificate: {e}"))?;
        let inter: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|d| CertificateDer::from(d.as_slice()))
            .collect();
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &self.anchors,
            &inter,
            now.to_pki(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| format!("chain check failed: {e}"))?;
        let name = ServerName::try_from(host).map_err(|_| format!("{host:?} is not a DNS name"))?;
        ee.verify_is_valid_for_subject_name(&name)
            .map_err(|e| format!("certificate does not cover {host}: {e}"))
    }
}

/// A cached answer.
#[derive(Clone, Debug)]
enum Answer {
    /// The RRset's RDATA (CNAMEs followed).
    Records(Vec<RData>),
    /// NXDOMAIN or NODATA.
    Negative,
}

#[derive(Clone, Debug)]
struct Entry {
    answer: Answer,
    /// Unix seconds; usable while `now < expires`.
    expires: u64,
}

type CacheKey = (String, RecordType);

/// A certificate: SHA-256, DER, and whether it is trusted (or why not).
type CertEntry = ([u8; 32], Vec<u8>, Result<(), String>);

/// A caching, verifying resolver for zrtt key records. Cheap to share
/// (`Arc<Resolver>`); all methods take `&self`.
#[derive(Debug)]
pub struct Resolver {
    cfg: ResolverConfig,
    trust: Trust,
    pinned: Mutex<HashMap<String, Vec<u8>>>,
    cache: Mutex<HashMap<CacheKey, Entry>>,
}

/// Per-type results of one resolution: the answer, or why there is none.
type Fetched = Result<Answer, LookupError>;

struct Gathered {
    https: Option<Fetched>,
    a: Option<Fetched>,
    aaaa: Option<Fetched>,
    tlsa: Option<Fetched>,
    txt: Option<Fetched>,
    tunnel: Option<Fetched>,
}

impl Resolver {
    /// A resolver asking `cfg.server`, trusting `trust` for TLSA certificates.
    pub fn new(cfg: ResolverConfig, trust: Trust) -> Self {
        Self {
            cfg,
            trust,
            pinned: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ResolverConfig {
        &self.cfg
    }

    /// Trust `cert_der` for `host`'s records without TLSA or a chain check:
    /// a pinned certificate, or one an earlier TLS connection verified. The
    /// TLSA record is then not queried for this host.
    pub fn pin_cert(&self, host: &str, cert_der: Vec<u8>) {
        lock(&self.pinned).insert(record::normalize_name(host), cert_der);
    }

    /// Resolve `host` at `now`: addresses and verified keys, from the cache
    /// where possible (see the module docs). Fails only when nothing at all
    /// could be looked up.
    pub async fn resolve(&self, host: &str, now: UnixTime) -> Result<Resolved, ResolveError> {
        self.resolve_inner(host, now, 0).await
    }

    /// Like [`Self::resolve`] but from the cache only, without sending
    /// anything: `None` when something needed is not cached. For sync
    /// callers such as a `zrtt_net::client::KeySource` adapter, after a
    /// [`Self::resolve`].
    pub fn resolve_cached(&self, host: &str, now: UnixTime) -> Option<Resolved> {
        let t0 = Instant::now();
        let host_n = record::normalize_name(host);
        let pinned = lock(&self.pinned).get(&host_n).cloned();
        let fqdn = fqdn(&host_n).ok()?;
        let tunnel = fqdn_tunnel(&host_n).ok()?;
        let now_s = now.as_secs();
        let get = |n: &Name, t| self.cached(n, t, now_s, 0).map(Ok);
        let mut g = Gathered {
            https: Some(get(&fqdn, RecordType::HTTPS)?),
            a: Some(get(&fqdn, RecordType::A)?),
            aaaa: Some(get(&fqdn, RecordType::AAAA)?),
            tlsa: match pinned {
                Some(_) => None,
                None => Some(get(&fqdn, RecordType::TLSA)?),
            },
            txt: None,
            tunnel: None,
        };
        if needs_fallback(g.https.as_ref()) {
            g.txt = Some(get(&fqdn, RecordType::TXT)?);
            g.tunnel = Some(get(&tunnel, RecordType::AAAA)?);
        }
        Some(self.assemble(&host_n, now, g, pinned, 0, t0))
    }

    /// Cache entries (name, type, expiry in Unix seconds) with data that
    /// expire within `within` of `now`, soonest first.
    pub fn expiring(&self, now: UnixTime, within: Duration) -> Vec<(String, RecordType, u64)> {
        let limit = now.as_secs().saturating_add(within.as_secs());
        let mut v: Vec<_> = lock(&self.cache)
            .iter()
            .filter(|(_, e)| matches!(e.answer, Answer::Records(_)) && e.expires <= limit)
            .map(|((n, t), e)| (n.clone(), *t, e.expires))
            .collect();
        v.sort_by_key(|x| x.2);
        v
    }

    /// Re-resolve every host with cached data expiring within `within` of
    /// `now`, refreshing the entries that expire by then (before they do,
    /// so clients never wait for a cold lookup). Returns one result per host.
    pub async fn prefetch(
        &self,
        now: UnixTime,
        within: Duration,
    ) -> Vec<(String, Result<Resolved, ResolveError>)> {
        let mut hosts: Vec<String> = Vec::new();
        for (name, _, _) in self.expiring(now, within) {
            let n = name.trim_end_matches('.');
            if n.starts_with("_zrttpv.") {
                continue; // verifier keys: their users refresh them
            }
            let h = n.strip_prefix("_zrtt.").unwrap_or(n).to_owned();
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        let mut out = Vec::with_capacity(hosts.len());
        for h in hosts {
            let r = self.resolve_inner(&h, now, within.as_secs()).await;
            out.push((h, r));
        }
        out
    }

    /// Drop everything cached.
    pub fn clear_cache(&self) {
        lock(&self.cache).clear();
    }

    /// The published keys of the provenance verifier `name` at `now`: TXT
    /// and (unless a certificate is pinned for `name`) TLSA at
    /// `_zrttpv.<name>`, in parallel, from the cache where possible. Each
    /// verifier key record is verified against the pinned certificate or a
    /// TLSA certificate that chains to the roots and covers `name`; nothing
    /// unverifiable, expired or not yet valid is returned. Fails only when
    /// the TXT lookup itself fails.
    pub async fn resolve_verifier(
        &self,
        name: &str,
        now: UnixTime,
    ) -> Result<ResolvedVerifier, ResolveError> {
        let t0 = Instant::now();
        let name_n = record::normalize_name(name);
        let bad = |reason: String| ResolveError::BadName {
            host: name.to_owned(),
            reason,
        };
        record::validate_name(&name_n).map_err(|e| bad(e.to_string()))?;
        let owner = fqdn(&encodings::verifier_owner(&name_n)).map_err(bad)?;
        let pinned = lock(&self.pinned).get(&name_n).cloned();
        let now_s = now.as_secs();
        let cached = |t| self.cached(&owner, t, now_s, 0);
        let (txt, tlsa) = tokio::join!(
            self.fetch(&owner, RecordType::TXT, cached(RecordType::TXT), now_s),
            async {
                if pinned.is_none() {
                    Some(
                        self.fetch(&owner, RecordType::TLSA, cached(RecordType::TLSA), now_s)
                            .await,
                    )
                } else {
                    None
                }
            }
        );
        let mut lookups = txt.1;
        let mut failed = Vec::new();
        let txt = match txt.0 {
            Ok(Answer::Records(v)) => v,
            Ok(Answer::Negative) => Vec::new(),
            Err(error) => {
                return Err(ResolveError::Lookup {
                    host: name_n,
                    error,
                })
            }
        };
        let tlsa = match tlsa {
            None => Vec::new(),
            Some((r, n)) => {
                lookups += n;
                match r {
                    Ok(Answer::Records(v)) => v,
                    Ok(Answer::Negative) => Vec::new(),
                    Err(e) => {
                        failed.push((RecordType::TLSA, e));
                        Vec::new()
                    }
                }
            }
        };
        let mut refused = Vec::new();
        let mut cands: Vec<VerifierKeyRecord> = Vec::new();
        for rd in &txt {
            let Some(bytes) = rdata_bytes(rd) else {
                continue;
            };
            if !encodings::txt_is_zrtt_verifier(&bytes) {
                continue;
            }
            match encodings::decode_verifier_txt_rdata(&bytes) {
                Ok(r) if !cands.contains(&r) => cands.push(r),
                Ok(_) => {}
                Err(e) => refused.push(Refusal {
                    what: Refused::Encoding(Encoding::VerifierTxt),
                    reason: RefusalReason::Record(e),
                }),
            }
        }
        let certs = self.trusted_certs(&name_n, &tlsa, pinned, now, &mut refused);
        let mut keys: Vec<VerifiedVerifierKeyRecord> = Vec::new();
        for rec in &cands {
            let what = Refused::VerifierKey {
                verifier_id: rec.body.verifier_id,
            };
            let reason = match certs.iter().find(|c| c.0 == rec.body.cert_sha256) {
                None => RefusalReason::NoCertificate(record::hex(&rec.body.cert_sha256[..4])),
                Some((_, _, Err(e))) => RefusalReason::Untrusted(e.clone()),
                Some((_, der, Ok(()))) => match rec.verify(der, &name_n, now) {
                    Ok(v) => {
                        keys.push(v);
                        continue;
                    }
                    Err(e) => RefusalReason::Record(e),
                },
            };
            refused.push(Refusal { what, reason });
        }
        // Two different verified records for one key id: neither is used.
        let dup: Vec<u32> = keys
            .iter()
            .enumerate()
            .filter(|(i, k)| {
                keys[..*i]
                    .iter()
                    .any(|p| p.body().verifier_id == k.body().verifier_id)
            })
            .map(|(_, k)| k.body().verifier_id)
            .collect();
        keys.retain(|k| {
            let d = dup.contains(&k.body().verifier_id);
            if d {
                refused.push(Refusal {
                    what: Refused::VerifierKey {
                        verifier_id: k.body().verifier_id,
                    },
                    reason: RefusalReason::DuplicateKeyId,
                });
            }
            !d
        });
        keys.sort_by_key(|k| std::cmp::Reverse(k.body().not_after));
        let cert_der = keys
            .first()
            .and_then(|k| certs.iter().find(|c| c.0 == k.body().cert_sha256))
            .or_else(|| certs.iter().find(|c| c.2.is_ok()))
            .map(|c| c.1.clone());
        Ok(ResolvedVerifier {
            name: name_n,
            keys,
            refused,
            cert_der,
            lookups,
            failed,
            elapsed: t0.elapsed(),
        })
    }

    /// Certificates for `name`: the pinned one, or the TLSA `3 0 0`
    /// certificates in `tlsa` with whether each chains to the roots (TLSA
    /// `2 0 0` serve as intermediates) and covers `name`. Unusable TLSA
    /// records are added to `refused`.
    fn trusted_certs(
        &self,
        name: &str,
        tlsa: &[RData],
        pinned: Option<Vec<u8>>,
        now: UnixTime,
        refused: &mut Vec<Refusal>,
    ) -> Vec<CertEntry> {
        let mut certs: Vec<CertEntry> = Vec::new();
        if let Some(p) = pinned {
            certs.push((record::sha256(&p), p, Ok(())));
            return certs;
        }
        let mut ee: Vec<Vec<u8>> = Vec::new();
        let mut inter: Vec<Vec<u8>> = Vec::new();
        for rd in tlsa {
            let Some(bytes) = rdata_bytes(rd) else {
                continue;
            };
            match bytes.get(..3) {
                Some([2, 0, 0]) => inter.push(bytes[3..].to_vec()),
                Some([3, 0, 0]) => match encodings::decode_tlsa_rdata(&bytes) {
                    Ok(der) => ee.push(der.to_vec()),
                    Err(e) => refused.push(Refusal {
                        what: Refused::Certificate(short_hash(&bytes[3..])),
                        reason: RefusalReason::Record(e),
                    }),
                },
                _ => {}
            }
        }
        for der in ee {
            let check = self.trust.check(&der, &inter, name, now);
            if let Err(e) = &check {
                refused.push(Refusal {
                    what: Refused::Certificate(short_hash(&der)),
                    reason: RefusalReason::Chain(e.clone()),
                });
            }
            certs.push((record::sha256(&der), der, check));
        }
        certs
    }

    async fn resolve_inner(
        &self,
        host: &str,
        now: UnixTime,
        refresh_within: u64,
    ) -> Result<Resolved, ResolveError> {
        let t0 = Instant::now();
        let host_n = record::normalize_name(host);
        let bad = |reason: String| ResolveError::BadName {
            host: host.to_owned(),
            reason,
        };
        record::validate_name(&host_n).map_err(|e| bad(e.to_string()))?;
        let fqdn = fqdn(&host_n).map_err(bad)?;
        let tunnel = fqdn_tunnel(&host_n).map_err(bad)?;
        let pinned = lock(&self.pinned).get(&host_n).cloned();
        let now_s = now.as_secs();
        let cached = |n: &Name, t| self.cached(n, t, now_s, refresh_within);

        // One parallel batch: HTTPS, A, AAAA and (unless pinned) TLSA.
        let want_tlsa = pinned.is_none();
        let (https, a, aaaa, tlsa) = tokio::join!(
            self.fetch(
                &fqdn,
                RecordType::HTTPS,
                cached(&fqdn, RecordType::HTTPS),
                now_s
            ),
            self.fetch(&fqdn, RecordType::A, cached(&fqdn, RecordType::A), now_s),
            self.fetch(
                &fqdn,
                RecordType::AAAA,
                cached(&fqdn, RecordType::AAAA),
                now_s
            ),
            async {
                if want_tlsa {
                    Some(
                        self.fetch(
                            &fqdn,
                            RecordType::TLSA,
                            cached(&fqdn, RecordType::TLSA),
                            now_s,
                        )
                        .await,
                    )
                } else {
                    None
                }
            }
        );
        let mut lookups = https.1 + a.1 + aaaa.1;
        let tlsa = tlsa.map(|(r, n)| {
            lookups += n;
            r
        });
        let mut g = Gathered {
            https: Some(https.0),
            a: Some(a.0),
            aaaa: Some(aaaa.0),
            tlsa,
            txt: None,
            tunnel: None,
        };
        // Nothing answered: the server is unreachable or broken; no fallback.
        let nothing_answered = [&g.https, &g.a, &g.aaaa, &g.tlsa]
            .into_iter()
            .flatten()
            .all(|r| r.is_err());
        if let (true, Some(Err(e))) = (nothing_answered, &g.a) {
            return Err(ResolveError::Lookup {
                host: host_n,
                error: e.clone(),
            });
        }
        // Fallback encodings, only when HTTPS carries no keys (none, a
        // stripped SvcParam, undecodable, or a failed HTTPS lookup while the
        // server answers other types).
        if needs_fallback(g.https.as_ref()) {
            let (txt, tun) = tokio::join!(
                self.fetch(
                    &fqdn,
                    RecordType::TXT,
                    cached(&fqdn, RecordType::TXT),
                    now_s
                ),
                self.fetch(
                    &tunnel,
                    RecordType::AAAA,
                    cached(&tunnel, RecordType::AAAA),
                    now_s
                ),
            );
            lookups += txt.1 + tun.1;
            g.txt = Some(txt.0);
            g.tunnel = Some(tun.0);
        }
        Ok(self.assemble(&host_n, now, g, pinned, lookups, t0))
    }

    /// A cached answer usable at `now` that does not expire within
    /// `refresh_within` seconds.
    fn cached(&self, name: &Name, t: RecordType, now: u64, refresh_within: u64) -> Option<Answer> {
        let key = (name.to_lowercase().to_ascii(), t);
        let cache = lock(&self.cache);
        let e = cache.get(&key)?;
        (e.expires > now.saturating_add(refresh_within)).then(|| e.answer.clone())
    }

    /// The cached answer, or a query (then cached); with the number of
    /// messages sent.
    async fn fetch(
        &self,
        name: &Name,
        t: RecordType,
        cached: Option<Answer>,
        now: u64,
    ) -> (Fetched, usize) {
        if let Some(a) = cached {
            return (Ok(a), 0);
        }
        let (res, sent) = self.query(name, t).await;
        let res = res.map(|msg| {
            let (answer, ttl) = self.interpret(&msg, name, t);
            let expires = self.expiry(&answer, ttl, now);
            self.store(name, t, answer.clone(), expires, now);
            answer
        });
        (res, sent)
    }

    /// The answer's RRset for `name`/`t` (following CNAMEs) and its TTL, or
    /// a negative answer and its negative TTL.
    fn interpret(&self, msg: &Message, name: &Name, t: RecordType) -> (Answer, u32) {
        let mut owners = vec![name.clone()];
        // CNAME chains, bounded.
        for _ in 0..8 {
            let Some(last) = owners.last().cloned() else {
                break;
            };
            let next = msg.answers.iter().find_map(|r| match &r.data {
                RData::CNAME(c) if r.name == last && t != RecordType::CNAME => Some(c.0.clone()),
                _ => None,
            });
            match next {
                Some(n) if !owners.contains(&n) => owners.push(n),
                _ => break,
            }
        }
        let rrs: Vec<&Record> = msg
            .answers
            .iter()
            .filter(|r| r.record_type() == t && owners.contains(&r.name))
            .collect();
        if rrs.is_empty() {
            let ttl = msg
                .authorities
                .iter()
                .find_map(|r| match &r.data {
                    RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                    _ => None,
                })
                .unwrap_or(self.cfg.negative_ttl);
            return (Answer::Negative, ttl);
        }
        let ttl = rrs.iter().map(|r| r.ttl).min().unwrap_or(0);
        (
            Answer::Records(rrs.iter().map(|r| r.data.clone()).collect()),
            ttl,
        )
    }

    /// Expiry: TTL, shortened to the validity of key records and
    /// certificates carried.
    fn expiry(&self, answer: &Answer, ttl: u32, now: u64) -> u64 {
        let mut exp = now.saturating_add(u64::from(ttl.min(self.cfg.max_ttl)));
        if let Answer::Records(rds) = answer {
            for rd in rds {
                if let Some(na) = validity_end(rd) {
                    exp = exp.min(na);
                }
            }
        }
        exp
    }

    fn store(&self, name: &Name, t: RecordType, answer: Answer, expires: u64, now: u64) {
        if expires <= now {
            return;
        }
        let mut cache = lock(&self.cache);
        if cache.len() >= self.cfg.max_entries {
            cache.retain(|_, e| e.expires > now);
            while cache.len() >= self.cfg.max_entries {
                let Some(k) = cache
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                cache.remove(&k);
            }
        }
        cache.insert(
            (name.to_lowercase().to_ascii(), t),
            Entry { answer, expires },
        );
    }

    /// One question: UDP (bounded retries), then TCP if truncated. Returns
    /// the answer (NOERROR or NXDOMAIN) and the number of messages sent.
    async fn query(&self, name: &Name, t: RecordType) -> (Result<Message, LookupError>, usize) {
        let server = self.cfg.server;
        let mut sent = 0usize;
        let mut m = Message::new(
            crate::client::random_id(),
            MessageType::Query,
            OpCode::Query,
        );
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(name.clone(), t));
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        m.set_edns(edns);
        let bytes = match m.to_vec() {
            Ok(b) => b,
            Err(e) => {
                return (
                    Err(LookupError::BadAnswer {
                        server,
                        reason: format!("cannot encode the question: {e}"),
                    }),
                    0,
                )
            }
        };
        let udp = udp_exchange(
            server,
            &bytes,
            &m,
            self.cfg.timeout,
            self.cfg.udp_attempts.max(1),
            &mut sent,
        )
        .await;
        let msg = match udp {
            Ok(msg) if msg.metadata.truncation => {
                sent += 1;
                match tcp_exchange(server, &bytes, &m, self.cfg.timeout).await {
                    Ok(msg) if msg.metadata.truncation => Err(LookupError::Truncated { server }),
                    other => other,
                }
            }
            other => other,
        };
        let msg = msg.and_then(|msg| match msg.metadata.response_code {
            ResponseCode::NoError | ResponseCode::NXDomain => Ok(msg),
            rcode => Err(LookupError::Rcode { server, rcode }),
        });
        (msg, sent)
    }

    /// Build the result from per-type answers: decode, check certificates,
    /// verify records.
    fn assemble(
        &self,
        host: &str,
        now: UnixTime,
        g: Gathered,
        pinned: Option<Vec<u8>>,
        lookups: usize,
        t0: Instant,
    ) -> Resolved {
        let mut refused = Vec::new();
        let mut failed = Vec::new();
        let mut note_fail = |t: RecordType, r: &Option<Fetched>| -> Vec<RData> {
            match r {
                Some(Ok(Answer::Records(v))) => v.clone(),
                Some(Ok(Answer::Negative)) | None => Vec::new(),
                Some(Err(e)) => {
                    failed.push((t, e.clone()));
                    Vec::new()
                }
            }
        };
        let https = note_fail(RecordType::HTTPS, &g.https);
        let a = note_fail(RecordType::A, &g.a);
        let aaaa = note_fail(RecordType::AAAA, &g.aaaa);
        let tlsa = note_fail(RecordType::TLSA, &g.tlsa);
        let txt = note_fail(RecordType::TXT, &g.txt);
        let tunnel = note_fail(RecordType::AAAA, &g.tunnel);
        for (enc, r) in [
            (Encoding::Https, &g.https),
            (Encoding::Txt, &g.txt),
            (Encoding::AaaaTunnel, &g.tunnel),
        ] {
            if let Some(Err(e)) = r {
                refused.push(Refusal {
                    what: Refused::Encoding(enc),
                    reason: RefusalReason::Lookup(e.to_string()),
                });
            }
        }

        // Addresses.
        let mut addrs: Vec<IpAddr> = Vec::new();
        for rd in a.iter().chain(&aaaa) {
            match rd {
                RData::A(x) => addrs.push(IpAddr::V4(x.0)),
                RData::AAAA(x) => addrs.push(IpAddr::V6(x.0)),
                _ => {}
            }
        }

        // Candidate records: HTTPS first, then the fallbacks.
        let mut cands: Vec<(KeyRecord, Encoding)> = Vec::new();
        let mut hints: Vec<IpAddr> = Vec::new();
        for rd in &https {
            let Some(bytes) = rdata_bytes(rd) else {
                continue;
            };
            let svcb = match SvcbRdata::decode(&bytes) {
                Ok(s) => s,
                Err(e) => {
                    refused.push(Refusal {
                        what: Refused::Encoding(Encoding::Https),
                        reason: RefusalReason::Record(e.into()),
                    });
                    continue;
                }
            };
            hints.extend(svcb.ipv4_hints().into_iter().map(IpAddr::V4));
            if let Some(v6) = svcb.param(SVC_IPV6HINT) {
                hints.extend(v6.chunks_exact(16).filter_map(|c| {
                    <[u8; 16]>::try_from(c)
                        .ok()
                        .map(|b| IpAddr::V6(Ipv6Addr::from(b)))
                }));
            }
            match svcb.zrtt_records() {
                Ok(Some(list)) => cands.extend(list.into_iter().map(|r| (r, Encoding::Https))),
                Ok(None) => {}
                Err(e) => refused.push(Refusal {
                    what: Refused::Encoding(Encoding::Https),
                    reason: RefusalReason::Record(e),
                }),
            }
        }
        if addrs.is_empty() {
            addrs = hints;
        }
        for rd in &txt {
            let Some(bytes) = rdata_bytes(rd) else {
                continue;
            };
            if !encodings::txt_is_zrtt(&bytes) {
                continue;
            }
            match encodings::decode_txt_rdata(&bytes) {
                Ok(r) => cands.push((r, Encoding::Txt)),
                Err(e) => refused.push(Refusal {
                    what: Refused::Encoding(Encoding::Txt),
                    reason: RefusalReason::Record(e),
                }),
            }
        }
        let tun: Vec<Ipv6Addr> = tunnel
            .iter()
            .filter_map(|rd| match rd {
                RData::AAAA(x) => Some(x.0),
                _ => None,
            })
            .collect();
        if !tun.is_empty() {
            match encodings::decode_aaaa_tunnel(&tun) {
                Ok(list) => cands.extend(list.into_iter().map(|r| (r, Encoding::AaaaTunnel))),
                Err(e) => refused.push(Refusal {
                    what: Refused::Encoding(Encoding::AaaaTunnel),
                    reason: RefusalReason::Record(e),
                }),
            }
        }

        // Certificates: pinned, or TLSA 3 0 0 that chains to the roots.
        // (sha256, der, Ok = trusted / Err = why not)
        let certs = self.trusted_certs(host, &tlsa, pinned, now, &mut refused);

        // Verify each candidate against its certificate. The same record in
        // two encodings counts once; a forged copy under a genuine key id
        // fails on its own and does not shadow the genuine one.
        let mut keys: Vec<(VerifiedKeyRecord, Encoding)> = Vec::new();
        for (i, (rec, enc)) in cands.iter().enumerate() {
            if cands[..i].iter().any(|(prev, _)| prev == rec) {
                continue;
            }
            let what = Refused::Key {
                key_id: rec.body.key_id,
                encoding: *enc,
            };
            let reason = match certs.iter().find(|c| c.0 == rec.body.cert_sha256) {
                None => RefusalReason::NoCertificate(record::hex(&rec.body.cert_sha256[..4])),
                Some((_, _, Err(e))) => RefusalReason::Untrusted(e.clone()),
                Some((_, der, Ok(()))) => match rec.verify(der, host, now) {
                    Ok(v) => {
                        keys.push((v, *enc));
                        continue;
                    }
                    Err(e) => RefusalReason::Record(e),
                },
            };
            refused.push(Refusal { what, reason });
        }
        // Two different verified records under one key id: neither is
        // safe to use.
        let dup_ids: Vec<u32> = keys
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| {
                keys[..*i]
                    .iter()
                    .any(|(p, _)| p.body().key_id == k.body().key_id)
            })
            .map(|(_, (k, _))| k.body().key_id)
            .collect();
        keys.retain(|(k, enc)| {
            let dup = dup_ids.contains(&k.body().key_id);
            if dup {
                refused.push(Refusal {
                    what: Refused::Key {
                        key_id: k.body().key_id,
                        encoding: *enc,
                    },
                    reason: RefusalReason::DuplicateKeyId,
                });
            }
            !dup
        });
        keys.sort_by_key(|(k, _)| std::cmp::Reverse(k.body().not_after));
        let cert_der = keys
            .first()
            .and_then(|(k, _)| certs.iter().find(|c| c.0 == k.body().cert_sha256))
            .or_else(|| certs.iter().find(|c| c.2.is_ok()))
            .map(|c| c.1.clone());
        Resolved {
            host: host.to_owned(),
            addrs,
            key_encoding: keys.first().map(|k| k.1),
            keys: keys.into_iter().map(|k| k.0).collect(),
            refused,
            cert_der,
            lookups,
            failed,
            elapsed: t0.elapsed(),
        }
    }
}

/// Whether the HTTPS answer carries no decodable zrtt records.
fn needs_fallback(https: Option<&Fetched>) -> bool {
    let Some(Ok(Answer::Records(rds))) = https else {
        return true;
    };
    !rds.iter().any(|rd| {
        rdata_bytes(rd)
            .and_then(|b| SvcbRdata::decode(&b).ok())
            .is_some_and(|s| matches!(s.zrtt_records(), Ok(Some(_))))
    })
}

/// The earliest end of validity among key records or TLSA certificates in
/// one RDATA, if it carries any.
fn validity_end(rd: &RData) -> Option<u64> {
    let bytes = rdata_bytes(rd)?;
    let list = match rd {
        RData::HTTPS(_) | RData::SVCB(_) => {
            SvcbRdata::decode(&bytes).ok()?.zrtt_records().ok()??
        }
        RData::TXT(_) if encodings::txt_is_zrtt_verifier(&bytes) => {
            return encodings::decode_verifier_txt_rdata(&bytes)
                .ok()
                .map(|r| r.body.not_after);
        }
        RData::TXT(_) if encodings::txt_is_zrtt(&bytes) => {
            vec![encodings::decode_txt_rdata(&bytes).ok()?]
        }
        RData::TLSA(_) => {
            let der = encodings::decode_tlsa_rdata(&bytes).ok()?;
            return record::cert::validity(der).ok().map(|(_, na)| na);
        }
        _ => return None,
    };
    list.iter().map(|r| r.body.not_after).min()
}

fn rdata_bytes(rd: &RData) -> Option<Vec<u8>> {
    rd.to_bytes().ok()
}

fn short_hash(der: &[u8]) -> String {
    record::hex(&record::sha256(der)[..4])
}

fn fqdn(host: &str) -> Result<Name, String> {
    let mut n = Name::from_ascii(host).map_err(|e| e.to_string())?;
    n.set_fqdn(true);
    Ok(n)
}

fn fqdn_tunnel(host: &str) -> Result<Name, String> {
    fqdn(&encodings::aaaa_tunnel_owner(host))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Parse and check an answer against the question.
fn check_answer(server: SocketAddr, bytes: &[u8], q: &Message) -> Result<Message, LookupError> {
    let bad = |reason: String| LookupError::BadAnswer { server, reason };
    let msg = Message::from_vec(bytes).map_err(|e| bad(e.to_string()))?;
    if msg.metadata.message_type != MessageType::Response {
        return Err(bad("not a response".into()));
    }
    if msg.queries != q.queries {
        return Err(bad("answer to another question".into()));
    }
    Ok(msg)
}

async fn udp_exchange(
    server: SocketAddr,
    bytes: &[u8],
    q: &Message,
    timeout: Duration,
    attempts: u32,
    sent: &mut usize,
) -> Result<Message, LookupError> {
    let io = |e: std::io::Error| LookupError::Io {
        server,
        reason: e.to_string(),
    };
    let bind: SocketAddr = if server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = tokio::net::UdpSocket::bind(bind).await.map_err(io)?;
    sock.connect(server).await.map_err(io)?;
    let id = q.metadata.id.to_be_bytes();
    let mut buf = vec![0u8; 65535];
    let mut last_bad = None;
    for _ in 0..attempts {
        sock.send(bytes).await.map_err(io)?;
        *sent += 1;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => break,
                Ok(Err(e)) => return Err(io(e)),
                Ok(Ok(n)) => n,
            };
            let Some(got) = buf.get(..n) else { continue };
            // Datagrams with another id are strays (or spoofing attempts).
            if got.len() < 12 || got[..2] != id {
                continue;
            }
            match check_answer(server, got, q) {
                Ok(m) => return Ok(m),
                Err(e) => last_bad = Some(e),
            }
        }
    }
    Err(last_bad.unwrap_or(LookupError::Timeout {
        server,
        attempts,
        timeout,
    }))
}

async fn tcp_exchange(
    server: SocketAddr,
    bytes: &[u8],
    q: &Message,
    timeout: Duration,
) -> Result<Message, LookupError> {
    let io = |e: std::io::Error| LookupError::Io {
        server,
        reason: e.to_string(),
    };
    let work = async {
        let mut s = tokio::net::TcpStream::connect(server).await.map_err(io)?;
        let len = u16::try_from(bytes.len()).map_err(|_| LookupError::BadAnswer {
            server,
            reason: "question over 65535 bytes".into(),
        })?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(bytes);
        s.write_all(&framed).await.map_err(io)?;
        loop {
            let mut lb = [0u8; 2];
            s.read_exact(&mut lb).await.map_err(io)?;
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lb))];
            s.read_exact(&mut buf).await.map_err(io)?;
            if buf.len() >= 12 && buf[..2] == q.metadata.id.to_be_bytes() {
                return check_answer(server, &buf, q);
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| LookupError::Timeout {
            server,
            attempts: 1,
            timeout,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use zrtt_proto::testing;

    fn txt(rec: &KeyRecord) -> RData {
        crate::records::rdata(RecordType::TXT, &encodings::txt_rdata(rec)).unwrap()
    }

    fn gathered(txt_records: Vec<RData>) -> Gathered {
        Gathered {
            https: Some(Ok(Answer::Negative)),
            a: Some(Ok(Answer::Negative)),
            aaaa: Some(Ok(Answer::Negative)),
            tlsa: None,
            txt: Some(Ok(Answer::Records(txt_records))),
            tunnel: Some(Ok(Answer::Negative)),
        }
    }

    #[test]
    fn two_verified_records_under_one_key_id_are_both_refused() {
        let cert = testing::ed25519_cert();
        let rng = ring::rand::SystemRandom::new();
        let signer = testing::ed25519_signer();
        let a = testing::body(&testing::semi_static("a"), &cert)
            .sign(&signer, &rng)
            .unwrap();
        let mut b_body = testing::body(&testing::semi_static("b"), &cert);
        b_body.key_id = a.body.key_id;
        let b = b_body.sign(&signer, &rng).unwrap();
        let c = testing::body(&testing::semi_static("c"), &cert)
            .sign(&signer, &rng)
            .unwrap();
        let r = Resolver::new(
            ResolverConfig::new("127.0.0.1:53".parse().unwrap()),
            Trust::none(),
        );
        let now = UnixTime::from_secs(testing::T0 + 10);
        let g = gathered(vec![txt(&a), txt(&b), txt(&c), txt(&a)]);
        let got = r.assemble(testing::NAME, now, g, Some(cert.clone()), 0, Instant::now());
        // c is used; a and b (same id, both validly signed) are not; the
        // repeated a counts once.
        assert_eq!(got.keys.len(), 1);
        assert_eq!(got.keys[0].body().key_id, c.body.key_id);
        let dups: Vec<_> = got
            .refused
            .iter()
            .filter(|f| f.reason == RefusalReason::DuplicateKeyId)
            .collect();
        assert_eq!(dups.len(), 2, "{:?}", got.refused);
        assert_eq!(got.refused.len(), 2);
        // Without the duplicate, a is used.
        let g = gathered(vec![txt(&a)]);
        let got = r.assemble(testing::NAME, now, g, Some(cert), 0, Instant::now());
        assert_eq!(got.keys.len(), 1);
        assert!(got.refused.is_empty());
    }

    #[test]
    fn resolv_conf() {
        let text = "# comment\nsearch example.com\nnameserver fe80::1%eth0\n  nameserver 10.0.0.53 # x\nnameserver 10.0.0.54\n";
        assert_eq!(
            parse_resolv_conf(text),
            Some("10.0.0.53:53".parse().unwrap())
        );
        assert_eq!(
            parse_resolv_conf("nameserver 2001:db8::53\n"),
            Some("[2001:db8::53]:53".parse().unwrap())
        );
        assert_eq!(parse_resolv_conf("options ndots:2\n"), None);
        assert_eq!(parse_resolv_conf("nameserver\n"), None);
    }
}
