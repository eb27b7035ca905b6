//! Helpers of the DNS shortcut tests (tests/sdns.rs, tests/sdns_unbound.rs):
//! a recording backend, a gateway with an SDNS, flights, DNS queries.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_net::gateway::ShortcutConfig;
use zrtt_proto::handshake::{read_frame, ClientHandshake, Expect, Frame, RejectReason};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::shortcut::{CompactRequest, Method, TxtAnswer};

use super::{cert_der, start_gateway, Env, GatewayOpts, HOST};

/// What the recording backend saw: one line per request, `METHOD target`
/// then its fields as `name: value`.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// Requests to `/hold` wait until this is notified.
pub static HOLD: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A backend that records each request's head; `/big` answers 5,000
/// bytes, `/huge` 1.1 MiB, `/hold` once [`HOLD`] is notified, anything
/// else a short text.
pub async fn recording_backend() -> (SocketAddr, Seen) {
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

pub async fn start() -> (Env, Seen) {
    start_with(ShortcutConfig::default()).await
}

pub async fn start_with(mut sc: ShortcutConfig) -> (Env, Seen) {
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
pub fn flight(rec: &KeyRecord, method: Method, target: &str) -> (ClientHandshake, Vec<u8>) {
    let now = zrtt_net::client::system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let req = CompactRequest::new(method, target).unwrap();
    let rng = ring::rand::SystemRandom::new();
    // Padded as the client pads (every name under HOST 253 characters).
    ClientHandshake::start_shortcut(&verified, &req, None, Some(HOST), now, &rng).unwrap()
}

/// A TXT query for `name` as the client sends it (RD, EDNS 1232).
pub fn query(name: &str, rtype: RecordType, id: u16) -> Vec<u8> {
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
pub async fn ask_udp(server: SocketAddr, q: &[u8]) -> Vec<u8> {
    ask_udp_from("127.0.0.1", server, q).await
}

/// [`ask_udp`] from the loopback address `from` (127.0.0.0/8 all works).
pub async fn ask_udp_from(from: &str, server: SocketAddr, q: &[u8]) -> Vec<u8> {
    let sock = tokio::net::UdpSocket::bind((from, 0)).await.unwrap();
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
pub async fn ask_sdns(sdns: SocketAddr, q: &[u8]) -> Vec<u8> {
    let a = ask_udp(sdns, q).await;
    assert!(a.len() <= 3 * q.len(), "{} > 3 x {}", a.len(), q.len());
    a
}

/// Ask `server` over TCP (DNS over TCP).
pub async fn ask_tcp(server: SocketAddr, q: &[u8]) -> Vec<u8> {
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
pub fn txt_answer(answer: &[u8]) -> TxtAnswer {
    let m = Message::from_vec(answer).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
    assert_eq!(m.answers.len(), 1, "{m:?}");
    assert_eq!(m.answers[0].ttl, 0);
    let RData::TXT(t) = &m.answers[0].data else {
        panic!("not TXT: {m:?}")
    };
    TxtAnswer::from_strings(t.txt_data.iter().map(|s| &s[..])).unwrap()
}

pub fn reject_reason(frame: &[u8]) -> RejectReason {
    match read_frame(frame, Expect::ReplyOrReject).unwrap().unwrap().0 {
        Frame::Reject { reason, .. } => reason,
        other => panic!("{other:?}"),
    }
}

/// The HTTP response's body (after the empty line).
pub fn body_of(response: &[u8]) -> &[u8] {
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    &response[at + 4..]
}

/// The TCP form of a flight on the gateway's port: the answer stream, then EOF.
pub async fn fetch_tcp(gateway: SocketAddr, frame: &[u8]) -> Vec<u8> {
    let mut tcp = tokio::net::TcpStream::connect(gateway).await.unwrap();
    tcp.write_all(frame).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .expect("answer stream")
        .unwrap();
    out
}
