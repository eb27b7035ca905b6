//! Loopback tests of every gateway path: early answer, gated answer, TLS
//! fallback, refusal with fresh keys, replay, oversize early data, tampered
//! flight, backend down/slow, keep-alive, 425 retry, tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::client::TokenStore;
use zrtt_net::client::{system_clock, Mode};
use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, Frame, Pattern, RejectReason,
    FRAME_FIRST_FLIGHT,
};
use zrtt_proto::record::VerifiedKeyRecord;

fn trusted_loopback() -> Vec<zrtt_proto::admission::IpNet> {
    vec!["127.0.0.0/8".parse().unwrap()]
}

#[tokio::test]
async fn early_answer_for_proven_address() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        ..Default::default()
    })
    .await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, info) = fetch(cfg, env.addr, vec![get("/hello")]).await.unwrap();
    assert_eq!(resp, vec![(200, "GET /hello early=1 body=0".to_owned())]);
    assert!(info.early_data, "{info:?}");
    assert_ne!(info.mode, Mode::TlsFallback);
    assert_eq!(env.metric("zrtt_answered_early"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 0);
    assert_eq!(env.metric("early_requests"), 1);
    let text = env.metrics.render();
    assert!(
        text.contains("zrtt_gateway_first_answer_seconds_count{path=\"zrtt\",early=\"true\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("zrtt_gateway_backend_response_seconds_count 1\n"),
        "{text}"
    );
    env.stop().await;
}

/// Listening sockets in LISTEN state on `port` (IPv4, /proc/net/tcp).
fn listening_sockets(port: u16) -> usize {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == "0A"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_port_listeners_all_serve() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        listeners: 3,
        ..Default::default()
    })
    .await;
    assert_eq!(
        listening_sockets(env.addr.port()),
        3,
        "three sockets on one port"
    );
    let cfg = Arc::new(client_config(env.records.clone()));
    // New connections from new source ports: the kernel spreads them over
    // the sockets by hash; every one is served, whichever socket took it.
    for i in 0..24 {
        let (resp, info) = fetch(cfg.clone(), env.addr, vec![get(&format!("/r{i}"))])
            .await
            .unwrap();
        assert_eq!(resp, vec![(200, format!("GET /r{i} early=1 body=0"))]);
        assert!(info.early_data, "{info:?}");
    }
    assert_eq!(env.metric("zrtt_answered_early"), 24);
    // A second gateway on the same port would have replay state of its
    // own: it must be refused, not given a share of the connections.
    let mut opts = zrtt_net::tfo::ListenOptions::default();
    opts.listeners = 2;
    let err = zrtt_net::tfo::bind_listeners(env.addr, opts).unwrap_err();
    assert!(err.to_string().contains("bind"), "{err}");
    assert_eq!(listening_sockets(env.addr.port()), 3);
    let port = env.addr.port();
    env.stop().await;
    assert_eq!(
        listening_sockets(port),
        0,
        "every socket closed at shutdown"
    );
}

#[tokio::test]
async fn gated_answer_for_unproven_address() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, info) = fetch(cfg, env.addr, vec![get("/a")]).await.unwrap();
    assert_eq!(resp[0], (200, "GET /a early=1 body=0".to_owned()));
    assert_eq!(info.mode, Mode::ZrttGated);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    assert_eq!(env.metric("zrtt_answered_early"), 0);
    assert!(env
        .metrics
        .render()
        .contains("zrtt_gateway_first_answer_seconds_count{path=\"zrtt\",early=\"false\"} 1\n"));
    env.stop().await;
}

#[tokio::test]
async fn keep_alive_second_request_in_channel() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, _) = fetch(cfg, env.addr, vec![get("/one"), get("/two"), get("/three")])
        .await
        .unwrap();
    assert_eq!(
        resp,
        vec![
            (200, "GET /one early=1 body=0".to_owned()),
            (200, "GET /two early=- body=0".to_owned()),
            (200, "GET /three early=- body=0".to_owned()),
        ]
    );
    assert_eq!(env.metric("connections"), 1);
    assert_eq!(env.metric("requests"), 3);
    env.stop().await;
}

