//! HTTP/2 inside the zrtt channel (docs/GATEWAY.md, "HTTP/2 in the zrtt
//! channel"):
//! - a GET in the first flight (preface, SETTINGS and HEADERS as early
//!   data) is answered and reaches the backend marked `Early-Data: 1`;
//! - hyper-util's client multiplexes a host's requests over one zrtt
//!   connection ([`ZrttConnector`] says h2);
//! - an unsafe request in HTTP/2 early data waits for the client's
//!   confirmation (then runs unmarked) or gets 425: never forwarded before;
//! - a client that wants h2 from a gateway that does not offer it speaks
//!   HTTP/1.1 (not advertised) or falls back to TLS with ALPN h2 (Reject 8);
//! - at most `max_early_requests` early requests run before the
//!   confirmation (the rest wait, still marked); trailers in early data do
//!   not make a later request early;
//! - a request partly written inside the channel is not sent again over
//!   TLS when the connection fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::client::{
    conn_info, system_clock, AppProtocol, ClientConfig, Http2Policy, Mode, SystemResolver, Target,
    ZrttConnector, ZrttStream,
};
use zrtt_net::gateway::Timeouts;
use zrtt_proto::handshake::{
    ext, read_frame, Channel, ClientHandshake, ClientParams, Expect, Frame, RecordKind,
};
use zrtt_proto::http2::{flag, kind, FrameHeader, PREFACE};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};

const PATIENCE: Duration = Duration::from_secs(15);

fn h2_client(records: Vec<KeyRecord>, policy: Http2Policy) -> Arc<ClientConfig> {
    let mut cfg = client_config(records);
    cfg.http2 = policy;
    Arc::new(cfg)
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("https://{HOST}:{}{path}", addr.port())
}

fn to_gateway(addr: SocketAddr) -> Arc<SystemResolver> {
    let mut resolver = SystemResolver::new();
    resolver.add_override(HOST, addr.port(), addr.ip());
    Arc::new(resolver)
}

/// Poll `cond` every 10 ms for at most [`PATIENCE`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_h2_get_rides_the_first_flight_and_is_marked_early() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        ..Default::default()
    })
    .await;
    let cfg = h2_client(env.records.clone(), Http2Policy::WhenAdvertised);
    let stream = ZrttStream::new(
        cfg,
        Target {
            host: HOST.into(),
            addr: env.addr,
        },
    );
    assert!(stream.negotiated_h2(), "the record advertises h2");
    let info = stream.info();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(url(env.addr, "/first"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = tokio::time::timeout(PATIENCE, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "GET /first early=1 body=0");
    let i = info.lock().unwrap().clone().unwrap();
    assert_eq!(i.protocol, AppProtocol::Http2);
    assert!(i.early_data, "the request travelled in the first flight");
    assert_ne!(i.mode, Mode::TlsFallback);
    // A second request on the same connection: inside the channel, not early.
    let req = hyper::Request::get(url(env.addr, "/second"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let body = sender.send_request(req).await.unwrap().into_body();
    let body = body.collect().await.unwrap().to_bytes();
    assert_eq!(body, "GET /second early=- body=0");
    assert_eq!(env.metric("zrtt_h2_connections"), 1);
    assert_eq!(env.metric("zrtt_flights"), 1);
    assert_eq!(env.metric("early_requests"), 1);
    drop(sender);
    env.stop().await;
}

/// HEAD and OPTIONS, which hyper's h2 writes as Huffman-coded literals of
/// `:method` (not the indexed GET), ride the first flight too: the
/// client recognises them as safe (`zrtt_proto::http2::first_request`).
#[tokio::test]
async fn an_h2_head_or_options_rides_the_first_flight_as_a_get_does() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        ..Default::default()
    })
    .await;
    for (n, method) in [hyper::Method::HEAD, hyper::Method::OPTIONS]
        .into_iter()
        .enumerate()
    {
        let cfg = h2_client(env.records.clone(), Http2Policy::WhenAdvertised);
        let target = Target {
            host: HOST.into(),
            addr: env.addr,
        };
        let stream = ZrttStream::new(cfg, target);
        let info = stream.info();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let req = hyper::Request::builder()
            .method(method.clone())
            .uri(url(env.addr, "/m"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = tokio::time::timeout(PATIENCE, sender.send_request(req))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), 200, "{method}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        if method == hyper::Method::OPTIONS {
            assert_eq!(body, "OPTIONS /m early=1 body=0");
        } else {
            assert!(body.is_empty(), "a HEAD answer has no body");
        }
        let i = info.lock().unwrap().clone().unwrap();
        assert_eq!(i.protocol, AppProtocol::Http2);
        assert!(i.early_data, "{method} travelled in the first flight");
        assert_eq!(env.metric("early_requests"), n as u64 + 1, "{method}");
        drop(sender);
    }
    assert_eq!(env.metric("zrtt_flights"), 2);
    env.stop().await;
}

