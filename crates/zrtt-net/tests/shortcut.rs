//! The DNS shortcut's client race (docs/DNS.md §8) against a fake SDNS on
//! loopback: a UDP socket that answers the shortcut's TXT query from the
//! core's server half (`ServerConfig::accept` + `Accepted::shortcut_answer`)
//! and the host's A query with 127.0.0.1, in an order the test chooses.
//! Plain-path answers come from the real gateway of `common`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use zrtt_dns::proto::op::{Message, MessageType, OpCode, ResponseCode};
use zrtt_dns::proto::rr::rdata::{A, TXT};
use zrtt_dns::proto::rr::{RData, Record, RecordType};
use zrtt_dns::resolver::{Resolver, ResolverConfig, Trust};
use zrtt_net::client::{system_clock, ConnInfo, Mode, ShortcutLookup, ZrttStream};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::handshake::{read_frame, Expect, ServerConfig, Transport};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
use zrtt_proto::shortcut::{self, NameMatch, TxtAnswer};

/// What the fake SDNS answers to the shortcut's TXT query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sdns {
    Answer,
    /// The answer once `release_txt` is notified; `txt_sent` after.
    AnswerLate,
    Fetch,
    NxDomain,
    Refused,
    Silent,
    Reject,
    Malformed,
}

/// The response a shortcut flight gets.
const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nshortcut";

struct Fake {
    dns: SocketAddr,
    /// TXT queries seen.
    txt_queries: Arc<Mutex<usize>>,
    /// The flights (TCP form) decoded from TXT query names.
    flights: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Opens the A answer (held until then).
    release_a: Arc<tokio::sync::Notify>,
    /// Opens the TXT answer of [`Sdns::AnswerLate`].
    release_txt: Arc<tokio::sync::Notify>,
    /// Notified once the TXT answer of [`Sdns::AnswerLate`] is sent.
    txt_sent: Arc<tokio::sync::Notify>,
}

fn replay() -> BloomReplayFilter {
    BloomReplayFilter::new(
        ReplayConfig {
            capacity: 1 << 10,
            ..ReplayConfig::default()
        },
        [7; 32],
        system_clock().saturating_sub(Duration::from_secs(5)),
    )
}

/// The answer stream for a flight (TCP form), made by the core's server half.
fn answer_stream(server: &ServerConfig, flight: &[u8]) -> Vec<u8> {
    let (frame, _) = read_frame(flight, Expect::FirstFlight).unwrap().unwrap();
    let rng = ring::rand::SystemRandom::new();
    let accepted = server
        .accept(
            &frame,
            Transport::Shortcut,
            system_clock(),
            &mut replay(),
            &rng,
        )
        .map_err(|_| "refused")
        .unwrap();
    let req = accepted.shortcut_request().unwrap();
    assert_eq!(req.target(), "/x");
    accepted.shortcut_answer(RESPONSE).unwrap()
}