#[tokio::test]
async fn non_idempotent_request_waits_for_reply() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let post = hyper::Request::builder()
        .method("POST")
        .uri("/submit")
        .header("host", HOST)
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap();
    let (resp, info) = fetch(cfg, env.addr, vec![post]).await.unwrap();
    assert_eq!(resp[0], (200, "POST /submit early=- body=7".to_owned()));
    assert!(!info.early_data);
    assert_eq!(env.metric("early_requests"), 0);
    env.stop().await;
}

#[tokio::test]
async fn tls_fallback_on_same_port_without_key() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(Vec::new()));
    let (resp, info) = fetch(cfg, env.addr, vec![get("/tls"), get("/tls2")])
        .await
        .unwrap();
    assert_eq!(resp[0], (200, "GET /tls early=- body=0".to_owned()));
    assert_eq!(resp[1].0, 200);
    assert_eq!(info.mode, Mode::TlsFallback);
    assert_eq!(env.metric("tls_connections"), 1);
    assert_eq!(env.metric("zrtt_flights"), 0);
    env.stop().await;
}

#[tokio::test]
async fn refused_key_with_fresh_records_retries_zrtt() {
    // The gateway rotated to key 2; the client still holds key 1's record.
    let env = start_gateway(GatewayOpts {
        keys: vec![record("zrtt test key 2", 16384)],
        ..Default::default()
    })
    .await;
    let (old, _) = record("zrtt test key 1", 16384);
    let cfg = Arc::new(client_config(vec![old]));
    let (resp, info) = fetch(cfg, env.addr, vec![get("/rotated")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert!(info.retried_with_fresh_keys, "{info:?}");
    assert_ne!(info.mode, Mode::TlsFallback, "{info:?}");
    assert_eq!(env.metric("zrtt_rejects_sent"), 1);
    assert_eq!(env.metric("zrtt_accepted"), 1);
    env.stop().await;
}

#[tokio::test]
async fn refused_key_with_unverifiable_records_falls_back_to_tls() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record("zrtt test key 2", 16384)],
        ..Default::default()
    })
    .await;
    let (old, _) = record("zrtt test key 1", 16384);
    let mut cfg = client_config(vec![old]);
    // A key source whose certificate does not sign the gateway's records.
    cfg.keys = Arc::new(NoRetry(cfg.keys.clone()));
    let (resp, info) = fetch(Arc::new(cfg), env.addr, vec![get("/x")])
        .await
        .unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(info.mode, Mode::TlsFallback);
    env.stop().await;
}

struct NoRetry(Arc<dyn zrtt_net::client::KeySource>);
impl zrtt_net::client::KeySource for NoRetry {
    fn lookup(&self, host: &str, now: zrtt_proto::UnixTime) -> Option<VerifiedKeyRecord> {
        self.0.lookup(host, now)
    }
    fn verify_retry(
        &self,
        _: &str,
        _: &[zrtt_proto::record::KeyRecord],
        _: zrtt_proto::UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        None
    }
}

/// Build a first flight by hand for raw-socket tests.
fn raw_flight(rec: &zrtt_proto::record::KeyRecord, early: &[u8]) -> Vec<u8> {
    let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    let (_, flight) = ClientHandshake::start(
        &v,
        &ClientParams::default(),
        early,
        system_clock(),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap();
    flight
}

/// Send raw bytes, read everything until the server closes (bounded).
async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return out,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if read_frame(&out, Expect::ReplyOrReject)
                    .ok()
                    .flatten()
                    .is_some()
                {
                    return out;
                }
            }
            Err(_) => panic!("server neither answered nor closed"),
        }
    }
}

fn reject_reason(bytes: &[u8]) -> Option<RejectReason> {
    match read_frame(bytes, Expect::ReplyOrReject) {
        Ok(Some((Frame::Reject { reason, .. }, _))) => Some(reason),
        _ => None,
    }
}