#[tokio::test]
async fn the_connector_multiplexes_a_hosts_requests_over_one_zrtt_connection() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        ..Default::default()
    })
    .await;
    let connector =
        ZrttConnector::builder(h2_client(env.records.clone(), Http2Policy::WhenAdvertised))
            .resolver(to_gateway(env.addr))
            .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let resp = client
        .get(url(env.addr, "/0").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    assert_eq!(conn_info(&resp).unwrap().protocol, AppProtocol::Http2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "GET /0 early=1 body=0");
    // Eight at once: all on the pooled HTTP/2 connection.
    let mut tasks = Vec::new();
    for i in 1..=8 {
        let client = client.clone();
        let u = url(env.addr, &format!("/{i}"));
        tasks.push(tokio::spawn(async move {
            let resp = client.get(u.parse().unwrap()).await.unwrap();
            assert_eq!(resp.version(), hyper::Version::HTTP_2);
            resp.into_body().collect().await.unwrap().to_bytes()
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let body = t.await.unwrap();
        assert_eq!(body, format!("GET /{} early=- body=0", i + 1));
    }
    assert_eq!(env.metric("connections"), 1);
    assert_eq!(env.metric("zrtt_flights"), 1);
    assert_eq!(env.metric("requests"), 9);
    assert_eq!(env.metric("tls_connections"), 0);
    drop(client);
    env.stop().await;
}

#[tokio::test]
async fn a_client_wanting_h2_of_a_gateway_without_it_falls_back_cleanly() {
    // Not advertised: HTTP/1.1 over zrtt, the request still early.
    let env = start_gateway(GatewayOpts::default()).await;
    let cfg = h2_client(env.records.clone(), Http2Policy::WhenAdvertised);
    let stream = ZrttStream::new(
        cfg.clone(),
        Target {
            host: HOST.into(),
            addr: env.addr,
        },
    );
    assert!(!stream.negotiated_h2());
    drop(stream);
    let (out, info) = fetch(cfg, env.addr, vec![get("/h1")]).await.unwrap();
    assert_eq!(out, vec![(200, "GET /h1 early=1 body=0".to_owned())]);
    assert_eq!(info.protocol, AppProtocol::Http1);
    assert_eq!(env.metric("zrtt_h2_connections"), 0);
    env.stop().await;

    // Insisted on, to a gateway that does not serve h2 in zrtt: Reject 8
    // (its records), then TLS with ALPN h2; nothing reached the backend twice.
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        zrtt_http2: false,
        ..Default::default()
    })
    .await;
    let connector = ZrttConnector::builder(h2_client(env.records.clone(), Http2Policy::Always))
        .resolver(to_gateway(env.addr))
        .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let resp = client
        .get(url(env.addr, "/tls").parse().unwrap())
        .await
        .unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let info = conn_info(&resp).unwrap();
    assert_eq!(info.mode, Mode::TlsFallback);
    assert_eq!(info.protocol, AppProtocol::Http2);
    assert!(
        info.notes.iter().any(|n| n.contains("unsupported")),
        "{:?}",
        info.notes
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "GET /tls early=- body=0");
    assert_eq!(env.metric("zrtt_rejects_sent"), 1);
    assert_eq!(env.metric("tls_h2_connections"), 1);
    assert_eq!(
        *env.seen.lock().unwrap(),
        vec!["GET /tls early=-".to_owned()]
    );
    drop(client);
    env.stop().await;
}

// ------------------------------------------------------- a raw h2 client

/// One HTTP/2 frame.
fn frame(k: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = FrameHeader {
        len: payload.len(),
        kind: k,
        flags,
        stream,
    }
    .encode()
    .to_vec();
    v.extend_from_slice(payload);
    v
}

/// A request header block (RFC 7541): `:method` from the static table
/// (0x82 GET, 0x83 POST), `:scheme https`, then `:path` and `:authority`
/// as literals without indexing.
fn header_block(method: u8, path: &str) -> Vec<u8> {
    let mut b = vec![method, 0x87, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, HOST.len() as u8]);
    b.extend_from_slice(HOST.as_bytes());
    b
}

