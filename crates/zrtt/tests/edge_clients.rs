//! The gateway's TLS path against clients nobody here wrote: curl over
//! HTTP/2 and HTTP/1.1 with TLS 1.2 and 1.3, `openssl s_client` resuming a
//! session, h2load, a WebSocket client and server (python3-websockets). Each test says why it skips when a tool is missing
//! (scripts/install-deps.sh installs them).

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const HOST: &str = "www.example.com";

fn skip(test: &str, tools: &[&str]) -> bool {
    for t in tools {
        if !have(t) {
            eprintln!("{test}: skipped: {t} not installed (run scripts/install-deps.sh)");
            return true;
        }
    }
    false
}

/// `zrtt gateway` on a free loopback port in front of the `ok` backend;
/// returns it and its port (from its `listening` line).
fn gateway(dir: &Path, extra: &[&str]) -> (Guard, u16) {
    gateway_to(dir, &backend().to_string(), extra)
}

/// `zrtt gateway` in front of `backend`.
fn gateway_to(dir: &Path, backend: &str, extra: &[&str]) -> (Guard, u16) {
    let backend = backend.to_owned();
    let mut args = vec![
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &backend,
        "--key",
        "k1.key",
        "--record",
        "k1.rec",
        "--cert",
        "cert.pem",
        "--cert-key",
        "cert.key",
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(&args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The `listening` line (an `admin` line may come first).
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        out.read_line(&mut line).unwrap();
        if line.starts_with("listening ") {
            break;
        }
    }
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .port();
    (Guard(child), port)
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    key_and_record(tmp.path(), HOST);
    tmp
}

/// curl with the test CA; returns `(stdout, success)`.
fn curl(dir: &Path, port: u16, flags: &[&str]) -> (String, bool) {
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let url = format!("https://{HOST}:{port}/hello");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", "ca.pem", "--resolve"])
        .arg(&resolve)
        .args(flags)
        .args(["-w", "\n%{http_version} %{http_code} %{ssl_verify_result}"])
        .arg(&url)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    )
}

