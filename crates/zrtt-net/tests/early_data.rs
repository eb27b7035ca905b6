//! Early data under attack (docs/PROTOCOL.md §7, RFC 8470), with a raw
//! client that decides whether and when to confirm the handshake:
//! - an early request whose body never comes, and a client that leaves,
//!   do not wedge the connection;
//! - pipelined or unsafe requests in a first flight run only after the
//!   client's confirmation, and never marked as early data;
//! - a flight replayed to a second gateway whose backend answers 425 gets
//!   the 425 back: only the real client's confirmation makes a retry;
//! - one source address cannot hold more than its share of connections;
//! - with `max_early_requests` 0 even a safe early GET waits for the
//!   confirmation (then runs, still marked).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::client::system_clock;
use zrtt_net::gateway::Timeouts;
use zrtt_proto::handshake::{
    read_frame, Channel, ClientHandshake, ClientParams, Expect, Frame, RecordKind,
};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};

/// Longest a test waits for the gateway to act; a wedged connection takes
/// the gateway's 600 s connection limit, so any pass is far below it.
const PATIENCE: Duration = Duration::from_secs(15);

fn trusted_loopback() -> Vec<zrtt_proto::admission::IpNet> {
    vec!["127.0.0.0/8".parse().unwrap()]
}

/// A zrtt client at the byte level.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
    channel: Option<Channel>,
}

impl Raw {
    /// Connect and send a first flight carrying `early`.
    async fn send(addr: SocketAddr, rec: &KeyRecord, early: &[u8]) -> (Self, ClientHandshake) {
        let (hs, flight) = Self::flight(rec, early);
        (Self::send_flight(addr, &flight).await, hs)
    }

    fn flight(rec: &KeyRecord, early: &[u8]) -> (ClientHandshake, Vec<u8>) {
        let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
        ClientHandshake::start(
            &v,
            &ClientParams::default(),
            early,
            system_clock(),
            &ring::rand::SystemRandom::new(),
        )
        .unwrap()
    }

    async fn send_flight(addr: SocketAddr, flight: &[u8]) -> Self {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(flight).await.unwrap();
        Self {
            tcp,
            buf: Vec::new(),
            channel: None,
        }
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout(PATIENCE, self.tcp.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(_) => panic!("the gateway neither answered nor closed within {PATIENCE:?}"),
        }
    }

    /// Read the Reply (with `hs`, when given) or a Reject; false if the
    /// gateway closed first.
    async fn reply(&mut self, hs: Option<ClientHandshake>) -> bool {
        loop {
            if let Ok(Some((frame, used))) = read_frame(&self.buf, Expect::ReplyOrReject) {
                let ok = matches!(frame, Frame::Reply { .. });
                if let (true, Some(hs)) = (ok, hs) {
                    let r = hs.handle_reply(&frame).unwrap();
                    assert!(r.data.is_empty(), "no response data before confirmation");
                    self.channel = Some(r.channel);
                }
                self.buf.drain(..used);
                return ok;
            }
            if !self.fill().await {
                return false;
            }
        }
    }

    async fn confirm(&mut self) {
        let mut out = Vec::new();
        self.channel
            .as_mut()
            .unwrap()
            .seal(RecordKind::Confirm, &[], &mut out)
            .unwrap();
        self.tcp.write_all(&out).await.unwrap();
    }

    /// Decrypted bytes until the gateway closes (Close record or end of stream).
    async fn read_to_close(&mut self) -> Vec<u8> {
        let mut plain = Vec::new();
        loop {
            while let Ok(Some((Frame::Transport(ct), used))) =
                read_frame(&self.buf, Expect::Transport)
            {
                let rec = self.channel.as_mut().unwrap().open(ct).unwrap();
                self.buf.drain(..used);
                match rec.kind {
                    RecordKind::Data => plain.extend_from_slice(&rec.body),
                    RecordKind::Close => return plain,
                    _ => {}
                }
            }
            if !self.fill().await {
                return plain;
            }
        }
    }

    /// Wait until the gateway closes the connection, ignoring what it sends.
    async fn until_closed(&mut self) {
        while self.fill().await {}
    }
}