/// Preface, empty SETTINGS, then each `(stream, method, path)` as one
/// HEADERS frame with END_STREAM and END_HEADERS.
fn h2_early(requests: &[(u32, u8, &str)]) -> Vec<u8> {
    let mut v = PREFACE.to_vec();
    v.extend(frame(kind::SETTINGS, 0, 0, &[]));
    for (stream, method, path) in requests {
        let block = header_block(*method, path);
        let flags = flag::END_STREAM | flag::END_HEADERS;
        v.extend(frame(kind::HEADERS, flags, *stream, &block));
    }
    v
}

/// A zrtt client at the byte level that asks for h2.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
    channel: Option<Channel>,
}

impl Raw {
    async fn send(addr: SocketAddr, rec: &KeyRecord, early: &[u8]) -> (Self, ClientHandshake) {
        let mut params = ClientParams::default();
        params.extensions.set(ext::ALPN, b"h2".to_vec());
        let (hs, flight) = ClientHandshake::start(
            &VerifiedKeyRecord::dangerous_assume_verified(rec.clone()),
            &params,
            early,
            system_clock(),
            &ring::rand::SystemRandom::new(),
        )
        .unwrap();
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&flight).await.unwrap();
        let raw = Self {
            tcp,
            buf: Vec::new(),
            channel: None,
        };
        (raw, hs)
    }

    /// Read the Reply, keeping its channel when `hs` is given.
    async fn reply(&mut self, hs: Option<ClientHandshake>) {
        loop {
            if let Ok(Some((frame, used))) = read_frame(&self.buf, Expect::ReplyOrReject) {
                assert!(matches!(frame, Frame::Reply { .. }), "not a Reply");
                if let Some(hs) = hs {
                    self.channel = Some(hs.handle_reply(&frame).unwrap().channel);
                }
                self.buf.drain(..used);
                return;
            }
            let mut chunk = [0u8; 16384];
            let n = tokio::time::timeout(PATIENCE, self.tcp.read(&mut chunk))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "closed before the Reply");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn confirm(&mut self) {
        let mut out = Vec::new();
        let channel = self.channel.as_mut().unwrap();
        channel.seal(RecordKind::Confirm, &[], &mut out).unwrap();
        self.tcp.write_all(&out).await.unwrap();
    }
}

fn short_confirmation() -> Timeouts {
    let mut t = Timeouts::default();
    t.first_flight = Duration::from_millis(500);
    t
}

#[tokio::test]
async fn an_unsafe_h2_request_in_early_data_waits_for_the_confirmation() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        timeouts: short_confirmation(),
        ..Default::default()
    })
    .await;
    const GET: u8 = 0x82;
    const POST: u8 = 0x83;
    let early = h2_early(&[(1, GET, "/g"), (3, POST, "/p")]);
    // A replayer (it cannot confirm): the GET runs, marked; the POST is
    // held, then answered 425, never forwarded.
    let (mut r, _hs) = Raw::send(env.addr, &env.records[0], &early).await;
    r.reply(None).await;
    until("the 425", || env.metric("early_requests_too_early") == 1).await;
    assert_eq!(env.metric("early_requests_held"), 1);
    assert_eq!(*env.seen.lock().unwrap(), vec!["GET /g early=1".to_owned()]);
    drop(r);
    // The real client confirms: the POST runs once, unmarked (its own
    // request now); the GET is marked as every request from early data.
    let (mut c, hs) = Raw::send(env.addr, &env.records[0], &early).await;
    c.reply(Some(hs)).await;
    c.confirm().await;
    until("the POST", || env.seen.lock().unwrap().len() == 3).await;
    let mut seen = env.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "GET /g early=1".to_owned(),
            "GET /g early=1".to_owned(),
            "POST /p early=-".to_owned()
        ]
    );
    assert_eq!(env.metric("early_requests_held"), 2);
    assert_eq!(env.metric("early_requests_too_early"), 1);
    assert_eq!(env.metric("early_requests"), 2);
    drop(c);
    env.stop().await;
}

