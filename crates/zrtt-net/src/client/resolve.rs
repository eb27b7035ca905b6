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
