//! What the SDNS owes a querier it cannot prove (security review sc-1,
//! docs/GATEWAY.md "The DNS shortcut"): the backend never hears the
//! querier's address (a marker in X-Forwarded-For and the PROXY header),
//! runs are bounded by the gateway's soft load limit and a per-prefix
//! budget (FETCH beyond them), a run from the SDNS reads at most 64 KiB,
//! a waiter waits as long as a run can take, and a REJECT under `zq.S`
//! carries only S's records.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::shortcut::*;
use common::*;
use hickory_proto::rr::RecordType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_net::gateway::ShortcutConfig;
use zrtt_proto::admission::AdmissionLimits;
use zrtt_proto::handshake::{decode_reject_records, read_frame, Expect, Frame, RejectReason};
use zrtt_proto::shortcut::{self, Method, TxtAnswer};
use zrtt_proto::testing;

/// One request a raw backend saw: the PROXY v2 source (if it read one)
/// and the request head.
#[derive(Clone, Debug)]
struct Heard {
    proxy_source: Option<SocketAddr>,
    head: String,
}

/// A backend that reads a PROXY v2 header first when `proxy_v2`, then a
/// request head, and answers `ok` after `delay` (the head at once, the
/// body after the delay).
async fn raw_backend(proxy_v2: bool, delay: Duration) -> (SocketAddr, Arc<Mutex<Vec<Heard>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heard: Arc<Mutex<Vec<Heard>>> = Arc::default();
    let h = heard.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let h = h.clone();
            tokio::spawn(async move {
                let mut proxy_source = None;
                if proxy_v2 {
                    let mut fixed = [0u8; 16];
                    tcp.read_exact(&mut fixed).await.unwrap();
                    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
                    let mut addrs = vec![0u8; len];
                    tcp.read_exact(&mut addrs).await.unwrap();
                    // 0x11: TCP over IPv4: src, dst, src port, dst port.
                    if fixed[13] == 0x11 {
                        let ip = IpAddr::from([addrs[0], addrs[1], addrs[2], addrs[3]]);
                        let port = u16::from_be_bytes([addrs[8], addrs[9]]);
                        proxy_source = Some(SocketAddr::new(ip, port));
                    }
                }
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tcp.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    head.push(b[0]);
                }
                h.lock().unwrap().push(Heard {
                    proxy_source,
                    head: String::from_utf8_lossy(&head).to_lowercase(),
                });
                let _ = tcp
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n")
                    .await;
                tokio::time::sleep(delay).await;
                let _ = tcp.write_all(b"ok").await;
            });
        }
    });
    (addr, heard)
}

fn sdns_config() -> ShortcutConfig {
    let mut sc = ShortcutConfig::default();
    sc.sdns = vec!["127.0.0.1:0".parse().unwrap()];
    sc
}

