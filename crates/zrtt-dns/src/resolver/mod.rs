//! Verified key resolution for clients (issue 3 part 4).
//!
//! For a host, [`Resolver::resolve`] asks the configured recursive resolvers
//! (every `nameserver` of `/etc/resolv.conf`, or configured addresses) for
//! the host's HTTPS, A, AAAA and TLSA records **in parallel**, so address
//! and key cost the same round trip as the address alone. Only when the
//! HTTPS answer carries no `key65380` (no HTTPS record, or a resolver
//! stripped the unknown SvcParam, or it does not decode) does it ask for the
//! fallback encodings, TXT at the host and the AAAA tunnel at
//! `zrtt-tunnel.<host>`, again in parallel.
//!
//! One job a module, as in hickory-resolver:
//!
//! - `config`: [`ResolverConfig`], the name servers and timeouts, and
//!   reading `resolv.conf`;
//! - `exchange`: one question to the name servers: UDP with EDNS0
//!   (payload [`EDNS_PAYLOAD`]), the servers in order with a bounded wait
//!   per try and a bounded number of rounds, TCP when the answer is
//!   truncated; every answer must match the question and id;
//! - `cache`: answers cached per (name, type) for their TTL, shortened to
//!   the validity of the records or certificates they carry; negative
//!   answers for the SOA minimum (RFC 2308) or
//!   [`ResolverConfig::negative_ttl`]. [`Resolver::expiring`] and
//!   [`Resolver::prefetch`] refresh entries before they expire;
//! - `trust`: [`Trust`], the CA roots TLSA certificates must chain to;
//! - `assemble`: answers into verified key records. Key records are
//!   verified with [`KeyRecord::verify`] against the signing certificate,
//!   which is either pinned by the caller ([`Resolver::pin_cert`], e.g. from
//!   configuration or from an earlier TLS connection) or taken from the TLSA
//!   `3 0 0` record at the host name; a TLSA certificate must chain to the
//!   configured CA roots for server authentication and cover the host name
//!   (TLSA `2 0 0` records in the same RRset are used as intermediates).
//!   Nothing expired, not yet valid or unverifiable is handed out: each
//!   refused record comes back in [`Resolved::refused`] with its reason;
//! - `verifier`: [`Resolver::resolve_verifier`] looks up a provenance
//!   verifier's published keys the same way: TXT and TLSA at
//!   `_zrttpv.<name>` in parallel, each `v=zrttpv1` record verified with
//!   [`VerifierKeyRecord::verify`] against the pinned certificate for the
//!   name or a TLSA certificate that chains to the roots and covers the name.
//!
//! The clock is always passed in.
//!
//! [`KeyRecord::verify`]: zrtt_proto::record::KeyRecord::verify
//! [`VerifierKeyRecord::verify`]: zrtt_proto::record::VerifierKeyRecord::verify

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, RData, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use zrtt_proto::record::encodings;
use zrtt_proto::record::{self, VerifiedKeyRecord, VerifiedVerifierKeyRecord};
use zrtt_proto::UnixTime;

mod assemble;
mod cache;
mod config;
mod exchange;
mod trust;
mod verifier;

pub use crate::client::EDNS_PAYLOAD;
pub use assemble::{Encoding, RecordRefusal, RefusalReason, Refused};
pub use config::{ResolverConfig, RESOLV_CONF};
pub use trust::{system_roots, Trust};

use assemble::{assemble, needs_fallback, Gathered};
use cache::{Answer, Cache, Fetched};

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
    pub refused: Vec<RecordRefusal>,
    /// The trusted certificate that signs `keys[0]` (or, without keys, the
    /// first trusted certificate).
    pub cert_der: Option<Vec<u8>>,
    /// Where `keys[0]` came from.
    pub key_encoding: Option<Encoding>,
    /// Queries sent to the servers (0: everything came from the cache);
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
    pub refused: Vec<RecordRefusal>,
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
    /// Several servers were asked and none gave an answer: why, for each
    /// one, in the configured order.
    #[error("{}", join(.0))]
    EveryServer(Vec<LookupError>),
    /// The configuration lists no server.
    #[error("no name server configured")]
    NoServers,
}

