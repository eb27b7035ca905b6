//! HTTP/2 in the zrtt channel before the TCP handshake completes, in
//! network namespaces (zrtt-lab, 50 ms RTT), the client's ACKs dropped so
//! the handshake never completes: a proven client (trusted network, the
//! strict 3x bound) whose first flight asks for a 100 KB answer over h2
//! receives some of it, and at most three times the bytes it sent:
//! everything the gateway's h2 server writes (SETTINGS, its ACK,
//! WINDOW_UPDATE, HEADERS, DATA) counts. An unproven one receives nothing.
//!
//! Needs root (prints "skipped: needs root" otherwise) and `nft`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::AsyncReadExt;
use zrtt_lab::{Lab, Topology};
use zrtt_net::gateway::Timeouts;
use zrtt_net::tfo;
use zrtt_proto::handshake::{ext, ClientHandshake, ClientParams};
use zrtt_proto::http2::{flag, kind, FrameHeader, PREFACE};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn nft(lab: &Lab, host: &str, args: &str) -> bool {
    let mut cmd = lab.command(host, "nft").unwrap();
    cmd.args(args.split_whitespace());
    cmd.status().is_ok_and(|s| s.success())
}

/// Preface, SETTINGS and `GET path` (HEADERS with END_STREAM|END_HEADERS).
fn h2_get(path: &str) -> Vec<u8> {
    let frame = |k: u8, flags: u8, stream: u32, payload: &[u8]| {
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
    };
    let mut block = vec![0x82, 0x87, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, HOST.len() as u8]);
    block.extend_from_slice(HOST.as_bytes());
    let mut v = PREFACE.to_vec();
    v.extend(frame(kind::SETTINGS, 0, 0, &[]));
    v.extend(frame(
        kind::HEADERS,
        flag::END_STREAM | flag::END_HEADERS,
        1,
        &block,
    ));
    v
}

/// Send an h2 first flight for `path` in the SYN and count the bytes that
/// come back within 1.5 s; (received, flight size).
fn flight_and_count(lab: &Lab, rec: &KeyRecord, to: SocketAddr, path: &str) -> (usize, usize) {
    let rec = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    let early = h2_get(path);
    lab.in_host("client", move || {
        rt().block_on(async move {
            let mut params = ClientParams::default();
            params.extensions.set(ext::ALPN, b"h2".to_vec());
            let (_, flight) = ClientHandshake::start(
                &rec,
                &params,
                &early,
                zrtt_net::client::system_clock(),
                &ring::rand::SystemRandom::new(),
            )
            .unwrap();
            let (mut tcp, _) = tfo::connect_with_data(to, &flight, true, Duration::from_secs(5))
                .await
                .unwrap();
            let mut total = 0usize;
            let mut buf = vec![0u8; 65536];
            let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
            while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
                if n == 0 {
                    break;
                }
                total += n;
            }
            (total, flight.len())
        })
    })
    .unwrap()
}

#[test]
fn lab_h2_before_the_handshake_stays_within_the_budget() {
    if !zrtt_lab::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let lab = Lab::up(Topology::new().host("client").host("server").rtt(
        "client",
        "server",
        Duration::from_millis(50),
    ))
    .unwrap();
    let server_ip = lab.addr("server").unwrap();
    let client_ip = lab.addr("client").unwrap();
    let (info_tx, info_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = lab
        .spawn_in_host("server", move || {
            rt().block_on(async move {
                let mut t = Timeouts::default();
                t.gate = Duration::from_secs(1);
                let opts = |trusted: Vec<_>| GatewayOpts {
                    keys: vec![record_h2("zrtt h2 lab key", 16384)],
                    trusted,
                    addr: (server_ip, 0).into(),
                    timeouts: t,
                    ..Default::default()
                };
                // Proven by its network, with the strict 3x bound (one per
                // answer: an early answer whose handshake fails puts the
                // address in a cool-down at that gateway); and not.
                let trusted = || vec![format!("{client_ip}/32").parse().unwrap()];
                let mut envs = Vec::new();
                for trusted in [trusted(), trusted(), Vec::new()] {
                    envs.push(start_gateway(opts(trusted)).await);
                }
                let info: Vec<_> = envs
                    .iter()
                    .map(|e| (e.addr, e.records[0].clone(), e.metrics.clone()))
                    .collect();
                info_tx.send(info).unwrap();
                let _ = stop_rx.await;
                for e in envs {
                    e.stop().await;
                }
            })
        })
        .unwrap();
    let gws = info_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let rule =
        format!("add rule inet zrtt_h2 out ip daddr {server_ip} tcp flags & syn != syn drop");
    if !(nft(&lab, "client", "add table inet zrtt_h2")
        && nft(
            &lab,
            "client",
            "add chain inet zrtt_h2 out { type filter hook output priority 0 ; }",
        )
        && nft(&lab, "client", &rule))
    {
        eprintln!("skipped: nft unavailable (scripts/install-deps.sh)");
        let _ = stop_tx.send(());
        server.join();
        lab.down().unwrap();
        return;
    }
    for (path, (addr, rec, metrics)) in ["/big", "/big-trickle"].into_iter().zip(&gws) {
        let (got, sent) = flight_and_count(&lab, rec, *addr, path);
        eprintln!("proven, h2, handshake incomplete, {path}: {got} bytes for a {sent}-byte flight");
        assert!(got > 0, "a proven client is answered before the handshake");
        assert!(got <= 3 * sent, "{got} bytes exceed 3 x {sent}");
        let held = metrics
            .snapshot()
            .into_iter()
            .find(|(n, _)| *n == "amplification_holds")
            .unwrap()
            .1;
        assert!(held >= 1, "the budget held the answer back");
    }
    let (addr, rec, _) = &gws[2];
    let (got, sent) = flight_and_count(&lab, rec, *addr, "/big");
    eprintln!("unproven, h2, handshake incomplete: {got} bytes for a {sent}-byte flight");
    assert_eq!(got, 0, "an unproven client gets nothing before its ACK");
    let _ = stop_tx.send(());
    server.join();
    lab.down().unwrap();
}
