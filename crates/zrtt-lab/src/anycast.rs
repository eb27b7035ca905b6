//! The anycast part of a running [`Lab`]: which member a flow reaches,
//! and taking members out of service and back.

use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::{anyhow, bail, Context, Result};

use crate::ecmp::Anycast;
use crate::lab::{lock, Lab};

impl Lab {
    pub(crate) fn anycast_of(&self, addr: Ipv4Addr, members: &[usize]) -> Anycast {
        let addrs = members.iter().map(|&m| self.state.hosts[m].addr).collect();
        Anycast {
            addr,
            hosts: members.to_vec(),
            addrs,
        }
    }

    fn anycast_index(&self, name: &str) -> Result<usize> {
        let a = &self.state.anycast;
        a.iter()
            .position(|(n, _, _)| n == name)
            .ok_or_else(|| anyhow!("no anycast address {name:?} in this lab"))
    }

    /// Puts exactly `members` of anycast address `name` in service (as a
    /// health check or a route withdrawal would): flows of the members
    /// taken out move to the others, no other flow moves.
    pub fn set_anycast_members(&self, name: &str, members: &[&str]) -> Result<()> {
        let i = self.anycast_index(name)?;
        let (_, addr, all) = &self.state.anycast[i];
        let mut idx = Vec::new();
        for m in members {
            let h = self.host_index(m)?;
            if !all.contains(&h) {
                bail!("{m:?} is not a member of anycast {name:?}");
            }
            idx.push(h);
        }
        let a = self.anycast_of(*addr, &idx);
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        hub.set_anycast(i, a.hosts, a.addrs);
        Ok(())
    }

    /// The member host that the hub gives a TCP connection from `src` to
    /// port `port` of anycast address `name` now (the hub's own function).
    pub fn anycast_route(&self, name: &str, src: SocketAddrV4, port: u16) -> Result<String> {
        let i = self.anycast_index(name)?;
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        let a = hub.anycast(i).context("anycast")?;
        let dst = SocketAddrV4::new(a.addr, port);
        let m = crate::ecmp::member_for(src, dst, &a.addrs)
            .ok_or_else(|| anyhow!("anycast {name:?} has no member in service"))?;
        Ok(self
            .state
            .hosts
            .iter()
            .find(|h| h.addr == m)
            .context("member")?
            .name
            .clone())
    }
}