// ------------------------------------------------------------- zrtt proxy

/// `zrtt proxy` with HTTP/2 when advertised: programs' HTTP/1.1 requests
/// for one origin, on separate connections to the proxy and all at once,
/// share one zrtt connection to the gateway.
#[tokio::test]
async fn the_proxy_multiplexes_an_origins_requests_over_one_zrtt_connection() {
    use zrtt_net::proxy::{Proxy, ProxyConfig, ZrttPorts};
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        ..Default::default()
    })
    .await;
    let mut client = client_config(env.records.clone());
    client.http2 = Http2Policy::WhenAdvertised;
    let mut ports = ZrttPorts::default();
    ports
        .add_spec(&format!("{HOST}={}", env.addr.port()))
        .unwrap();
    let mut cfg = ProxyConfig::new(Arc::new(client));
    cfg.resolver = to_gateway(env.addr);
    cfg.zrtt_ports = ports;
    let proxy = Proxy::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    let proxy_addr = proxy.local_addr().unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = proxy.run(async { drop(rx.await) }).await;
    });
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(async move {
            let tcp = TcpStream::connect(proxy_addr).await.unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            let req = hyper::Request::get(format!("http://{HOST}/p{i}"))
                .header("host", HOST)
                .body(Empty::<Bytes>::new())
                .unwrap();
            let resp = tokio::time::timeout(PATIENCE, sender.send_request(req))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(resp.status(), 200);
            resp.into_body().collect().await.unwrap().to_bytes()
        }));
    }
    let mut early = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let body = String::from_utf8(t.await.unwrap().to_vec()).unwrap();
        assert!(body.starts_with(&format!("GET /p{i} early=")), "{body}");
        early += usize::from(body.contains("early=1"));
    }
    // The first request rode the first flight (with those hyper had
    // written by then: a run of GETs may share it, each marked).
    assert!(early >= 1, "no request rode the first flight");
    assert_eq!(env.metric("early_requests"), early as u64);
    assert_eq!(env.metric("connections"), 1);
    assert_eq!(env.metric("zrtt_h2_connections"), 1);
    assert_eq!(env.metric("requests"), 8);
    let _ = stop.send(());
    let _ = tokio::time::timeout(PATIENCE, task).await;
    env.stop().await;
}

#[tokio::test]
async fn every_request_begun_in_early_data_is_marked() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        ..Default::default()
    })
    .await;
    // Two GETs whole, a third whose header block starts in the early data
    // and ends in a CONTINUATION sent inside the channel after the Reply.
    let mut early = h2_early(&[(1, 0x82, "/a"), (3, 0x82, "/b")]);
    let block = header_block(0x82, "/c");
    let (head, tail) = block.split_at(3);
    early.extend(frame(kind::HEADERS, flag::END_STREAM, 5, head));
    let (mut c, hs) = Raw::send(env.addr, &env.records[0], &early).await;
    c.reply(Some(hs)).await;
    let mut out = Vec::new();
    let rest = frame(kind::CONTINUATION, flag::END_HEADERS, 5, tail);
    let channel = c.channel.as_mut().unwrap();
    channel.seal(RecordKind::Data, &rest, &mut out).unwrap();
    c.tcp.write_all(&out).await.unwrap();
    until("three requests", || env.seen.lock().unwrap().len() == 3).await;
    let mut seen = env.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "GET /a early=1".to_owned(),
            "GET /b early=1".to_owned(),
            "GET /c early=1".to_owned()
        ]
    );
    assert_eq!(env.metric("early_requests"), 3);
    drop(c);
    env.stop().await;
}

