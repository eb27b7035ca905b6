//! Helpers shared by the binary's integration tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Run the zrtt binary in `dir`.
pub fn zrtt(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(args)
        .current_dir(dir)
        // Token state of this test only (the clients keep it by default).
        .env("XDG_STATE_HOME", dir.join(".state"))
        .output()
        .expect("run zrtt")
}

/// Run the zrtt binary in `dir`; it must succeed; its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = zrtt(dir, args);
    assert!(
        out.status.success(),
        "zrtt {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A child process killed (by its own PID) and reaped when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP/1.1 backend answering `ok` to every request.
pub fn backend() -> SocketAddr {
    backend_saying("ok")
}

/// An HTTP/1.1 backend answering `body` to every request.
pub fn backend_saying(body: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let head =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                        let _ = s.write_all(head.as_bytes());
                        let _ = s.write_all(body.as_bytes());
                    }
                }
            });
        }
    });
    addr
}

/// In `dir`: a test CA and certificate for `host` (`cert.pem`, `cert.key`,
/// `ca.pem`), a semi-static key `k1.key` and its signed record `k1.rec`.
pub fn key_and_record(dir: &Path, host: &str) {
    ok(dir, &["keys", "cert", "--name", host, "--out-dir", "."]);
    ok(dir, &["keys", "generate", "--out", "k1.key"]);
    ok(
        dir,
        &[
            "keys",
            "sign",
            "--key",
            "k1.key",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--name",
            host,
            "--out",
            "k1.rec",
        ],
    );
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (at most 10 s) until something accepts on `addr`.
pub fn wait_listening(addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "{addr} did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The exposition text an admin endpoint serves at `/metrics`.
pub fn admin_metrics(admin: &str) -> String {
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The gateway counter `zrtt_gateway_<name>_total` at `admin`.
pub fn gateway_counter(admin: &str, name: &str) -> u64 {
    let out = admin_metrics(admin);
    let key = format!("zrtt_gateway_{name}_total ");
    out.lines()
        .find_map(|l| l.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
        .trim()
        .parse()
        .unwrap()
}

/// In `dir`: a test CA and certificate for `host` in `pki/` (`keys cert`),
/// and a key store `ks` for `host` signed by it (`keys init`), with
/// `extra` arguments for `keys init` (a policy, for example).
pub fn keystore(dir: &Path, host: &str, pki: &str, extra: &[&str]) {
    ok(dir, &["keys", "cert", "--name", host, "--out-dir", pki]);
    let (cert, key) = (format!("{pki}/cert.pem"), format!("{pki}/cert.key"));
    let mut args = vec![
        "keys",
        "init",
        "--keystore",
        "ks",
        "--name",
        host,
        "--cert",
        &cert,
        "--cert-key",
        &key,
    ];
    args.extend_from_slice(extra);
    ok(dir, &args);
}

/// Whether a lab test must skip (it says why): not root, or one of
/// `tools` is not installed.
pub fn lab_skip(test: &str, tools: &[&str]) -> bool {
    if !zrtt_lab::is_root() {
        eprintln!("{test}: skipped: needs root");
        return true;
    }
    if let Some(t) = tools.iter().find(|t| !have(t)) {
        eprintln!("{test}: skipped: {t} not installed (run scripts/install-deps.sh)");
        return true;
    }
    false
}

/// `zrtt get --zrtt-only` for `https://a.example:{port}{path}` at
/// 127.0.0.1, with `k1.rec`, `cert.pem` and `ca.pem` from `dir`
/// ([`key_and_record`]) and `-w write_out`. A fresh gateway's replay filter
/// refuses flights (Busy) for its first seconds, and such a refusal reaches
/// no backend: asked again for up to 20 s.
pub fn zrtt_get_retrying_busy(dir: &Path, port: u16, path: &str, write_out: &str) -> Output {
    let resolve = format!("a.example:{port}:127.0.0.1");
    let url = format!("https://a.example:{port}{path}");
    let get = [
        "get",
        "--zrtt-only",
        "--no-state",
        "-m",
        "20s",
        "--record",
        "k1.rec",
        "--cert",
        "cert.pem",
        "--cacert",
        "ca.pem",
        "--resolve",
        &resolve,
        "-w",
        write_out,
        &url,
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = zrtt(dir, &get);
        let busy = String::from_utf8_lossy(&out.stderr).contains("server busy");
        if !busy || std::time::Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The flags of the test key `key_and_record` writes.
pub const KEY_FLAGS: &[&str] = &[
    "--key",
    "k1.key",
    "--record",
    "k1.rec",
    "--cert",
    "cert.pem",
    "--cert-key",
    "cert.key",
];

/// `zrtt gateway --listen LISTEN --backend BACKEND --admin ADMIN` with
/// `flags` in `dir`, once both addresses accept.
pub fn spawn_gateway(
    dir: &Path,
    listen: &str,
    backend: &str,
    admin: &str,
    flags: &[&str],
) -> Guard {
    let child = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["gateway", "--listen", listen, "--backend", backend])
            .args(["--admin", admin])
            .args(flags)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(listen);
    wait_listening(admin);
    child
}

/// An HTTP/1.1 backend answering `ok` and recording each request's first
/// line and whether it carried `Early-Data: 1` (`GET / early=true`).
pub fn recording_backend() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = seen2.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let first = head.lines().next().unwrap_or("").to_owned();
                        let early = head.lines().any(|l| l.trim() == "early-data: 1");
                        seen.lock().unwrap().push(format!("{first} early={early}"));
                        buf.drain(..end + 4);
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    (addr, seen)
}
