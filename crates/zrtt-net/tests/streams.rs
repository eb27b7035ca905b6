//! Slow readers through the gateway's TLS path (attack review,
//! 2026-11-26): an HTTP/2 client that withholds flow-control credit while
//! keeping its connection busy holds a backend request only for the stream
//! idle timeout, and never more requests at once than the stream cap; an
//! HTTP/1.1 client that stops reading is closed at that timeout; an
//! HTTP/1.1 request head that stops half-way gets 408 and a close. Checks
//! states, reset reasons and counters, polled within generous bounds.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_net::gateway::{Metrics, Timeouts};

/// What the backend saw: requests, connections it saw closed, and the
/// gateway's `requests_in_flight` read as each request arrived.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    closed: AtomicUsize,
    most_in_flight: AtomicI64,
}

/// A backend that answers every request with an endless body (1 GiB
/// declared) and counts its connections closed by the gateway.
async fn endless_backend(
    metrics: Arc<tokio::sync::OnceCell<Arc<Metrics>>>,
) -> (SocketAddr, Arc<Seen>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            let seen = seen2.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tcp.read(&mut byte).await.unwrap_or(0) == 0 {
                        return; // a health check or a pool probe
                    }
                    head.push(byte[0]);
                }
                if let Some(m) = metrics.get() {
                    let now = m.requests_in_flight.get();
                    seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
                }
                seen.requests.fetch_add(1, Ordering::SeqCst);
                let (mut r, mut w) = tcp.into_split();
                let chunk = vec![b'x'; 64 * 1024];
                let write = async {
                    w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
                        .await?;
                    loop {
                        w.write_all(&chunk).await?;
                    }
                    #[allow(unreachable_code)]
                    Ok::<_, std::io::Error>(())
                };
                let closed = async {
                    let mut b = [0u8; 1];
                    let _ = r.read(&mut b).await;
                };
                tokio::select! {
                    _ = write => {}
                    () = closed => {}
                }
                seen.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

/// A TLS connection with ALPN h2 to `addr`, and an HTTP/2 client on it
/// whose stream window is 16 bytes and which never releases capacity.
async fn stingy_h2_client(addr: SocketAddr) -> (h2::client::SendRequest<Bytes>, h2::PingPong) {
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(tls_roots())
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = pki_types::ServerName::try_from(HOST).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, mut conn) = h2::client::Builder::new()
        .initial_window_size(16)
        .handshake(tls)
        .await
        .unwrap();
    let ping = conn.ping_pong().unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    (send, ping)
}

/// One request whose body is never given credit beyond the first window:
/// how its stream ended (the reset's reason). A stream refused before the
/// client learned the cap is sent again, as clients do.
async fn stalled_stream(mut send: h2::client::SendRequest<Bytes>) -> Option<h2::Reason> {
    loop {
        send = send.ready().await.unwrap();
        let req = hyper::Request::get(format!("https://{HOST}/endless"))
            .body(())
            .unwrap();
        let (resp, _) = send.send_request(req, true).unwrap();
        let resp = match resp.await {
            Err(e) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => continue,
            r => r.unwrap(),
        };
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        // Taking data does not give credit back (no release_capacity).
        loop {
            match body.data().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return e.reason(),
                None => panic!("an endless body ended"),
            }
        }
    }
}

