//! Resolver settings: the name servers to ask and how long to wait for
//! them, from the caller or from `/etc/resolv.conf` (parsed by the
//! `resolv-conf` crate, as hickory-resolver does).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::ResolveError;

/// The resolver configuration file read by [`ResolverConfig::system`].
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// glibc's `RES_MAXRETRANS`: the longest `timeout:` honoured, seconds.
const MAX_TIMEOUT_SECS: u32 = 30;
/// glibc's `RES_MAXRETRY`: the most `attempts:` honoured.
const MAX_ATTEMPTS: u32 = 5;

/// Resolver settings.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// The recursive resolvers (or authoritative servers) to ask, in order
    /// of preference: each question goes to the first, and to the next one
    /// when a server stays silent, fails or answers with an error code.
    pub servers: Vec<SocketAddr>,
    /// Bound on one try (one UDP datagram to one server), and on a TCP
    /// exchange (resolv.conf `timeout`).
    pub timeout: Duration,
    /// Rounds over `servers` (resolv.conf `attempts`, at least 1): a server
    /// that stays silent is asked once per round.
    pub udp_attempts: u32,
    /// Negative caching time when the answer carries no SOA.
    pub negative_ttl: u32,
    /// Longest time anything is cached.
    pub max_ttl: u32,
    /// Most cache entries; expired ones go first, then the soonest expiring.
    pub max_entries: usize,
}

impl ResolverConfig {
    /// Defaults for one `server`: 1 s per try, 2 rounds, negative TTL 60 s,
    /// at most one day, 4096 entries.
    pub fn new(server: SocketAddr) -> Self {
        Self::with_servers(vec![server])
    }

    /// The defaults of [`Self::new`] for several servers, asked in order.
    pub fn with_servers(servers: Vec<SocketAddr>) -> Self {
        Self {
            servers,
            timeout: Duration::from_secs(1),
            udp_attempts: 2,
            negative_ttl: 60,
            max_ttl: 86400,
            max_entries: 4096,
        }
    }

    /// The settings of `/etc/resolv.conf` ([`Self::from_resolv_conf`]).
    pub fn system() -> Result<Self, ResolveError> {
        let err = |reason: String| ResolveError::NoNameserver {
            path: RESOLV_CONF.into(),
            reason,
        };
        let text = std::fs::read(RESOLV_CONF).map_err(|e| err(e.to_string()))?;
        Self::from_resolv_conf(&text).map_err(err)
    }

    /// Settings from resolv.conf text, as glibc reads it (resolv.conf(5)):
    /// every `nameserver` (port 53, at most three), `options timeout:N`
    /// (seconds per try, at most 30) and `options attempts:N` (rounds over
    /// the servers, at most 5). An option the text does not set, or sets to
    /// 0, keeps the default of [`Self::new`]: 1 s per try rather than
    /// glibc's 5 s, because a key lookup sits on the connection's critical
    /// path. IPv6 addresses with a zone (`fe80::1%eth0`) are skipped; lines
    /// that do not parse are skipped with a debug message. Fails only when
    /// no usable name server is left.
    pub fn from_resolv_conf(text: &[u8]) -> Result<Self, String> {
        // Options later in the text win: after this first line, an option
        // still at 0 is one the text does not set. The line also makes the
        // parser's 0-based line numbers the file's 1-based ones.
        let mut buf = b"options timeout:0 attempts:0\n".to_vec();
        buf.extend_from_slice(text);
        let (mut conf, errors) = resolv_conf::Config::parse_with_errors(&buf);
        for e in errors {
            tracing::debug!("{RESOLV_CONF}: {e}");
        }
        // glibc's limits: three name servers (and six search domains).
        conf.glibc_normalize();
        let servers: Vec<SocketAddr> = conf
            .nameservers
            .iter()
            .filter_map(|ns| match ns {
                resolv_conf::ScopedIp::V6(_, Some(zone)) => {
                    tracing::debug!("{RESOLV_CONF}: nameserver {ns} skipped (zone {zone})");
                    None
                }
                ns => Some(SocketAddr::new(IpAddr::from(ns), 53)),
            })
            .collect();
        if servers.is_empty() {
            return Err("no usable nameserver line".into());
        }
        let mut cfg = Self::with_servers(servers);
        if conf.timeout > 0 {
            cfg.timeout = Duration::from_secs(conf.timeout.min(MAX_TIMEOUT_SECS).into());
        }
        if conf.attempts > 0 {
            cfg.udp_attempts = conf.attempts.min(MAX_ATTEMPTS);
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ResolverConfig, String> {
        ResolverConfig::from_resolv_conf(text.as_bytes())
    }

    fn servers(text: &str) -> Vec<SocketAddr> {
        parse(text).unwrap().servers
    }

    #[test]
    fn every_nameserver_in_order() {
        let text = "# comment\nsearch example.com\nnameserver fe80::1%eth0\n  nameserver 10.0.0.53 # x\nnameserver 10.0.0.54\n";
        assert_eq!(
            servers(text),
            vec![
                "10.0.0.53:53".parse::<SocketAddr>().unwrap(),
                "10.0.0.54:53".parse().unwrap()
            ]
        );
        assert_eq!(
            servers("nameserver 2001:db8::53\nnameserver 192.0.2.1\n"),
            vec![
                "[2001:db8::53]:53".parse::<SocketAddr>().unwrap(),
                "192.0.2.1:53".parse().unwrap()
            ]
        );
        // glibc uses the first three.
        let four = "nameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 192.0.2.3\nnameserver 192.0.2.4\n";
        assert_eq!(servers(four).len(), 3);
        assert!(parse("options ndots:2\n").is_err());
        assert!(parse("nameserver\n").is_err());
        assert!(parse("nameserver fe80::1%eth0\n").is_err());
    }

    #[test]
    fn timeout_and_attempts_options() {
        let c = parse("nameserver 192.0.2.1\noptions timeout:3 attempts:4 rotate\n").unwrap();
        assert_eq!((c.timeout, c.udp_attempts), (Duration::from_secs(3), 4));
        // Unset or 0: zrtt's defaults; glibc's caps apply.
        let c = parse("nameserver 192.0.2.1\n").unwrap();
        assert_eq!((c.timeout, c.udp_attempts), (Duration::from_secs(1), 2));
        let c = parse("options timeout:0 attempts:0\nnameserver 192.0.2.1\n").unwrap();
        assert_eq!((c.timeout, c.udp_attempts), (Duration::from_secs(1), 2));
        let c = parse("nameserver 192.0.2.1\noptions timeout:99\noptions attempts:9\n").unwrap();
        assert_eq!((c.timeout, c.udp_attempts), (Duration::from_secs(30), 5));
        // The last setting wins; an unknown option does not spoil the rest.
        let c =
            parse("options attempts:1\nnameserver 192.0.2.1\noptions bogus attempts:3\n").unwrap();
        assert_eq!(c.udp_attempts, 3);
    }
}
