//! Describing a lab: hosts, their addresses and the links between them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{bail, Result};

/// The address block every lab host lives in: 198.18.0.0/15 (RFC 2544
/// benchmarking range). Only addresses from this block are ever used.
pub const LAB_NET: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Prefix length of [`LAB_NET`].
pub const LAB_PREFIX: u8 = 15;

/// Returns true if `addr` lies inside 198.18.0.0/15.
pub fn in_lab_net(addr: Ipv4Addr) -> bool {
    let o = addr.octets();
    o[0] == 198 && (o[1] & 0xfe) == 18
}

/// Properties of one direction of a link between two hosts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// One-way propagation delay added to every packet.
    pub delay: Duration,
    /// Probability in `[0, 1]` that a packet is dropped.
    pub loss: f64,
    /// Optional bottleneck rate in bytes per second; packets are serialised at
    /// this rate (adding `len / rate` of delay plus queueing behind earlier
    /// packets of the same direction).
    pub rate: Option<u64>,
    /// Probability in `[0, 1]` that a packet is held back by
    /// `reorder_delay` beyond its deadline, so that later packets of the
    /// same direction overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    pub reorder_delay: Duration,
    /// Probability in `[0, 1]` that a packet is delivered twice.
    pub duplicate: f64,
    /// What a middlebox on this direction does to SYNs carrying data.
    pub syn_data: SynData,
    /// A middlebox on this direction lets only TLS through once a
    /// connection is set up: data segments (without SYN) of a TCP flow
    /// whose first payload was not a TLS handshake record are dropped, so
    /// zrtt's flight in a SYN passes and everything after it does not.
    /// Set it on both directions for a firewall that allows TLS only.
    pub tls_only: bool,
}

/// What a middlebox does to a client's SYN that carries data (TCP Fast
/// Open): let it pass, drop it, or strip the data and pass the SYN (both
/// seen on real paths; RFC 7413 §7.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SynData {
    /// No middlebox.
    #[default]
    Pass,
    /// Drop SYNs with data (the client's retransmission without data passes).
    Drop,
    /// Remove the data, fix lengths and checksums, pass the SYN.
    Strip,
}

impl Link {
    /// A link with the given one-way delay, no loss and no rate limit.
    pub fn delay(delay: Duration) -> Self {
        Link {
            delay,
            loss: 0.0,
            rate: None,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            duplicate: 0.0,
            syn_data: SynData::Pass,
            tls_only: false,
        }
    }

    /// Sets the loss probability (clamped to `[0, 1]`).
    pub fn with_loss(mut self, loss: f64) -> Self {
        self.loss = probability(loss);
        self
    }

    /// Holds back a share `p` of packets by `delay` so that later ones
    /// overtake them (`p` clamped to `[0, 1]`).
    pub fn with_reorder(mut self, p: f64, delay: Duration) -> Self {
        self.reorder = probability(p);
        self.reorder_delay = delay;
        self
    }

    /// Delivers a share `p` of packets twice (clamped to `[0, 1]`).
    pub fn with_duplicate(mut self, p: f64) -> Self {
        self.duplicate = probability(p);
        self
    }

    /// Puts a middlebox that treats SYNs with data as `syn_data` on this
    /// direction.
    pub fn with_syn_data(mut self, syn_data: SynData) -> Self {
        self.syn_data = syn_data;
        self
    }

    /// Puts (or removes) a middlebox that lets only TLS through after the
    /// handshake on this direction ([`Link::tls_only`]).
    pub fn with_tls_only(mut self, on: bool) -> Self {
        self.tls_only = on;
        self
    }

    /// Sets the rate limit in bytes per second (`None` or `Some(0)` = unlimited).
    pub fn with_rate(mut self, rate: Option<u64>) -> Self {
        self.rate = rate.filter(|&r| r > 0);
        self
    }
}

/// `p` clamped to `[0, 1]` (NaN counts as 0).
fn probability(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

impl Default for Link {
    fn default() -> Self {
        Link::delay(Duration::ZERO)
    }
}

/// One host of a [`Topology`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// Host name (letters, digits, `_` and `-`; at most 24 characters).
    pub name: String,
    /// The host's IPv4 address, inside 198.18.0.0/15.
    pub addr: Ipv4Addr,
}