fn join(errors: &[LookupError]) -> String {
    let v: Vec<String> = errors.iter().map(ToString::to_string).collect();
    v.join("; ")
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

/// A caching, verifying resolver for zrtt key records. Cheap to share
/// (`Arc<Resolver>`); all methods take `&self`.
#[derive(Debug)]
pub struct Resolver {
    cfg: ResolverConfig,
    trust: Trust,
    pinned: Mutex<HashMap<String, Vec<u8>>>,
    cache: Cache,
}

impl Resolver {
    /// A resolver asking `cfg.servers`, trusting `trust` for TLSA
    /// certificates.
    pub fn new(cfg: ResolverConfig, trust: Trust) -> Self {
        Self {
            cache: Cache::new(&cfg),
            cfg,
            trust,
            pinned: Mutex::new(HashMap::new()),
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

    fn pinned(&self, name: &str) -> Option<Vec<u8>> {
        lock(&self.pinned).get(name).cloned()
    }

    /// Resolve `host` at `now`: addresses and verified keys, from the cache
    /// where possible (see the module docs). Fails only when nothing at all
    /// could be looked up.
    pub async fn resolve(&self, host: &str, now: UnixTime) -> Result<Resolved, ResolveError> {
        self.resolve_inner(host, now, 0, None).await
    }

    /// Like [`Self::resolve`], and calls `on_addresses` with the host's
    /// addresses as soon as the A or the AAAA answer brings some (whichever
    /// first; the result has both), before the key records. A QNAME-minimising resolver answers HTTPS and TLSA
    /// for a name it has not seen one probe later than A (docs/DNS.md §6a),
    /// so a client can start TLS on the address while the keys are on their
    /// way and use whichever is ready first. Not called when no address came
    /// back (the result then says why).
    pub async fn resolve_addresses_first(
        &self,
        host: &str,
        now: UnixTime,
        on_addresses: impl FnOnce(Vec<IpAddr>) + Send,
    ) -> Result<Resolved, ResolveError> {
        self.resolve_inner(host, now, 0, Some(Box::new(on_addresses)))
            .await
    }

    /// Like [`Self::resolve`] but from the cache only, without sending
    /// anything: `None` when something needed is not cached. For sync
    /// callers such as a `zrtt_net::client::KeySource` adapter, after a
    /// [`Self::resolve`].
    pub fn resolve_cached(&self, host: &str, now: UnixTime) -> Option<Resolved> {
        self.cached(host, now, true)
    }

    /// Like [`Self::resolve_cached`], but the addresses may have expired
    /// (they live minutes, key records hours): the keys held for `host`,
    /// with whatever addresses are still cached. For the DNS shortcut,
    /// which needs a key and no address (docs/DNS.md §8).
    pub fn keys_cached(&self, host: &str, now: UnixTime) -> Option<Resolved> {
        self.cached(host, now, false)
    }

    fn cached(&self, host: &str, now: UnixTime, with_addresses: bool) -> Option<Resolved> {
        let t0 = Instant::now();
        let host_n = record::normalize_name(host);
        let pinned = self.pinned(&host_n);
        let fqdn = fqdn(&host_n).ok()?;
        let tunnel = fqdn_tunnel(&host_n).ok()?;
        let now_s = now.as_secs();
        let get = |n: &Name, t| self.cache.get(n, t, now_s, 0).map(Ok);
        let mut g = Gathered {
            https: Some(get(&fqdn, RecordType::HTTPS)?),
            a: match with_addresses {
                true => Some(get(&fqdn, RecordType::A)?),
                false => get(&fqdn, RecordType::A),
            },
            aaaa: match with_addresses {
                true => Some(get(&fqdn, RecordType::AAAA)?),
                false => get(&fqdn, RecordType::AAAA),
            },
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
        Some(assemble(&self.trust, &host_n, now, g, pinned, 0, t0))
    }

    /// Cache entries (name, type, expiry in Unix seconds) with data that
    /// expire within `within` of `now`, soonest first.
    pub fn expiring(&self, now: UnixTime, within: Duration) -> Vec<(String, RecordType, u64)> {
        self.cache.expiring(now, within)
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
            let tunnel = format!("{}.", zrtt_proto::record::encodings::AAAA_TUNNEL_LABEL);
            let h = n.strip_prefix(tunnel.as_str()).unwrap_or(n).to_owned();
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        let mut out = Vec::with_capacity(hosts.len());
        for h in hosts {
            let r = self.resolve_inner(&h, now, within.as_secs(), None).await;
            out.push((h, r));
        }
        out
    }

    /// One question through the configured servers, never cached: the
    /// answer as it came (NOERROR or NXDOMAIN; SERVFAIL, REFUSED and other
    /// codes from every server are errors), over the same exchange as every
    /// lookup. For answers good for one use only, such as the DNS
    /// shortcut's unique names (docs/DNS.md §8).
    pub async fn query_uncached(
        &self,
        name: &str,
        t: RecordType,
    ) -> Result<hickory_proto::op::Message, ResolveError> {
        let n = fqdn(name).map_err(|e| bad_name(name, e))?;
        let (answer, _) = exchange::query(&self.cfg, &n, t).await;
        answer.map_err(|error| ResolveError::Lookup {
            host: name.to_owned(),
            error,
        })
    }

    /// Drop everything cached.
    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    async fn resolve_inner(
        &self,
        host: &str,
        now: UnixTime,
        refresh_within: u64,
        on_addresses: Option<Box<dyn FnOnce(Vec<IpAddr>) + Send + '_>>,
    ) -> Result<Resolved, ResolveError> {
        let t0 = Instant::now();
        let host_n = checked_name(host)?;
        let fqdn = owner_fqdn(host, &host_n)?;
        let tunnel = owner_fqdn(host, &encodings::aaaa_tunnel_owner(&host_n))?;
        let pinned = self.pinned(&host_n);
        let now_s = now.as_secs();
        let cached = |n: &Name, t| self.cache.get(n, t, now_s, refresh_within);

        // One parallel batch: HTTPS, A, AAAA and (unless pinned) TLSA.
        let want_tlsa = pinned.is_none();
        // The first of A and AAAA that brings addresses reports them: a
        // minimising resolver answers AAAA one probe after A, with the keys.
        let report = Mutex::new(on_addresses);
        let reported = |f: &Fetched| {
            let found = addresses_of(f);
            if !found.is_empty() {
                if let Some(report) = lock(&report).take() {
                    report(found);
                }
            }
        };
        let addresses = async {
            tokio::join!(
                async {
                    let a = self
                        .fetch(&fqdn, RecordType::A, cached(&fqdn, RecordType::A), now_s)
                        .await;
                    reported(&a.0);
                    a
                },
                async {
                    let aaaa = self
                        .fetch(
                            &fqdn,
                            RecordType::AAAA,
                            cached(&fqdn, RecordType::AAAA),
                            now_s,
                        )
                        .await;
                    reported(&aaaa.0);
                    aaaa
                },
            )
        };
        let (https, (a, aaaa), tlsa) = tokio::join!(
            self.fetch(
                &fqdn,
                RecordType::HTTPS,
                cached(&fqdn, RecordType::HTTPS),
                now_s
            ),
            addresses,
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
        Ok(assemble(&self.trust, &host_n, now, g, pinned, lookups, t0))
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
        let (res, sent) = exchange::query(&self.cfg, name, t).await;
        (res.map(|msg| self.cache.insert(&msg, name, t, now)), sent)
    }
}

/// The addresses in an A or AAAA answer.
fn addresses_of(f: &Fetched) -> Vec<IpAddr> {
    let Ok(Answer::Records(v)) = f else {
        return Vec::new();
    };
    v.iter()
        .filter_map(|rd| match rd {
            RData::A(x) => Some(IpAddr::V4(x.0)),
            RData::AAAA(x) => Some(IpAddr::V6(x.0)),
            _ => None,
        })
        .collect()
}

fn rdata_bytes(rd: &RData) -> Option<Vec<u8>> {
    rd.to_bytes().ok()
}

fn fqdn(host: &str) -> Result<Name, String> {
    let mut n = Name::from_ascii(host).map_err(|e| e.to_string())?;
    n.set_fqdn(true);
    Ok(n)
}

fn fqdn_tunnel(host: &str) -> Result<Name, String> {
    fqdn(&encodings::aaaa_tunnel_owner(host))
}

/// `name` normalised (lowercase, no trailing dot), or why it is not a DNS
/// name.
fn checked_name(name: &str) -> Result<String, ResolveError> {
    let n = record::normalize_name(name);
    record::validate_name(&n).map_err(|e| bad_name(name, e.to_string()))?;
    Ok(n)
}

/// `owner` (a name derived from `name`) as an FQDN.
fn owner_fqdn(name: &str, owner: &str) -> Result<Name, ResolveError> {
    fqdn(owner).map_err(|reason| bad_name(name, reason))
}

fn bad_name(name: &str, reason: String) -> ResolveError {
    ResolveError::BadName {
        host: name.to_owned(),
        reason,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fuzz entry point (fuzz/fuzz_targets/dns_answer.rs): one DNS message
/// from the network taken as the answer to each question a resolution of
/// `www.example.com` asks (HTTPS, A, AAAA, TLSA, TXT, the AAAA tunnel),
/// through the answer cache (CNAME chains, TTLs, negative answers) and the
/// assembly (decoding, certificates, record verification) with `pinned`
/// as the certificate. Every key it returns is for the name asked and
/// valid at `now`. Returns how many keys verified.
#[doc(hidden)]
pub fn fuzz_dns_answer(data: &[u8], pinned: Option<Vec<u8>>, now: UnixTime) -> usize {
    use hickory_proto::op::Message;
    let Ok(msg) = Message::from_vec(data) else {
        return 0;
    };
    let host = "www.example.com";
    let (Ok(name), Ok(tunnel)) = (fqdn(host), fqdn_tunnel(host)) else {
        return 0;
    };
    let cache = Cache::new(&ResolverConfig::new(SocketAddr::from((
        [192, 0, 2, 53],
        53,
    ))));
    let fetch = |n: &Name, t| Some(Ok(cache.insert(&msg, n, t, now.as_secs())));
    let g = Gathered {
        https: fetch(&name, RecordType::HTTPS),
        a: fetch(&name, RecordType::A),
        aaaa: fetch(&name, RecordType::AAAA),
        tlsa: fetch(&name, RecordType::TLSA),
        txt: fetch(&name, RecordType::TXT),
        tunnel: fetch(&tunnel, RecordType::AAAA),
    };
    let _ = needs_fallback(g.https.as_ref());
    let r = assemble(&Trust::none(), host, now, g, pinned, 6, Instant::now());
    for k in &r.keys {
        assert_eq!(k.body().name, host);
        assert!(k.body().check_validity(now).is_ok());
    }
    r.keys.len()
}

/// A DNS answer carrying every encoding of `records` signed with
/// `cert_der` (a seed of the `dns_answer` fuzz target).
#[doc(hidden)]
pub fn fuzz_dns_answer_seed(records: &[record::KeyRecord], cert_der: &[u8]) -> Vec<u8> {
    use hickory_proto::op::{Message, MessageType, Query};
    let Ok(h) = crate::records::host_records(
        "www.example.com",
        records,
        cert_der,
        300,
        &crate::records::HttpsOptions::default(),
    ) else {
        return Vec::new();
    };
    let mut m = Message::new(1, MessageType::Response, hickory_proto::op::OpCode::Query);
    m.add_query(Query::query(h.host.clone(), RecordType::HTTPS));
    for r in h.https.into_iter().chain(h.txt).chain(h.aaaa).chain(h.tlsa) {
        m.add_answer(r);
    }
    m.to_bytes().unwrap_or_default()
}

#[cfg(test)]
mod fuzz_tests {
    use zrtt_proto::testing;

    /// The seed of the fuzz target reaches record verification; damaged
    /// copies of it never panic.
    #[test]
    fn dns_answer_seed_verifies_and_mutations_do_not_panic() {
        let cert = testing::ed25519_cert();
        let now = zrtt_proto::UnixTime::from_secs(testing::T0 + 100);
        let seed = super::fuzz_dns_answer_seed(&[testing::vector_record()], &cert);
        assert_eq!(super::fuzz_dns_answer(&seed, Some(cert.clone()), now), 1);
        for i in 0..seed.len() {
            let mut m = seed.clone();
            m[i] ^= 0x41;
            super::fuzz_dns_answer(&m, Some(cert.clone()), now);
            super::fuzz_dns_answer(&seed[..i], Some(cert.clone()), now);
        }
    }
}