/// A fake SDNS: TXT under zq.HOST as `mode` says; A for HOST with
/// 127.0.0.1 once `release_a` is notified (or at once with `a_first`).
async fn start_sdns(mode: Sdns, server: Arc<ServerConfig>, a_first: bool) -> Fake {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let fake = Fake {
        dns: sock.local_addr().unwrap(),
        txt_queries: Arc::default(),
        flights: Arc::default(),
        release_a: Arc::new(tokio::sync::Notify::new()),
        release_txt: Arc::new(tokio::sync::Notify::new()),
        txt_sent: Arc::new(tokio::sync::Notify::new()),
    };
    if a_first {
        fake.release_a.notify_one();
    }
    let sock = Arc::new(sock);
    let (txt_queries, flights, release) = (
        fake.txt_queries.clone(),
        fake.flights.clone(),
        fake.release_a.clone(),
    );
    let (release_txt, txt_sent) = (fake.release_txt.clone(), fake.txt_sent.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let q = Message::from_vec(&buf[..n]).unwrap();
            let query = q.queries[0].clone();
            let qname = query.name().to_ascii();
            let mut resp = Message::response(q.metadata.id, OpCode::Query);
            resp.metadata.message_type = MessageType::Response;
            resp.add_query(query.clone());
            if query.query_type() == RecordType::A {
                let (sock, release) = (sock.clone(), release.clone());
                resp.add_answer(Record::from_rdata(
                    query.name().clone(),
                    60,
                    RData::A(A(Ipv4Addr::LOCALHOST)),
                ));
                tokio::spawn(async move {
                    release.notified().await;
                    release.notify_one();
                    let _ = sock.send_to(&resp.to_vec().unwrap(), from).await;
                });
                continue;
            }
            *txt_queries.lock().unwrap() += 1;
            let NameMatch::Flight(flight) = shortcut::parse_query_name(&qname, HOST) else {
                panic!("not a flight name: {qname}");
            };
            flights.lock().unwrap().push(flight.clone());
            let answer = match mode {
                Sdns::Silent => continue,
                Sdns::NxDomain | Sdns::Refused => {
                    resp.metadata.response_code = if mode == Sdns::NxDomain {
                        ResponseCode::NXDomain
                    } else {
                        ResponseCode::Refused
                    };
                    None
                }
                Sdns::Answer | Sdns::AnswerLate => {
                    Some(TxtAnswer::Answer(answer_stream(&server, &flight)))
                }
                Sdns::Fetch => Some(TxtAnswer::Fetch),
                // A Reject frame's bytes do not matter to the client.
                Sdns::Reject => Some(TxtAnswer::Reject(vec![0xD9, 0x07, 0x00, 0x00])),
                Sdns::Malformed => None,
            };
            let strings = match (answer, mode) {
                (Some(a), _) => Some(a.to_strings()),
                (None, Sdns::Malformed) => Some(vec![vec![0x09, 1, 2, 3]]),
                (None, _) => None,
            };
            if let Some(strings) = strings {
                let txt = TXT::from_bytes(strings.iter().map(|s| &s[..]).collect());
                resp.add_answer(Record::from_rdata(query.name().clone(), 0, RData::TXT(txt)));
            }
            if mode == Sdns::AnswerLate {
                let (sock, release_txt, txt_sent) =
                    (sock.clone(), release_txt.clone(), txt_sent.clone());
                tokio::spawn(async move {
                    release_txt.notified().await;
                    let _ = sock.send_to(&resp.to_vec().unwrap(), from).await;
                    txt_sent.notify_one();
                });
                continue;
            }
            sock.send_to(&resp.to_vec().unwrap(), from).await.unwrap();
            // The A answer only after the TXT one.
            release.notify_one();
        }
    });
    fake
}

fn keys() -> Vec<(KeyRecord, X25519KeyPair)> {
    vec![record("shortcut", 16 * 1024)]
}

/// A client config with the shortcut on, holding the records of `keys`.
fn client(keys: &[(KeyRecord, X25519KeyPair)]) -> Arc<zrtt_net::client::ClientConfig> {
    let mut cfg = client_config(keys.iter().map(|(r, _)| r.clone()).collect());
    cfg.dns_shortcut = true;
    Arc::new(cfg)
}

/// The resolver of the fake SDNS, and the plain address lookup through it.
fn lookup(fake: &Fake, port: u16) -> ShortcutLookup {
    let mut rc = ResolverConfig::new(fake.dns);
    rc.timeout = Duration::from_millis(300);
    rc.udp_attempts = 1;
    let dns = Arc::new(Resolver::new(rc, Trust::none()));
    let r = dns.clone();
    let addr = Box::pin(async move {
        let m = r
            .query_uncached(HOST, RecordType::A)
            .await
            .map_err(std::io::Error::other)?;
        m.answers
            .iter()
            .find_map(|rr| match &rr.data {
                RData::A(a) => Some(SocketAddr::from((a.0, port))),
                _ => None,
            })
            .ok_or_else(|| std::io::Error::other("no A"))
    });
    ShortcutLookup {
        dns,
        addr,
        known: None,
    }
}

