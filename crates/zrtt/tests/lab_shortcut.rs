//! The DNS shortcut end to end (issue #17, docs/DNS.md §8) in network
//! namespaces: `zrtt get --dns-shortcut` holding the key record, through a
//! real unbound (default settings, QNAME minimisation on) whose cache has
//! the `zq.www.example.com` delegation but not www's address, to the
//! gateway's SDNS (`zrtt gateway --sdns`) delegated from `zrtt dns`. The
//! response comes in the DNS answer (`%{zrtt_mode}` = dns-shortcut), the
//! backend sees the request once with `Early-Data: 1`, and a POST goes the
//! plain path. Resolver to SDNS 5 ms, resolver to authoritative 60 ms,
//! client to gateway 100 ms: the shortcut's answer comes long before the
//! address would. Needs root and unbound; says why when it skips.

mod common;
use common::*;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zrtt_dns::client::{exchange, query_message, DnsTransport};
use zrtt_dns::proto::rr::RecordType;
use zrtt_lab::{Lab, Topology};

const HOST: &str = "www.example.com";

fn unbound_conf(dir: &Path, res: std::net::Ipv4Addr, auth: std::net::Ipv4Addr) -> String {
    format!(
        "server:\n  interface: {res}\n  port: 53\n  access-control: 198.18.0.0/15 allow\n  do-ip6: no\n  do-not-query-localhost: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n  module-config: \"iterator\"\n  edns-buffer-size: 1232\nstub-zone:\n  name: \"example.com\"\n  stub-addr: {auth}\nremote-control:\n  control-enable: yes\n  control-interface: \"{d}/unbound.ctl\"\n  control-use-cert: no\n",
        d = dir.display()
    )
}

