//! Open connections counted per source address and per source prefix, so
//! one address (or one network) cannot fill a gateway's connection limit.

use std::collections::HashMap;
use std::net::IpAddr;

use super::canonical_ip;

/// IPv4 sources are grouped by /24, IPv6 by /48 (a typical end site).
pub const IPV4_PREFIX: u8 = 24;
/// See [`IPV4_PREFIX`].
pub const IPV6_PREFIX: u8 = 48;

/// The prefix (`IPV4_PREFIX` / `IPV6_PREFIX`) an address belongs to, as
/// its network address.
pub fn source_prefix(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V4(a) => {
            let mask = u32::MAX << (32 - u32::from(IPV4_PREFIX));
            IpAddr::from((u32::from(a) & mask).to_be_bytes())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX << (128 - u32::from(IPV6_PREFIX));
            IpAddr::from((u128::from(a) & mask).to_be_bytes())
        }
    }
}

/// Connection counts per address and per prefix, with caps.
#[derive(Debug, Default)]
pub struct SourceCounts {
    per_address: HashMap<IpAddr, usize>,
    per_prefix: HashMap<IpAddr, usize>,
}

impl SourceCounts {
    /// Count a new connection from `ip` if neither its address nor its
    /// prefix is at its cap (0: no cap); false (and nothing counted) if one is.
    pub fn try_open(&mut self, ip: IpAddr, max_per_address: usize, max_per_prefix: usize) -> bool {
        let ip = canonical_ip(ip);
        let prefix = source_prefix(ip);
        let a = self.per_address.get(&ip).copied().unwrap_or(0);
        let p = self.per_prefix.get(&prefix).copied().unwrap_or(0);
        if (max_per_address > 0 && a >= max_per_address)
            || (max_per_prefix > 0 && p >= max_per_prefix)
        {
            return false;
        }
        *self.per_address.entry(ip).or_insert(0) += 1;
        *self.per_prefix.entry(prefix).or_insert(0) += 1;
        true
    }

    /// A connection counted by [`Self::try_open`] ended.
    pub fn close(&mut self, ip: IpAddr) {
        let ip = canonical_ip(ip);
        for (map, key) in [
            (&mut self.per_address, ip),
            (&mut self.per_prefix, source_prefix(ip)),
        ] {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
    }

    /// Connections open from `ip`'s address.
    pub fn from_address(&self, ip: IpAddr) -> usize {
        self.per_address
            .get(&canonical_ip(ip))
            .copied()
            .unwrap_or(0)
    }

    /// Addresses with at least one open connection.
    pub fn addresses(&self) -> usize {
        self.per_address.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|_| unreachable!("test address"))
    }

    #[test]
    fn prefixes() {
        assert_eq!(source_prefix(ip("198.18.7.200")), ip("198.18.7.0"));
        assert_eq!(source_prefix(ip("::ffff:198.18.7.200")), ip("198.18.7.0"));
        assert_eq!(source_prefix(ip("2001:db8:1:2:3::9")), ip("2001:db8:1::"));
    }

    #[test]
    fn caps_per_address_and_prefix_and_release() {
        let mut c = SourceCounts::default();
        assert!(c.try_open(ip("10.0.0.1"), 2, 3));
        assert!(c.try_open(ip("::ffff:10.0.0.1"), 2, 3));
        assert!(!c.try_open(ip("10.0.0.1"), 2, 3), "address at its cap");
        assert!(c.try_open(ip("10.0.0.2"), 2, 3));
        assert!(!c.try_open(ip("10.0.0.3"), 2, 3), "prefix at its cap");
        assert!(c.try_open(ip("10.0.1.3"), 2, 3), "another prefix");
        assert_eq!(c.from_address(ip("10.0.0.1")), 2);
        c.close(ip("10.0.0.1"));
        assert!(c.try_open(ip("10.0.0.3"), 2, 3));
        for a in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.3"] {
            c.close(ip(a));
        }
        assert_eq!(c.addresses(), 0, "nothing left behind: {c:?}");
        assert!(c.per_prefix.is_empty());
        // Closing what was never opened changes nothing.
        c.close(ip("10.9.9.9"));
        assert_eq!(c.addresses(), 0);
    }

    #[test]
    fn zero_means_no_cap() {
        let mut c = SourceCounts::default();
        assert!((0..10_000).all(|_| c.try_open(ip("10.0.0.1"), 0, 0)));
    }
}