#[tokio::test]
async fn replayed_first_flight_is_refused() {
    let env = start_gateway(GatewayOpts::default()).await;
    let flight = raw_flight(
        &env.records[0],
        b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
    );
    let first = exchange(env.addr, &flight).await;
    assert_eq!(first.first(), Some(&0xD8), "first copy gets a reply");
    let second = exchange(env.addr, &flight).await;
    assert_eq!(reject_reason(&second), Some(RejectReason::Replay));
    // The replayed request never reached the backend.
    assert_eq!(env.seen.lock().unwrap().len(), 1);
    env.stop().await;
}

#[tokio::test]
async fn oversize_early_data_is_refused() {
    let (rec, key) = record("zrtt small key", 64);
    let env = start_gateway(GatewayOpts {
        keys: vec![(rec.clone(), key)],
        ..Default::default()
    })
    .await;
    // A client that ignores the record's limit.
    let mut lying = rec.clone();
    lying.body.max_early_data_bytes = 16384;
    let flight = raw_flight(&lying, &[b'a'; 5000]);
    let answer = exchange(env.addr, &flight).await;
    assert_eq!(
        reject_reason(&answer),
        Some(RejectReason::EarlyDataTooLarge)
    );
    assert!(env.seen.lock().unwrap().is_empty());
    env.stop().await;
}

#[tokio::test]
async fn tampered_first_flight_gets_no_answer() {
    let env = start_gateway(GatewayOpts::default()).await;
    let mut flight = raw_flight(&env.records[0], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let last = flight.len() - 1;
    flight[last] ^= 1;
    let answer = exchange(env.addr, &flight).await;
    assert!(answer.is_empty(), "got {} bytes", answer.len());
    assert_eq!(env.metric("zrtt_silent_drops"), 1);
    assert!(env.seen.lock().unwrap().is_empty());
    env.stop().await;
}

#[tokio::test]
async fn backend_down_gives_502_inside_channel() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let env = start_gateway(GatewayOpts {
        backend: Some(dead),
        ..Default::default()
    })
    .await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, info) = fetch(cfg.clone(), env.addr, vec![get("/")]).await.unwrap();
    assert_eq!(resp[0].0, 502);
    assert_ne!(info.mode, Mode::TlsFallback);
    assert_eq!(env.metric("backend_errors"), 1);
    // Its length is stated: a chunked 502 made a client that sent
    // `Connection: close` wait for the close, one more round trip for an
    // early answer (the close waits for the TCP handshake).
    let mut s = zrtt_net::client::ZrttStream::new(
        cfg,
        zrtt_net::client::Target {
            host: HOST.into(),
            addr: env.addr,
        },
    );
    let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    let mut head = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut head))
        .await
        .expect("the answer ends")
        .unwrap();
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 502"), "{head}");
    assert!(head.contains("\r\ncontent-length: "), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    env.stop().await;
}

#[tokio::test]
async fn slow_backend_gives_504() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, _) = fetch(cfg, env.addr, vec![get("/slow")]).await.unwrap();
    assert_eq!(resp[0].0, 504);
    assert_eq!(env.metric("backend_timeouts"), 1);
    env.stop().await;
}

#[tokio::test]
async fn backend_425_is_retried_after_handshake() {
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, _) = fetch(cfg, env.addr, vec![get("/425")]).await.unwrap();
    assert_eq!(resp[0], (200, "GET /425 early=- body=0".to_owned()));
    assert_eq!(env.metric("backend_425_retries"), 1);
    assert_eq!(
        *env.seen.lock().unwrap(),
        vec!["GET /425 early=1".to_owned(), "GET /425 early=-".to_owned()]
    );
    env.stop().await;
}

