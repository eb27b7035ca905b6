//! The gateway's SDNS and the TCP path of shortcut flights (docs/DNS.md
//! §8), on loopback: a flight in a TXT query name is run once on a
//! recording backend and answered in the DNS answer (or FETCH, then its
//! TCP form on the gateway's port); other names NXDOMAIN; through a real
//! unbound with QNAME minimisation on and off when it is installed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_net::gateway::ShortcutConfig;
use zrtt_proto::handshake::{read_frame, ClientHandshake, Expect, Frame, RejectReason};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::shortcut::{self, CompactRequest, Method, TxtAnswer};

/// What the recording backend saw: one line per request, `METHOD target`
/// then its fields as `name: value`.
type Seen = Arc<Mutex<Vec<String>>>;

/// Requests to `/hold` wait until this is notified.
static HOLD: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A backend that records each request's head; `/big` answers 5,000
/// bytes, `/huge` 1.1 MiB, `/hold` once [`HOLD`] is notified, anything
/// else a short text.
async fn recording_backend() -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let seen = seen2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let mut line = format!("{} {}", req.method(), req.uri());
                        for (n, v) in req.headers() {
                            line.push_str(&format!("\n{n}: {}", v.to_str().unwrap_or("?")));
                        }
                        seen.lock().unwrap().push(line);
                        if req.uri().path() == "/hold" {
                            HOLD.notified().await;
                        }
                        let body = match req.uri().path() {
                            "/big" => "b".repeat(5000),
                            "/huge" => "h".repeat(1_100_000),
                            p if p.starts_with("/n/") => "n".repeat(p[3..].parse().unwrap_or(0)),
                            p => format!("hello from {p}"),
                        };
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            body,
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

async fn start() -> (Env, Seen) {
    start_with(ShortcutConfig::default()).await
}

async fn start_with(mut sc: ShortcutConfig) -> (Env, Seen) {
    let (backend, seen) = recording_backend().await;
    sc.sdns = vec!["127.0.0.1:0".parse().unwrap()];
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        shortcut: Some(sc),
        ..GatewayOpts::default()
    })
    .await;
    (env, seen)
}

/// A shortcut flight for `target` to the record `rec` (HOST's).
fn flight(rec: &KeyRecord, method: Method, target: &str) -> (ClientHandshake, Vec<u8>) {
    let now = zrtt_net::client::system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let req = CompactRequest::new(method, target).unwrap();
    let rng = ring::rand::SystemRandom::new();
    ClientHandshake::start_shortcut(&verified, &req, None, now, &rng).unwrap()
}

/// A TXT query for `name` as the client sends it (RD, EDNS 1232).
fn query(name: &str, rtype: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    let mut e = Edns::new();
    e.set_max_payload(1232);
    m.set_edns(e);
    m.to_vec().unwrap()
}

/// Ask `server` over UDP; waits up to 10 s for the answer (a flight being
/// made gets its answer when done, and copies get none).
async fn ask_udp(server: SocketAddr, q: &[u8]) -> Vec<u8> {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(q, server).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), sock.recv_from(&mut buf))
        .await
        .expect("no DNS answer")
        .unwrap();
    buf.truncate(n);
    buf
}

/// Ask the SDNS over UDP: its answer is never larger than three times
/// the query (the querier's address is unproven).
async fn ask_sdns(sdns: SocketAddr, q: &[u8]) -> Vec<u8> {
    let a = ask_udp(sdns, q).await;
    assert!(a.len() <= 3 * q.len(), "{} > 3 x {}", a.len(), q.len());
    a
}