fn count(haystack: &[u8], needle: &str) -> usize {
    String::from_utf8_lossy(haystack).matches(needle).count()
}

fn short_confirmation() -> Timeouts {
    let mut t = Timeouts::default();
    t.first_flight = Duration::from_millis(500);
    t
}

#[tokio::test]
async fn early_request_whose_body_never_comes_does_not_wedge() {
    for trusted in [trusted_loopback(), Vec::new()] {
        let proven = !trusted.is_empty();
        let env = start_gateway(GatewayOpts {
            trusted,
            timeouts: short_confirmation(),
            ..Default::default()
        })
        .await;
        let early =
            b"POST /upload HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: 100\r\n\r\n";
        // The client leaves right after its flight was answered.
        let (mut c, _hs) = Raw::send(env.addr, &env.records[0], early).await;
        assert!(
            c.reply(None).await,
            "proven {proven}: a Reply, without data"
        );
        c.tcp.shutdown().await.unwrap();
        c.until_closed().await;
        // The client stays but never confirms nor sends the body.
        let (mut c, _hs) = Raw::send(env.addr, &env.records[0], early).await;
        assert!(c.reply(None).await);
        c.until_closed().await;
        assert!(
            env.seen.lock().unwrap().is_empty(),
            "nothing unconfirmed reached the backend"
        );
        assert_eq!(env.metric("early_data_held"), 2);
        env.stop().await;
    }
}

#[tokio::test]
async fn client_leaving_during_an_early_request_is_noticed() {
    let mut timeouts = Timeouts::default();
    timeouts.backend_response = Duration::from_secs(600);
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        timeouts,
        ..Default::default()
    })
    .await;
    let (mut c, _hs) = Raw::send(
        env.addr,
        &env.records[0],
        b"GET /hang HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
    )
    .await;
    c.tcp.shutdown().await.unwrap();
    // The backend never answers; the gateway notices the end of stream
    // and closes (no Reply needed: nothing was written yet).
    c.until_closed().await;
    env.stop().await;
}

#[tokio::test]
async fn pipelined_and_unsafe_early_requests_wait_for_the_confirmation() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        timeouts: short_confirmation(),
        ..Default::default()
    })
    .await;
    let mut early = Vec::new();
    for i in 0..50 {
        early.extend_from_slice(
            format!("GET /g{i} HTTP/1.1\r\nHost: www.example.com\r\n\r\n").as_bytes(),
        );
    }
    early.extend_from_slice(
        b"POST /p HTTP/1.1\r\nHost: www.example.com\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    // A replayer (it cannot confirm): nothing runs.
    let (mut c, _hs) = Raw::send(env.addr, &env.records[0], &early).await;
    assert!(c.reply(None).await);
    c.until_closed().await;
    assert!(env.seen.lock().unwrap().is_empty());
    // The real client confirms: all 51 run, none marked as early data.
    let (mut c, hs) = Raw::send(env.addr, &env.records[0], &early).await;
    assert!(c.reply(Some(hs)).await);
    c.confirm().await;
    let answers = c.read_to_close().await;
    assert_eq!(
        count(&answers, "HTTP/1.1 200"),
        51,
        "{}",
        String::from_utf8_lossy(&answers)
    );
    let seen = env.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 51);
    assert!(seen.iter().all(|s| s.ends_with("early=-")), "{seen:?}");
    assert_eq!(seen.last().unwrap(), "POST /p early=-");
    env.stop().await;
}

