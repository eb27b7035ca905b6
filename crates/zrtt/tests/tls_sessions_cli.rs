//! TLS sessions across a fleet and across restarts, with clients nobody
//! here wrote: `openssl s_client -sess_out` at gateway A, `-sess_in
//! -early_data` at gateway B (both on one real `redis-server` and one token
//! key) resumes with its 0-RTT request answered once; the same session
//! again, at A or B, is not resumed; with Redis stalled or stopped, full
//! handshakes and every request served. A lone gateway stopped and started again
//! (its `--replay-state`), or replaced by a successor taking over its
//! sockets (`--handover`), resumes a session from before the restart, once.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";
const PATIENCE: Duration = Duration::from_secs(30);

fn skip(test: &str) -> bool {
    for t in ["openssl", "redis-server", "redis-cli"] {
        if !have(t) {
            use std::os::unix::fs::MetadataExt;
            let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
            assert!(!root, "{t} missing: run scripts/install-deps.sh");
            eprintln!("{test}: skipped: {t} not installed (scripts/install-deps.sh)");
            return true;
        }
    }
    false
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

/// `redis-server` on a free loopback port, without persistence.
fn redis(dir: &Path) -> (Guard, u16) {
    let port = free_port();
    let g = Guard(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while redis_cli(port, &["PING"]) != "PONG" {
        assert!(start.elapsed() < PATIENCE, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (g, port)
}

/// The Redis key of the session openssl saved in `dir` (its ticket is
/// the gateway's ticket id).
fn saved_key(dir: &Path) -> String {
    let out = Command::new("openssl")
        .args(["sess_id", "-noout", "-text", "-in"])
        .arg(dir.join(SESS))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hex = String::new();
    for line in text
        .lines()
        .skip_while(|l| !l.contains("TLS session ticket:"))
        .skip(1)
    {
        let Some((_, bytes)) = line.split_once(" - ") else {
            break;
        };
        // "01 02 ... 08-09 ... 10   ascii"
        let bytes = bytes.split("   ").next().unwrap_or_default();
        for b in bytes.split([' ', '-']).filter(|b| b.len() == 2) {
            hex.push_str(b);
        }
    }
    assert_eq!(hex.len(), 64, "a 32-byte ticket id: {text}");
    format!("zrtt:tls:{hex}")
}

/// Until the session openssl saved in `dir` is in Redis (written off the
/// handshake).
fn wait_for_saved(dir: &Path, port: u16) {
    let key = saved_key(dir);
    let start = Instant::now();
    while redis_cli(port, &["STRLEN", &key]) == "0" {
        assert!(
            start.elapsed() < PATIENCE,
            "the session never reached Redis"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The TLS sessions in Redis (not the tombstones takes leave).
fn tls_key_set(port: u16) -> std::collections::HashSet<String> {
    redis_cli(port, &["--scan", "--pattern", "zrtt:tls:*"])
        .lines()
        .filter(|l| !l.is_empty() && redis_cli(port, &["STRLEN", l]) != "0")
        .map(str::to_owned)
        .collect()
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    key_and_record(tmp.path(), HOST);
    let key = tmp.path().join("token.key");
    std::fs::write(&key, format!("{}\n", "5a".repeat(32))).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let req = format!("GET /early HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    std::fs::write(tmp.path().join("early.txt"), req).unwrap();
    tmp
}

/// `zrtt gateway` with `extra` flags in front of `backend`: it and its
/// address.
fn gateway(dir: &Path, backend: &str, extra: &[&str]) -> (Guard, String) {
    gateway_on(dir, "127.0.0.1:0", backend, extra)
}

fn gateway_on(dir: &Path, listen: &str, backend: &str, extra: &[&str]) -> (Guard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--listen", listen, "--backend", backend])
        .args(["--key", "k1.key", "--record", "k1.rec"])
        .args(["--cert", "cert.pem", "--cert-key", "cert.key"])
        .args(["--token-key", "token.key"])
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(match std::env::var_os("ZRTT_TEST_LOG") {
            Some(_) => Stdio::inherit(),
            None => Stdio::null(),
        })
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();
    (Guard(child), addr)
}

/// `openssl s_client` (TLS 1.3, HTTP/1.1) to `addr` with `args`, writing
/// `stdin`; its output.
fn s_client(dir: &Path, addr: &str, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-tls1_3", "-connect", addr, "-servername", HOST])
        .args(["-CAfile", "ca.pem", "-alpn", "http/1.1", "-ign_eof"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const SESS: &str = "session.pem";

/// A full handshake at `addr` saving its session; the request answered.
fn new_session(dir: &Path, addr: &str) {
    let req = std::fs::read(dir.join("early.txt")).unwrap();
    let out = s_client(dir, addr, &["-sess_out", SESS], &req);
    assert!(out.contains("New, TLSv1.3"), "{out}");
    assert!(out.contains("\r\n\r\nok"), "{out}");
}

/// The saved session presented at `addr` with the request as early data
/// (and sent again after the handshake when the early data is refused):
/// (resumed, early data accepted); the request is answered either way.
fn resume(dir: &Path, addr: &str) -> (bool, bool) {
    let out = s_client(
        dir,
        addr,
        &["-sess_in", SESS, "-early_data", "early.txt"],
        b"",
    );
    let resumed = out.contains("Reused, TLSv1.3");
    let early = out.contains("Early data was accepted");
    if !early {
        // openssl sends nothing more when its early data is refused: ask
        // again after the handshake, without early data.
        let req = std::fs::read(dir.join("early.txt")).unwrap();
        let again = s_client(dir, addr, &[], &req);
        assert!(again.contains("\r\n\r\nok"), "{again}");
    } else {
        assert!(out.contains("\r\n\r\nok"), "{out}");
    }
    assert!(resumed || !early, "{out}");
    (resumed, early)
}

fn signal(g: &Guard, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &g.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn stop(g: &mut Guard) {
    let pid = g.0.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let _ = g.0.wait();
}

#[test]
fn a_session_from_gateway_a_resumes_once_at_gateway_b_through_redis() {
    if skip("a_session_from_gateway_a_resumes_once_at_gateway_b_through_redis") {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (mut redis, port) = redis(dir);
    let (backend, seen) = recording_backend();
    let backend = backend.to_string();
    let store = format!("redis://127.0.0.1:{port}");
    let flags = [
        "--replay-store",
        &store,
        "--replay-store-skew",
        "0s",
        "--replay-store-timeout",
        "200ms",
        // openssl sends nothing more when its early data is refused: the
        // gateway closes such a connection after this.
        "--request-head-timeout",
        "1s",
    ];
    let (_a, a) = gateway(dir, &backend, &flags);
    let (_b, b) = gateway(dir, &backend, &flags);

    // Sessions issued before the store's guard (2 s after each gateway
    // connected: a store that restarted may have lost takes) resume
    // without 0-RTT: retake the sample until one resumes with it.
    let start = Instant::now();
    loop {
        new_session(dir, &a);
        // Written to Redis off the handshake (one ticket in a fleet).
        wait_for_saved(dir, port);
        let (resumed, early) = resume(dir, &b);
        assert!(resumed, "a session issued by A resumes at B");
        if early {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "0-RTT never accepted at B");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The same session again, at A or at B: taken already.
    assert_eq!(resume(dir, &a), (false, false));
    assert_eq!(resume(dir, &b), (false, false));
    let early_runs = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.ends_with("early=true"))
        .count();
    assert_eq!(early_runs, 1, "the 0-RTT request ran once: {seen:?}");

    // A ClientHello answered with a HelloRetryRequest (its only key share
    // is for a group the gateway does not take): the session taken for the
    // first ClientHello is the one the second resumes, without 0-RTT (none
    // after a retry, RFC 8446 §4.2.10).
    new_session(dir, &a);
    wait_for_saved(dir, port);
    let out = s_client(
        dir,
        &b,
        &["-sess_in", SESS, "-groups", "P-521:X25519"],
        &std::fs::read(dir.join("early.txt")).unwrap(),
    );
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    assert!(out.contains("\r\n\r\nok"), "{out}");

    // Redis stalled (SIGSTOP, shorter than the connection's own 1 s
    // bound): no answer within the deadline, a full handshake; once Redis
    // runs again its late GETDEL takes the session, which is then never
    // resumed.
    new_session(dir, &a);
    wait_for_saved(dir, port);
    let held = tls_key_set(port);
    signal(&redis, "-STOP");
    let req = std::fs::read(dir.join("early.txt")).unwrap();
    let out = s_client(dir, &b, &["-sess_in", SESS], &req);
    signal(&redis, "-CONT");
    assert!(out.contains("New, TLSv1.3"), "{out}");
    assert!(out.contains("\r\n\r\nok"), "{out}");
    let start = Instant::now();
    // (B's full handshake meanwhile added its own.)
    while held.difference(&tls_key_set(port)).count() != 1 {
        assert!(start.elapsed() < PATIENCE, "the late GETDEL never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(resume(dir, &b), (false, false));

    // Redis gone: full handshakes, nothing fails.
    new_session(dir, &a);
    stop(&mut redis);
    assert_eq!(resume(dir, &b), (false, false));
    new_session(dir, &b);
}

#[test]
fn a_lone_gateway_hands_its_sessions_to_its_next_start_once() {
    if skip("a_lone_gateway_hands_its_sessions_to_its_next_start_once") {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (backend, seen) = recording_backend();
    let backend = backend.to_string();
    let flags = [
        "--replay-state",
        "replay.state",
        "--request-head-timeout",
        "1s",
    ];
    let (mut first, addr) = gateway(dir, &backend, &flags);
    new_session(dir, &addr);
    stop(&mut first);
    let tls = dir.join("replay.state.tls");
    assert!(tls.exists(), "sessions saved at exit");
    let mode = std::fs::metadata(&tls).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read(&tls).unwrap();
    assert!(
        !text.windows(4).any(|w| w == b"TLS1"),
        "nothing readable at rest"
    );
    let (_second, addr) = gateway(dir, &backend, &flags);
    assert!(!tls.exists(), "taken once");
    let (resumed, early) = resume(dir, &addr);
    assert!(resumed, "the session from before the restart resumes");
    assert!(early, "with its 0-RTT request");
    assert_eq!(resume(dir, &addr), (false, false), "and only once");
    let early_runs = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.ends_with("early=true"))
        .count();
    assert_eq!(early_runs, 1, "{seen:?}");
}

#[test]
fn a_successor_taking_over_resumes_the_sessions_of_its_predecessor_once() {
    if skip("a_successor_taking_over_resumes_the_sessions_of_its_predecessor_once") {
        return;
    }
    let tmp = setup();
    let dir = tmp.path();
    let (backend, seen) = recording_backend();
    let backend = backend.to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let flags = [
        "--handover",
        "gateway.handover",
        "--request-head-timeout",
        "1s",
    ];
    let (mut old, addr) = gateway_on(dir, &listen, &backend, &flags);
    let sock = dir.join("gateway.handover");
    let start = Instant::now();
    while !sock.exists() {
        assert!(start.elapsed() < PATIENCE, "no hand-over socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    new_session(dir, &addr);
    // The successor takes the sockets (and the sessions); the old process
    // drains and exits.
    let (_new, addr2) = gateway_on(dir, &listen, &backend, &flags);
    assert_eq!(addr, addr2);
    let start = Instant::now();
    while old.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < PATIENCE, "the old gateway did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (resumed, early) = resume(dir, &addr);
    assert!(resumed && early, "resumed with 0-RTT after the hand-over");
    assert_eq!(resume(dir, &addr), (false, false), "and only once");
    let early_runs = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.ends_with("early=true"))
        .count();
    assert_eq!(early_runs, 1, "{seen:?}");
}