#[tokio::test]
async fn trailers_in_early_data_do_not_mark_a_later_request() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        ..Default::default()
    })
    .await;
    // Early data: a GET, then a POST with a body and trailers (its second
    // HEADERS frame opens no request: two requests began here).
    let mut early = h2_early(&[(1, 0x82, "/a")]);
    early.extend(frame(
        kind::HEADERS,
        flag::END_HEADERS,
        3,
        &header_block(0x83, "/p"),
    ));
    early.extend(frame(kind::DATA, 0, 3, b"body"));
    // Trailers: `x: y`, a literal without indexing.
    let trailers = [0x00, 0x01, b'x', 0x01, b'y'];
    let flags = flag::END_STREAM | flag::END_HEADERS;
    early.extend(frame(kind::HEADERS, flags, 3, &trailers));
    let (mut c, hs) = Raw::send(env.addr, &env.records[0], &early).await;
    c.reply(Some(hs)).await;
    c.confirm().await;
    until("the GET and the POST", || {
        env.seen.lock().unwrap().len() == 2
    })
    .await;
    // A GET sent after the confirmation, inside the channel: the client's
    // own request, not marked.
    let mut out = Vec::new();
    let later = frame(kind::HEADERS, flags, 5, &header_block(0x82, "/c"));
    let channel = c.channel.as_mut().unwrap();
    channel.seal(RecordKind::Data, &later, &mut out).unwrap();
    c.tcp.write_all(&out).await.unwrap();
    until("the later GET", || env.seen.lock().unwrap().len() == 3).await;
    let mut seen = env.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "GET /a early=1".to_owned(),
            "GET /c early=-".to_owned(),
            "POST /p early=-".to_owned()
        ]
    );
    assert_eq!(env.metric("early_requests"), 1);
    drop(c);
    env.stop().await;
}

/// A flight of 12 GETs: `(stream, GET, path)` for /r0../r11.
fn twelve_gets() -> Vec<u8> {
    let paths: Vec<String> = (0..12).map(|i| format!("/r{i}")).collect();
    let requests: Vec<(u32, u8, &str)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (2 * i as u32 + 1, 0x82, p.as_str()))
        .collect();
    h2_early(&requests)
}

#[tokio::test]
async fn a_replayed_flight_runs_at_most_max_early_requests() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        timeouts: short_confirmation(),
        ..Default::default()
    })
    .await;
    let early = twelve_gets();
    // A replayer: the default 8 GETs run (marked), the other 4 wait for
    // a confirmation that never comes and get 425.
    let (mut r, _hs) = Raw::send(env.addr, &env.records[0], &early).await;
    r.reply(None).await;
    until("the 425s", || env.metric("early_requests_too_early") == 4).await;
    until("the 8", || env.seen.lock().unwrap().len() == 8).await;
    let seen = env.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.ends_with("early=1")), "{seen:?}");
    assert_eq!(env.metric("early_requests"), 8);
    assert_eq!(env.metric("early_requests_held"), 4);
    drop(r);
    env.stop().await;
}

#[tokio::test]
async fn requests_past_the_cap_wait_for_the_confirmation_and_stay_marked() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        max_early_requests: Some(2),
        ..Default::default()
    })
    .await;
    let early = twelve_gets();
    // The client: 2 run at once; the other 10 once it confirms, still
    // marked (they began in replayable bytes).
    let (mut c, hs) = Raw::send(env.addr, &env.records[0], &early).await;
    c.reply(Some(hs)).await;
    until("the first 2", || env.seen.lock().unwrap().len() == 2).await;
    until("10 held", || env.metric("early_requests_held") == 10).await;
    assert_eq!(env.seen.lock().unwrap().len(), 2);
    c.confirm().await;
    until("all 12", || env.seen.lock().unwrap().len() == 12).await;
    let seen = env.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|s| s.ends_with("early=1")), "{seen:?}");
    assert_eq!(env.metric("early_requests"), 12);
    assert_eq!(env.metric("early_requests_too_early"), 0);
    drop(c);
    env.stop().await;
}