/// One request over a shortcut stream: status, body, info.
async fn send(
    cfg: Arc<zrtt_net::client::ClientConfig>,
    lookup: ShortcutLookup,
    port: u16,
    req: Request<Full<Bytes>>,
) -> (u16, String, ConnInfo) {
    let stream = ZrttStream::with_shortcut(cfg, HOST.into(), port, lookup);
    let info = stream.info();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    let info = info.lock().unwrap().clone().unwrap();
    (status, String::from_utf8_lossy(&body).into_owned(), info)
}

#[tokio::test]
async fn answer_in_dns_needs_no_connection() {
    let keys = keys();
    let server = Arc::new(server_keys(&keys));
    let fake = start_sdns(Sdns::Answer, server, false).await;
    // The A answer comes after the TXT one; any connection here is a failure.
    let site = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = site.local_addr().unwrap().port();
    let (status, body, info) = send(client(&keys), lookup(&fake, port), port, get("/x")).await;
    assert_eq!((status, body.as_str()), (200, "shortcut"), "{info:?}");
    assert_eq!(info.mode, Mode::DnsShortcut, "{info:?}");
    assert_eq!(info.mode.as_str(), "dns-shortcut");
    assert_eq!(*fake.txt_queries.lock().unwrap(), 1);
    let accepted = tokio::time::timeout(Duration::from_millis(200), site.accept()).await;
    assert!(accepted.is_err(), "the plain path connected");
}

/// A fake gateway: reads one flight, answers it as a shortcut flight from
/// the core, closes; the flight it read.
async fn fake_site(server: Arc<ServerConfig>) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    let site = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = site.local_addr().unwrap().port();
    let got = tokio::spawn(async move {
        let (mut tcp, _) = site.accept().await.unwrap();
        let mut buf = Vec::new();
        let flight = loop {
            let mut chunk = [0u8; 4096];
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before a whole flight");
            buf.extend_from_slice(&chunk[..n]);
            if let Some((_, used)) = read_frame(&buf, Expect::FirstFlight).unwrap() {
                break buf[..used].to_vec();
            }
        };
        tcp.write_all(&answer_stream(&server, &flight))
            .await
            .unwrap();
        tcp.shutdown().await.unwrap();
        flight
    });
    (port, got)
}

#[tokio::test]
async fn fetch_sends_the_same_flight_over_tcp() {
    let keys = keys();
    let server = Arc::new(server_keys(&keys));
    let fake = start_sdns(Sdns::Fetch, server.clone(), false).await;
    let (port, got) = fake_site(server).await;
    let (status, body, info) = send(client(&keys), lookup(&fake, port), port, get("/x")).await;
    assert_eq!((status, body.as_str()), (200, "shortcut"), "{info:?}");
    assert_eq!(info.mode, Mode::ShortcutFetch, "{info:?}");
    let tcp_flight = got.await.unwrap();
    let dns_flights = fake.flights.lock().unwrap().clone();
    assert_eq!(dns_flights, vec![tcp_flight.clone()]);
    assert_eq!(
        shortcut::flight_hash(&tcp_flight).unwrap(),
        shortcut::flight_hash(&dns_flights[0]).unwrap()
    );
}