/// An anycast address of a [`Topology`]: several member hosts hold it and
/// the hub spreads flows over them by 5-tuple hash (ECMP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnycastSpec {
    /// Name of the address (looked up like a host name by `Lab::addr`).
    pub name: String,
    /// The shared address, inside 198.18.0.0/15.
    pub addr: Ipv4Addr,
    /// Names of the member hosts.
    pub members: Vec<String>,
}

/// Builder describing a lab: named hosts and the links between them.
///
/// ```
/// use std::time::Duration;
/// use zrtt_lab::{Link, Topology};
/// let topo = Topology::new()
///     .host("client")
///     .host("server")
///     .default_delay(Duration::from_millis(5))
///     .rtt("client", "server", Duration::from_millis(100));
/// assert_eq!(topo.link_between(0, 1).delay, Duration::from_millis(50));
/// ```
#[derive(Debug, Clone)]
pub struct Topology {
    pub(crate) hosts: Vec<HostSpec>,
    pub(crate) anycast: Vec<AnycastSpec>,
    pub(crate) default_link: Link,
    /// Directed overrides, keyed by host *names* (resolved at `Lab::up`).
    pub(crate) links: BTreeMap<(String, String), Link>,
    pub(crate) seed: u64,
    pub(crate) queue_limit: usize,
    pub(crate) spin_margin: Duration,
    pub(crate) rt_priority: Option<i32>,
    pub(crate) handle_signals: bool,
    pub(crate) tcp_fastopen: bool,
    next_addr: u32,
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

impl Topology {
    /// An empty topology: no hosts, zero default delay, no loss, no rate
    /// limit, queue limit 4096 packets per direction, spin margin 1 ms,
    /// SCHED_FIFO priority 50, signal handling on, TCP Fast Open on.
    pub fn new() -> Self {
        Topology {
            hosts: Vec::new(),
            anycast: Vec::new(),
            default_link: Link::default(),
            links: BTreeMap::new(),
            seed: 0x7a72_7474_5eed_0001,
            queue_limit: 4096,
            spin_margin: Duration::from_millis(1),
            rt_priority: Some(50),
            handle_signals: true,
            tcp_fastopen: true,
            next_addr: 1,
        }
    }

    /// Adds a host with the next free address (198.18.0.1, 198.18.0.2, ...).
    /// Invalid or duplicate names are reported by [`Topology::validate`] /
    /// `Lab::up`.
    pub fn host(mut self, name: &str) -> Self {
        let addr = self.next_free_addr();
        self.hosts.push(HostSpec {
            name: name.to_string(),
            addr,
        });
        self
    }

    fn next_free_addr(&mut self) -> Ipv4Addr {
        loop {
            let addr = Ipv4Addr::from(u32::from(LAB_NET) + self.next_addr);
            self.next_addr += 1;
            if !self.hosts.iter().any(|h| h.addr == addr)
                && !self.anycast.iter().any(|a| a.addr == addr)
            {
                return addr;
            }
        }
    }

    /// Adds an anycast address called `name` (the next free address) held
    /// by every host of `members`: the hub sends each flow for it to one
    /// member, chosen by a hash of the flow's 5-tuple (ECMP; see
    /// [`crate::member_for`]). Each member has the address on its `lo` and
    /// answers from it. Members are checked by [`Topology::validate`].
    pub fn anycast(mut self, name: &str, members: &[&str]) -> Self {
        let addr = self.next_free_addr();
        self.anycast.push(AnycastSpec {
            name: name.to_string(),
            addr,
            members: members.iter().map(|m| m.to_string()).collect(),
        });
        self
    }

    /// The anycast addresses, in the order they were added.
    pub fn anycast_addrs(&self) -> &[AnycastSpec] {
        &self.anycast
    }

    /// Adds a host with an explicit address (must be inside 198.18.0.0/15,
    /// checked by [`Topology::validate`]).
    pub fn host_with_addr(mut self, name: &str, addr: Ipv4Addr) -> Self {
        self.hosts.push(HostSpec {
            name: name.to_string(),
            addr,
        });
        self
    }

    /// Link used for every pair without an explicit setting.
    pub fn default_link(mut self, link: Link) -> Self {
        self.default_link = link;
        self
    }

