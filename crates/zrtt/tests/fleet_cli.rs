//! `zrtt gateway --replay-store` with the real binary and a real
//! `redis-server` (scripts/install-deps.sh installs it; started on a free
//! loopback port in a temporary directory, killed by its PID): `zrtt get`
//! is answered over zrtt with the flight recorded in Redis, and over TLS
//! once Redis is gone (the gateway refuses the flight Busy), as its
//! metrics say. The replay refusal itself: zrtt-net's tests/fleet.rs.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";
const PATIENCE: Duration = Duration::from_secs(60);

fn redis_installed() -> bool {
    use std::os::unix::fs::MetadataExt;
    let ok = ["redis-server", "redis-cli"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        assert!(
            !root,
            "redis-server or redis-cli missing: run scripts/install-deps.sh"
        );
        eprintln!("skipped: redis-server not installed and not root (scripts/install-deps.sh)");
    }
    ok
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `zrtt get` of `/` through the gateway on `port`: (body, zrtt mode).
fn get(dir: &Path, port: u16) -> (String, String) {
    let out = ok(
        dir,
        &[
            "get",
            "-m",
            "20s",
            "--no-state",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--resolve",
            &format!("{HOST}:{port}:127.0.0.1"),
            "-w",
            "\n%{zrtt_mode}",
            &format!("https://{HOST}:{port}/"),
        ],
    );
    let (body, mode) = out.rsplit_once('\n').unwrap();
    (body.to_owned(), mode.trim().to_owned())
}

/// A counter or histogram line's value from the admin endpoint.
fn metric(admin: &str, name: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_gateway_records_flights_in_redis_and_falls_back_safely_without_it() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let redis_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let redis = Guard(
        Command::new("redis-server")
            .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            // An evicting policy: the gateway warns (docs/FLEET.md).
            .args(["--maxmemory-policy", "allkeys-lru"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while redis_cli(redis_port, &["PING"]) != "PONG" {
        assert!(start.elapsed() < PATIENCE, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let backend = backend().to_string();
    let store = format!("redis://127.0.0.1:{redis_port}");
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
            &backend,
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
        ])
        .args(["--cert", "cert.pem", "--cert-key", "cert.key"])
        // One host: no skew; the guard after connecting is then 2 s.
        .args(["--replay-store", &store, "--replay-store-skew", "0s"])
        .args([
            "--replay-store-timeout",
            "500ms",
            "--replay-store-prefix",
            "www",
        ])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let l = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = l.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
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
    let _gw = Guard(child);

    // Served over zrtt once the store checks flights (TLS before).
    let start = Instant::now();
    loop {
        let (body, mode) = get(dir, port);
        assert_eq!(body, "ok");
        if mode.starts_with("0rtt") {
            break;
        }
        assert_eq!(mode, "tls-fallback");
        assert!(start.elapsed() < PATIENCE, "never served over zrtt");
        std::thread::sleep(Duration::from_millis(100));
    }
    let keys = redis_cli(redis_port, &["KEYS", "www:*"]);
    assert_eq!(
        keys.lines()
            .filter(|k| *k != "www:settings" && !k.starts_with("www:tls:"))
            .count(),
        1,
        "the served flight, recorded (beside the TLS fallbacks' sessions): {keys}"
    );
    // Warned at start: the evicting policy, the token key made at start
    // (TLS sessions would not open at the other gateways).
    let warned = log.lock().unwrap().clone();
    assert!(
        warned.contains("maxmemory-policy is allkeys-lru"),
        "{warned}"
    );
    assert!(
        warned.contains("token key made at start with --replay-store"),
        "{warned}"
    );
    let checks = metric(&admin, "zrtt_gateway_replay_store_check_seconds_count");
    assert!(checks >= 1.0);
    let refused = metric(&admin, "zrtt_gateway_replay_store_unavailable_total");

    // Redis gone: refused Busy, answered over TLS.
    drop(redis);
    let (body, mode) = get(dir, port);
    assert_eq!((body.as_str(), mode.as_str()), ("ok", "tls-fallback"));
    assert!(metric(&admin, "zrtt_gateway_replay_store_unavailable_total") > refused);
    assert_eq!(
        metric(&admin, "zrtt_gateway_replay_store_replays_total"),
        0.0
    );
}
