//! `zrtt proxy` end to end with the real binary: keys, `zrtt gateway` in
//! front of a tiny backend, `zrtt proxy`, and absolute-form requests as curl
//! sends them with `-x`.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{addr} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One request with `Connection: close`; the whole answer.
fn http(addr: &str, head: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn spawn(dir: &Path, args: &[&str]) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(args)
            .current_dir(dir)
            // Token state of this test only (the clients keep it by default).
            .env("XDG_STATE_HOME", dir.join(".state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn proxy_sends_zrtt_hosts_over_zrtt_and_passes_others_through() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let plain = backend();
    let (gw_port, admin_port, proxy_port) = (free_port(), free_port(), free_port());
    let gw = format!("127.0.0.1:{gw_port}");
    let admin = format!("127.0.0.1:{admin_port}");
    let proxy = format!("127.0.0.1:{proxy_port}");
    let _gw = spawn(
        dir,
        &[
            "gateway",
            "--listen",
            &gw,
            "--backend",
            &plain.to_string(),
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--admin",
            &admin,
        ],
    );
    let _proxy = spawn(
        dir,
        &[
            "proxy",
            "--listen",
            &proxy,
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--zrtt-port",
            &format!("{HOST}={gw_port}"),
            "--resolve",
            &format!("{HOST}:{gw_port}:127.0.0.1"),
            "--resolve",
            &format!("plain.test:{}:127.0.0.1", plain.port()),
        ],
    );
    wait_listening(&gw);
    wait_listening(&admin);
    wait_listening(&proxy);
    // The gateway's replay filter refuses flights stamped within its first
    // seconds (a restart must not reopen old flights).
    std::thread::sleep(Duration::from_secs(3));

    let resp = http(
        &proxy,
        &format!("GET http://{HOST}/ HTTP/1.1\r\nHost: {HOST}\r\nProxy-Connection: close\r\nConnection: close\r\n\r\n"),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("\r\n\r\nok"), "{resp}");
    let metrics = http(&admin, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        metrics.contains("zrtt_gateway_zrtt_accepted_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("zrtt_gateway_tls_connections_total 0\n"),
        "{metrics}"
    );

    let resp = http(
        &proxy,
        &format!(
            "GET http://plain.test:{p}/x HTTP/1.1\r\nHost: plain.test:{p}\r\nConnection: close\r\n\r\n",
            p = plain.port()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("\r\n\r\nok"), "{resp}");
    let metrics = http(&admin, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        metrics.contains("zrtt_gateway_requests_total 1\n"),
        "{metrics}"
    );

    let resp = http(
        &proxy,
        &format!(
            "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            free_port()
        ),
    );
    assert!(resp.starts_with("HTTP/1.1 502"), "{resp}");
    assert!(
        resp.contains("zrtt proxy: 127.0.0.1 via plain HTTP"),
        "{resp}"
    );
}

#[test]
fn proxy_carries_provenance_certificates_it_refreshes_in_the_background() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let keygen = ok(dir, &["verifier", "keygen", "--out", "pv.key"]);
    let pv_hex = keygen
        .lines()
        .find_map(|l| l.strip_prefix("public key:"))
        .unwrap()
        .trim()
        .to_owned();
    let plain = backend();
    let (gw_port, admin_port, proxy_port, pv_port) =
        (free_port(), free_port(), free_port(), free_port());
    let (gw, admin, proxy, pv) = (
        format!("127.0.0.1:{gw_port}"),
        format!("127.0.0.1:{admin_port}"),
        format!("127.0.0.1:{proxy_port}"),
        format!("127.0.0.1:{pv_port}"),
    );
    let _pv = spawn(
        dir,
        &["verifier", "serve", "--listen", &pv, "--key", "pv.key"],
    );
    let _gw = spawn(
        dir,
        &[
            "gateway",
            "--listen",
            &gw,
            "--backend",
            &plain.to_string(),
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--admin",
            &admin,
            "--verifier",
            &pv_hex,
            "--quorum",
            "1",
        ],
    );
    wait_listening(&pv);
    let _proxy = spawn(
        dir,
        &[
            "proxy",
            "--listen",
            &proxy,
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--zrtt-port",
            &format!("{HOST}={gw_port}"),
            "--resolve",
            &format!("{HOST}:{gw_port}:127.0.0.1"),
            "--verifier",
            &pv,
            "--provenance-state",
            "pv.state",
        ],
    );
    wait_listening(&gw);
    wait_listening(&admin);
    wait_listening(&proxy);
    // The proxy fetches certificates at start; the gateway's replay filter
    // refuses flights from its first seconds anyway.
    std::thread::sleep(Duration::from_secs(3));
    let state = std::fs::read_to_string(dir.join("pv.state")).unwrap();
    assert!(
        state.lines().any(|l| l.starts_with("127.0.0.1 ")),
        "{state}"
    );
    let resp = http(
        &proxy,
        &format!("GET http://{HOST}/ HTTP/1.1\r\nHost: {HOST}\r\nProxy-Connection: close\r\nConnection: close\r\n\r\n"),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let metrics = http(&admin, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        metrics.contains("zrtt_gateway_provenance_accepted_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("zrtt_gateway_zrtt_answered_early_total 1\n"),
        "{metrics}"
    );
}
