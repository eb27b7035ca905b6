//! Flags shared by the clients of the binary (`zrtt get`, `zrtt proxy`)
//! and the DNS users (`--dns-server`). What they configure lives in the
//! library: `zrtt_net::client` (with `DnsKeySource`), `zrtt_net::verifier::DnsVerifiers`.

use std::net::{IpAddr, SocketAddr};

pub fn parse_dns_server(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .map_err(|_| format!("{s:?}: use ADDR or ADDR:PORT"))
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
