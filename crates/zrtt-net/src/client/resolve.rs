//! Name resolution for outgoing connections: the [`Resolve`] seam and
//! [`SystemResolver`] (curl-style overrides, then the system's resolver).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use crate::error::{Error, Result};

/// A boxed future returned by [`Resolve::resolve`].
pub type ResolveFuture = Pin<Box<dyn Future<Output = io::Result<SocketAddr>> + Send>>;

/// Name resolution for the connector's and the proxy's connections.
pub trait Resolve: Send + Sync + 'static {
    /// The address to connect to for `host` (a name or an IP literal
    /// without brackets) on `port`.
    fn resolve(&self, host: &str, port: u16) -> ResolveFuture;

    /// The address of `host` on `port` if it is known without waiting
    /// (overrides, IP literals, a cache, the hosts file), else `None`. The
    /// DNS shortcut asks this before it sends a query: a known address
    /// leaves nothing to save. Default: `None`.
    fn resolve_now(&self, host: &str, port: u16) -> Option<SocketAddr> {
        let _ = (host, port);
        None
    }
}

/// The first address of `host` in a hosts file's `text` (`/etc/hosts`
/// syntax: an address, then names; `#` starts a comment), IPv4 first
/// as `getaddrinfo` usually orders them.
pub fn hosts_file_lookup(text: &str, host: &str) -> Option<IpAddr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let mut found: Vec<IpAddr> = text
        .lines()
        .filter_map(|line| {
            let mut it = line.split('#').next()?.split_ascii_whitespace();
            let ip: IpAddr = it.next()?.parse().ok()?;
            it.any(|n| n.eq_ignore_ascii_case(host)).then_some(ip)
        })
        .collect();
    found.sort_by_key(|ip| ip.is_ipv6());
    found.first().copied()
}

/// `--resolve HOST:PORT:ADDR` overrides, then the system resolver
/// (`getaddrinfo` on a blocking thread; IP literals cost nothing).
#[derive(Clone, Debug, Default)]
pub struct SystemResolver {
    overrides: HashMap<(String, u16), IpAddr>,
}

impl SystemResolver {
    /// A resolver with no overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Use `ip` for `host` on `port` (the host is matched case-insensitively).
    pub fn add_override(&mut self, host: &str, port: u16, ip: IpAddr) {
        self.overrides.insert((host.to_ascii_lowercase(), port), ip);
    }

    /// Parse curl's `HOST:PORT:ADDR` (the address may be in brackets) and add it.
    pub fn add_curl_override(&mut self, spec: &str) -> Result<()> {
        let bad = || Error::Config(format!("--resolve {spec:?}: use HOST:PORT:ADDR"));
        let mut it = spec.splitn(3, ':');
        let (Some(host), Some(port), Some(addr)) = (it.next(), it.next(), it.next()) else {
            return Err(bad());
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        let ip: IpAddr = addr.trim_matches(['[', ']']).parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        self.add_override(host, port, ip);
        Ok(())
    }
}

impl Resolve for SystemResolver {
    /// Overrides, IP literals, then `/etc/hosts` (what `getaddrinfo`
    /// answers from the file without a query, in the usual `files dns`
    /// order).
    fn resolve_now(&self, host: &str, port: u16) -> Option<SocketAddr> {
        if let Some(ip) = self.overrides.get(&(host.to_ascii_lowercase(), port)) {
            return Some(SocketAddr::new(*ip, port));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(SocketAddr::new(ip, port));
        }
        let text = std::fs::read_to_string("/etc/hosts").ok()?;
        hosts_file_lookup(&text, host).map(|ip| SocketAddr::new(ip, port))
    }

    fn resolve(&self, host: &str, port: u16) -> ResolveFuture {
        if let Some(ip) = self.overrides.get(&(host.to_ascii_lowercase(), port)) {
            let addr = SocketAddr::new(*ip, port);
            return Box::pin(async move { Ok(addr) });
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Box::pin(async move { Ok(SocketAddr::new(ip, port)) });
        }
        let host = host.to_owned();
        Box::pin(async move {
            tokio::net::lookup_host((host.as_str(), port))
                .await?
                .next()
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"))
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file() {
        let text = "# comment\n::1 www.example.com\n127.0.0.1 localhost\n\
                    10.0.0.7  other WWW.example.com # x\n#10.0.0.8 www.example.com\n";
        let ip = |s: &str| s.parse::<IpAddr>().ok();
        assert_eq!(hosts_file_lookup(text, "www.example.com."), ip("10.0.0.7"));
        assert_eq!(hosts_file_lookup(text, "localhost"), ip("127.0.0.1"));
        assert_eq!(hosts_file_lookup(text, "example.com"), None);
        let r = SystemResolver::new();
        assert_eq!(
            r.resolve_now("127.0.0.9", 80),
            Some(SocketAddr::from(([127, 0, 0, 9], 80)))
        );
    }

    #[test]
    fn resolve_overrides() {
        let mut r = SystemResolver::new();
        assert!(r.add_curl_override("www.example.com:443:127.0.0.2").is_ok());
        assert!(r.add_curl_override("v6.example:80:[::1]").is_ok());
        assert!(r.add_curl_override("bad").is_err());
        assert!(r.add_curl_override("h:port:127.0.0.1").is_err());
        assert_eq!(
            r.overrides.get(&("v6.example".to_owned(), 80)),
            Some(
                &"::1"
                    .parse::<IpAddr>()
                    .unwrap_or(IpAddr::from([0, 0, 0, 0]))
            )
        );
    }
}