/// The shortcut fails as `mode` says: the plain path's answer (the real
/// gateway, the flight early) comes back, and the request ran once.
async fn plain_after(mode: Sdns) {
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(mode, Arc::new(server_keys(&keys)), mode == Sdns::Silent).await;
    let port = env.addr.port();
    let (status, body, info) = send(client(&keys), lookup(&fake, port), port, get("/x")).await;
    assert_eq!(status, 200, "{mode:?} {info:?}");
    assert!(
        body.starts_with("GET /x early="),
        "{mode:?} {body} {info:?}"
    );
    // A silent SDNS lets the address come first: with no token the
    // shortcut flight's TCP form is the plain path (the gateway runs it).
    let plain = matches!(info.mode, Mode::ZrttEarly | Mode::ZrttGated);
    let tcp_form = mode == Sdns::Silent && info.mode == Mode::ShortcutFetch;
    assert!(plain || tcp_form, "{mode:?} {info:?}");
    assert_eq!(*fake.txt_queries.lock().unwrap(), 1, "{mode:?}");
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("DNS shortcut") || n.contains("address after")),
        "{mode:?} {info:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn nxdomain_goes_the_plain_path() {
    plain_after(Sdns::NxDomain).await;
}

#[tokio::test]
async fn refused_goes_the_plain_path() {
    plain_after(Sdns::Refused).await;
}

#[tokio::test]
async fn silent_sdns_goes_the_plain_path() {
    plain_after(Sdns::Silent).await;
}

#[tokio::test]
async fn reject_goes_the_plain_path() {
    plain_after(Sdns::Reject).await;
}

#[tokio::test]
async fn malformed_answer_goes_the_plain_path() {
    plain_after(Sdns::Malformed).await;
}

#[tokio::test]
async fn post_never_takes_the_shortcut() {
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(Sdns::Answer, Arc::new(server_keys(&keys)), true).await;
    let port = env.addr.port();
    let post = Request::builder()
        .method("POST")
        .uri("/x")
        .header("host", HOST)
        .body(Full::new(Bytes::from_static(b"abc")))
        .unwrap();
    let (status, body, info) = send(client(&keys), lookup(&fake, port), port, post).await;
    assert_eq!(status, 200, "{info:?}");
    assert!(
        body.starts_with("POST /x ") && body.ends_with("body=3"),
        "{body}"
    );
    assert_eq!(*fake.txt_queries.lock().unwrap(), 0);
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("not used: only GET and HEAD")),
        "{info:?}"
    );
    env.stop().await;
}

#[test]
fn compact_requests() {
    use zrtt_net::client::compact_request;
    let ok = compact_request(
        b"GET /a?b=c HTTP/1.1\r\nhost: www.example.com\r\naccept: */*\r\n\r\n",
        HOST,
    );
    assert_eq!(ok.unwrap().target(), "/a?b=c");
    let head = compact_request(b"HEAD / HTTP/1.1\r\n\r\n", HOST).unwrap();
    assert_eq!(head.method(), zrtt_proto::shortcut::Method::Head);
    let same = compact_request(
        b"GET / HTTP/1.1\r\nhost: WWW.example.com.:443\r\n\r\n",
        HOST,
    );
    assert!(same.is_ok(), "{same:?}");
    for bad in [
        &b"GET / HTTP/1.1\r\nhost: other.example.com\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nhost: www.example.com.evil\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: h\r\n\r\n",
        b"GET / HTTP/1.1\r\ncookie: a=b\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: h\r\n\r\nbody",
        b"GET / HTTP/1.1\r\nhost: h\r\n",
    ] {
        assert!(compact_request(bad, HOST).is_err(), "{bad:?}");
    }
    let long = format!(
        "GET /{} HTTP/1.1\r\n\r\n",
        "a".repeat(shortcut::max_target_len(HOST))
    );
    assert!(compact_request(long.as_bytes(), HOST).is_err());
}

#[tokio::test]
async fn known_address_sends_no_query() {
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(Sdns::Answer, Arc::new(server_keys(&keys)), true).await;
    let port = env.addr.port();
    let mut l = lookup(&fake, port);
    let known = env.addr;
    l.addr = Box::pin(async move { Ok(known) });
    let (status, body, info) = send(client(&keys), l, port, get("/x")).await;
    assert_eq!(status, 200, "{info:?}");
    assert!(body.starts_with("GET /x early="), "{body}");
    assert_eq!(*fake.txt_queries.lock().unwrap(), 0);
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("the address is known")),
        "{info:?}"
    );
    env.stop().await;
}

