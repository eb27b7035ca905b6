//! Pieces shared by the clients (`zrtt get`, `zrtt proxy`): the adapter
//! from `zrtt_dns::resolver` to `zrtt_net::client::KeySource`, and the
//! transport flags.

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