/// Ask `server` over TCP (DNS over TCP).
async fn ask_tcp(server: SocketAddr, q: &[u8]) -> Vec<u8> {
    let mut tcp = tokio::net::TcpStream::connect(server).await.unwrap();
    let mut out = (q.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(q);
    tcp.write_all(&out).await.unwrap();
    let len = tcp.read_u16().await.unwrap();
    let mut buf = vec![0u8; usize::from(len)];
    tcp.read_exact(&mut buf).await.unwrap();
    buf
}

/// The shortcut answer a DNS answer carries.
fn txt_answer(answer: &[u8]) -> TxtAnswer {
    let m = Message::from_vec(answer).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
    assert_eq!(m.answers.len(), 1, "{m:?}");
    assert_eq!(m.answers[0].ttl, 0);
    let RData::TXT(t) = &m.answers[0].data else {
        panic!("not TXT: {m:?}")
    };
    TxtAnswer::from_strings(t.txt_data.iter().map(|s| &s[..])).unwrap()
}

fn reject_reason(frame: &[u8]) -> RejectReason {
    match read_frame(frame, Expect::ReplyOrReject).unwrap().unwrap().0 {
        Frame::Reject { reason, .. } => reason,
        other => panic!("{other:?}"),
    }
}

/// The HTTP response's body (after the empty line).
fn body_of(response: &[u8]) -> &[u8] {
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    &response[at + 4..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txt_query_runs_the_flight_once_and_answers_the_same_bytes() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    let (hs, frame) = flight(&env.records[0], Method::Get, "/hello?x=1");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let q = query(&name, RecordType::TXT, 0x1234);
    let first = ask_sdns(sdns, &q).await;
    assert!(
        first.len() <= 3 * q.len(),
        "{} > 3 x {}",
        first.len(),
        q.len()
    );
    let TxtAnswer::Answer(stream) = txt_answer(&first) else {
        panic!("not ANSWER")
    };
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let text = String::from_utf8_lossy(&response).to_lowercase();
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("\r\ncontent-length: 17\r\n"), "{text}");
    assert_eq!(body_of(&response), b"hello from /hello");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let line = seen[0].to_lowercase();
        assert!(line.starts_with("get /hello?x=1"), "{line}");
        assert!(line.contains("\nearly-data: 1"), "{line}");
        assert!(line.contains("\nhost: www.example.com"), "{line}");
        assert!(
            line.contains("\nforwarded: for=unknown;proto=https"),
            "{line}"
        );
    }
    // A resolver's retry (or a replay): the same bytes, no second run.
    let again = ask_sdns(sdns, &q).await;
    assert_eq!(again, first);
    // Over DNS-over-TCP too.
    let over_tcp = ask_tcp(sdns, &q).await;
    assert_eq!(txt_answer(&over_tcp), TxtAnswer::Answer(stream));
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(env.metric("shortcut_runs"), 1);
    assert_eq!(env.metric("shortcut_cache_hits"), 2);
    assert_eq!(env.metric("shortcut_answers"), 3);
    env.stop().await;
}

