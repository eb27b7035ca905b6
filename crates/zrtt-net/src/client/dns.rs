//! Keys and addresses from DNS: the client's side of `zrtt_dns::resolver`
//! ([`DnsKeySource`], [`DnsAddresses`]). The resolver verifies records
//! against a certificate from TLSA (chained to its roots) or a pinned one
//! (docs/DNS.md).

use std::net::SocketAddr;
use std::sync::Arc;

use zrtt_dns::resolver::{Resolver, ResolverConfig, Trust};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

use super::keys::{KeySource, PrefetchFuture};
use super::resolve::{Resolve, ResolveFuture};
use crate::error::{Error, Result};

/// [`KeySource`] over a DNS resolver's cache. [`KeySource::lookup`] never
/// sends a query; [`KeySource::prefetch`] resolves the host (addresses and
/// keys in one batch, from the cache while it is fresh), which the
/// [`ZrttConnector`](super::ZrttConnector) and the proxy do before each
/// connection, so a cold host costs one DNS round trip first. Keys are
/// re-checked at the transport's `now`.
#[derive(Debug, Clone)]
pub struct DnsKeySource {
    resolver: Arc<Resolver>,
}

impl DnsKeySource {
    /// Keys from `resolver` (shared: its cache also serves [`DnsAddresses`]).
    pub fn new(resolver: Arc<Resolver>) -> Self {
        Self { resolver }
    }

    /// Keys from the first nameserver of `/etc/resolv.conf`, their
    /// certificates from TLSA checked against the system's CA bundle.
    pub fn system() -> Result<Self> {
        let cfg = ResolverConfig::system().map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self::new(Arc::new(Resolver::new(cfg, Trust::system()))))
    }

    /// The resolver behind this source.
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }
}

impl KeySource for DnsKeySource {
    fn lookup(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord> {
        // The keys held, even when the address has expired (the DNS
        // shortcut's case: a key record lives hours, an address minutes).
        self.resolver
            .keys_cached(host, now)?
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

    fn prefetch(&self, host: &str, now: UnixTime) -> PrefetchFuture {
        let (resolver, host) = (self.resolver.clone(), host.to_owned());
        Box::pin(async move {
            if let Err(e) = resolver.resolve(&host, now).await {
                tracing::debug!("DNS lookup of {host}: {e}");
            }
        })
    }
}

/// [`Resolve`] from a DNS resolver's cache (filled by the
/// [`DnsKeySource::prefetch`] of the same resolver, which runs first), then
/// `fallback` (e.g. a [`SystemResolver`](super::SystemResolver) with
/// overrides). Never sends a query itself.
pub struct DnsAddresses {
    dns: Arc<Resolver>,
    fallback: Arc<dyn Resolve>,
}

impl std::fmt::Debug for DnsAddresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsAddresses").finish_non_exhaustive()
    }
}

impl DnsAddresses {
    /// The first cached address of `keys`'s resolver, else `fallback`.
    pub fn new(keys: &DnsKeySource, fallback: Arc<dyn Resolve>) -> Self {
        Self {
            dns: keys.resolver.clone(),
            fallback,
        }
    }
}

impl Resolve for DnsAddresses {
    fn resolve_now(&self, host: &str, port: u16) -> Option<SocketAddr> {
        self.dns
            .resolve_cached(host, super::system_clock())
            .and_then(|r| r.addrs.first().copied())
            .map(|ip| SocketAddr::new(ip, port))
            .or_else(|| self.fallback.resolve_now(host, port))
    }

    fn resolve(&self, host: &str, port: u16) -> ResolveFuture {
        let cached = self
            .dns
            .resolve_cached(host, super::system_clock())
            .and_then(|r| r.addrs.first().copied());
        match cached {
            Some(ip) => Box::pin(async move { Ok(SocketAddr::new(ip, port)) }),
            None => self.fallback.resolve(host, port),
        }
    }
}
