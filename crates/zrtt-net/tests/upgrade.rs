//! Upgraded connections through the gateway (issue 13 item 4), on loopback:
//! a WebSocket-style `Upgrade` request over the zrtt channel and over the
//! TLS path reaches a backend that switches protocols, and bytes then flow
//! both ways through the gateway. The upgrade request is never forwarded
//! as early data (a replayed flight must not open a stream). Checks bytes,
//! modes and counters. (Debian's python3-websockets runs against the
//! binary in crates/zrtt/tests/edge_clients.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_net::client::{Mode, Target, ZrttStream};

/// A backend that answers every request with `101` and then echoes bytes;
/// the request heads it saw, lowercased.
async fn upgrade_backend() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            let seen = seen2.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tcp.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_lowercase());
                tcp.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                )
                .await
                .unwrap();
                let (mut r, mut w) = tcp.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, seen)
}

const UPGRADE: &str = "GET /chat HTTP/1.1\r\nHost: www.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Send the upgrade request, read the `101` head, then echo a message.
async fn upgrade_and_echo<S>(s: &mut S) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "closed in the head");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    for msg in [&b"hello"[..], b" over the stream"] {
        s.write_all(msg).await.unwrap();
        s.flush().await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, msg);
    }
    head
}

#[tokio::test]
async fn upgrades_are_relayed_on_the_zrtt_and_tls_paths_never_early() {
    let (backend, seen) = upgrade_backend().await;
    let env = start_gateway(GatewayOpts {
        backend: Some(backend),
        ..Default::default()
    })
    .await;
    let target = Target {
        host: HOST.into(),
        addr: env.addr,
    };

    // TLS (no key record: the client falls back on the same port).
    let mut tls = ZrttStream::new(Arc::new(client_config(Vec::new())), target.clone());
    let tls_info = tls.info();
    let head = tokio::time::timeout(Duration::from_secs(20), upgrade_and_echo(&mut tls))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        tls_info.lock().unwrap().as_ref().unwrap().mode,
        Mode::TlsFallback
    );

    // zrtt: the request rides in the first flight, but is held until the
    // client confirms the handshake, and reaches the backend unmarked.
    let mut zrtt = ZrttStream::new(Arc::new(client_config(env.records.clone())), target);
    let info = zrtt.info();
    let head = tokio::time::timeout(Duration::from_secs(20), upgrade_and_echo(&mut zrtt))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.to_lowercase().contains("upgrade: websocket"), "{head}");
    let mode = info.lock().unwrap().as_ref().unwrap().mode;
    assert_ne!(mode, Mode::TlsFallback, "over zrtt");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for h in &seen {
        assert!(h.contains("upgrade: websocket\r\n"), "{h}");
        assert!(h.contains("connection: upgrade\r\n"), "{h}");
        assert!(!h.contains("early-data"), "an upgrade is never early: {h}");
        assert!(h.contains("x-forwarded-for: 127.0.0.1\r\n"), "{h}");
    }
    assert_eq!(env.metric("upgrades"), 2);
    drop(zrtt);
    drop(tls);
    env.stop().await;
}