/// The TCP form of a flight on the gateway's port: the answer stream, then EOF.
async fn fetch_tcp(gateway: SocketAddr, frame: &[u8]) -> Vec<u8> {
    let mut tcp = tokio::net::TcpStream::connect(gateway).await.unwrap();
    tcp.write_all(frame).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .expect("answer stream")
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_is_fetched_over_tcp_with_the_same_flight() {
    let (env, seen) = start().await;
    let (hs, frame) = flight(&env.records[0], Method::Get, "/big");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let q = query(&name, RecordType::TXT, 7);
    let a = ask_sdns(env.sdns[0], &q).await;
    assert!(a.len() <= 3 * q.len());
    assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    let stream = fetch_tcp(env.addr, &frame).await;
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert_eq!(body_of(&response), "b".repeat(5000).as_bytes());
    assert_eq!(seen.lock().unwrap().len(), 1, "the backend ran it once");
    assert_eq!(env.metric("shortcut_fetch"), 1);
    assert_eq!(env.metric("shortcut_tcp_answers"), 1);
    assert_eq!(env.metric("shortcut_cache_hits"), 1);
    // A flight that comes over TCP first runs there, with the client's address.
    let (hs, frame) = flight(&env.records[0], Method::Head, "/first-tcp");
    let stream = fetch_tcp(env.addr, &frame).await;
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(body_of(&response).is_empty(), "HEAD");
    let line = seen.lock().unwrap()[1].to_lowercase();
    assert!(line.starts_with("head /first-tcp"), "{line}");
    assert!(
        line.contains("\nforwarded: for=127.0.0.1;proto=https"),
        "{line}"
    );
    assert!(line.contains("\nearly-data: 1"), "{line}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_names_nxdomain_apex_soa_ns_outside_refused() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    let (_, frame) = flight(&env.records[0], Method::Get, "/x");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let rcode = |a: &[u8]| Message::from_vec(a).unwrap().metadata.response_code;
    // QNAME minimisation's probes: one label, then two, under the zone.
    let labels: Vec<&str> = name.split('.').collect();
    let n = labels.len();
    for k in 1..n - 4 {
        let partial = labels[n - 4 - k..].join(".");
        let a = ask_sdns(sdns, &query(&partial, RecordType::A, 1)).await;
        assert_eq!(rcode(&a), ResponseCode::NXDomain, "{partial}");
        let m = Message::from_vec(&a).unwrap();
        assert!(matches!(m.authorities[0].data, RData::SOA(_)), "{m:?}");
        assert_eq!(m.authorities[0].ttl, shortcut::NEGATIVE_TTL);
    }
    // The whole name, another type.
    let a = ask_sdns(sdns, &query(&name, RecordType::A, 2)).await;
    assert_eq!(rcode(&a), ResponseCode::NXDomain);
    // dns-0x20: the case of the name does not matter, and comes back as sent.
    let mixed: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let a = ask_sdns(sdns, &query(&mixed, RecordType::TXT, 3)).await;
    let m = Message::from_vec(&a).unwrap();
    assert_eq!(m.queries[0].name().to_ascii().trim_end_matches('.'), mixed);
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    let a = ask_sdns(sdns, &query("zq.www.example.com.", RecordType::SOA, 4)).await;
    let m = Message::from_vec(&a).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(matches!(m.answers[0].data, RData::SOA(_)));
    let a = ask_sdns(sdns, &query("zq.www.example.com.", RecordType::NS, 5)).await;
    let m = Message::from_vec(&a).unwrap();
    assert!(
        matches!(&m.answers[0].data, RData::NS(ns) if ns.0.to_ascii() == "ns.zq.www.example.com.")
    );
    assert!(matches!(m.additionals[0].data, RData::A(a) if a.0 == std::net::Ipv4Addr::LOCALHOST));
    let a = ask_sdns(sdns, &query("www.example.org.", RecordType::A, 6)).await;
    assert_eq!(rcode(&a), ResponseCode::Refused);
    assert_eq!(seen.lock().unwrap().len(), 1, "only the TXT query ran");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_and_huge_responses_are_rejected() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    // A key this gateway does not hold: REJECT 1 (its records only if they fit).
    let (other, _) = record("zrtt test key not served", 16384);
    let (_, frame) = flight(&other, Method::Get, "/x");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        9,
    );
    let a = ask_sdns(sdns, &q).await;
    assert!(a.len() <= 3 * q.len());
    let TxtAnswer::Reject(r) = txt_answer(&a) else {
        panic!("not REJECT")
    };
    assert_eq!(reject_reason(&r), RejectReason::UnknownKey);
    // Over 1 MiB: REJECT 7, the client takes the normal path.
    let (_, frame) = flight(&env.records[0], Method::Get, "/huge");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        10,
    );
    let TxtAnswer::Reject(r) = txt_answer(&ask_sdns(sdns, &q).await) else {
        panic!("not REJECT")
    };
    assert_eq!(reject_reason(&r), RejectReason::Busy);
    // The same flight again: the same refusal, no second run.
    let TxtAnswer::Reject(r2) = txt_answer(&ask_sdns(sdns, &q).await) else {
        panic!("not REJECT")
    };
    assert_eq!(r, r2);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(env.metric("shortcut_too_large"), 1);
    env.stop().await;
}

