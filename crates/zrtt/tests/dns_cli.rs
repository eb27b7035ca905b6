//! `zrtt dns`, `zrtt keys init/rotate/status/publish` through the real
//! binary; `zrtt keys publish` against a real Knot DNS (knotd, started on a
//! free loopback port with a TSIG key and stopped afterwards).

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zrtt_dns::client::{self, DnsTransport};
use zrtt_dns::proto::op::{Message, ResponseCode};
use zrtt_dns::proto::rr::{RData, RecordType};
use zrtt_dns::proto::serialize::binary::BinEncodable;
use zrtt_proto::record::encodings::{self, SvcbRdata};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::UnixTime;

const HOST: &str = "www.example.com";
const TIMEOUT: Duration = Duration::from_secs(3);
const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\nwww IN TXT \"v=spf1 -all\"\n";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Certificate and key store for www.example.com, first key made now.
fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    ok(
        d.path(),
        &["keys", "cert", "--name", HOST, "--out-dir", "pki"],
    );
    let out = ok(
        d.path(),
        &[
            "keys",
            "init",
            "--keystore",
            "ks",
            "--name",
            HOST,
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
        ],
    );
    assert!(out.contains("published"), "{out}");
    std::fs::write(d.path().join("example.com.zone"), ZONE).unwrap();
    d
}

fn cert(d: &Path) -> Vec<u8> {
    zrtt_dns::keyfile::load_cert(&d.join("pki/cert.pem")).unwrap()
}

fn https_keys(m: &Message) -> Vec<KeyRecord> {
    let rr: Vec<_> = m
        .answers
        .iter()
        .filter(|r| r.record_type() == RecordType::HTTPS)
        .collect();
    assert_eq!(rr.len(), 1, "{m:?}");
    SvcbRdata::decode(&rr[0].data.to_bytes().unwrap())
        .unwrap()
        .zrtt_records()
        .unwrap()
        .unwrap()
}

fn ids(v: &[KeyRecord]) -> Vec<u32> {
    let mut i: Vec<u32> = v.iter().map(|r| r.body.key_id).collect();
    i.sort_unstable();
    i
}

/// The key ids in every encoding at `server` (HTTPS, TXT, AAAA tunnel), all
/// verified against the certificate at `at`; checks they agree and that
/// non-zrtt TXT records survive.
fn served_keys(server: SocketAddr, cert: &[u8], at: u64) -> Vec<u32> {
    let q = |name: &str, rt| client::query(server, name, rt, DnsTransport::Udp, TIMEOUT).unwrap();
    let (m, len) = q(HOST, RecordType::HTTPS);
    assert!(!m.metadata.truncation && len <= 1232, "{len}");
    let https = https_keys(&m);
    for r in &https {
        r.verify(cert, HOST, UnixTime::from_secs(at)).unwrap();
        assert!(u64::from(m.answers[0].ttl) < r.body.not_after - at);
    }
    let (m, _) = q(HOST, RecordType::TXT);
    let mut txt = Vec::new();
    let mut other = 0;
    for r in &m.answers {
        let rd = r.data.to_bytes().unwrap();
        if encodings::txt_is_zrtt(&rd) {
            txt.push(encodings::decode_txt_rdata(&rd).unwrap());
        } else {
            other += 1;
        }
    }
    assert_eq!(other, 1, "the SPF record must stay");
    let (m, _) = q(&format!("zrtt-tunnel.{HOST}"), RecordType::AAAA);
    let addrs: Vec<_> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0),
            _ => None,
        })
        .collect();
    let tunnel = encodings::decode_aaaa_tunnel(&addrs).unwrap();
    let (m, _) = q(HOST, RecordType::TLSA);
    assert_eq!(
        encodings::decode_tlsa_rdata(&m.answers[0].data.to_bytes().unwrap()).unwrap(),
        cert
    );
    assert_eq!(ids(&https), ids(&txt));
    assert_eq!(ids(&https), ids(&tunnel));
    ids(&https)
}

