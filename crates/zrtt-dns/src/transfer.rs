//! Feeding secondaries (issue 14, "DNS for a fleet"): `zrtt dns` bumps the
//! zone's SOA serial whenever the key records change, sends NOTIFY (RFC
//! 1996) to the configured secondaries, and answers zone transfers (AXFR,
//! RFC 5936, over TCP) to the addresses allowed to transfer; everyone else
//! gets REFUSED. Knot, BIND and NSD secondaries then follow it (a secondary
//! asking for IXFR gets the whole zone).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, Record, RecordSet, RecordType, RrKey};

use crate::client::{exchange, DnsTransport};

/// Who may transfer the zone and whom to notify of changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferPolicy {
    /// Source addresses allowed AXFR (and IXFR, answered with the zone).
    pub allow: Vec<IpAddr>,
    /// Secondaries sent NOTIFY after every change.
    pub notify: Vec<SocketAddr>,
}

impl TransferPolicy {
    /// Whether a transfer request from `src` is served.
    pub fn allows(&self, src: IpAddr) -> bool {
        let src = match src {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(src, IpAddr::V4),
            v4 => v4,
        };
        self.allow.contains(&src)
    }
}

/// Whether a query asks for a zone transfer.
pub fn is_transfer(rtype: RecordType) -> bool {
    matches!(rtype, RecordType::AXFR | RecordType::IXFR)
}

/// The serial after `serial` at Unix time `now_secs`: the clock when it
/// is ahead of `serial` (RFC 1982 order), so a restarted server still moves
/// forward, else `serial + 1` (wrapping).
pub fn next_serial(serial: u32, now_secs: u32) -> u32 {
    if (now_secs.wrapping_sub(serial) as i32) > 0 {
        now_secs
    } else {
        serial.wrapping_add(1)
    }
}

/// The SOA RRset at the origin with its serial advanced at `now_secs`;
/// `None` if the zone has no SOA there. Returns the set and the new serial.
pub fn bumped_soa(set: &RecordSet, now_secs: u32) -> Option<(RecordSet, u32)> {
    let mut out = RecordSet::with_ttl(set.name().clone(), RecordType::SOA, set.ttl());
    let mut serial = None;
    for r in set.records_without_rrsigs() {
        let mut r: Record = r.clone();
        if let RData::SOA(soa) = &mut r.data {
            soa.serial = next_serial(soa.serial, now_secs);
            serial = Some(soa.serial);
        }
        let s = serial?;
        out.insert(r, s);
    }
    serial.map(|s| (out, s))
}

/// The key of the origin's SOA RRset.
pub fn soa_key(origin: &Name) -> RrKey {
    RrKey::new(origin.into(), RecordType::SOA)
}

/// Tell every secondary in `to` that `origin` changed (RFC 1996: an
/// authoritative NOTIFY carrying the SOA question; up to three tries, 1 s
/// apart, until the secondary answers). Blocking: run it off the runtime.
pub fn notify(origin: &Name, to: &[SocketAddr]) -> Vec<(SocketAddr, Result<(), String>)> {
    to.iter()
        .map(|&addr| {
            let mut last = String::new();
            for _ in 0..3 {
                let mut m = Message::new(rand_id(), MessageType::Query, OpCode::Notify);
                m.metadata.authoritative = true;
                m.add_query(Query::query(origin.clone(), RecordType::SOA));
                match exchange(addr, &m, DnsTransport::Udp, Duration::from_secs(1)) {
                    Ok(_) => return (addr, Ok(())),
                    Err(e) => last = e.to_string(),
                }
            }
            (addr, Err(last))
        })
        .collect()
}

fn rand_id() -> u16 {
    let mut b = [0u8; 2];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u16::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hickory_proto::rr::rdata::SOA;

    #[test]
    fn serial_advances_and_wraps() {
        assert_eq!(next_serial(1, 1_800_000_000), 1_800_000_000, "the clock");
        assert_eq!(next_serial(1_800_000_000, 1_800_000_000), 1_800_000_001);
        assert_eq!(next_serial(u32::MAX, 5), 5, "RFC 1982: 5 follows 2^32 - 1");
        assert_eq!(next_serial(u32::MAX, u32::MAX - 10), 0);
        let origin = Name::from_ascii("example.com.").unwrap();
        let soa = SOA::new(
            Name::from_ascii("ns1.example.com.").unwrap(),
            Name::from_ascii("hostmaster.example.com.").unwrap(),
            2026112201,
            3600,
            600,
            86400,
            300,
        );
        let mut set = RecordSet::with_ttl(origin.clone(), RecordType::SOA, 300);
        set.insert(Record::from_rdata(origin, 300, RData::SOA(soa)), 2026112201);
        let (bumped, serial) = bumped_soa(&set, 1_800_000_000).unwrap();
        assert_eq!(serial, 2026112202);
        let r = bumped.records_without_rrsigs().next().unwrap();
        assert!(matches!(&r.data, RData::SOA(s) if s.serial == 2026112202));
    }

    #[test]
    fn only_listed_addresses_transfer() {
        let p = TransferPolicy {
            allow: vec!["192.0.2.2".parse().unwrap()],
            notify: Vec::new(),
        };
        assert!(p.allows("192.0.2.2".parse().unwrap()));
        assert!(p.allows("::ffff:192.0.2.2".parse().unwrap()));
        assert!(!p.allows("192.0.2.3".parse().unwrap()));
        assert!(is_transfer(RecordType::AXFR) && is_transfer(RecordType::IXFR));
        assert!(!is_transfer(RecordType::SOA));
    }
}
