//! The DNS shortcut's TCP form before the TCP handshake completes, in
//! network namespaces (zrtt-lab, 50 ms RTT), the client's ACKs dropped so
//! the handshake never completes: a shortcut flight (pattern 0x04) in the
//! SYN gets nothing back and reaches no backend, even from an address the
//! gateway trusts (no token or proof rides a shortcut flight, docs/DNS.md
//! §8.5, PROTOCOL.md §13.4); an ordinary first flight from that trusted
//! address is answered early on the same path (the control: the set-up
//! lets early answers through).
//!
//! Needs root (prints "skipped: needs root" otherwise) and `nft`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio::io::AsyncReadExt;
use zrtt_lab::{Lab, Topology};
use zrtt_net::gateway::Timeouts;
use zrtt_net::tfo;
use zrtt_proto::handshake::{ClientHandshake, ClientParams};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::shortcut::Method;

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

/// Send `flight` in the SYN and count the bytes that come back within 1.5 s.
fn send_and_count(lab: &Lab, to: SocketAddr, flight: Vec<u8>) -> usize {
    lab.in_host("client", move || {
        rt().block_on(async move {
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
            total
        })
    })
    .unwrap()
}

/// An ordinary NK first flight carrying `GET /control`.
fn plain_flight(rec: &KeyRecord) -> Vec<u8> {
    let now = zrtt_net::client::system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let req = format!("GET /control HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    ClientHandshake::start(
        &verified,
        &ClientParams::default(),
        req.as_bytes(),
        now,
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
    .1
}

#[test]
fn lab_a_shortcut_flight_in_the_syn_gets_nothing_before_the_handshake() {
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
    type Info = (SocketAddr, KeyRecord, Arc<Mutex<Vec<String>>>);
    let (info_tx, info_rx) = std::sync::mpsc::channel::<Vec<Info>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = lab
        .spawn_in_host("server", move || {
            rt().block_on(async move {
                let mut t = Timeouts::default();
                t.gate = Duration::from_secs(1);
                let opts = |trusted: Vec<_>| GatewayOpts {
                    trusted,
                    addr: (server_ip, 0).into(),
                    timeouts: t,
                    ..Default::default()
                };
                // Trusted (an ordinary flight would be answered early), and not.
                let trusted = || vec![format!("{client_ip}/32").parse().unwrap()];
                let mut envs = Vec::new();
                for trusted in [trusted(), trusted(), Vec::new()] {
                    envs.push(start_gateway(opts(trusted)).await);
                }
                let info = envs
                    .iter()
                    .map(|e| (e.addr, e.records[0].clone(), e.seen.clone()))
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
        format!("add rule inet zrtt_sc out ip daddr {server_ip} tcp flags & syn != syn drop");
    if !(nft(&lab, "client", "add table inet zrtt_sc")
        && nft(
            &lab,
            "client",
            "add chain inet zrtt_sc out { type filter hook output priority 0 ; }",
        )
        && nft(&lab, "client", &rule))
    {
        eprintln!("skipped: nft unavailable (scripts/install-deps.sh)");
        let _ = stop_tx.send(());
        server.join();
        lab.down().unwrap();
        return;
    }
    // The control: an ordinary flight from the trusted address is answered
    // before the handshake on this very path.
    let (addr, rec, seen) = &gws[0];
    let got = send_and_count(&lab, *addr, plain_flight(rec));
    eprintln!("trusted, ordinary flight, handshake incomplete: {got} bytes");
    assert!(got > 0, "the control flight is answered early");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the control reached the backend"
    );
    // A shortcut flight's TCP form: nothing, from the trusted address and
    // from an unproven one, and no backend request.
    for (which, (addr, rec, seen)) in ["trusted", "unproven"].into_iter().zip(&gws[1..]) {
        let (_, flight) = shortcut::flight(rec, Method::Get, "/sc");
        let got = send_and_count(&lab, *addr, flight);
        eprintln!("{which}, shortcut flight, handshake incomplete: {got} bytes");
        assert_eq!(
            got, 0,
            "{which}: a shortcut flight gets nothing before its ACK"
        );
        assert!(
            seen.lock().unwrap().is_empty(),
            "{which}: no backend request"
        );
    }
    let _ = stop_tx.send(());
    server.join();
    lab.down().unwrap();
}