#[tokio::test]
async fn token_makes_next_connection_early() {
    let env = start_gateway(GatewayOpts {
        tokens: true,
        ..Default::default()
    })
    .await;
    let mut cfg = client_config(env.records.clone());
    let store = Arc::new(TokenStore::new());
    cfg.tokens = Some(store.clone());
    // Tokens alone: a resumption ticket would prove the next visit instead
    // (resumed_connection_is_answered_early_and_skips_the_dh).
    cfg.resume = false;
    let cfg = Arc::new(cfg);
    let (resp, info) = fetch(cfg.clone(), env.addr, vec![get("/1")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(env.metric("tokens_issued"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    let local = info.local_addr.unwrap().ip();
    assert!(store.token(HOST, local).is_some());
    let (resp, _) = fetch(cfg, env.addr, vec![get("/2")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(env.metric("tokens_accepted"), 1);
    assert_eq!(env.metric("zrtt_answered_early"), 1);
    env.stop().await;
}

#[tokio::test]
async fn resumed_connection_is_answered_early_and_skips_the_dh() {
    let env = start_gateway(GatewayOpts {
        tokens: true,
        ..Default::default()
    })
    .await;
    let mut cfg = client_config(env.records.clone());
    let store = Arc::new(TokenStore::new());
    cfg.tokens = Some(store.clone());
    let cfg = Arc::new(cfg);
    // First contact: gated (nothing proves the address yet), a ticket granted.
    let (resp, info) = fetch(cfg.clone(), env.addr, vec![get("/1")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert!(!info.resumed);
    assert_eq!(env.metric("zrtt_tickets_granted"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    assert_eq!(store.tickets(HOST), 1);
    // Revisit: resumed, proven by the ticket (issued to this address), and
    // the next ticket replaces the used one.
    let (resp, info) = fetch(cfg.clone(), env.addr, vec![get("/2")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert!(info.resumed, "{info:?}");
    assert_eq!(env.metric("zrtt_resumed"), 1);
    assert_eq!(env.metric("zrtt_answered_early"), 1);
    assert_eq!(env.metric("tokens_accepted"), 0);
    assert_eq!(env.metric("zrtt_tickets_granted"), 2);
    assert_eq!(store.tickets(HOST), 1);
    env.stop().await;
}

/// A server that predates resumption closes on a resumed flight (pattern
/// 0x03) without an answer: a front that does so before the gateway; the
/// client retries at once without its ticket (docs/PROTOCOL.md §12.4).
#[tokio::test]
async fn a_resumed_flight_an_old_server_drops_is_retried_without_the_ticket() {
    let env = start_gateway(GatewayOpts {
        tokens: true,
        ..Default::default()
    })
    .await;
    let mut cfg = client_config(env.records.clone());
    let store = Arc::new(TokenStore::new());
    cfg.tokens = Some(store.clone());
    let cfg = Arc::new(cfg);
    let (resp, _) = fetch(cfg.clone(), env.addr, vec![get("/1")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(store.tickets(HOST), 1);

    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_addr = front.local_addr().unwrap();
    let backend = env.addr;
    let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let d = dropped.clone();
    let task = tokio::spawn(async move {
        loop {
            let (mut c, _) = front.accept().await.unwrap();
            let d = d.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while head.len() < 3 {
                    let mut b = [0u8; 2048];
                    match c.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                if head[0] == FRAME_FIRST_FLIGHT && head[2] == Pattern::Resumed as u8 {
                    d.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    return; // closed, no answer
                }
                let mut s = TcpStream::connect(backend).await.unwrap();
                s.write_all(&head).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
            });
        }
    });
    let (resp, info) = fetch(cfg.clone(), front_addr, vec![get("/2")])
        .await
        .unwrap();
    assert_eq!(resp[0].0, 200);
    assert!(!info.resumed, "{info:?}");
    assert_eq!(info.mode, Mode::ZrttGated, "{info:?}");
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("retrying without a ticket")),
        "{info:?}"
    );
    assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(env.metric("zrtt_resumed"), 0);
    assert_eq!(env.metric("zrtt_accepted"), 2);
    assert_eq!(
        store.tickets(HOST),
        1,
        "the retry's Reply brought a new ticket"
    );
    task.abort();
    env.stop().await;
}

#[tokio::test]
async fn hard_limit_sends_busy_and_client_falls_back() {
    let env = start_gateway(GatewayOpts {
        limits: {
            let mut l = zrtt_proto::admission::AdmissionLimits::default();
            l.max_connections = 0;
            l.hard_max_connections = 0;
            l
        },
        ..Default::default()
    })
    .await;
    let flight = raw_flight(&env.records[0], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let answer = exchange(env.addr, &flight).await;
    assert_eq!(reject_reason(&answer), Some(RejectReason::Busy));
    assert_eq!(env.metric("zrtt_busy"), 1);
    env.stop().await;
}

#[tokio::test]
async fn soft_limit_forces_gating() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        limits: {
            let mut l = zrtt_proto::admission::AdmissionLimits::default();
            l.max_connections = 0;
            l
        },
        ..Default::default()
    })
    .await;
    let cfg = Arc::new(client_config(env.records.clone()));
    let (resp, _) = fetch(cfg, env.addr, vec![get("/")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(env.metric("zrtt_forced_gating"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    env.stop().await;
}

#[tokio::test]
async fn plain_http_is_closed() {
    let env = start_gateway(GatewayOpts::default()).await;
    let answer = exchange(env.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(answer.is_empty());
    assert_eq!(env.metric("other_refused"), 1);
    env.stop().await;
}

/// A ticket for HOST from another fleet (its own token key and semi-static
/// key), made in process: a client must not try it after a Reject 9.
fn other_fleets_ticket() -> zrtt_proto::handshake::ResumptionTicket {
    let (rec, key) = record("zrtt test key 3", 16384);
    let mut server = server_keys(&[(rec.clone(), key)]);
    server.resumption = Some(zrtt_proto::admission::TokenKeyRing::new(
        zrtt_proto::admission::TokenKeys::single(zrtt_proto::admission::TokenKey::new(
            &[8; 32],
            Duration::from_secs(3600),
        )),
    ));
    let now = system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let mut params = ClientParams::default();
    params.request_ticket();
    let rng = ring::rand::SystemRandom::new();
    let (client, flight) = ClientHandshake::start(&verified, &params, b"", now, &rng).unwrap();
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let mut filter = zrtt_proto::replay::BloomReplayFilter::new(
        zrtt_proto::replay::ReplayConfig::default(),
        [4; 32],
        now.saturating_sub(Duration::from_secs(5)),
    );
    let accepted = server
        .accept(
            &frame,
            zrtt_proto::handshake::Transport::Tcp,
            now,
            &mut filter,
            &rng,
        )
        .unwrap();
    let grant = server
        .grant_ticket(&accepted, "127.0.0.1".parse().unwrap(), now, &rng)
        .unwrap()
        .unwrap();
    let mut exts = zrtt_proto::handshake::Extensions::new();
    exts.set(zrtt_proto::handshake::ext::RESUMPTION, grant);
    let (_, reply) = accepted.reply(&exts, b"").unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    client.handle_reply(&frame).unwrap().ticket.unwrap()
}

/// Three tickets for HOST from gateway `from` (each a first contact with a
/// fresh store), moved into `store`.
async fn three_tickets(from: &Env, store: &TokenStore) {
    for i in 0..3 {
        let mut cfg = client_config(from.records.clone());
        let own = Arc::new(TokenStore::new());
        cfg.tokens = Some(own.clone());
        let cfg = Arc::new(cfg);
        let (resp, _) = fetch(cfg.clone(), from.addr, vec![get(&format!("/t{i}"))])
            .await
            .unwrap();
        assert_eq!(resp[0].0, 200);
        let rec =
            zrtt_net::client::KeySource::lookup(cfg.keys.as_ref(), HOST, system_clock()).unwrap();
        store.put_ticket(HOST, own.take_ticket(HOST, &rec, system_clock()).unwrap());
    }
    assert_eq!(store.tickets(HOST), 4);
}

/// Gateways sharing token keys but each with its own semi-static key (so
/// its own replay filter) do not resume each other's tickets (review M2):
/// B refuses A's ticket with Reject 9, the client retries at once with
/// NK/IK (never another ticket, review M1) and drops its other tickets of that
/// ticket key; the request runs once at B, early.
#[tokio::test]
async fn another_replay_domains_ticket_is_refused_and_retried_with_nk_once() {
    let a = start_gateway(GatewayOpts {
        tokens: true,
        ..Default::default()
    })
    .await;
    let b = start_gateway(GatewayOpts {
        tokens: true,
        keys: vec![record("zrtt test key 2", 16384)],
        trusted: trusted_loopback(),
        ..Default::default()
    })
    .await;
    let store = Arc::new(TokenStore::with_tickets_per_server(8));
    // The oldest ticket: another fleet's (another ticket key id).
    store.put_ticket(HOST, other_fleets_ticket());
    three_tickets(&a, &store).await;

    let mut cfg = client_config(b.records.clone());
    cfg.tokens = Some(store.clone());
    let cfg = Arc::new(cfg);
    let (resp, info) = fetch(cfg, b.addr, vec![get("/once")]).await.unwrap();
    assert_eq!(resp[0], (200, "GET /once early=1 body=0".to_owned()));
    assert!(!info.resumed, "{info:?}");
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("dropped 2 more tickets")),
        "{info:?}"
    );
    assert_eq!(b.metric("zrtt_tickets_refused"), 1);
    assert_eq!(b.metric("zrtt_resumed"), 0);
    assert_eq!(b.metric("zrtt_accepted"), 1);
    assert_eq!(
        *b.seen.lock().unwrap(),
        vec!["GET /once early=1".to_owned()],
        "the early request runs once"
    );
    assert_eq!(
        store.tickets(HOST),
        2,
        "the other fleet's ticket, untried, and B's fresh one"
    );
    a.stop().await;
    b.stop().await;
}

/// Gateways holding one semi-static key and one replay filter (PROTOCOL.md
/// §7) resume each other's tickets.
#[tokio::test]
async fn gateways_sharing_key_and_filter_resume_each_others_tickets() {
    let shared: Arc<std::sync::Mutex<dyn zrtt_proto::replay::ReplayFilter>> = Arc::new(
        std::sync::Mutex::new(zrtt_proto::replay::BloomReplayFilter::new(
            zrtt_proto::replay::ReplayConfig::default(),
            [3; 32],
            system_clock().saturating_sub(Duration::from_secs(5)),
        )),
    );
    let a = start_gateway(GatewayOpts {
        tokens: true,
        replay: Some(shared.clone()),
        ..Default::default()
    })
    .await;
    let b = start_gateway(GatewayOpts {
        tokens: true,
        replay: Some(shared),
        ..Default::default()
    })
    .await;
    let store = Arc::new(TokenStore::new());
    let mut cfg = client_config(a.records.clone());
    cfg.tokens = Some(store.clone());
    let cfg = Arc::new(cfg);
    let (_, info) = fetch(cfg.clone(), a.addr, vec![get("/1")]).await.unwrap();
    assert!(!info.resumed);
    let (resp, info) = fetch(cfg, b.addr, vec![get("/2")]).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert!(info.resumed, "{info:?}");
    assert_eq!(b.metric("zrtt_resumed"), 1);
    assert_eq!(b.metric("zrtt_tickets_refused"), 0);
    a.stop().await;
    b.stop().await;
}

/// Keys still coming once the address is known: the TLS connection raced
/// beside them connects at once but holds its ClientHello until
/// `KEY_RACE_GRACE` after the race began, so keys a little behind drop a
/// connection that carried nothing, and a path of RTT at least the grace
/// loses no time to it (docs/DNS.md §6b). Bytes and order only: the first
/// byte on the wire is a TLS handshake record, and it was not sent before
/// the grace (a lower bound the scheduler cannot break).
#[tokio::test]
async fn raced_tls_holds_its_client_hello_for_the_grace() {
    use zrtt_net::client::{establish_when_keys, Target, KEY_RACE_GRACE};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = Target {
        host: HOST.into(),
        addr: listener.local_addr().unwrap(),
    };
    let cfg = Arc::new(client_config(Vec::new()));
    let t0 = std::time::Instant::now();
    let race = tokio::spawn(async move {
        // Keys that never come: TLS is the only way.
        let keys: zrtt_net::client::PrefetchFuture = Box::pin(std::future::pending());
        let _ = establish_when_keys(&cfg, &target, b"GET / HTTP/1.1\r\n\r\n", keys).await;
    });
    let (mut tcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the raced TLS connection")
        .unwrap();
    let mut first = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut first))
        .await
        .expect("a ClientHello")
        .unwrap();
    let sent_after = t0.elapsed();
    assert_eq!(first[0], 0x16, "a TLS handshake record");
    assert!(
        sent_after >= KEY_RACE_GRACE,
        "ClientHello {sent_after:?} after the race began, before the grace {KEY_RACE_GRACE:?}"
    );
    race.abort();
}

/// Attack review, issue 11 item 8: a reverse proxy opens no tunnels. A
/// CONNECT inside the zrtt channel and one over the TLS path get 405 and
/// reach no backend; the connection still serves the next request.
#[tokio::test]
async fn connect_is_refused_on_both_paths_and_reaches_no_backend() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        ..Default::default()
    })
    .await;
    let connect = || {
        hyper::Request::builder()
            .method("CONNECT")
            .uri("www.example.com:443")
            .header("host", "www.example.com:443")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    for records in [env.records.clone(), Vec::new()] {
        let tls = records.is_empty();
        let cfg = Arc::new(client_config(records));
        let (resp, info) = fetch(cfg, env.addr, vec![connect(), get("/after")])
            .await
            .unwrap();
        assert_eq!(info.mode == Mode::TlsFallback, tls, "{info:?}");
        assert_eq!(resp[0].0, 405, "{resp:?}");
        assert_eq!(resp[1], (200, "GET /after early=- body=0".to_owned()));
    }
    let seen = env.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|r| !r.starts_with("CONNECT")),
        "a CONNECT reached the backend: {seen:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
    env.stop().await;
}

/// The race budget (paths.rs): a server whose zrtt answers are late gets a
/// TLS handshake raced beside a flight only while the destination's budget
/// lasts. The fake server takes flights and never answers (it closes each
/// once a raced TLS connection came, or after 2 s, without marking the
/// path), and closes TLS connections at once; with a budget of one raced
/// handshake and no steady rate, four requests race exactly once (the
/// second to fourth add a tenth of a race each). Without the budget every
/// one raced.
#[tokio::test]
async fn late_answers_race_tls_only_within_the_budget() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zrtt_net::client::PathMemory;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let open_flights = Arc::new(AtomicUsize::new(0));
    let raced = Arc::new(AtomicUsize::new(0));
    let after = Arc::new(AtomicUsize::new(0));
    let tls_came = Arc::new(tokio::sync::Notify::new());
    let server = tokio::spawn({
        let (open_flights, raced, after, tls_came) = (
            open_flights.clone(),
            raced.clone(),
            after.clone(),
            tls_came.clone(),
        );
        async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let mut first = [0u8; 1];
                if tcp.peek(&mut first).await.unwrap_or(0) == 0 {
                    continue;
                }
                if first[0] == 0x16 {
                    if open_flights.load(Ordering::SeqCst) > 0 {
                        raced.fetch_add(1, Ordering::SeqCst);
                        tls_came.notify_one();
                    } else {
                        after.fetch_add(1, Ordering::SeqCst);
                    }
                    drop(tcp);
                    continue;
                }
                assert_eq!(first[0], FRAME_FIRST_FLIGHT);
                open_flights.fetch_add(1, Ordering::SeqCst);
                let (open_flights, tls_came) = (open_flights.clone(), tls_came.clone());
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(2), tls_came.notified()).await;
                    open_flights.fetch_sub(1, Ordering::SeqCst);
                    drop(tcp);
                });
            }
        }
    });
    let (rec, _) = record("zrtt test key 1", 16384);
    let mut cfg = client_config(vec![rec]);
    cfg.fast_open = false;
    cfg.paths = Arc::new(PathMemory::default().with_race_budget(1, 0));
    let cfg = Arc::new(cfg);
    for i in 0..4 {
        assert!(
            fetch(cfg.clone(), addr, vec![get("/")]).await.is_err(),
            "request {i} answered by a server that never answers"
        );
    }
    assert_eq!(raced.load(Ordering::SeqCst), 1, "raced TLS handshakes");
    assert_eq!(
        after.load(Ordering::SeqCst),
        4,
        "TLS fallbacks after zrtt failed"
    );
    assert_eq!(
        cfg.paths.zrtt_blocked(addr, std::time::Instant::now()),
        None
    );
    server.abort();
}
