//! `zrtt proxy` end to end with the real binary: keys, `zrtt gateway` in
//! front of a tiny backend, `zrtt proxy`, and absolute-form requests as curl
//! sends them with `-x`.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const HOST: &str = "www.example.com";

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

/// A WebSocket echo server (the origin behind the gateway) and a client
/// that talks to a plain `ws://` address (the sidecar port), with Debian's
/// python3-websockets.
const WS_SIDECAR_PY: &str = r#"
import asyncio, sys
import websockets

async def echo(ws, path=None):
    async for m in ws:
        await ws.send(m)

async def serve():
    async with websockets.serve(echo, "127.0.0.1", 0) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()

async def client(addr):
    async with websockets.connect("ws://%s/chat" % addr) as ws:
        for msg in ["hello", "y" * 50000, b"\x02\x03"]:
            await ws.send(msg)
            back = await asyncio.wait_for(ws.recv(), 10)
            assert back == msg, (len(back), len(msg))
    print("echoed 3", flush=True)

if sys.argv[1] == "serve":
    asyncio.run(serve())
else:
    asyncio.run(asyncio.wait_for(client(sys.argv[2]), 20))
"#;

/// Sidecar mode (`--map LOCAL=https://host:port`): an application that
/// speaks plain HTTP and WebSocket to a local port reaches the origin over
/// zrtt: a request and a WebSocket echo through the gateway's zrtt path.
#[test]
fn sidecar_port_carries_requests_and_websockets_over_zrtt() {
    sidecar_requests_and_websockets(false);
}

/// The same with `--http2` and a record that offers HTTP/2: requests ride
/// an h2 zrtt connection, the WebSocket an HTTP/1.1 one (h2 has no Upgrade).
#[test]
fn sidecar_websockets_work_with_http2_on() {
    sidecar_requests_and_websockets(true);
}

fn sidecar_requests_and_websockets(h2: bool) {
    let have_ws = Command::new("/usr/bin/python3")
        .args(["-c", "import websockets"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_ws {
        eprintln!(
            "sidecar test: skipped: python3-websockets not installed (run scripts/install-deps.sh)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    if h2 {
        let sign = "keys sign --key k1.key --cert cert.pem --cert-key cert.key --h2 --out k1.rec";
        let mut args: Vec<&str> = sign.split(' ').collect();
        args.extend(["--name", HOST]);
        ok(dir, &args);
    }
    std::fs::write(dir.join("ws.py"), WS_SIDECAR_PY).unwrap();
    let mut server = Command::new("/usr/bin/python3")
        .args(["ws.py", "serve"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _server = Guard(server);
    let ws_port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    let (gw_port, admin_port, proxy_port, side_port) =
        (free_port(), free_port(), free_port(), free_port());
    let gw = format!("127.0.0.1:{gw_port}");
    let admin = format!("127.0.0.1:{admin_port}");
    let side = format!("127.0.0.1:{side_port}");
    let _gw = spawn(
        dir,
        &[
            "gateway",
            "--listen",
            &gw,
            "--backend",
            &format!("127.0.0.1:{ws_port}"),
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
    let listen = format!("127.0.0.1:{proxy_port}");
    let map = format!("{side_port}=https://{HOST}:{gw_port}");
    let resolve = format!("{HOST}:{gw_port}:127.0.0.1");
    let mut args = vec![
        "proxy",
        "--listen",
        &listen,
        "--map",
        &map,
        "--record",
        "k1.rec",
        "--cert",
        "cert.pem",
        "--cacert",
        "ca.pem",
        "--resolve",
        &resolve,
    ];
    if h2 {
        args.push("--http2");
    }
    let _proxy = spawn(dir, &args);
    wait_listening(&gw);
    wait_listening(&admin);
    wait_listening(&side);
    // The gateway's replay filter refuses flights stamped within its first
    // seconds (no saved filter on a first start).
    std::thread::sleep(Duration::from_secs(3));

    // An origin-form request, as an application calling a local service
    // sends it: it reaches the origin with the origin's name.
    let resp = http(
        &side,
        "GET /plain HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 "), "{resp}");
    let out = Command::new("/usr/bin/python3")
        .args(["ws.py", "client", &side])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "echoed 3");
    let metrics = http(&admin, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        metrics.contains("zrtt_gateway_tls_connections_total 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("zrtt_gateway_upgrades_total 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("zrtt_gateway_zrtt_accepted_total 0\n"),
        "{metrics}"
    );
    let h2_conns = if h2 { "1" } else { "0" };
    assert!(
        metrics.contains(&format!(
            "zrtt_gateway_zrtt_h2_connections_total {h2_conns}\n"
        )),
        "{metrics}"
    );
}

#[test]
fn https_proxy_carries_curl_over_tls_to_zrtt_and_refuses_plain_http() {
    if !have("curl") {
        eprintln!("skipped: curl is not installed (scripts/install-deps.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    // The proxy's own certificate, for the address clients connect to.
    std::fs::create_dir(dir.join("ptls")).unwrap();
    ok(
        dir,
        &["keys", "cert", "--name", "127.0.0.1", "--out-dir", "ptls"],
    );
    let plain = backend();
    let (gw_port, admin_port, proxy_port, padmin_port) =
        (free_port(), free_port(), free_port(), free_port());
    let (gw, admin, proxy, padmin) = (
        format!("127.0.0.1:{gw_port}"),
        format!("127.0.0.1:{admin_port}"),
        format!("127.0.0.1:{proxy_port}"),
        format!("127.0.0.1:{padmin_port}"),
    );
    let _gw = spawn_gateway(dir, &gw, &plain.to_string(), &admin, KEY_FLAGS);
    let _proxy = spawn(
        dir,
        &[
            "proxy",
            "--listen",
            &proxy,
            "--tls-cert",
            "ptls/cert.pem",
            "--tls-key",
            "ptls/cert.key",
            "--admin",
            &padmin,
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
        ],
    );
    wait_listening(&padmin);
    wait_listening(&proxy);
    std::thread::sleep(Duration::from_secs(3));

    // curl speaks TLS to the proxy (checking its certificate) and the
    // proxy carries the request over zrtt.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--proxy"])
        .arg(format!("https://{proxy}"))
        .args(["--proxy-cacert", "ptls/ca.pem"])
        .arg(format!("http://{HOST}/"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
    assert_eq!(gateway_counter(&admin, "zrtt_accepted"), 1);
    // A certificate curl does not trust: refused by curl, nothing sent.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--proxy"])
        .arg(format!("https://{proxy}"))
        .args(["--proxy-cacert", "ca.pem"])
        .arg(format!("http://{HOST}/"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(gateway_counter(&admin, "zrtt_accepted"), 1);
    // Plain HTTP to the TLS listener gets no HTTP answer (a TLS alert, or
    // a closed or reset connection).
    let mut s = TcpStream::connect(&proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET http://{HOST}/ HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    assert!(!resp.starts_with(b"HTTP/"), "{resp:?}");
    // Failed handshakes: the untrusted curl and the plain request;
    // wait_listening's probe (connected and closed) sent nothing.
    let m = admin_metrics(&padmin);
    assert!(m.contains("zrtt_proxy_connections_total 4\n"), "{m}");
    assert!(m.contains("zrtt_proxy_tls_failures_total 2\n"), "{m}");
    assert!(m.contains("zrtt_proxy_tls_unused_total 1\n"), "{m}");
    assert!(m.contains("zrtt_proxy_h2_connections_total 0\n"), "{m}");
    assert!(m.contains("zrtt_proxy_zrtt_requests_total 1\n"), "{m}");
}
