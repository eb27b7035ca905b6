//! `zrtt gateway --sdns` with the real binary, configured from a TOML
//! file (`sdns = [...]`): it prints its SDNS address and `dig` reads the
//! shortcut zone's SOA and NS (with the glue address), NXDOMAIN for a
//! partial name, REFUSED outside the zone. The shortcut flights
//! themselves are tested in zrtt-net's tests/sdns.rs.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const HOST: &str = "www.example.com";

fn dig(port: u16, name: &str, rtype: &str) -> String {
    dig_with(port, &[name, rtype])
}

fn dig_with(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .args(["+norec", "+time=5", "+tries=2", "@127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A gateway from a TOML file with an SDNS and `extra` settings: its
/// directory, its process and the SDNS port.
fn start(extra: &str) -> (tempfile::TempDir, Guard, u16) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let conf = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\nkey = [\"k1.key\"]\nrecord = [\"k1.rec\"]\ncert = \"cert.pem\"\ncert_key = \"cert.key\"\nsdns = [\"127.0.0.1:0\"]\n{extra}",
        backend()
    );
    std::fs::write(dir.join("zrtt.toml"), conf).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--config", "zrtt.toml"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let gw = Guard(child);
    let (mut listening, mut sdns) = (String::new(), String::new());
    out.read_line(&mut listening).unwrap();
    out.read_line(&mut sdns).unwrap();
    assert!(listening.starts_with("listening "), "{listening:?}");
    let sdns: std::net::SocketAddr = sdns
        .trim()
        .strip_prefix("sdns ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{sdns:?}"));
    (tmp, gw, sdns.port())
}

#[test]
fn the_gateway_serves_the_shortcut_zone_to_dig() {
    if !have("dig") {
        eprintln!("skipped: dig not installed (scripts/install-deps.sh)");
        return;
    }
    let (_tmp, _gw, port) = start("");

    let soa = dig(port, "zq.www.example.com", "SOA");
    assert!(soa.contains("status: NOERROR"), "{soa}");
    assert!(soa.contains("flags: qr aa"), "{soa}");
    assert!(
        soa.contains("ns.zq.www.example.com. hostmaster.zq.www.example.com. 1 3600 600 86400 5"),
        "{soa}"
    );
    let ns = dig(port, "zq.www.example.com", "NS");
    assert!(ns.contains("IN\tNS\tns.zq.www.example.com."), "{ns}");
    assert!(
        ns.contains("ns.zq.www.example.com.\t3600\tIN\tA\t127.0.0.1"),
        "{ns}"
    );
    let partial = dig(port, &format!("{}.zq.www.example.com", "a".repeat(63)), "A");
    assert!(partial.contains("status: NXDOMAIN"), "{partial}");
    assert!(partial.contains("AUTHORITY: 1"), "{partial}");
    let outside = dig(port, "www.example.org", "TXT");
    assert!(outside.contains("status: REFUSED"), "{outside}");
    // DNS over TCP answers alike.
    let tcp = dig_with(port, &["+tcp", "zq.www.example.com", "SOA"]);
    assert!(tcp.contains("status: NOERROR"), "{tcp}");
}

#[test]
fn a_site_whose_shortcut_is_off_has_no_zone() {
    if !have("dig") {
        eprintln!("skipped: dig not installed (scripts/install-deps.sh)");
        return;
    }
    let (_tmp, _gw, port) =
        start("sdns_off = [\"www.example.com\"]\nsdns_client_address = \"203.0.113.9\"\n");
    let soa = dig(port, "zq.www.example.com", "SOA");
    assert!(soa.contains("status: REFUSED"), "{soa}");
}
