//! The PROXY protocol version 2 header (HAProxy's proxy-protocol.txt §2.2)
//! a backend marked `proxy-v2+` reads at the start of each connection: the
//! client's address and port as the source, the address and port the
//! client reached the gateway at as the destination. Encoded by the `ppp`
//! crate. Health checks send the LOCAL command (no addresses), which
//! receivers accept without taking an address from it.

use std::net::{IpAddr, SocketAddr};

use ppp::v2::{Builder, Command, Protocol, Version};
use zrtt_proto::admission::canonical_ip;

/// The header for a connection relayed for the client at `client` that
/// reached the gateway at `gateway`. Addresses of two families (an IPv4
/// client on an IPv6 socket) are both written as IPv6.
pub(super) fn proxy(client: SocketAddr, gateway: SocketAddr) -> Vec<u8> {
    let (c, g) = (canonical(client), canonical(gateway));
    let addrs = match (c.ip(), g.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (c, g),
        _ => (v6(c), v6(g)),
    };
    build(Version::Two | Command::Proxy, Some(addrs))
}

/// The header of a connection the gateway opens for itself (health checks).
pub(super) fn local() -> Vec<u8> {
    build(Version::Two | Command::Local, None)
}

fn build(version_command: u8, addrs: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let b = match addrs {
        Some(a) => Builder::with_addresses(version_command, Protocol::Stream, a),
        None => Builder::with_addresses(
            version_command,
            Protocol::Unspecified,
            ppp::v2::Addresses::Unspecified,
        ),
    };
    // Building into a Vec cannot fail (no TLV over 64 KiB here).
    b.build().unwrap_or_default()
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical_ip(a.ip()), a.port())
}

fn v6(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

    #[test]
    fn headers_carry_both_addresses_byte_for_byte() {
        let h = proxy(
            "198.51.100.7:40000".parse().unwrap(),
            "[::ffff:192.0.2.1]:443".parse().unwrap(),
        );
        let mut want = SIGNATURE.to_vec();
        // v2 PROXY, TCP over IPv4, 12 address bytes.
        want.extend([0x21, 0x11, 0, 12]);
        want.extend([198, 51, 100, 7, 192, 0, 2, 1]);
        want.extend(40000u16.to_be_bytes());
        want.extend(443u16.to_be_bytes());
        assert_eq!(h, want);
        let parsed = ppp::v2::Header::try_from(&h[..]).unwrap();
        assert_eq!(parsed.command, Command::Proxy);
        // Mixed families: both as IPv6 (TCP over IPv6, 36 bytes).
        let h = proxy(
            "198.51.100.7:1".parse().unwrap(),
            "[2001:db8::1]:443".parse().unwrap(),
        );
        assert_eq!(h[12..16], [0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
        // LOCAL: no addresses.
        let mut want = SIGNATURE.to_vec();
        want.extend([0x20, 0x00, 0, 0]);
        assert_eq!(local(), want);
    }
}