fn dig() -> Option<PathBuf> {
    ["/usr/bin/dig", "/bin/dig"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

#[test]
fn zrtt_dns_serves_key_records_dig_reads_them() {
    let d = setup();
    let mut child = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args([
                "dns",
                "--zone",
                "example.com.zone",
                "--keystore",
                "ks",
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "warn",
            ])
            .current_dir(d.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // listening udp=127.0.0.1:PORT tcp=127.0.0.1:PORT
    let udp: SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp="))
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .parse()
        .unwrap();
    assert!(line.contains(&format!("tcp={udp}")), "{line}");
    let keys = served_keys(udp, &cert(d.path()), now());
    assert_eq!(keys.len(), 1);

    // Status shows the key the server publishes.
    let st = ok(d.path(), &["keys", "status", "--keystore", "ks"]);
    assert!(st.contains(&format!("{:08x}  published", keys[0])), "{st}");

    match dig() {
        None => eprintln!("dig not installed (run scripts/install-deps.sh): dig checks skipped"),
        Some(dig) => {
            let out = Command::new(dig)
                .args([
                    "+norec",
                    "+time=3",
                    "+tries=1",
                    "@127.0.0.1",
                    "-p",
                    &udp.port().to_string(),
                    HOST,
                    "HTTPS",
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("status: NOERROR"), "{text}");
            assert!(
                text.contains("flags: qr aa;"),
                "no TC, authoritative: {text}"
            );
            assert!(text.contains("udp: 1232"), "{text}");
            assert!(text.contains("key65380="), "{text}");
            assert!(text.contains("ipv4hint=192.0.2.10"), "{text}");
        }
    }
}

#[test]
fn zrtt_dns_rejects_a_malformed_zone_with_file_and_line() {
    let d = setup();
    std::fs::write(
        d.path().join("bad.zone"),
        ZONE.replace("ns1 IN A 192.0.2.1", "ns1 IN A not-an-address"),
    )
    .unwrap();
    let out = zrtt(
        d.path(),
        &[
            "dns",
            "--zone",
            "bad.zone",
            "--keystore",
            "ks",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("zrtt: error: bad.zone:5: "), "{err}");
}

#[test]
fn keys_publish_zone_fragment() {
    let d = setup();
    let out = ok(
        d.path(),
        &[
            "keys",
            "publish",
            "--keystore",
            "ks",
            "--zone-fragment",
            "--ipv4hint",
            "192.0.2.10",
        ],
    );
    assert!(
        out.contains(
            "www.example.com. 300 IN HTTPS 1 . alpn=\"http/1.1\" ipv4hint=192.0.2.10 key65380=\""
        ),
        "{out}"
    );
    assert!(out.contains("IN TXT \"v=zrtt1 id="), "{out}");
    assert!(
        out.contains("zrtt-tunnel.www.example.com. 300 IN AAAA 0:"),
        "{out}"
    );
    assert!(out.contains("IN TLSA 3 0 0 "), "{out}");
    // hickory's zone parser reads the TXT, AAAA and TLSA lines (it cannot
    // parse SvcParams it does not know, so not the HTTPS line; `zrtt dns`
    // generates that record itself).
    let rest: String = out
        .lines()
        .filter(|l| !l.contains(" HTTPS "))
        .map(|l| format!("{l}\n"))
        .collect();
    let zone = format!("{ZONE}{rest}");
    zrtt_dns::zone::parse(&zone, None, None).unwrap();
}

// ---------------------------------------------------------------- Knot

fn knotd() -> Option<PathBuf> {
    ["/usr/sbin/knotd", "/usr/bin/knotd", "/usr/local/sbin/knotd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn free_port() -> u16 {
    // UDP and TCP on the same port: take one free for UDP, check TCP.
    loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

struct Knot {
    _guard: Guard,
    addr: SocketAddr,
}

fn start_knot(dir: &Path, secret_b64: &str) -> Knot {
    let knotd = knotd().unwrap();
    let kdir = dir.join("knot");
    std::fs::create_dir_all(kdir.join("db")).unwrap();
    std::fs::write(kdir.join("example.com.zone"), ZONE).unwrap();
    let port = free_port();
    let user = if unsafe_is_root() {
        "    user: root:root\n"
    } else {
        ""
    };
    let conf = format!(
        "server:\n    rundir: \"{k}\"\n    listen: 127.0.0.1@{port}\n{user}\
         log:\n  - target: stderr\n    any: warning\n\
         database:\n    storage: \"{k}/db\"\n\
         key:\n  - id: zrtt-key\n    algorithm: hmac-sha256\n    secret: {secret_b64}\n\
         acl:\n  - id: update\n    key: zrtt-key\n    action: update\n\
         template:\n  - id: default\n    storage: \"{k}\"\n    file: \"%s.zone\"\n    zonefile-sync: -1\n\
         zone:\n  - domain: example.com\n    acl: update\n",
        k = kdir.display()
    );
    std::fs::write(kdir.join("knot.conf"), conf).unwrap();
    let child = Command::new(knotd)
        .arg("-c")
        .arg(kdir.join("knot.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut guard = Guard(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // Bounded wait until it answers for the zone.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = guard.0.try_wait() {
            panic!("knotd exited early: {status}");
        }
        if let Ok((m, _)) = client::query(
            addr,
            "example.com",
            RecordType::SOA,
            DnsTransport::Udp,
            Duration::from_millis(300),
        ) {
            if m.metadata.response_code == ResponseCode::NoError && !m.answers.is_empty() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "knotd did not answer in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Knot {
        _guard: guard,
        addr,
    }
}

fn unsafe_is_root() -> bool {
    // No libc: root's home and the uid in /proc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn keys_publish_keeps_knot_current_through_a_rotation() {
    if knotd().is_none() {
        eprintln!("skipped: knotd not installed (run scripts/install-deps.sh)");
        return;
    }
    let d = setup();
    let secret = "Wm1SelpYSnBZWE5rWm1GelpHWmhjMlJtWVhOa1ptRnpaQT09";
    std::fs::write(
        d.path().join("tsig.key"),
        format!("key \"zrtt-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"),
    )
    .unwrap();
    let knot = start_knot(d.path(), secret);
    let server = knot.addr.to_string();
    let cert = cert(d.path());
    let t0 = now();

    // Unsigned and wrongly signed updates are refused by Knot's ACL.
    let out = zrtt(
        d.path(),
        &["keys", "publish", "--keystore", "ks", "--server", &server],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused the update"), "{err}");
    let out = zrtt(
        d.path(),
        &[
            "keys",
            "publish",
            "--keystore",
            "ks",
            "--server",
            &server,
            "--tsig",
            "zrtt-key:d3JvbmcgcGFzc3dvcmQ=",
        ],
    );
    assert!(!out.status.success());

    // Publish: Knot serves key 1 in all four encodings, hints from its A/AAAA.
    let out = ok(
        d.path(),
        &[
            "keys",
            "publish",
            "--keystore",
            "ks",
            "--server",
            &server,
            "--tsig-key",
            "tsig.key",
        ],
    );
    assert!(out.contains("published 1 key(s)"), "{out}");
    let k1 = served_keys(knot.addr, &cert, t0);
    assert_eq!(k1.len(), 1);
    let (m, _) = client::query(
        knot.addr,
        HOST,
        RecordType::HTTPS,
        DnsTransport::Udp,
        TIMEOUT,
    )
    .unwrap();
    let svcb = SvcbRdata::decode(&m.answers[0].data.to_bytes().unwrap()).unwrap();
    assert_eq!(
        svcb.ipv4_hints(),
        vec!["192.0.2.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );

    // Rotate (as a timer would, 40 minutes on): both keys published.
    let at = (t0 + 2400).to_string();
    ok(
        d.path(),
        &["keys", "rotate", "--keystore", "ks", "--at", &at],
    );
    ok(
        d.path(),
        &[
            "keys",
            "publish",
            "--keystore",
            "ks",
            "--server",
            &server,
            "--tsig-key",
            "tsig.key",
            "--at",
            &at,
        ],
    );
    let both = served_keys(knot.addr, &cert, t0 + 2400);
    assert_eq!(both.len(), 2);
    assert!(both.contains(&k1[0]));

    // 50 minutes on: key 1 left the publication window; Knot drops it.
    let at = (t0 + 3000).to_string();
    let out = ok(
        d.path(),
        &[
            "keys",
            "publish",
            "--keystore",
            "ks",
            "--server",
            &server,
            "--tsig-key",
            "tsig.key",
            "--at",
            &at,
        ],
    );
    assert!(
        out.contains("published 1 key(s)") && out.contains("2 old zrtt TXT removed"),
        "{out}"
    );
    let k2 = served_keys(knot.addr, &cert, t0 + 3000);
    assert_eq!(k2.len(), 1);
    assert_ne!(k2, k1);
    assert!(both.contains(&k2[0]));

    if let Some(dig) = dig() {
        let out = Command::new(dig)
            .args([
                "+norec",
                "+time=3",
                "+tries=1",
                "@127.0.0.1",
                "-p",
                &knot.addr.port().to_string(),
                HOST,
                "TXT",
                "+short",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("id={:08x}", k2[0])), "{text}");
        assert!(!text.contains(&format!("id={:08x}", k1[0])), "{text}");
        assert!(text.contains("v=spf1 -all"), "{text}");
    }
}

// ------------------------------------------------- secondaries (transfers)

/// The key ids a server answers for www's HTTPS record (empty if none).
fn https_ids_at(server: SocketAddr) -> Vec<u32> {
    match client::query(
        server,
        HOST,
        RecordType::HTTPS,
        DnsTransport::Udp,
        Duration::from_millis(500),
    ) {
        Ok((m, _)) if m.metadata.response_code == ResponseCode::NoError => ids(&https_keys(&m)),
        _ => Vec::new(),
    }
}

/// `zrtt dns` as a primary whose keys live 30 s (the next one is published
/// 20 s after the first), allowing transfers from 127.0.0.1 and notifying
/// `secondary`; returns its guard and address.
fn rotating_primary(dir: &Path, secondary: SocketAddr) -> (Guard, SocketAddr) {
    keystore(dir, HOST, "pki", &["--lifetime", "30s", "--ttl", "5s"]);
    std::fs::write(dir.join("example.com.zone"), ZONE).unwrap();
    let primary: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let guard = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["dns", "--zone", "example.com.zone", "--keystore", "ks"])
            .args(["--listen", &primary.to_string(), "--log-level", "warn"])
            .args([
                "--allow-transfer",
                "127.0.0.1",
                "--notify",
                &secondary.to_string(),
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    (guard, primary)
}

/// The secondary `who` at `secondary` transfers the zone and serves what
/// the primary serves, then follows the primary's next key (serial bumped,
/// NOTIFY, transfer) within a minute.
fn follows_rotation(who: &str, primary: SocketAddr, secondary: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let (p, s) = (https_ids_at(primary), https_ids_at(secondary));
        if !s.is_empty() && s == p {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{who}: no transfer: primary {p:x?}, secondary {s:x?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = https_ids_at(secondary);
        if !s.is_empty() && s != first && s == https_ids_at(primary) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{who}: the secondary kept {first:x?} (serving {s:x?}) after the primary rotated"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `zrtt dns` feeds a Knot secondary: the secondary transfers the zone
/// (AXFR), and when the keys rotate `zrtt dns` bumps the SOA serial and
/// sends NOTIFY, so the secondary serves the new key; a transfer from an
/// address not allowed is refused.
#[test]
fn a_knot_secondary_follows_zrtt_dns_through_a_rotation() {
    let Some(knotd) = knotd() else {
        eprintln!("knotd not installed (run scripts/install-deps.sh): skipped");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let kport = free_port();
    let secondary: SocketAddr = format!("127.0.0.1:{kport}").parse().unwrap();
    let (_zrtt, primary) = rotating_primary(d.path(), secondary);
    let zport = primary.port();
    let kdir = d.path().join("knot2");
    std::fs::create_dir_all(kdir.join("db")).unwrap();
    let user = if unsafe_is_root() {
        "    user: root:root\n"
    } else {
        ""
    };
    let conf = format!(
        "server:\n    rundir: \"{k}\"\n    listen: 127.0.0.1@{kport}\n{user}\
         log:\n  - target: stderr\n    any: warning\n\
         database:\n    storage: \"{k}/db\"\n\
         remote:\n  - id: zrtt\n    address: 127.0.0.1@{zport}\n\
         acl:\n  - id: notify-from-zrtt\n    address: 127.0.0.1\n    action: notify\n\
         template:\n  - id: default\n    storage: \"{k}\"\n    file: \"%s.zone\"\n    zonefile-sync: -1\n\
         zone:\n  - domain: example.com\n    master: zrtt\n    acl: notify-from-zrtt\n",
        k = kdir.display()
    );
    std::fs::write(kdir.join("knot.conf"), conf).unwrap();
    let _knot = Guard(
        Command::new(knotd)
            .arg("-c")
            .arg(kdir.join("knot.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    follows_rotation("knot", primary, secondary);
    // A transfer from an address not allowed is refused.
    if let Some(dig) = dig() {
        let out = Command::new(&dig)
            .args(["+time=3", "+tries=1", "-b", "127.0.0.2", "@127.0.0.1", "-p"])
            .arg(zport.to_string())
            .args(["example.com", "AXFR"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Transfer failed") || text.contains("REFUSED"),
            "{text}"
        );
        let out = Command::new(&dig)
            .args(["+time=3", "+tries=1", "@127.0.0.1", "-p"])
            .arg(zport.to_string())
            .args(["example.com", "AXFR"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("key65380="),
            "the allowed transfer has the keys: {text}"
        );
    }
}

// ---------------------------------------------------------------- BIND, NSD

/// A server stopped with SIGTERM (so it stops the processes it forked),
/// then SIGKILL if it has not exited within 5 s.
struct TermGuard(std::process::Child);

impl Drop for TermGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn installed(paths: &[&str]) -> Option<PathBuf> {
    paths.iter().map(PathBuf::from).find(|p| p.exists())
}

/// `zrtt dns` feeds a BIND 9 secondary (named): AXFR, then the next key
/// through NOTIFY and a transfer, as with Knot. BIND asks for IXFR first;
/// `zrtt dns` answers with the whole zone, which RFC 1995 allows.
#[test]
fn a_bind_secondary_follows_zrtt_dns_through_a_rotation() {
    let Some(named) = installed(&["/usr/sbin/named", "/usr/bin/named"]) else {
        eprintln!("named not installed (run scripts/install-deps.sh): skipped");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let sport = free_port();
    let secondary: SocketAddr = format!("127.0.0.1:{sport}").parse().unwrap();
    let (_zrtt, primary) = rotating_primary(d.path(), secondary);
    let bdir = d.path().join("bind");
    std::fs::create_dir_all(&bdir).unwrap();
    let conf = format!(
        "options {{\n  directory \"{b}\";\n  pid-file \"{b}/named.pid\";\n  listen-on port {sport} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  recursion no;\n  notify no;\n  dnssec-validation no;\n}};\n\
         controls {{ }};\n\
         zone \"example.com\" {{\n  type secondary;\n  primaries {{ 127.0.0.1 port {zport}; }};\n  file \"{b}/example.com.db\";\n  allow-notify {{ 127.0.0.1; }};\n}};\n",
        b = bdir.display(),
        zport = primary.port()
    );
    std::fs::write(bdir.join("named.conf"), conf).unwrap();
    // -g: foreground, logs to stderr; no -u: stays the user running the test.
    let _named = TermGuard(
        Command::new(named)
            .arg("-g")
            .arg("-c")
            .arg(bdir.join("named.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    follows_rotation("BIND", primary, secondary);
}

/// `zrtt dns` feeds an NSD secondary: AXFR, then the next key through
/// NOTIFY and a transfer.
#[test]
fn an_nsd_secondary_follows_zrtt_dns_through_a_rotation() {
    let Some(nsd) = installed(&["/usr/sbin/nsd", "/usr/bin/nsd"]) else {
        eprintln!("nsd not installed (run scripts/install-deps.sh): skipped");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let sport = free_port();
    let secondary: SocketAddr = format!("127.0.0.1:{sport}").parse().unwrap();
    let (_zrtt, primary) = rotating_primary(d.path(), secondary);
    let ndir = d.path().join("nsd");
    std::fs::create_dir_all(&ndir).unwrap();
    let conf = format!(
        "server:\n  ip-address: 127.0.0.1@{sport}\n  port: {sport}\n  zonesdir: \"{n}\"\n  database: \"\"\n  pidfile: \"{n}/nsd.pid\"\n  xfrdfile: \"{n}/xfrd.state\"\n  xfrdir: \"{n}\"\n  zonelistfile: \"{n}/zone.list\"\n  username: \"\"\n  chroot: \"\"\n  verbosity: 1\n\
         remote-control:\n  control-enable: no\n\
         zone:\n  name: example.com\n  zonefile: \"example.com.zone\"\n  allow-notify: 127.0.0.1 NOKEY\n  request-xfr: AXFR 127.0.0.1@{zport} NOKEY\n",
        n = ndir.display(),
        zport = primary.port()
    );
    std::fs::write(ndir.join("nsd.conf"), conf).unwrap();
    let _nsd = TermGuard(
        Command::new(nsd)
            .arg("-d")
            .arg("-c")
            .arg(ndir.join("nsd.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    follows_rotation("NSD", primary, secondary);
}
