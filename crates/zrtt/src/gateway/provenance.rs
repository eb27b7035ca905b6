//! Provenance verifiers a gateway trusts: keys given on the command line,
//! and keys learned from DNS by name, looked up before serving and then in
//! the background (docs/PROVENANCE.md).

use std::sync::Arc;
use std::time::Duration;

use std::path::Path;

use anyhow::{bail, Result};

use super::GatewayArgs;
use crate::util;

pub(super) type VerifierPolicy = (
    zrtt_net::gateway::SharedTrustPolicy,
    Option<Arc<zrtt_net::verifier::DnsVerifiers>>,
);

/// The provenance policy from --verifier and --verifier-name: `None`
/// without either. With names, looks them up once (bounded by the
/// resolver's timeouts) before the gateway serves; failures are logged and
/// the names retried in the background.
pub(super) fn provenance(
    a: &GatewayArgs,
    rt: &tokio::runtime::Runtime,
) -> Result<Option<VerifierPolicy>> {
    if a.verifiers.is_empty() && a.verifier_dns.verifier_names.is_empty() {
        return Ok(None);
    }
    let keys = a
        .verifiers
        .iter()
        .map(|h| {
            zrtt_net::verifier::parse_verifier_key(h)
                .ok_or_else(|| anyhow::anyhow!("--verifier {h:?}: need 64 hex digits"))
        })
        .collect::<Result<Vec<_>>>()?;
    let verifiers = keys.len() + a.verifier_dns.verifier_names.len();
    if a.quorum == 0 || a.quorum > verifiers {
        bail!("--quorum {} with {verifiers} verifier(s)", a.quorum);
    }
    for n in &a.verifier_dns.verifier_names {
        zrtt_proto::record::validate_name(&zrtt_proto::record::normalize_name(n))
            .map_err(|e| anyhow::anyhow!("--verifier-name {n:?}: {e}"))?;
    }
    let dns = if a.verifier_dns.verifier_names.is_empty() {
        None
    } else {
        let cfg = match a.verifier_dns.dns_server {
            Some(s) => zrtt_dns::resolver::ResolverConfig::new(s),
            None => zrtt_dns::resolver::ResolverConfig::system()?,
        };
        let trust = match &a.verifier_dns.verifier_cacert {
            Some(p) => zrtt_dns::resolver::Trust::from_pem_file(p)?,
            None => zrtt_dns::resolver::Trust::system(),
        };
        let resolver = Arc::new(zrtt_dns::resolver::Resolver::new(cfg, trust));
        for pin in &a.verifier_dns.verifier_certs {
            let Some((name, file)) = pin.split_once('=') else {
                bail!("--verifier-cert {pin:?}: use NAME=FILE");
            };
            let name = zrtt_proto::record::normalize_name(name);
            if !a
                .verifier_dns
                .verifier_names
                .iter()
                .any(|n| zrtt_proto::record::normalize_name(n) == name)
            {
                bail!("--verifier-cert {pin:?}: {name} is not a --verifier-name");
            }
            resolver.pin_cert(&name, util::load_cert(Path::new(file))?.to_vec());
        }
        Some(Arc::new(zrtt_net::verifier::DnsVerifiers::new(
            resolver,
            a.verifier_dns.verifier_names.clone(),
            keys.clone(),
            a.quorum,
        )))
    };
    let initial = match &dns {
        Some(d) => d.policy(util::now()),
        None => zrtt_proto::provenance::TrustPolicy {
            keys: keys.into_iter().map(Into::into).collect(),
            quorum: a.quorum,
            skew_secs: 5,
        },
    };
    let shared: zrtt_net::gateway::SharedTrustPolicy =
        zrtt_net::gateway::shared_trust_policy(initial);
    if let Some(d) = &dns {
        rt.block_on(refresh_verifiers(d, &shared));
    }
    Ok(Some((shared, dns)))
}

/// Look the verifier names up, log what changed or failed, and put the
/// resulting policy in force. Returns whether any lookup failed.
pub(super) async fn refresh_verifiers(
    dns: &zrtt_net::verifier::DnsVerifiers,
    policy: &zrtt_net::gateway::SharedTrustPolicy,
) -> bool {
    use zrtt_net::verifier::VerifierLookup;
    let before: Vec<u32> = policy
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys
        .iter()
        .map(|k| k.key.id)
        .collect();
    let now = util::now();
    let mut failed = false;
    for (name, r) in dns.refresh(now).await {
        match r {
            VerifierLookup::Keys(keys) => {
                if keys.iter().any(|k| !before.contains(&k.key.id)) || before.is_empty() {
                    let list: Vec<String> = keys
                        .iter()
                        .map(|k| format!("{:08x} until {}", k.key.id, util::fmt_time(k.not_after)))
                        .collect();
                    tracing::info!(
                        "verifier {name}: trusting {} key(s): {}",
                        keys.len(),
                        list.join(", ")
                    );
                }
            }
            VerifierLookup::Kept { reason, kept } => {
                failed = true;
                tracing::warn!(
                    "verifier {name}: no usable keys from DNS ({reason}); keeping {kept} key(s) learned before"
                );
            }
        }
    }
    *policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(dns.policy(now));
    failed
}

/// When to look the names up next: every `every`, within 30 s after a
/// failure. Keys are published long before they sign and stay published
/// long after, so this is far more often than they change.
pub(super) fn next_lookup(every: Duration, failed: bool) -> Duration {
    let wait = if failed {
        every.min(Duration::from_secs(30))
    } else {
        every
    };
    wait.max(Duration::from_secs(1))
}