#[test]
fn curl_speaks_http2_and_http11_over_tls12_and_tls13() {
    if skip(
        "curl_speaks_http2_and_http11_over_tls12_and_tls13",
        &["curl"],
    ) {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (_gw, port) = gateway(dir, &[]);
    for (flags, version) in [
        (&["--http2", "--tlsv1.3"][..], "2"),
        (&["--http2", "--tlsv1.2", "--tls-max", "1.2"][..], "2"),
        (&["--http1.1", "--tlsv1.3"][..], "1.1"),
        (&["--http1.1", "--tlsv1.2", "--tls-max", "1.2"][..], "1.1"),
    ] {
        let (out, ok) = curl(dir, port, flags);
        assert!(ok, "curl {flags:?}: {out}");
        assert_eq!(out, format!("ok\n{version} 200 0"), "curl {flags:?}");
    }
}

#[test]
fn openssl_resumes_a_session() {
    if skip("openssl_resumes_a_session", &["openssl"]) {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (_gw, port) = gateway(dir, &[]);
    let connect = format!("127.0.0.1:{port}");
    for (tls, label) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
        let session = dir.join(format!("session{tls}"));
        let run = |resume: bool| {
            let mut cmd = Command::new("openssl");
            cmd.args(["s_client", tls, "-connect", &connect, "-servername", HOST])
                .args(["-CAfile", "ca.pem", "-alpn", "http/1.1", "-ign_eof"])
                .current_dir(dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if resume {
                cmd.arg("-sess_in").arg(&session);
            } else {
                cmd.arg("-sess_out").arg(&session);
            }
            let mut child = cmd.spawn().unwrap();
            use std::io::Write;
            let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(req.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let first = run(false);
        assert!(first.contains(&format!("New, {label}")), "{first}");
        assert!(first.contains("\r\n\r\nok"), "{first}");
        let again = run(true);
        assert!(again.contains(&format!("Reused, {label}")), "{again}");
        assert!(again.contains("\r\n\r\nok"), "{again}");
    }
}

#[test]
fn h2load_completes_without_errors() {
    if skip("h2load_completes_without_errors", &["h2load"]) {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (_gw, port) = gateway(dir, &[]);
    let out = Command::new("h2load")
        .args(["-n", "400", "-c", "4", "-m", "8"])
        .arg(format!("https://127.0.0.1:{port}/"))
        .args(["--header", &format!(":authority: {HOST}")])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("400 succeeded, 0 failed, 0 errored"),
        "{text}"
    );
    assert!(text.contains("Application protocol: h2"), "{text}");
}

#[test]
fn openssl_0rtt_is_answered_once_and_a_replayed_ticket_gets_no_early_data() {
    if skip("openssl_0rtt_...", &["openssl"]) {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (backend, seen) = recording_backend();
    let backend = backend.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--backend", &backend])
        .args([
            "--key", "k1.key", "--record", "k1.rec", "--cert", "cert.pem",
        ])
        .args(["--cert-key", "cert.key"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _gw = Guard(child);
    let addr = line.trim().strip_prefix("listening ").unwrap().to_owned();
    let req = format!("GET /early HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    std::fs::write(dir.join("early.txt"), &req).unwrap();
    let session = dir.join("session.pem");
    let run = |args: &[&str], stdin: &[u8]| {
        let mut cmd = Command::new("openssl");
        cmd.args([
            "s_client",
            "-tls1_3",
            "-connect",
            &addr,
            "-servername",
            HOST,
        ])
        .args(["-CAfile", "ca.pem", "-alpn", "http/1.1", "-ign_eof"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let sess = session.to_str().unwrap();
    // A full handshake gets a ticket.
    let first = run(&["-sess_out", sess], req.as_bytes());
    assert!(first.contains("New, TLSv1.3"), "{first}");
    assert!(first.contains("\r\n\r\nok"), "{first}");
    // Resumed with the request as early data: accepted and answered.
    let early = run(&["-sess_in", sess, "-early_data", "early.txt"], b"");
    assert!(early.contains("Reused, TLSv1.3"), "{early}");
    assert!(early.contains("Early data was accepted"), "{early}");
    assert!(early.contains("\r\n\r\nok"), "{early}");
    // The same ticket again (a replay of the ClientHello's PSK): tickets
    // are single-use, so no resumption and no early data. The client then
    // sends its request after the handshake, as 1-RTT data.
    let replay = run(
        &["-sess_in", sess, "-early_data", "early.txt"],
        req.as_bytes(),
    );
    assert!(!replay.contains("Early data was accepted"), "{replay}");
    assert!(replay.contains("New, TLSv1.3"), "{replay}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            "get /early http/1.1 early=false".to_owned(),
            "get /early http/1.1 early=true".to_owned(),
            "get /early http/1.1 early=false".to_owned(),
        ],
        "early data ran once, marked; the replayed ticket's early data never ran"
    );
}

/// A WebSocket echo server and client (Debian's python3-websockets, so
/// Debian's interpreter: a `python3` earlier in PATH may lack it).
const WS_PY: &str = r#"
import asyncio, ssl, sys
import websockets

async def echo(ws, path=None):
    async for m in ws:
        await ws.send(m)

async def serve():
    async with websockets.serve(echo, "127.0.0.1", 0) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()

async def client(port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    uri = "wss://www.example.com:%d/chat" % port
    async with websockets.connect(uri, ssl=ctx, host="127.0.0.1", port=port,
                                  server_hostname="www.example.com") as ws:
        for msg in ["hello", "x" * 100000, b"\x00\x01binary"]:
            await ws.send(msg)
            back = await asyncio.wait_for(ws.recv(), 10)
            assert back == msg, (len(back), len(msg))
    print("echoed 3", flush=True)

if sys.argv[1] == "serve":
    asyncio.run(serve())
else:
    asyncio.run(asyncio.wait_for(client(int(sys.argv[2]), sys.argv[3]), 20))
"#;

fn have_websockets() -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", "import websockets"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn websocket_client_echoes_through_the_tls_path() {
    if !have_websockets() {
        eprintln!("websocket test: skipped: python3-websockets not installed (run scripts/install-deps.sh)");
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    std::fs::write(dir.join("ws.py"), WS_PY).unwrap();
    let mut server = Command::new("/usr/bin/python3")
        .args(["ws.py", "serve"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Guard(server);
    let ws_port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    let (_gw, port) = gateway_to(dir, &format!("127.0.0.1:{ws_port}"), &[]);
    let out = Command::new("/usr/bin/python3")
        .args(["ws.py", "client", &port.to_string(), "ca.pem"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "echoed 3");
}

/// curl against the admin endpoint; returns (status, content type, body).
fn admin_get(admin: &str, path: &str) -> (u16, String, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code} %{content_type}",
        ])
        .arg(format!("http://{admin}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (code, ctype) = tail.split_once(' ').unwrap_or((tail, ""));
    (
        code.parse().unwrap_or(0),
        ctype.to_owned(),
        body.trim_end().to_owned(),
    )
}

#[test]
fn admin_endpoint_serves_metrics_health_and_readiness_through_a_drain() {
    if skip("admin_endpoint_...", &["curl"]) {
        return;
    }
    let tmp = setup();
    // A backend that accepts and never answers: a request stays open, so
    // the gateway drains for its grace period after SIGTERM.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_addr = hang.local_addr().unwrap().to_string();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let held2 = held.clone();
    std::thread::spawn(move || {
        for s in hang.incoming().take(4).flatten() {
            held2.lock().unwrap().push(s);
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args([
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ])
        .args([
            "--backend",
            &hang_addr,
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
        ])
        .args(["--cert", "cert.pem", "--cert-key", "cert.key"])
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut admin, mut port) = (String::new(), 0u16);
    for _ in 0..2 {
        let line = lines.next().unwrap().unwrap();
        if let Some(a) = line.strip_prefix("admin ") {
            admin = a.to_owned();
        } else if let Some(a) = line.strip_prefix("listening ") {
            port = a.parse::<std::net::SocketAddr>().unwrap().port();
        }
    }
    let _guard = Guard(child);
    assert!(
        !admin.is_empty() && port != 0,
        "admin {admin:?}, port {port}"
    );

    assert_eq!(admin_get(&admin, "/healthz").0, 200);
    let (code, _, body) = admin_get(&admin, "/readyz");
    assert_eq!((code, body.as_str()), (200, "ready"));
    let (code, ctype, body) = admin_get(&admin, "/metrics");
    assert_eq!(code, 200);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    assert!(
        body.contains("# TYPE zrtt_gateway_connections counter"),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert_eq!(admin_get(&admin, "/nothing").0, 404);

    // A request held at the backend, then SIGTERM: not ready while draining.
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let mut pending = Guard(
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                "--cacert",
                "ca.pem",
                "--resolve",
                &resolve,
            ])
            .arg(format!("https://{HOST}:{port}/held"))
            .current_dir(tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never reached the backend"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut draining = None;
    for _ in 0..100 {
        let (code, _, body) = admin_get(&admin, "/readyz");
        if code != 200 {
            draining = Some((code, body));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        draining,
        Some((503, "not ready".to_owned())),
        "readiness during the drain"
    );
    assert_eq!(admin_get(&admin, "/healthz").0, 200, "alive while draining");
    let _ = pending.0.kill();
}

#[test]
fn access_log_has_a_line_per_request() {
    if skip("access_log_has_a_line_per_request", &["curl"]) {
        return;
    }
    let tmp = setup();
    let backend = backend().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--access-log"])
        .args([
            "--backend",
            &backend,
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
        ])
        .args(["--cert", "cert.pem", "--cert-key", "cert.key"])
        .env_remove("RUST_LOG")
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .port();
    let stderr = child.stderr.take().unwrap();
    let (out, ok) = curl(tmp.path(), port, &["--http2"]);
    assert!(ok, "{out}");
    let (out, ok) = curl(tmp.path(), port, &["--http1.1"]);
    assert!(ok, "{out}");
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut log).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("zrtt_access")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains(&format!(
            " tls {HOST}:{port} \"GET /hello HTTP/2.0\" 200 2 early=0 ms="
        )),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(&format!(
            " tls {HOST}:{port} \"GET /hello HTTP/1.1\" 200 2 early=0 ms="
        )),
        "{}",
        lines[1]
    );
}

/// A page with a stylesheet, a script and two images, served by Python's
/// http.server behind the gateway.
const PAGE: &str = r#"<!doctype html>
<html><head><title>zrtt page</title><link rel="stylesheet" href="/style.css"></head>
<body><h1 id="status">loading</h1>
<img src="/a.svg" width="64" height="64">
<img src="/b.svg" width="64" height="64">
<script src="/app.js"></script>
</body></html>
"#;
const APP_JS: &str = r#"window.addEventListener("load", function () {
  var n = 0;
  for (var i = 0; i < document.images.length; i++) {
    if (document.images[i].complete && document.images[i].naturalWidth > 0) { n += 1; }
  }
  document.getElementById("status").textContent =
    "rendered: " + n + " images, " + document.styleSheets.length + " stylesheet";
});
"#;
const SVG: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><rect width="64" height="64" fill="#c03"/></svg>"##;

/// SHA-256 of the certificate's public key, base64: what Chromium's
/// `--ignore-certificate-errors-spki-list` takes.
fn spki_hash(dir: &Path) -> String {
    let out = Command::new("sh")
        .args([
            "-c",
            "openssl x509 -pubkey -noout -in cert.pem | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn chromium_renders_a_page_over_http2_through_the_tls_path() {
    if skip(
        "chromium_renders_a_page_over_http2_through_the_tls_path",
        &["chromium", "openssl"],
    ) {
        return;
    }
    let tmp = setup();
    let site = tmp.path().join("site");
    std::fs::create_dir(&site).unwrap();
    for (name, body) in [
        ("index.html", PAGE),
        ("app.js", APP_JS),
        ("style.css", "h1 { color: #036; }"),
        ("a.svg", SVG),
        ("b.svg", SVG),
    ] {
        std::fs::write(site.join(name), body).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _web = Guard(
        Command::new("/usr/bin/python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(&site)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let backend = format!("127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(&backend).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "http.server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let admin = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );
    let (_gw, gw_port) = gateway_to(tmp.path(), &backend, &["--admin", &admin]);
    let spki = spki_hash(tmp.path());
    let url = format!("https://{HOST}:{gw_port}/index.html");
    let chromium = |extra: &[&str]| {
        let profile = tempfile::tempdir().unwrap();
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=5000",
                "--timeout=20000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
            .arg(format!("--host-resolver-rules=MAP {HOST} 127.0.0.1"))
            .args(extra)
            .arg(&url)
            .current_dir(tmp.path())
            .output()
            .unwrap()
    };
    let dom = chromium(&["--dump-dom"]);
    let text = String::from_utf8_lossy(&dom.stdout);
    assert!(
        text.contains("rendered: 2 images, 1 stylesheet"),
        "DOM: {text}\nstderr: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let shot = tmp.path().join("page.png");
    let out = chromium(&[
        "--window-size=400,300",
        &format!("--screenshot={}", shot.display()),
    ]);
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 1000, "an empty screenshot: {} bytes", png.len());
    // Over HTTP/2, every object through the gateway.
    let (_, _, metrics) = admin_get(&admin, "/metrics");
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("zrtt_gateway_{name}_total ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name}: {metrics}"))
    };
    assert!(value("tls_h2_connections") >= 1, "{metrics}");
    assert!(value("requests") >= 5, "{metrics}");
}