/// `unbound-control` on the test's resolver.
fn unbound_control(dir: &Path, args: &[&str]) {
    let out = Command::new("unbound-control")
        .arg("-c")
        .arg(dir.join("unbound.conf"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "unbound-control {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `zrtt get --dns-shortcut` in the client's namespace, holding the key
/// record; `(mode, status)` from `-w`, or the failure.
fn get(lab: &Lab, dir: &Path, resolver: SocketAddr, path: &str, post: bool) -> (String, String) {
    let mut c = lab.command("client", env!("CARGO_BIN_EXE_zrtt")).unwrap();
    c.args(["get", "--no-state", "--dns-shortcut", "-o", "/dev/null"])
        .args([
            "-m",
            "15s",
            "--record",
            "records.hex",
            "--cert",
            "pki/cert.pem",
        ])
        .args(["--dns-server", &resolver.to_string()])
        .args(["-w", "%{zrtt_mode} %{http_code}"]);
    if post {
        c.args(["-d", "hello"]);
    }
    c.arg(format!("https://{HOST}{path}")).current_dir(dir);
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut f = text.split_whitespace().map(String::from);
    match (out.status.success(), f.next(), f.next()) {
        (true, Some(mode), Some(status)) => (mode, status),
        _ => (
            "failed".into(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
    }
}

#[test]
fn dns_shortcut_through_unbound_and_the_gateways_sdns() {
    let test = "dns_shortcut_through_unbound_and_the_gateways_sdns";
    if lab_skip(test, &["unbound", "unbound-control"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    keystore(dir, HOST, "pki", &[]);
    let now = zrtt_net::client::system_clock();
    let records = zrtt_dns::KeyStore::open(&dir.join("ks"))
        .unwrap()
        .published_records(now);
    assert!(!records.is_empty());
    let list = zrtt_proto::record::encode_record_list(&records);
    std::fs::write(
        dir.join("records.hex"),
        zrtt_proto::record::hex(&list).as_bytes(),
    )
    .unwrap();

    let lab = Lab::up(
        Topology::new()
            .host("client")
            .host("resolver")
            .host("auth")
            .host("www")
            .rtt("client", "resolver", Duration::from_millis(5))
            .rtt("resolver", "auth", Duration::from_millis(60))
            .rtt("resolver", "www", Duration::from_millis(5))
            .rtt("client", "www", Duration::from_millis(100))
            .rtt("client", "auth", Duration::from_millis(60)),
    )
    .unwrap();
    let (auth, res, www) = (
        lab.addr("auth").unwrap(),
        lab.addr("resolver").unwrap(),
        lab.addr("www").unwrap(),
    );

    // Authoritative: www's address and keys; zq.www delegated to www.
    let zone = format!(
        "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A {auth}\nwww IN A {www}\nzq.www IN NS ns.zq.www\nns.zq.www IN A {www}\n"
    );
    std::fs::write(dir.join("example.com.zone"), zone).unwrap();
    let mut dns = lab.command("auth", env!("CARGO_BIN_EXE_zrtt")).unwrap();
    dns.args(["dns", "--zone", "example.com.zone", "--keystore", "ks"])
        .args(["--no-rotate", "--listen", &format!("{auth}:53")])
        .args(["--log-level", "warn"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _dns = lab.spawn("auth", dns).unwrap();

    // The site: a recording backend and the gateway with its SDNS, on www.
    let (backend, seen) = lab.in_host("www", recording_backend).unwrap();
    let mut gw = lab.command("www", env!("CARGO_BIN_EXE_zrtt")).unwrap();
    gw.args(["gateway", "--listen", &format!("{www}:443")])
        .args(["--backend", &backend.to_string(), "--keystore", "ks"])
        .args(["--sdns", &format!("{www}:53")])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _gw = lab.spawn("www", gw).unwrap();

    std::fs::write(dir.join("unbound.conf"), unbound_conf(dir, res, auth)).unwrap();
    let mut u = lab.command("resolver", "unbound").unwrap();
    u.args(["-d", "-c"])
        .arg(dir.join("unbound.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _unbound = lab.spawn("resolver", u).unwrap();
    let resolver = SocketAddr::from((res, 53));

    // The chain answers and the gateway listens.
    lab.in_host("client", move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut m = query_message(HOST, RecordType::A).unwrap();
            m.metadata.recursion_desired = true;
            let answered = exchange(resolver, &m, DnsTransport::Udp, Duration::from_secs(2))
                .is_ok_and(|(a, _)| !a.answers.is_empty());
            if answered && std::net::TcpStream::connect((www, 443)).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "resolver chain or gateway down");
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .unwrap();

    // Warm up until a shortcut answer comes (the resolver learns the
    // delegation; a fresh gateway's replay filter refuses flights for its
    // first seconds, and then the plain path answers).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        let (mode, status) = get(&lab, dir, resolver, &format!("/warm{n}"), false);
        if mode == "dns-shortcut" && status == "200" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no shortcut answer: {mode} {status}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // The measured request: www's address cold at the resolver, the
    // delegation and the key records warm. A sample the plain path won
    // (the machine's load) is taken again, on another path.
    let mut attempt = 0;
    let path = loop {
        attempt += 1;
        let path = format!("/shortcut{attempt}");
        unbound_control(dir, &["flush_type", HOST, "A"]);
        let (mode, status) = get(&lab, dir, resolver, &path, false);
        if mode == "dns-shortcut" {
            assert_eq!(status, "200");
            break path;
        }
        assert!(
            attempt < 3,
            "the shortcut lost 3 times: last {mode} {status}"
        );
        eprintln!("{test}: {path} went {mode}; taken again");
    };
    let line = format!("get {path} http/1.1 early=true");
    let runs = seen.lock().unwrap().iter().filter(|l| **l == line).count();
    assert_eq!(runs, 1, "{:?}", seen.lock().unwrap());

    // A POST never takes the shortcut: the plain path, run once, not early.
    unbound_control(dir, &["flush_type", HOST, "A"]);
    let (mode, status) = get(&lab, dir, resolver, "/post", true);
    assert_eq!(status, "200", "{mode}");
    assert!(mode.starts_with("0rtt") || mode == "tls-fallback", "{mode}");
    let posts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("post /post "))
        .cloned()
        .collect();
    assert_eq!(posts, vec!["post /post http/1.1 early=false".to_owned()]);
    lab.down().unwrap();
}
