//! Keys from DNS for the clients (`zrtt get`, `zrtt proxy`): the adapter
//! from `zrtt_dns::resolver` to `zrtt_net::client::KeySource`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use zrtt_dns::resolver::Resolver;
use zrtt_net::client::KeySource;
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