/// A shortcut flight (pattern 0x04) whose early data is `early`, built
/// with snow by hand: the client API only makes valid compact requests.
fn raw_flight(rec: &KeyRecord, early: &[u8]) -> Vec<u8> {
    use zrtt_proto::handshake::{prologue, FirstFlightHeader, Pattern, Transport};
    let now = zrtt_net::client::system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let body = verified.body();
    let aead = body.aeads[0];
    let header = FirstFlightHeader {
        version: 1,
        pattern: Pattern::Shortcut,
        aead: aead as u8,
        key_id: body.key_id,
    };
    let record_hash: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &rec.encode())
        .as_ref()
        .try_into()
        .unwrap();
    let params = format!("Noise_NK_25519_{}_SHA256", aead.noise_name())
        .parse()
        .unwrap();
    let mut noise = snow::Builder::new(params)
        .prologue(&prologue(&record_hash, Transport::Shortcut, &header))
        .unwrap()
        .remote_public_key(&body.public_key)
        .unwrap()
        .build_initiator()
        .unwrap();
    let mut payload = now.as_millis().to_be_bytes().to_vec();
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(early);
    let mut msg = vec![0u8; payload.len() + 64];
    let n = noise.write_message(&payload, &mut msg).unwrap();
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&(n as u16).to_be_bytes());
    frame.extend_from_slice(&msg[..n]);
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_and_malformed_requests_are_rejected() {
    let (env, seen) = start().await;
    // The hand-made flight is sound: a valid compact request runs.
    let mut get = vec![1u8];
    get.extend_from_slice(b"/raw");
    let frame = raw_flight(&env.records[0], &get);
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        11,
    );
    assert!(matches!(
        txt_answer(&ask_sdns(env.sdns[0], &q).await),
        TxtAnswer::Answer(_)
    ));
    for (i, early) in [
        b"\x03/post".to_vec(),
        b"\x01no-slash".to_vec(),
        b"\x01/sp ace".to_vec(),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![1u8],
    ]
    .iter()
    .enumerate()
    {
        let frame = raw_flight(&env.records[0], early);
        let q = query(
            &shortcut::query_name(&frame, HOST).unwrap(),
            RecordType::TXT,
            12 + i as u16,
        );
        let TxtAnswer::Reject(r) = txt_answer(&ask_sdns(env.sdns[0], &q).await) else {
            panic!("not REJECT for {early:?}")
        };
        assert_eq!(reject_reason(&r), RejectReason::Unsupported);
        // And its TCP form on the gateway's port: the Reject frame.
        let got = fetch_tcp(env.addr, &frame).await;
        assert_eq!(reject_reason(&got), RejectReason::Unsupported);
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "only the GET ran");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_flight_is_waited_for_over_tcp_and_bounded_per_source() {
    let mut sc = ShortcutConfig::default();
    sc.max_running_per_source = 1;
    let (env, seen) = start_with(sc).await;
    let (hs, frame) = flight(&env.records[0], Method::Get, "/hold");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        30,
    );
    let sdns = env.sdns[0];
    let first = tokio::spawn(async move { ask_sdns(sdns, &q).await });
    // Running once the backend has the request (polled, bounded).
    for _ in 0..500 {
        if !seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Another flight from the same resolver address: over its bound.
    let (_, other) = flight(&env.records[0], Method::Get, "/other");
    let q2 = query(
        &shortcut::query_name(&other, HOST).unwrap(),
        RecordType::TXT,
        31,
    );
    let a = Message::from_vec(&ask_sdns(sdns, &q2).await).unwrap();
    assert_eq!(a.metadata.response_code, ResponseCode::Refused);
    assert_eq!(env.metric("shortcut_refused"), 1);
    // The TCP form of the running flight waits for it, then gets its stream.
    let addr = env.addr;
    let fetch = tokio::spawn(async move { fetch_tcp(addr, &frame).await });
    for _ in 0..500 {
        if env.metric("shortcut_flights") >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    HOLD.notify_one();
    let TxtAnswer::Answer(stream) = txt_answer(&first.await.unwrap()) else {
        panic!("not ANSWER")
    };
    assert_eq!(fetch.await.unwrap(), stream, "the same answer stream");
    assert_eq!(
        body_of(&hs.open_shortcut_answer(&stream).unwrap()),
        b"hello from /hold"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "run once");
    // The bound frees with the run.
    let a = ask_sdns(sdns, &q2).await;
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    env.stop().await;
}

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