/// A resolver whose answer never comes: only the shortcut can answer.
struct NoAddress;

impl zrtt_net::client::Resolve for NoAddress {
    fn resolve(&self, _: &str, _: u16) -> zrtt_net::client::ResolveFuture {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn proxy_answers_from_the_dns_answer() {
    use zrtt_net::proxy::{Proxy, ProxyConfig};
    let keys = keys();
    let fake = start_sdns(Sdns::Answer, Arc::new(server_keys(&keys)), false).await;
    let mut cfg = ProxyConfig::new(client(&keys));
    cfg.resolver = Arc::new(NoAddress);
    cfg.shortcut_dns = Some(lookup(&fake, 443).dns);
    let proxy = Proxy::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    let addr = proxy.local_addr().unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(proxy.run(async {
        let _ = rx.await;
    }));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = Request::builder()
        .uri(format!("http://{HOST}/x"))
        .header("host", HOST)
        .header("proxy-connection", "keep-alive")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"shortcut");
    assert_eq!(*fake.txt_queries.lock().unwrap(), 1);
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}

/// The address first and no token: the plain flight would be gated, so
/// the shortcut flight's TCP form goes to the site (the gateway's answer
/// cache then runs the request once whichever copy comes first).
#[tokio::test]
async fn address_first_without_a_token_sends_the_shortcut_flight() {
    let keys = keys();
    let server = Arc::new(server_keys(&keys));
    let fake = start_sdns(Sdns::Silent, server.clone(), true).await;
    let (port, got) = fake_site(server).await;
    let (status, body, info) = send(client(&keys), lookup(&fake, port), port, get("/x")).await;
    assert_eq!((status, body.as_str()), (200, "shortcut"), "{info:?}");
    assert_eq!(info.mode, Mode::ShortcutFetch, "{info:?}");
    let tcp_flight = got.await.unwrap();
    assert_eq!(*fake.flights.lock().unwrap(), vec![tcp_flight]);
    assert!(
        info.notes.iter().any(|n| n.contains("no token")),
        "{info:?}"
    );
}

/// The address first with a token: the fresh plain flight (one round
/// trip when the token is good), not the shortcut flight.
#[tokio::test]
async fn address_first_with_a_token_takes_the_plain_path() {
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(Sdns::Silent, Arc::new(server_keys(&keys)), true).await;
    let port = env.addr.port();
    let mut cfg = (*client(&keys)).clone();
    let tokens = zrtt_net::client::TokenStore::new();
    tokens.put(HOST, Ipv4Addr::LOCALHOST.into(), vec![7; 16]);
    cfg.tokens = Some(Arc::new(tokens));
    let (status, body, info) = send(Arc::new(cfg), lookup(&fake, port), port, get("/x")).await;
    assert_eq!(status, 200, "{info:?}");
    assert!(body.starts_with("GET /x early="), "{body} {info:?}");
    assert!(
        matches!(info.mode, Mode::ZrttEarly | Mode::ZrttGated),
        "{info:?}"
    );
    assert!(info.notes.iter().any(|n| n.contains("a token")), "{info:?}");
    env.stop().await;
}

/// A resolver that knows the address at once (`resolve_now`, as for an
/// override, a cached answer or /etc/hosts) but whose lookup never ends.
struct KnownNow(SocketAddr);

impl zrtt_net::client::Resolve for KnownNow {
    fn resolve(&self, _: &str, _: u16) -> zrtt_net::client::ResolveFuture {
        Box::pin(std::future::pending())
    }

