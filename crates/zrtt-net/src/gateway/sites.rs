//! Which site a request is for, when one gateway serves several: each site
//! has its names and its backends (and, elsewhere, its certificate and its
//! keys). A request goes to the site whose names hold its authority
//! (request target or `Host`); a connection is bound to the site whose
//! name it was opened for (the TLS server name, or the name of the key
//! record a zrtt first flight was encrypted to), and a request on it for
//! another site gets 421 Misdirected Request (RFC 9110 §15.5.20), as a
//! connection coalesced across certificates would in HTTP/2.

use super::Backend;

/// One site: the names it answers for and where its requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Host names (lowercase, no trailing dot); empty only for a default
    /// site that takes every name.
    pub names: Vec<String>,
    /// Its backends (at least one), chosen round robin among the healthy
    /// ones (pool.rs).
    pub backends: Vec<Backend>,
    /// How its backends are judged healthy; `None`: the gateway's
    /// (`GatewayConfig::backend_health`).
    pub health: Option<super::BackendHealth>,
}

impl Site {
    /// The name metrics and logs give the site: its first name, `*` for a
    /// default site without names.
    pub fn label(&self) -> &str {
        self.names.first().map_or("*", String::as_str)
    }

    fn serves(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }
}

/// The sites of a gateway: the default one first (the command line's
/// backend and names), then the others.
#[derive(Debug)]
pub(super) struct Sites(Vec<Site>);

impl Sites {
    pub(super) fn new(default: Site, others: &[Site]) -> Self {
        let mut all = vec![default];
        all.extend(others.iter().cloned());
        Self(all)
    }

    /// The index of the site serving `host`: the first whose names hold it;
    /// the default site when it takes every name (no names); `None` when no
    /// site serves it.
    pub(super) fn route(&self, host: Option<&str>) -> Option<usize> {
        if let Some(h) = host {
            if let Some(i) = self.0.iter().position(|s| s.serves(h)) {
                return Some(i);
            }
        }
        self.0[0].names.is_empty().then_some(0)
    }

    pub(super) fn all(&self) -> &[Site] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn site(names: &[&str], port: u16) -> Site {
        Site {
            health: None,
            names: names.iter().map(|s| (*s).to_owned()).collect(),
            backends: vec![std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()],
        }
    }

    #[test]
    fn requests_go_to_the_site_of_their_host() {
        let s = Sites::new(
            site(&["a.example"], 1),
            &[site(&["b.example", "www.b.example"], 2)],
        );
        assert_eq!(s.route(Some("a.example")), Some(0));
        assert_eq!(s.route(Some("WWW.B.example.")), Some(1));
        assert_eq!(s.route(Some("c.example")), None);
        assert_eq!(s.route(None), None);
        assert_eq!(s.all()[1].backends[0].to_string(), "127.0.0.1:2");
        assert_eq!(s.all()[1].label(), "b.example");
    }

    #[test]
    fn a_default_site_without_names_takes_the_rest() {
        let s = Sites::new(site(&[], 1), &[site(&["b.example"], 2)]);
        assert_eq!(s.route(Some("b.example")), Some(1));
        assert_eq!(s.route(Some("c.example")), Some(0));
        assert_eq!(s.route(None), Some(0));
    }
}
