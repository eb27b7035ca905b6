//! Pieces shared by the DNS users of the binary: the adapter from
//! `zrtt_dns::resolver` to `zrtt_net::client::KeySource` and the transport
//! flags (clients: `zrtt get`, `zrtt proxy`), and provenance verifier keys
//! learned from DNS (`zrtt gateway --verifier-name`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use zrtt_dns::resolver::{ResolveError, ResolvedVerifier, Resolver};
use zrtt_net::client::KeySource;
use zrtt_proto::provenance::{TrustPolicy, TrustedKey, VerifierKey};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

pub fn parse_dns_server(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .map_err(|_| format!("{s:?}: use ADDR or ADDR:PORT"))
}

/// [`KeySource`] over the resolver's cache: `zrtt-net` does not depend on
/// `zrtt-dns`, so the adapter lives here. `lookup` never sends a query; the
/// caller resolves the host first (it needs the addresses anyway), and the
/// keys are re-checked at the transport's `now`.
pub struct DnsKeySource {
    pub resolver: Arc<Resolver>,
}

impl KeySource for DnsKeySource {
    fn lookup(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord> {
        self.resolver
            .resolve_cached(host, now)?
            .keys
            .into_iter()
            .next()
    }

    fn verify_retry(
        &self,
        host: &str,
        records: &[KeyRecord],
        now: UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        // The certificate the resolver trusted (pinned, or TLSA chained to the roots).
        let cert = self.resolver.resolve_cached(host, now)?.cert_der?;
        records
            .iter()
            .filter_map(|r| r.verify(&cert, host, now).ok())
            .max_by_key(|v| v.body().not_after)
    }
}

/// How the client may use zrtt, shared by `zrtt get` and `zrtt proxy`.
#[derive(clap::Args, Debug)]
pub struct ClientFlags {
    /// Do not put the first flight in the SYN.
    #[arg(long)]
    no_fast_open: bool,
    /// Never send the request as early data.
    #[arg(long)]
    no_early_data: bool,
    /// Do not fall back to TLS for hosts with a key (`get` fails, `proxy` answers 502).
    #[arg(long)]
    zrtt_only: bool,
}

impl ClientFlags {
    /// Set these choices on a client config.
    pub fn apply(&self, cfg: &mut zrtt_net::client::ClientConfig) {
        cfg.fast_open = !self.no_fast_open;
        cfg.tls_fallback = !self.zrtt_only;
        if self.no_early_data {
            cfg.early_data = zrtt_net::client::EarlyDataPolicy::Never;
        }
    }
}

/// Provenance verifier keys learned from DNS for `zrtt gateway
/// --verifier-name` (docs/PROVENANCE.md): each name's published keys,
/// verified like key records, refreshed in the background. A failed or
/// empty lookup keeps the keys learned before (each is trusted only until
/// its record's `not_after`), so DNS trouble never stops provenance at once
/// and never stops serving.
pub struct DnsVerifiers {
    resolver: Arc<Resolver>,
    names: Vec<String>,
    configured: Vec<VerifierKey>,
    quorum: usize,
    /// Per name: the keys of its last lookup that verified anything.
    learned: std::sync::Mutex<Vec<Vec<TrustedKey>>>,
}

/// What one lookup of one verifier name gave.
pub enum VerifierLookup {
    /// Verified keys (now trusted, replacing the previous ones).
    Keys(Vec<TrustedKey>),
    /// Nothing usable: why, and how many earlier keys are kept.
    Kept { reason: String, kept: usize },
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