#[tokio::test]
async fn an_h2_post_goes_inside_the_channel_not_in_the_first_flight() {
    let env = start_gateway(GatewayOpts {
        keys: vec![record_h2("zrtt h2 key", 16384)],
        ..Default::default()
    })
    .await;
    let stream = ZrttStream::new(
        h2_client(env.records.clone(), Http2Policy::WhenAdvertised),
        Target {
            host: HOST.into(),
            addr: env.addr,
        },
    );
    let info = stream.info();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::post(url(env.addr, "/p"))
        .body(http_body_util::Full::new(Bytes::from_static(b"hello")))
        .unwrap();
    let resp = tokio::time::timeout(PATIENCE, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "POST /p early=- body=5");
    let i = info.lock().unwrap().clone().unwrap();
    assert_eq!(i.protocol, AppProtocol::Http2);
    assert!(!i.early_data, "a POST is not early data");
    assert_ne!(i.mode, Mode::TlsFallback);
    assert_eq!(env.metric("early_requests"), 0);
    assert_eq!(env.metric("early_requests_held"), 0);
    drop(sender);
    env.stop().await;
}

// ------------------------------------------- client: no second send on failure

/// A zrtt server that answers the first connection's flight with a Reply,
/// reads a little of what follows in the channel, then resets the
/// connection; later connections (a TLS fallback) are counted and dropped.
async fn reset_after_reply(
    keys: Vec<(KeyRecord, zrtt_proto::crypto::X25519KeyPair)>,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use zrtt_proto::handshake::Transport;
    use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let server = server_keys(&keys);
        let rng = ring::rand::SystemRandom::new();
        let start = system_clock().saturating_sub(Duration::from_secs(5));
        let mut filter = BloomReplayFilter::new(ReplayConfig::default(), [9; 32], start);
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            if counted.fetch_add(1, Ordering::AcqRel) > 0 {
                continue;
            }
            let mut buf = Vec::new();
            let accepted = loop {
                if let Ok(Some((f, _))) = read_frame(&buf, Expect::FirstFlight) {
                    let now = system_clock();
                    break server.accept(&f, Transport::Tcp, now, &mut filter, &rng);
                }
                let mut chunk = [0u8; 4096];
                let n = tcp.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before the flight");
                buf.extend_from_slice(&chunk[..n]);
            };
            let Ok(accepted) = accepted else {
                panic!("flight refused")
            };
            assert!(accepted.early_data.is_empty(), "a POST is not early");
            let (_, reply) = accepted
                .reply(&zrtt_proto::handshake::Extensions::new(), b"")
                .unwrap();
            tcp.write_all(&reply).await.unwrap();
            // Some of the request reached us: reset.
            let mut chunk = [0u8; 4096];
            let _ = tcp.read(&mut chunk).await;
            tcp.set_zero_linger().unwrap();
            drop(tcp);
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_request_partly_sent_in_the_channel_is_not_sent_again_over_tls() {
    use std::sync::atomic::Ordering;
    let keys = vec![record("zrtt test key 1", 16384)];
    let (addr, connections) = reset_after_reply(keys.clone()).await;
    let cfg = client_config(keys.into_iter().map(|(r, _)| r).collect());
    // A POST (never early data) larger than the socket buffers: it all goes
    // inside the channel, and the reset comes while it is being written.
    let body = vec![b'x'; 32 << 20];
    let mut request = format!(
        "POST /upload HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let target = Target {
        host: HOST.to_owned(),
        addr,
    };
    let r = tokio::time::timeout(
        PATIENCE,
        zrtt_net::client::establish(&cfg, &target, &request),
    )
    .await
    .expect("establish returns");
    let Err(err) = r else {
        panic!("the write did not fail")
    };
    assert!(err.to_string().contains("sending request"), "{err}");
    // No second connection: the request was not offered to TLS.
    assert_eq!(connections.load(Ordering::Acquire), 1);
}
