//! The little IPv4/TCP packet work the hub's middleboxes and the flood
//! generator need: where a packet goes, whether it is a SYN carrying data,
//! stripping that data (fixing lengths and checksums), and building a SYN
//! with data from any source address. No options beyond what is given, no
//! fragments: lab traffic only.

use std::net::Ipv4Addr;

const PROTO_TCP: u8 = 6;
const FLAG_SYN: u8 = 0x02;
const FLAG_ACK: u8 = 0x10;

/// Destination address of an IPv4 packet, or `None` if it is not IPv4.
pub(crate) fn ipv4_dst(pkt: &[u8]) -> Option<Ipv4Addr> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]))
}

/// Header lengths of an unfragmented IPv4/TCP packet: (IP header, TCP
/// header, payload), or `None` for anything else or a truncated packet.
fn tcp_layout(pkt: &[u8]) -> Option<(usize, usize, usize)> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 || pkt[9] != PROTO_TCP {
        return None;
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    let frag = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff; // MF + offset
    if ihl < 20 || total > pkt.len() || frag != 0 || total < ihl + 20 {
        return None;
    }
    let thl = usize::from(pkt[ihl + 12] >> 4) * 4;
    if thl < 20 || ihl + thl > total {
        return None;
    }
    Some((ihl, thl, total - ihl - thl))
}

/// Whether `pkt` is a client's SYN (SYN without ACK) carrying payload, as
/// a TCP Fast Open SYN does.
pub(crate) fn is_syn_with_data(pkt: &[u8]) -> bool {
    match tcp_layout(pkt) {
        Some((ihl, _, payload)) => {
            let flags = pkt[ihl + 13];
            payload > 0 && flags & FLAG_SYN != 0 && flags & FLAG_ACK == 0
        }
        None => false,
    }
}

/// What the flow filter ([`crate::impair::Flows`]) needs of a TCP
/// segment: its endpoints, whether it opens a connection, and the first
/// bytes of its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment<'a> {
    pub(crate) src: (Ipv4Addr, u16),
    pub(crate) dst: (Ipv4Addr, u16),
    /// SYN flag set (a client's SYN or a server's SYN-ACK).
    pub(crate) syn: bool,
    /// SYN without ACK: a client opening a connection.
    pub(crate) opening: bool,
    pub(crate) payload: &'a [u8],
}

/// `pkt` as a TCP segment, or `None` for anything else.
pub(crate) fn tcp_segment(pkt: &[u8]) -> Option<Segment<'_>> {
    let (ihl, thl, payload) = tcp_layout(pkt)?;
    let t = &pkt[ihl..];
    let flags = t[13];
    let addr = |o: usize| Ipv4Addr::new(pkt[o], pkt[o + 1], pkt[o + 2], pkt[o + 3]);
    Some(Segment {
        src: (addr(12), u16::from_be_bytes([t[0], t[1]])),
        dst: (addr(16), u16::from_be_bytes([t[2], t[3]])),
        syn: flags & FLAG_SYN != 0,
        opening: flags & FLAG_SYN != 0 && flags & FLAG_ACK == 0,
        payload: &pkt[ihl + thl..ihl + thl + payload],
    })
}

/// Removes the payload of a SYN with data, as a middlebox that strips it
/// would: the IPv4 total length and both checksums are fixed, TCP options
/// (a Fast Open cookie option included) are kept. Returns whether the
/// packet changed.
pub(crate) fn strip_syn_data(pkt: &mut Vec<u8>) -> bool {
    if !is_syn_with_data(pkt) {
        return false;
    }
    let Some((ihl, thl, _)) = tcp_layout(pkt) else {
        return false;
    };
    let total = ihl + thl;
    pkt.truncate(total);
    pkt[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    fix_checksums(pkt, ihl);
    true
}

/// The Internet checksum (RFC 1071) of `data`, continuing from `sum`.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Recomputes the IPv4 header checksum and the TCP checksum (with the
/// pseudo-header) of a TCP packet whose IP header is `ihl` bytes.
fn fix_checksums(pkt: &mut [u8], ihl: usize) {
    pkt[10..12].copy_from_slice(&[0, 0]);
    let ip = fold(sum16(0, &pkt[..ihl]));
    pkt[10..12].copy_from_slice(&ip.to_be_bytes());
    let seg_len = pkt.len() - ihl;
    pkt[ihl + 16..ihl + 18].copy_from_slice(&[0, 0]);
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&pkt[12..20]);
    pseudo[9] = PROTO_TCP;
    pseudo[10..12].copy_from_slice(&(seg_len as u16).to_be_bytes());
    let tcp = fold(sum16(sum16(0, &pseudo), &pkt[ihl..]));
    pkt[ihl + 16..ihl + 18].copy_from_slice(&tcp.to_be_bytes());
}