fn txt_query(frame: &[u8], id: u16) -> Vec<u8> {
    query(
        &shortcut::query_name(frame, HOST).unwrap(),
        RecordType::TXT,
        id,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_never_hears_the_querier_only_the_marker() {
    let (backend, heard) = raw_backend(true, Duration::ZERO).await;
    let mut sc = sdns_config();
    sc.dns_client_address = "198.51.100.7".parse().unwrap();
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        backend_spec: Some(format!("proxy-v2+{backend}")),
        shortcut: Some(sc),
        ..GatewayOpts::default()
    })
    .await;
    // From the SDNS (a querier at 127.0.0.3, which `Require local` would
    // trust): the marker in X-Forwarded-For and as the PROXY source.
    let (hs, frame) = flight(&env.records[0], Method::Get, "/server-status");
    let a = ask_udp_from("127.0.0.3", env.sdns[0], &txt_query(&frame, 1)).await;
    let TxtAnswer::Answer(stream) = txt_answer(&a) else {
        panic!("not ANSWER")
    };
    assert_eq!(body_of(&hs.open_shortcut_answer(&stream).unwrap()), b"ok");
    // The same flight's TCP form from elsewhere: the cached answer.
    assert_eq!(fetch_tcp(env.addr, &frame).await, stream);
    // A flight that starts on the gateway's port: the client's address.
    let (_, tcp_flight) = flight(&env.records[0], Method::Get, "/tcp");
    let _ = fetch_tcp(env.addr, &tcp_flight).await;
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 2, "{heard:?}");
    let dns = &heard[0];
    assert!(dns.head.starts_with("get /server-status "), "{dns:?}");
    assert_eq!(dns.proxy_source, Some("198.51.100.7:0".parse().unwrap()));
    assert!(
        dns.head.contains("\r\nx-forwarded-for: 198.51.100.7\r\n"),
        "{dns:?}"
    );
    assert!(
        dns.head
            .contains("\r\nforwarded: for=unknown;proto=https\r\n"),
        "{dns:?}"
    );
    assert!(dns.head.contains("\r\nearly-data: 1\r\n"), "{dns:?}");
    assert!(!dns.head.contains("127.0.0."), "{dns:?}");
    let tcp = &heard[1];
    assert!(tcp.head.starts_with("get /tcp "), "{tcp:?}");
    assert_eq!(tcp.proxy_source.unwrap().ip().to_string(), "127.0.0.1");
    assert!(
        tcp.head.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"),
        "{tcp:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_soft_load_limit_the_sdns_says_fetch_and_runs_nothing() {
    let (backend, seen) = recording_backend().await;
    let mut limits = AdmissionLimits::default();
    // One early decryption, then none for minutes: over the soft limit;
    // two decryptions at all.
    limits.decrypts_per_sec = 0.001;
    limits.hard_decrypts_per_sec = 2.0;
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        shortcut: Some(sdns_config()),
        limits,
        ..GatewayOpts::default()
    })
    .await;
    let (_, first) = flight(&env.records[0], Method::Get, "/first");
    let a = ask_sdns(env.sdns[0], &txt_query(&first, 1)).await;
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    let (hs, second) = flight(&env.records[0], Method::Get, "/second");
    let a = ask_sdns(env.sdns[0], &txt_query(&second, 2)).await;
    assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    // A flood of them takes no hard decryption token from the port's
    // first flights.
    for i in 0..10 {
        let (_, f) = flight(&env.records[0], Method::Get, "/flood");
        let a = ask_sdns(env.sdns[0], &txt_query(&f, 10 + i)).await;
        assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    }
    assert_eq!(env.metric("shortcut_deferred"), 11);
    assert_eq!(seen.lock().unwrap().len(), 1, "FETCH ran nothing");
    // Its TCP form, after the handshake, runs it (the last hard token).
    let stream = fetch_tcp(env.addr, &second).await;
    assert_eq!(
        body_of(&hs.open_shortcut_answer(&stream).unwrap()),
        b"hello from /second"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_source_prefix_has_a_run_budget() {
    let mut sc = ShortcutConfig::default();
    // A burst of one, then one run every 1,000 s.
    sc.runs_per_sec_per_prefix = 0.001;
    let (env, seen) = start_with(sc).await;
    let (_, first) = flight(&env.records[0], Method::Get, "/first");
    let a = ask_sdns(env.sdns[0], &txt_query(&first, 1)).await;
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    // The run is over, but the prefix's budget is spent (another address
    // of the /24 too).
    let (_, second) = flight(&env.records[0], Method::Get, "/second");
    let a = ask_udp_from("127.0.0.9", env.sdns[0], &txt_query(&second, 2)).await;
    assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    assert_eq!(env.metric("shortcut_deferred"), 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_from_the_sdns_reads_at_most_64_kib() {
    let (env, seen) = start().await;
    let (_, frame) = flight(&env.records[0], Method::Get, "/n/70000");
    let a = ask_sdns(env.sdns[0], &txt_query(&frame, 1)).await;
    let TxtAnswer::Reject(r) = txt_answer(&a) else {
        panic!("not REJECT")
    };
    assert_eq!(reject_reason(&r), RejectReason::Busy);
    assert_eq!(env.metric("shortcut_too_large"), 1);
    // Its TCP form gets the same refusal from the cache (no second run).
    assert_eq!(fetch_tcp(env.addr, &frame).await, r);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // A run started by a TCP form (a proven address) reads up to 1 MiB.
    let (hs, frame) = flight(&env.records[0], Method::Get, "/n/70000");
    let stream = fetch_tcp(env.addr, &frame).await;
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert_eq!(body_of(&response).len(), 70_000);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_over_dns_tcp_waits_as_long_as_the_run_can_take() {
    // The backend answers its head at once and its body 3 s later: within
    // the run's bound (backend 1 s + stream idle 6 s), beyond the
    // backend's response timeout plus a second.
    let (backend, heard) = raw_backend(false, Duration::from_secs(3)).await;
    let mut timeouts = GatewayOpts::default().timeouts;
    timeouts.backend_response = Duration::from_secs(1);
    timeouts.stream_idle = Duration::from_secs(6);
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        shortcut: Some(sdns_config()),
        timeouts,
        ..GatewayOpts::default()
    })
    .await;
    let (hs, frame) = flight(&env.records[0], Method::Get, "/slow");
    let q = txt_query(&frame, 1);
    let sdns = env.sdns[0];
    let q1 = q.clone();
    let udp = tokio::spawn(async move { ask_udp(sdns, &q1).await });
    for _ in 0..500 {
        if !heard.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(heard.lock().unwrap().len(), 1);
    // A DNS-over-TCP copy of the running flight: its answer, not NXDOMAIN.
    let over_tcp = ask_tcp(sdns, &q).await;
    let TxtAnswer::Answer(stream) = txt_answer(&over_tcp) else {
        panic!("not ANSWER")
    };
    assert_eq!(body_of(&hs.open_shortcut_answer(&stream).unwrap()), b"ok");
    assert_eq!(txt_answer(&udp.await.unwrap()), TxtAnswer::Answer(stream));
    assert_eq!(heard.lock().unwrap().len(), 1, "run once");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_under_a_zone_lists_only_that_sites_records() {
    let other = {
        let key = testing::semi_static("zrtt other site");
        let mut body = testing::body(&key, &testing::ed25519_cert());
        body.not_before = now_secs() - 60;
        body.not_after = now_secs() + 3600;
        body.name = "www.example.net".into();
        let rec = body
            .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
            .unwrap();
        (rec, key)
    };
    let (backend, _) = recording_backend().await;
    let env = start_gateway(GatewayOpts {
        keys: vec![record("zrtt test key 1", 16384), other],
        backend: Some(backend),
        shortcut: Some(sdns_config()),
        ..GatewayOpts::default()
    })
    .await;
    // A flight to a key this gateway does not hold: REJECT 1 with the
    // current records of the zone's site only (over DNS-over-TCP, where
    // they fit).
    let (stale, _) = record("zrtt retired key", 16384);
    let (_, frame) = flight(&stale, Method::Get, "/");
    let a = ask_tcp(env.sdns[0], &txt_query(&frame, 1)).await;
    let TxtAnswer::Reject(r) = txt_answer(&a) else {
        panic!("not REJECT")
    };
    let Ok(Some((Frame::Reject { reason, records }, _))) = read_frame(&r, Expect::ReplyOrReject)
    else {
        panic!("not a Reject frame")
    };
    assert_eq!(reason, RejectReason::UnknownKey);
    let records = decode_reject_records(records).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].body.name, HOST);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_whose_shortcut_is_off_runs_nothing() {
    let mut sc = ShortcutConfig::default();
    sc.off_sites = vec!["WWW.example.com.".into()];
    let (env, seen) = start_with(sc).await;
    let (_, frame) = flight(&env.records[0], Method::Get, "/");
    let a = ask_sdns(env.sdns[0], &txt_query(&frame, 1)).await;
    let m = hickory_proto::op::Message::from_vec(&a).unwrap();
    assert_eq!(
        m.metadata.response_code,
        hickory_proto::op::ResponseCode::Refused,
        "not its zone"
    );
    let got = fetch_tcp(env.addr, &frame).await;
    assert_eq!(reject_reason(&got), RejectReason::Unsupported);
    assert!(seen.lock().unwrap().is_empty());
    env.stop().await;
}