    /// One-way delay used for every pair without an explicit setting.
    pub fn default_delay(mut self, delay: Duration) -> Self {
        self.default_link.delay = delay;
        self
    }

    /// Sets the link in both directions between `a` and `b`.
    pub fn link(self, a: &str, b: &str, link: Link) -> Self {
        self.link_directed(a, b, link).link_directed(b, a, link)
    }

    /// Sets the link for packets travelling from `from` to `to` only.
    pub fn link_directed(mut self, from: &str, to: &str, link: Link) -> Self {
        self.links.insert((from.to_string(), to.to_string()), link);
        self
    }

    /// Sets a symmetric one-way `delay` between `a` and `b` (no loss, no
    /// rate limit), i.e. an RTT of `2 * delay`.
    pub fn delay(self, a: &str, b: &str, delay: Duration) -> Self {
        self.link(a, b, Link::delay(delay))
    }

    /// Sets a symmetric path between `a` and `b` with round-trip time `rtt`
    /// (one-way delay `rtt / 2` each way).
    pub fn rtt(self, a: &str, b: &str, rtt: Duration) -> Self {
        self.delay(a, b, rtt / 2)
    }

    /// Seed of the loss PRNG (runs with the same seed drop the same packets
    /// given the same traffic).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Maximum number of packets queued per direction of each pair; beyond it
    /// packets are dropped (drop-tail) and counted.
    pub fn queue_limit(mut self, packets: usize) -> Self {
        self.queue_limit = packets.max(1);
        self
    }

    /// How long before a packet's deadline the sender stops sleeping and
    /// starts busy-spinning (default 1 ms).
    pub fn spin_margin(mut self, margin: Duration) -> Self {
        self.spin_margin = margin;
        self
    }

    /// SCHED_FIFO priority for the hub threads (1..=99), or `None` to keep the
    /// normal scheduler. Failure to obtain it is not fatal; it is reported in
    /// [`crate::HubStats::realtime_error`].
    pub fn realtime_priority(mut self, prio: Option<i32>) -> Self {
        self.rt_priority = prio;
        self
    }

    /// Whether `Lab::up` installs the process-wide SIGINT/SIGTERM handler that
    /// tears down all live labs and exits (default true).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.handle_signals = on;
        self
    }

    /// Whether to set `net.ipv4.tcp_fastopen=3` in every host namespace
    /// (default true), enabling TCP Fast Open for clients and servers.
    pub fn tcp_fastopen(mut self, on: bool) -> Self {
        self.tcp_fastopen = on;
        self
    }

    /// The hosts, in the order they were added.
    pub fn hosts(&self) -> &[HostSpec] {
        &self.hosts
    }

    /// Index of the host called `name`.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// The effective link from host index `from` to host index `to`.
    pub fn link_between(&self, from: usize, to: usize) -> Link {
        match (self.hosts.get(from), self.hosts.get(to)) {
            (Some(a), Some(b)) => self
                .links
                .get(&(a.name.clone(), b.name.clone()))
                .copied()
                .unwrap_or(self.default_link),
            _ => self.default_link,
        }
    }

    /// Checks names, addresses and link references.
    pub fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            bail!("topology has no hosts");
        }
        if self.hosts.len() > 250 {
            bail!("too many hosts ({}; max 250)", self.hosts.len());
        }
        for (i, h) in self.hosts.iter().enumerate() {
            validate_host_name(&h.name)?;
            if !in_lab_net(h.addr) {
                bail!(
                    "host {:?} address {} is outside 198.18.0.0/15",
                    h.name,
                    h.addr
                );
            }
            let o = h.addr.octets();
            if (o[2] == 0 && o[3] == 0 && o[1] == 18) || (o[1] == 19 && o[2] == 255 && o[3] == 255)
            {
                bail!("host {:?} uses a reserved address {}", h.name, h.addr);
            }
            for other in &self.hosts[..i] {
                if other.name == h.name {
                    bail!("duplicate host name {:?}", h.name);
                }
                if other.addr == h.addr {
                    bail!(
                        "hosts {:?} and {:?} share address {}",
                        other.name,
                        h.name,
                        h.addr
                    );
                }
            }
        }
        for ((a, b), link) in &self.links {
            for n in [a, b] {
                if self.host_index(n).is_none() {
                    bail!("link refers to unknown host {n:?}");
                }
            }
            validate_link(link)?;
        }
        validate_link(&self.default_link)?;
        for a in &self.anycast {
            validate_host_name(&a.name)?;
            if !in_lab_net(a.addr)
                || self
                    .hosts
                    .iter()
                    .any(|h| h.addr == a.addr || h.name == a.name)
            {
                bail!(
                    "anycast {:?} ({}) clashes with a host or leaves the lab net",
                    a.name,
                    a.addr
                );
            }
            if a.members.is_empty() {
                bail!("anycast {:?} has no member", a.name);
            }
            for (i, m) in a.members.iter().enumerate() {
                if self.host_index(m).is_none() || a.members[..i].contains(m) {
                    bail!("anycast {:?}: unknown or repeated member {m:?}", a.name);
                }
            }
        }
        if let Some(p) = self.rt_priority {
            if !(1..=99).contains(&p) {
                bail!("realtime priority {p} outside 1..=99");
            }
        }
        Ok(())
    }
}

