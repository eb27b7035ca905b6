//! ECMP in the hub: an anycast address ("virtual IP") held by several
//! hosts. The hub sends each packet for it to one member, chosen per flow
//! from a hash of the 5-tuple (protocol, source and destination address
//! and port), so every packet of one TCP connection reaches the same
//! member, as a router's ECMP or a layer-4 load balancer does.
//!
//! The member is picked by rendezvous (highest random weight) hashing over
//! the members in service: taking a member out of service (as a health
//! check or a BGP withdrawal would) moves only its own flows, and bringing
//! it back moves only the flows that are its again. The hash is a fixed
//! function (SplitMix64 finaliser), so a flow's member can be predicted
//! outside the hub ([`member_for`], `Lab::anycast_route`).

use std::net::{Ipv4Addr, SocketAddrV4};

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;

/// The SplitMix64 finaliser: a fixed, well-mixing 64-bit hash step.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 5-tuple of an IPv4 packet: (protocol, source, destination); ports
/// are 0 for protocols without ports and for fragments after the first.
pub(crate) fn five_tuple(pkt: &[u8]) -> Option<(u8, SocketAddrV4, SocketAddrV4)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let proto = pkt[9];
    let offset = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
    let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
    let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
    let ports = matches!(proto, PROTO_TCP | PROTO_UDP) && offset == 0 && pkt.len() >= ihl + 4;
    let (sp, dp) = if ports {
        (
            u16::from_be_bytes([pkt[ihl], pkt[ihl + 1]]),
            u16::from_be_bytes([pkt[ihl + 2], pkt[ihl + 3]]),
        )
    } else {
        (0, 0)
    };
    Some((
        proto,
        SocketAddrV4::new(src, sp),
        SocketAddrV4::new(dst, dp),
    ))
}

/// The hash of a flow's 5-tuple.
pub fn flow_hash(proto: u8, src: SocketAddrV4, dst: SocketAddrV4) -> u64 {
    let addrs = (u64::from(u32::from(*src.ip())) << 32) | u64::from(u32::from(*dst.ip()));
    let ports = (u64::from(src.port()) << 32) | (u64::from(dst.port()) << 16) | u64::from(proto);
    mix(mix(addrs) ^ ports)
}

/// The member (an index into `members`, which are the members' own
/// addresses) that serves the flow with hash `hash`: the highest
/// rendezvous weight. `None` when no member is in service.
pub fn pick(hash: u64, members: &[Ipv4Addr]) -> Option<usize> {
    members
        .iter()
        .enumerate()
        .max_by_key(|(_, m)| (mix(hash ^ mix(u64::from(u32::from(**m)))), u32::from(**m)))
        .map(|(i, _)| i)
}

/// The member of `members` (by address) that serves a TCP flow from `src`
/// to `dst`.
pub fn member_for(src: SocketAddrV4, dst: SocketAddrV4, members: &[Ipv4Addr]) -> Option<Ipv4Addr> {
    pick(flow_hash(PROTO_TCP, src, dst), members).map(|i| members[i])
}

/// One anycast address in the hub: the address and the host indices (and
/// addresses) of the members in service.
#[derive(Clone, Debug)]
pub(crate) struct Anycast {
    pub(crate) addr: Ipv4Addr,
    /// Host indices of the members in service.
    pub(crate) hosts: Vec<usize>,
    /// Their addresses (the rendezvous identities), same order.
    pub(crate) addrs: Vec<Ipv4Addr>,
}

impl Anycast {
    /// The host that gets `pkt` (addressed to this anycast address).
    pub(crate) fn route(&self, pkt: &[u8]) -> Option<usize> {
        let (proto, src, dst) = five_tuple(pkt)?;
        pick(flow_hash(proto, src, dst), &self.addrs).map(|i| self.hosts[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: u8) -> Vec<Ipv4Addr> {
        (0..n).map(|i| Ipv4Addr::new(198, 18, 0, 10 + i)).collect()
    }

    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 9), 443);

    #[test]
    fn every_packet_of_a_flow_goes_to_one_member_and_flows_spread() {
        let m = members(3);
        let mut per = [0usize; 3];
        for port in 20_000..23_000u16 {
            let src = SocketAddrV4::new(CLIENT, port);
            let first = member_for(src, VIP, &m).unwrap();
            // The same flow again, and as the hub sees its packets.
            assert_eq!(member_for(src, VIP, &m), Some(first));
            let syn = crate::packet::syn_with_data((CLIENT, port), (*VIP.ip(), 443), 1, b"x");
            let any = Anycast {
                addr: *VIP.ip(),
                hosts: vec![5, 6, 7],
                addrs: m.clone(),
            };
            let idx = m.iter().position(|a| *a == first).unwrap();
            assert_eq!(any.route(&syn), Some(5 + idx));
            per[idx] += 1;
        }
        // 3,000 flows: each member gets a fair share (expected 1,000).
        for n in per {
            assert!((850..1150).contains(&n), "{per:?}");
        }
        // A fixed function: this flow's member never changes.
        let h = flow_hash(6, SocketAddrV4::new(CLIENT, 40_000), VIP);
        assert_eq!(h, flow_hash(6, SocketAddrV4::new(CLIENT, 40_000), VIP));
        assert_ne!(h, flow_hash(17, SocketAddrV4::new(CLIENT, 40_000), VIP));
    }

    #[test]
    fn withdrawing_a_member_moves_only_its_flows() {
        let all = members(3);
        let without: Vec<Ipv4Addr> = vec![all[0], all[2]];
        let mut moved = 0;
        for port in 30_000..31_000u16 {
            let src = SocketAddrV4::new(CLIENT, port);
            let before = member_for(src, VIP, &all).unwrap();
            let after = member_for(src, VIP, &without).unwrap();
            if before == all[1] {
                moved += 1;
                assert_ne!(after, all[1]);
            } else {
                assert_eq!(after, before, "a flow of a member in service moved");
            }
        }
        assert!(moved > 250, "{moved}");
        assert_eq!(pick(1, &[]), None);
    }

    #[test]
    fn five_tuples_of_other_packets() {
        let mut p = crate::packet::syn_with_data((CLIENT, 1234), (*VIP.ip(), 443), 1, b"");
        let (proto, s, d) = five_tuple(&p).unwrap();
        assert_eq!((proto, s.port(), d.port()), (6, 1234, 443));
        p[9] = 1; // ICMP: no ports
        assert_eq!(five_tuple(&p).unwrap().1.port(), 0);
        p[9] = 6;
        p[7] = 1; // a later fragment: no ports
        assert_eq!(five_tuple(&p).unwrap().2.port(), 0);
        assert!(five_tuple(&[0x60; 40]).is_none());
    }
}