#[tokio::test]
async fn a_425_is_retried_only_for_the_client_that_confirms() {
    // Two gateways of one site: the same key, a filter each.
    let (backend, seen) = start_backend().await;
    let keys = vec![record("zrtt shared key", 16384)];
    let gw = |keys: Vec<_>| {
        start_gateway(GatewayOpts {
            keys,
            backend: Some(backend),
            trusted: trusted_loopback(),
            timeouts: short_confirmation(),
            ..Default::default()
        })
    };
    let (a, b) = (gw(keys.clone()).await, gw(keys).await);
    let early = b"GET /425 HTTP/1.1\r\nHost: www.example.com\r\n\r\n";
    let (hs, flight) = Raw::flight(&a.records[0], early);
    // The client's own connection to A: 425, confirmation, retry, 200.
    let mut c = Raw::send_flight(a.addr, &flight).await;
    assert!(c.reply(Some(hs)).await);
    c.confirm().await;
    let answer = c.read_to_close_or_first_response().await;
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // The same flight replayed to B: the backend says 425, nobody confirms,
    // the 425 goes back to the replayer.
    let mut r = Raw::send_flight(b.addr, &flight).await;
    assert!(
        r.reply(None).await,
        "B accepts the flight once (its own filter)"
    );
    // It cannot read the 425 (no keys); the gateway counts it.
    for waited in 0.. {
        if b.metric("backend_425_unconfirmed") == 1 {
            break;
        }
        assert!(waited < 1500, "B neither retried nor gave up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(r);
    assert_eq!(b.metric("backend_425_retries"), 0);
    assert_eq!(a.metric("backend_425_retries"), 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            "GET /425 early=1".to_owned(),
            "GET /425 early=-".to_owned(),
            "GET /425 early=1".to_owned()
        ],
        "executed without the early mark exactly once"
    );
    a.stop().await;
    b.stop().await;
}

impl Raw {
    /// Decrypted bytes until the first complete response head and body
    /// (`Content-Length`), for keep-alive connections.
    async fn read_to_close_or_first_response(&mut self) -> Vec<u8> {
        let mut plain = Vec::new();
        loop {
            while let Ok(Some((Frame::Transport(ct), used))) =
                read_frame(&self.buf, Expect::Transport)
            {
                let rec = self.channel.as_mut().unwrap().open(ct).unwrap();
                self.buf.drain(..used);
                if rec.kind == RecordKind::Data {
                    plain.extend_from_slice(&rec.body);
                }
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = resp.parse(&plain) {
                let len = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                if plain.len() >= n + len {
                    return plain;
                }
            }
            if !self.fill().await {
                return plain;
            }
        }
    }
}

#[tokio::test]
async fn one_address_cannot_hold_more_than_its_share_of_connections() {
    let mut limits = zrtt_proto::admission::AdmissionLimits::default();
    limits.max_connections_per_address = 2;
    let env = start_gateway(GatewayOpts {
        limits,
        ..Default::default()
    })
    .await;
    let first = TcpStream::connect(env.addr).await.unwrap();
    let second = TcpStream::connect(env.addr).await.unwrap();
    let mut third = TcpStream::connect(env.addr).await.unwrap();
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(PATIENCE, third.read(&mut b))
        .await
        .expect("the third connection is closed at once");
    assert!(matches!(n, Ok(0) | Err(_)));
    assert_eq!(env.metric("source_limited"), 1);
    drop((first, second));
    // The places are given back when those connections end (a moment later).
    for attempt in 0.. {
        let limited = env.metric("source_limited");
        let c = TcpStream::connect(env.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        if env.metric("source_limited") == limited {
            drop(c);
            break;
        }
        assert!(attempt < 100, "places never given back");
    }
    env.stop().await;
}

#[tokio::test]
async fn a_confirmation_arriving_after_the_answer_does_not_reset_the_connection() {
    // The gateway answers early and closes before the client's confirmation
    // (sent one round trip after the Reply) arrives. Closing with that data
    // unread would make the kernel reset the connection, and on a lossy
    // path the reset can overtake the answer's last segments: the client
    // sees "connection reset" for a request that ran. The gateway keeps
    // reading after its close (lingering close) instead.
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        ..Default::default()
    })
    .await;
    let (mut c, hs) = Raw::send(
        env.addr,
        &env.records[0],
        b"GET /a HTTP/1.1\r\nHost: www.example.com\r\nConnection: close\r\n\r\n",
    )
    .await;
    // The Reply carries the answer's first bytes (a proven address).
    let mut answer = loop {
        if let Ok(Some((frame, used))) = read_frame(&c.buf, Expect::ReplyOrReject) {
            let r = hs.handle_reply(&frame).unwrap();
            c.channel = Some(r.channel);
            c.buf.drain(..used);
            break r.data;
        }
        assert!(c.fill().await, "closed before the Reply");
    };
    answer.extend(c.read_to_close().await);
    assert_eq!(count(&answer, "HTTP/1.1 200"), 1);
    c.until_closed().await;
    // Late confirmation, then the end of our side. A lingering gateway
    // reads both and the connection ends cleanly; a gateway that closed
    // with the confirmation unread (or arriving after its close) resets it.
    c.confirm().await;
    c.tcp.shutdown().await.unwrap();
    let closed = async {
        use std::os::fd::AsFd;
        while zrtt_net::sys::tcp_info(c.tcp.as_fd()).unwrap().state != zrtt_net::sys::state::CLOSE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, closed)
        .await
        .expect("the connection neither closed nor was reset");
    let error = socket2::SockRef::from(&c.tcp).take_error().unwrap();
    assert!(
        error.is_none(),
        "the late confirmation was answered with a reset: {error:?}"
    );
    env.stop().await;
}

#[tokio::test]
async fn with_max_early_requests_0_an_early_get_waits_for_the_confirmation() {
    let env = start_gateway(GatewayOpts {
        trusted: trusted_loopback(),
        max_early_requests: Some(0),
        ..Default::default()
    })
    .await;
    let cfg = std::sync::Arc::new(client_config(env.records.clone()));
    let (out, info) = fetch(cfg, env.addr, vec![get("/x")]).await.unwrap();
    assert_eq!(out[0].0, 200);
    assert!(info.early_data, "the GET was early data");
    // Held until the client's confirmation, then run, still marked.
    assert_eq!(env.metric("early_requests_held"), 1);
    assert_eq!(env.metric("early_requests_too_early"), 0);
    assert_eq!(*env.seen.lock().unwrap(), vec!["GET /x early=1".to_owned()]);
    env.stop().await;
}

/// A failure after the Reply to early data (here: garbage after it, so the
/// channel cannot read on) is the caller's error: the server has the
/// request, so it never goes again over TLS (docs/PROTOCOL.md §4.3). The
/// fake server counts connections: a TLS fallback would be the second.
#[tokio::test]
async fn a_failure_after_the_reply_to_early_data_does_not_send_the_request_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use zrtt_proto::handshake::{Extensions, Transport};
    use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
    let keys = vec![record("zrtt test key 1", 16384)];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let early_seen = Arc::new(AtomicUsize::new(0));
    let (counted, seen) = (connections.clone(), early_seen.clone());
    let server = server_keys(&keys);
    tokio::spawn(async move {
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
                    break server.accept(&f, Transport::Tcp, system_clock(), &mut filter, &rng);
                }
                let mut chunk = [0u8; 4096];
                let n = tcp.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed before the flight");
                buf.extend_from_slice(&chunk[..n]);
            };
            let accepted = accepted.expect("flight accepted");
            if !accepted.early_data.is_empty() {
                seen.fetch_add(1, Ordering::AcqRel);
            }
            let (_, mut reply) = accepted.reply(&Extensions::new(), b"").unwrap();
            // A whole transport record that does not open (not sealed
            // with the channel's key).
            reply.extend_from_slice(&[0x00, 0x20]);
            reply.extend_from_slice(&[0xAB; 32]);
            tcp.write_all(&reply).await.unwrap();
            // Hold the connection without blocking the next accept.
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                while tcp.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
            });
        }
    });
    let cfg = client_config(keys.into_iter().map(|(r, _)| r).collect());
    let target = zrtt_net::client::Target {
        host: HOST.to_owned(),
        addr,
    };
    let request = format!("GET /once HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    let r = tokio::time::timeout(
        PATIENCE,
        zrtt_net::client::establish(&cfg, &target, request.as_bytes()),
    )
    .await
    .expect("establish returns");
    assert!(r.is_err(), "garbage after the Reply was accepted");
    assert_eq!(
        early_seen.load(Ordering::Acquire),
        1,
        "the GET rode the flight"
    );
    assert_eq!(
        connections.load(Ordering::Acquire),
        1,
        "the request was sent again over TLS"
    );
}