/// Poll `f` until it holds, for at most `bound`.
async fn eventually(bound: Duration, what: &str, f: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < bound, "not within {bound:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_withholding_credit_holds_backend_requests_briefly_and_within_the_cap() {
    let metrics = Arc::new(tokio::sync::OnceCell::new());
    let (backend, seen) = endless_backend(metrics.clone()).await;
    let mut timeouts = Timeouts::default();
    timeouts.backend_response = Duration::from_secs(5);
    timeouts.stream_idle = Duration::from_secs(1);
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        timeouts,
        max_streams: Some(2),
        ..Default::default()
    })
    .await;
    metrics.set(env.metrics.clone()).ok().unwrap();
    let (send, mut ping) = stingy_h2_client(env.addr).await;

    // Pings keep bytes moving both ways: the connection is never idle, so
    // only a per-stream bound can end the stalled streams.
    let pinging = Arc::new(AtomicBool::new(true));
    let pinging2 = pinging.clone();
    let pinger = tokio::spawn(async move {
        while pinging2.load(Ordering::SeqCst) {
            if ping.ping(h2::Ping::opaque()).await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    });

    let streams: Vec<_> = (0..3)
        .map(|_| tokio::spawn(stalled_stream(send.clone())))
        .collect();
    for s in streams {
        let reason = tokio::time::timeout(Duration::from_secs(60), s)
            .await
            .expect("a stalled stream was never cancelled")
            .unwrap();
        assert_eq!(reason, Some(h2::Reason::CANCEL));
    }
    eventually(
        Duration::from_secs(30),
        "backend connections closed",
        || seen.closed.load(Ordering::SeqCst) == 3,
    )
    .await;
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    // The third request reached the backend only once a stalled one had
    // been cancelled: never more than the cap at once.
    assert_eq!(seen.most_in_flight.load(Ordering::SeqCst), 2);
    assert_eq!(env.metric("responses_stalled"), 3);
    eventually(Duration::from_secs(10), "nothing in flight", || {
        env.metrics.requests_in_flight.get() == 0
    })
    .await;
    // The connection itself lived on (its pings were answered throughout).
    pinging.store(false, Ordering::SeqCst);
    assert!(pinger.await.unwrap(), "the connection was closed");
    drop(send);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_stops_gets_408_and_a_close() {
    let mut timeouts = Timeouts::default();
    timeouts.request_head = Duration::from_secs(1);
    let env = start_gateway(GatewayOpts {
        timeouts,
        ..Default::default()
    })
    .await;
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(tls_roots())
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(env.addr).await.unwrap();
        let name = pki_types::ServerName::try_from(HOST).unwrap();
        connector.connect(name, tcp).await.unwrap()
    };

    // Half a request line, then nothing: 408, then the end of the stream.
    let mut tls = connect().await;
    tls.write_all(b"GET /slow HT").await.unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut got)).await;
    read.expect("the connection was not closed").ok();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 408 "), "{got}");
    assert!(
        got.to_lowercase().contains("connection: close\r\n"),
        "{got}"
    );
    assert_eq!(env.metric("request_heads_timed_out"), 1);

    // The same over the zrtt channel (its first flight carries the half
    // request line).
    let target = zrtt_net::client::Target {
        host: HOST.into(),
        addr: env.addr,
    };
    let mut zrtt =
        zrtt_net::client::ZrttStream::new(Arc::new(client_config(env.records.clone())), target);
    let info = zrtt.info();
    zrtt.write_all(b"GET /slow HT").await.unwrap();
    zrtt.flush().await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), zrtt.read_to_end(&mut got)).await;
    read.expect("the zrtt connection was not closed").ok();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 408 "), "{got}");
    let mode = info.lock().unwrap().as_ref().unwrap().mode;
    assert_ne!(mode, zrtt_net::client::Mode::TlsFallback, "over zrtt");
    assert_eq!(env.metric("request_heads_timed_out"), 2);

    // A connection that sends nothing is closed without an answer.
    let mut quiet = connect().await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), quiet.read_to_end(&mut got)).await;
    read.expect("the connection was not closed").ok();
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert_eq!(env.metric("request_heads_timed_out"), 2);
    assert_eq!(env.metric("requests"), 0);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_stops_reading_but_keeps_sending_is_closed() {
    let metrics = Arc::new(tokio::sync::OnceCell::new());
    let (backend, seen) = endless_backend(metrics.clone()).await;
    let mut timeouts = Timeouts::default();
    timeouts.backend_response = Duration::from_secs(5);
    timeouts.stream_idle = Duration::from_secs(1);
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        timeouts,
        ..Default::default()
    })
    .await;
    metrics.set(env.metrics.clone()).ok().unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(tls_roots())
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(env.addr).await.unwrap();
    let name = pki_types::ServerName::try_from(HOST).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    let (_unread, mut w) = tokio::io::split(tls);
    w.write_all(format!("GET /endless HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    w.flush().await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the request reached the backend",
        || seen.requests.load(Ordering::SeqCst) == 1,
    )
    .await;
    // The answer is never read; a pipelined request trickles in a byte at
    // a time. hyper reads none of it while the answer is blocked (so the
    // connection's idle timer would end it too, after the shutdown
    // grace); the response's own watch closes it at the idle timeout.
    let next = format!(
        "GET /next HTTP/1.1\r\nHost: {HOST}\r\nX-Pad: {}\r\n",
        "p".repeat(2000)
    );
    let trickle = async {
        for b in next.as_bytes() {
            if w.write_all(&[*b]).await.is_err() || w.flush().await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    let closed = tokio::time::timeout(Duration::from_secs(90), trickle).await;
    assert!(closed.unwrap_or(false), "the connection was kept open");
    eventually(
        Duration::from_secs(30),
        "the backend connection closed",
        || seen.closed.load(Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(env.metric("responses_stalled"), 1);

    // The zrtt channel carries HTTP/1.1 too: a client that never reads
    // its answer is closed the same way.
    let target = zrtt_net::client::Target {
        host: HOST.into(),
        addr: env.addr,
    };
    let mut zrtt =
        zrtt_net::client::ZrttStream::new(Arc::new(client_config(env.records.clone())), target);
    let info = zrtt.info();
    zrtt.write_all(format!("GET /endless HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    zrtt.flush().await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the zrtt request was cancelled",
        || seen.requests.load(Ordering::SeqCst) == 2 && seen.closed.load(Ordering::SeqCst) == 2,
    )
    .await;
    assert_eq!(env.metric("responses_stalled"), 2);
    let mode = info.lock().unwrap().as_ref().unwrap().mode;
    assert_ne!(mode, zrtt_net::client::Mode::TlsFallback, "over zrtt");
    drop(zrtt);
    env.stop().await;
}