    fn resolve_now(&self, _: &str, _: u16) -> Option<SocketAddr> {
        Some(self.0)
    }
}

#[tokio::test]
async fn an_address_known_at_once_sends_no_query() {
    use zrtt_net::proxy::{Proxy, ProxyConfig};
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(Sdns::Answer, Arc::new(server_keys(&keys)), false).await;
    let mut cfg = ProxyConfig::new(client(&keys));
    cfg.resolver = Arc::new(KnownNow(env.addr));
    cfg.shortcut_dns = Some(lookup(&fake, 443).dns);
    let proxy = Proxy::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    let addr = proxy.local_addr().unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(proxy.run(async {
        let _ = rx.await;
    }));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let port = env.addr.port();
    let req = Request::builder()
        .uri(format!("http://{HOST}:{port}/x"))
        .header("host", format!("{HOST}:{port}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.starts_with(b"GET /x early="), "{body:?}");
    assert_eq!(*fake.txt_queries.lock().unwrap(), 0);
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    env.stop().await;
}

/// How the client's side of a relayed connection ended.
#[derive(Debug, PartialEq, Eq)]
enum ClientEnd {
    /// End of stream after the gateway's bytes were delivered.
    InOrder,
    /// End of stream before anything from the gateway was delivered.
    Early,
    /// A reset or another error.
    Error(std::io::ErrorKind),
}

/// A relay between the client and `gateway` that delivers the gateway's
/// bytes only once `release` is notified (its first connection only);
/// `entered` is notified when the client's connection arrives. Returns
/// how the client's side ended.
async fn holding_relay(
    gateway: SocketAddr,
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
) -> (u16, tokio::task::JoinHandle<ClientEnd>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (client, _) = l.accept().await.unwrap();
        entered.notify_one();
        let server = tokio::net::TcpStream::connect(gateway).await.unwrap();
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let delivered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = delivered.clone();
        let down = tokio::spawn(async move {
            release.notified().await;
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = sr.read(&mut buf).await {
                if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                d.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            let _ = cw.shutdown().await;
        });
        let mut buf = [0u8; 16 * 1024];
        let end = loop {
            match cr.read(&mut buf).await {
                Ok(0) if delivered.load(std::sync::atomic::Ordering::SeqCst) => {
                    break ClientEnd::InOrder
                }
                Ok(0) => break ClientEnd::Early,
                Ok(n) => {
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break ClientEnd::Error(std::io::ErrorKind::BrokenPipe);
                    }
                }
                Err(e) => break ClientEnd::Error(e.kind()),
            }
        };
        let _ = sw.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), down).await;
        end
    });
    (port, task)
}

/// The DNS answer overtakes a plain connection under way (a token held,
/// the address first): that connection is not dropped but finished and
/// closed in order, after the gateway's reply was read (a reset before
/// the gateway saw the handshake complete would cost the client's next
/// connections their round trip). Ordered by construction: the relay
/// holds the gateway's bytes until the DNS answer is sent.
#[tokio::test]
async fn an_overtaken_plain_connection_is_closed_in_order() {
    let keys = keys();
    let env = start_gateway(GatewayOpts {
        keys: keys.clone(),
        ..Default::default()
    })
    .await;
    let fake = start_sdns(Sdns::AnswerLate, Arc::new(server_keys(&keys)), true).await;
    let (port, relay) =
        holding_relay(env.addr, fake.release_txt.clone(), fake.txt_sent.clone()).await;
    let mut cfg = (*client(&keys)).clone();
    let tokens = zrtt_net::client::TokenStore::new();
    tokens.put(HOST, Ipv4Addr::LOCALHOST.into(), vec![7; 16]);
    cfg.tokens = Some(Arc::new(tokens));
    let (status, body, info) = send(Arc::new(cfg), lookup(&fake, port), port, get("/x")).await;
    assert_eq!((status, body.as_str()), (200, "shortcut"), "{info:?}");
    assert_eq!(info.mode, Mode::DnsShortcut, "{info:?}");
    assert!(
        info.notes.iter().any(|n| n.contains("closed in order")),
        "{info:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(10), relay)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(end, ClientEnd::InOrder);
    env.stop().await;
}
