//! The DNS shortcut through a real recursive resolver (Debian's unbound,
//! loopback, unprivileged on a high port): a stub zone for `zq.S` with
//! QNAME minimisation on and off, how much response fits an answer, and
//! the delegation from `zrtt dns` (root: the SDNS on port 53). Skipped
//! with a message when unbound is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::shortcut::*;
use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use zrtt_net::gateway::ShortcutConfig;
use zrtt_proto::shortcut::{self, Method, TxtAnswer};

/// Debian's unbound on loopback, a stub zone `zq.www.example.com` pointing
/// at the SDNS; killed (its own PID) when dropped.
struct Unbound {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Unbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 (at the time of asking).
fn free_port() -> u16 {
    loop {
        let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

const UNBOUND: &str = "/usr/sbin/unbound";

async fn start_unbound(sdns: SocketAddr, qmin: bool) -> Unbound {
    start_unbound_stub(&format!("zq.{HOST}"), sdns, qmin).await
}

/// unbound with a stub zone `zone` served at `stub`.
async fn start_unbound_stub(zone: &str, stub: SocketAddr, qmin: bool) -> Unbound {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let port = free_port();
    let conf = format!(
        "server:\n  interface: 127.0.0.1@{port}\n  port: {port}\n  do-daemonize: no\n  chroot: \"\"\n  username: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"{d}/unbound.log\"\n  verbosity: 1\n  do-ip6: no\n  do-not-query-localhost: no\n  qname-minimisation: {q}\n  access-control: 127.0.0.0/8 allow\n  module-config: \"iterator\"\n  edns-buffer-size: 1232\nremote-control:\n  control-enable: no\nstub-zone:\n  name: \"{zone}\"\n  stub-addr: {ip}@{sp}\n",
        q = if qmin { "yes" } else { "no" },
        ip = stub.ip(),
        sp = stub.port(),
    );
    let path = dir.path().join("unbound.conf");
    std::fs::write(&path, conf).unwrap();
    let child = std::process::Command::new(UNBOUND)
        .arg("-c")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let u = Unbound {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    };
    // Serving once it answers the zone's SOA through the stub (bounded).
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query(&format!("zq.{HOST}."), RecordType::SOA, 99);
    let mut buf = vec![0u8; 4096];
    for _ in 0..100 {
        sock.send_to(&q, u.addr).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(200), sock.recv_from(&mut buf)).await
        {
            if Message::from_vec(&buf[..n])
                .is_ok_and(|m| m.metadata.response_code == ResponseCode::NoError)
            {
                return u;
            }
        }
    }
    panic!("unbound did not answer on {}", u.addr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_comes_through_unbound_with_and_without_qname_minimisation() {
    if !std::path::Path::new(UNBOUND).exists() {
        eprintln!("skipped: {UNBOUND} not installed (scripts/install-deps.sh)");
        return;
    }
    let (env, seen) = start().await;
    for (i, qmin) in [false, true].into_iter().enumerate() {
        let unbound = start_unbound(env.sdns[0], qmin).await;
        let nx_before = env.metric("sdns_nxdomain");
        let target = format!("/through-unbound-{qmin}");
        let (hs, frame) = flight(&env.records[0], Method::Get, &target);
        let q = query(
            &shortcut::query_name(&frame, HOST).unwrap(),
            RecordType::TXT,
            20,
        );
        let TxtAnswer::Answer(stream) = txt_answer(&ask_udp(unbound.addr, &q).await) else {
            panic!("not ANSWER (qname-minimisation {qmin})")
        };
        let response = hs.open_shortcut_answer(&stream).unwrap();
        assert_eq!(
            body_of(&response),
            format!("hello from {target}").as_bytes()
        );
        assert_eq!(seen.lock().unwrap().len(), i + 1, "run once");
        let probes = env.metric("sdns_nxdomain") - nx_before;
        eprintln!("qname-minimisation {qmin}: {probes} partial names answered NXDOMAIN");
        if qmin {
            assert!(
                probes >= 1,
                "a minimising resolver asks partial names first"
            );
        } else {
            assert_eq!(probes, 0);
        }
    }
    env.stop().await;
}

/// The largest body (bytes) whose response still comes as ANSWER when
/// asking `server` (the SDNS itself, or a resolver in front of it):
/// bisection over `/n/N`; every size below it answers, above FETCH.
async fn largest_answer(env: &Env, server: SocketAddr) -> (usize, usize) {
    let (mut lo, mut hi) = (0usize, 2000usize);
    let mut query_len = 0;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let (hs, frame) = flight(&env.records[0], Method::Get, &format!("/n/{mid}"));
        let q = query(
            &shortcut::query_name(&frame, HOST).unwrap(),
            RecordType::TXT,
            40,
        );
        query_len = q.len();
        match txt_answer(&ask_udp(server, &q).await) {
            TxtAnswer::Answer(stream) => {
                let r = hs.open_shortcut_answer(&stream).unwrap();
                assert_eq!(body_of(&r).len(), mid);
                lo = mid;
            }
            TxtAnswer::Fetch => hi = mid,
            other => panic!("{other:?}"),
        }
    }
    (lo, query_len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn how_much_response_fits_a_dns_answer() {
    let (env, _) = start().await;
    let (direct, qlen) = largest_answer(&env, env.sdns[0]).await;
    eprintln!(
        "asked directly ({qlen}-byte query, EDNS 1232): bodies up to {direct} bytes come as ANSWER"
    );
    assert!(direct > 100, "{direct}");
    if std::path::Path::new(UNBOUND).exists() {
        for qmin in [false, true] {
            let unbound = start_unbound(env.sdns[0], qmin).await;
            let (through, _) = largest_answer(&env, unbound.addr).await;
            eprintln!("through unbound (qname-minimisation {qmin}): bodies up to {through} bytes");
            assert!(through > 100, "{through}");
        }
    }
    env.stop().await;
}

/// The delegation of docs/DNS.md §8.6 for real: `zrtt dns` serves
/// example.com with `zq.www IN NS ns.zq.www` and its glue, the SDNS listens
/// on that glue address's port 53 (root only), and unbound, knowing only
/// example.com's server, follows the referral to the SDNS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_comes_through_unbound_following_zrtt_dns_delegation() {
    if !std::path::Path::new(UNBOUND).exists() {
        eprintln!("skipped: {UNBOUND} not installed (scripts/install-deps.sh)");
        return;
    }
    let glue: SocketAddr = "127.0.0.77:53".parse().unwrap();
    if std::net::UdpSocket::bind(glue).is_err() || std::net::TcpListener::bind(glue).is_err() {
        eprintln!("skipped: cannot bind {glue} (root needed, or the port is taken)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("example.com.zone");
    std::fs::write(
        &zone,
        "$ORIGIN example.com.\n$TTL 300\n@ IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ IN NS ns1\nns1 IN A 127.0.0.1\nwww 60 IN A 127.0.0.1\nzq.www 21600 IN NS ns.zq.www\nns.zq.www 21600 IN A 127.0.0.77\n",
    )
    .unwrap();
    let state = zrtt_dns::server::ZoneState::new(&zone, None, &[], false).unwrap();
    let listener = zrtt_dns::server::Listener::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dns = listener.udp.local_addr().unwrap();
    let (trigger, shutdown) = zrtt_dns::server::shutdown::channel();
    let server = tokio::spawn(async move {
        let rng = ring::rand::SystemRandom::new();
        zrtt_dns::server::serve(
            state,
            vec![listener],
            zrtt_net::client::system_clock,
            &rng,
            Duration::from_secs(60),
            shutdown,
        )
        .await
        .unwrap();
    });
    let (backend, seen) = recording_backend().await;
    let mut sc = ShortcutConfig::default();
    sc.sdns = vec![glue];
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        shortcut: Some(sc),
        ..GatewayOpts::default()
    })
    .await;
    for (i, qmin) in [false, true].into_iter().enumerate() {
        let unbound = start_unbound_stub("example.com", dns, qmin).await;
        let target = format!("/delegated-{qmin}");
        let (hs, frame) = flight(&env.records[0], Method::Get, &target);
        let q = query(
            &shortcut::query_name(&frame, HOST).unwrap(),
            RecordType::TXT,
            50,
        );
        let TxtAnswer::Answer(stream) = txt_answer(&ask_udp(unbound.addr, &q).await) else {
            panic!("not ANSWER (qname-minimisation {qmin})")
        };
        let response = hs.open_shortcut_answer(&stream).unwrap();
        assert_eq!(
            body_of(&response),
            format!("hello from {target}").as_bytes()
        );
        assert_eq!(seen.lock().unwrap().len(), i + 1);
    }
    env.stop().await;
    trigger.fire();
    let _ = server.await;
}