pub(crate) fn validate_link(link: &Link) -> Result<()> {
    for (what, p) in [
        ("loss", link.loss),
        ("reorder", link.reorder),
        ("duplicate", link.duplicate),
    ] {
        if !(0.0..=1.0).contains(&p) {
            bail!("{what} probability {p} outside [0, 1]");
        }
    }
    for (what, d) in [
        ("one-way delay", link.delay),
        ("reorder delay", link.reorder_delay),
    ] {
        if d > Duration::from_secs(60) {
            bail!("{what} {d:?} is larger than 60 s");
        }
    }
    Ok(())
}

pub(crate) fn validate_host_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 24 {
        bail!("host name {name:?} must be 1..=24 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!("host name {name:?} may only contain ASCII letters, digits, '_' and '-'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_in_benchmark_range() {
        let t = Topology::new().host("a").host("b").host("c");
        t.validate().unwrap();
        for h in t.hosts() {
            assert!(in_lab_net(h.addr), "{}", h.addr);
        }
        assert_eq!(t.hosts()[0].addr, Ipv4Addr::new(198, 18, 0, 1));
        assert!(in_lab_net(Ipv4Addr::new(198, 19, 3, 4)));
        assert!(!in_lab_net(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!in_lab_net(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn rejects_bad_topologies() {
        assert!(Topology::new().validate().is_err());
        assert!(Topology::new().host("a").host("a").validate().is_err());
        assert!(Topology::new().host("a b").validate().is_err());
        assert!(Topology::new()
            .host_with_addr("a", Ipv4Addr::new(10, 1, 1, 1))
            .validate()
            .is_err());
        assert!(Topology::new()
            .host("a")
            .delay("a", "zz", Duration::ZERO)
            .validate()
            .is_err());
    }

    #[test]
    fn anycast_addresses() {
        let t = Topology::new()
            .host("c")
            .host("g1")
            .host("g2")
            .anycast("vip", &["g1", "g2"])
            .host("r");
        t.validate().unwrap();
        assert_eq!(t.anycast_addrs()[0].addr, Ipv4Addr::new(198, 18, 0, 4));
        assert_eq!(t.hosts()[3].addr, Ipv4Addr::new(198, 18, 0, 5));
        for bad in [&["g1", "zz"][..], &["g1", "g1"], &[]] {
            let t = Topology::new().host("g1").anycast("vip", bad);
            assert!(t.validate().is_err(), "{bad:?}");
        }
        assert!(Topology::new()
            .host("g1")
            .anycast("g1", &["g1"])
            .validate()
            .is_err());
    }

    #[test]
    fn links_are_directional_with_default() {
        let t = Topology::new()
            .host("a")
            .host("b")
            .host("c")
            .default_delay(Duration::from_millis(7))
            .link_directed(
                "a",
                "b",
                Link::delay(Duration::from_millis(3)).with_loss(0.5),
            );
        assert_eq!(t.link_between(0, 1).delay, Duration::from_millis(3));
        assert_eq!(t.link_between(0, 1).loss, 0.5);
        assert_eq!(t.link_between(1, 0).delay, Duration::from_millis(7));
        assert_eq!(t.link_between(2, 0).delay, Duration::from_millis(7));
    }
}