/// Whether both checksums of an IPv4/TCP packet verify.
#[cfg(test)]
fn checksums_ok(pkt: &[u8]) -> bool {
    let Some((ihl, _, _)) = tcp_layout(pkt) else {
        return false;
    };
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&pkt[12..20]);
    pseudo[9] = PROTO_TCP;
    pseudo[10..12].copy_from_slice(&((pkt.len() - ihl) as u16).to_be_bytes());
    fold(sum16(0, &pkt[..ihl])) == 0 && fold(sum16(sum16(0, &pseudo), &pkt[ihl..])) == 0
}

/// An IPv4 TCP SYN from `src` to `dst` carrying `payload`, with an MSS
/// option (1460) and checksums set: what a client's Fast Open SYN looks
/// like to a server that needs no cookie.
pub fn syn_with_data(
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    const IHL: usize = 20;
    const THL: usize = 24; // 20 + MSS option
    let total = IHL + THL + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&((seq >> 16) as u16).to_be_bytes()); // id
    p[6] = 0x40; // DF
    p[8] = 64; // TTL
    p[9] = PROTO_TCP;
    p[12..16].copy_from_slice(&src.0.octets());
    p[16..20].copy_from_slice(&dst.0.octets());
    let t = &mut p[IHL..];
    t[0..2].copy_from_slice(&src.1.to_be_bytes());
    t[2..4].copy_from_slice(&dst.1.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = ((THL / 4) as u8) << 4;
    t[13] = FLAG_SYN;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t[20..24].copy_from_slice(&[2, 4, 0x05, 0xb4]); // MSS 1460
    t[THL..].copy_from_slice(payload);
    fix_checksums(&mut p, IHL);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    #[test]
    fn parses_ipv4_destination() {
        let mut p = [0u8; 20];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&[198, 18, 0, 2]);
        assert_eq!(ipv4_dst(&p), Some(B));
        p[0] = 0x60;
        assert_eq!(ipv4_dst(&p), None);
        assert_eq!(ipv4_dst(&p[..10]), None);
    }

    #[test]
    fn builds_a_valid_syn_with_data() {
        let p = syn_with_data((A, 40000), (B, 443), 7, b"\xd7hello");
        assert!(checksums_ok(&p));
        assert!(is_syn_with_data(&p));
        assert_eq!(ipv4_dst(&p), Some(B));
        let empty = syn_with_data((A, 40000), (B, 443), 7, b"");
        assert!(checksums_ok(&empty));
        assert!(!is_syn_with_data(&empty), "a SYN without data");
        // The same checksum routine verifies a known packet (RFC 1071 example).
        assert_eq!(
            fold(sum16(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            !0xddf2
        );
    }

    #[test]
    fn strips_syn_data_and_fixes_checksums() {
        let mut p = syn_with_data((A, 40000), (B, 443), 1, &[0xd7; 301]);
        assert!(strip_syn_data(&mut p));
        assert_eq!(p.len(), 44);
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 44);
        assert!(checksums_ok(&p));
        assert!(!is_syn_with_data(&p));
        assert!(!strip_syn_data(&mut p), "nothing left to strip");
        // A SYN-ACK or a data segment is left alone.
        let mut synack = syn_with_data((B, 443), (A, 40000), 1, b"xy");
        synack[20 + 13] |= FLAG_ACK;
        assert!(!is_syn_with_data(&synack));
        let before = synack.clone();
        assert!(!strip_syn_data(&mut synack));
        assert_eq!(synack, before);
        // Fragments, other protocols and truncated packets are not touched.
        let mut frag = syn_with_data((A, 1), (B, 2), 1, b"x");
        frag[6] |= 0x20;
        assert!(!is_syn_with_data(&frag));
        let mut udp = syn_with_data((A, 1), (B, 2), 1, b"x");
        udp[9] = 17;
        assert!(!is_syn_with_data(&udp));
        assert!(!is_syn_with_data(
            &syn_with_data((A, 1), (B, 2), 1, b"x")[..30]
        ));
    }
}
