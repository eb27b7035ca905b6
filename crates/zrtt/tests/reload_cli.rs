//! Certificate renewal without a restart, with the real binary and
//! `openssl s_client` as the client: a certificate replaced on disk is
//! served by the next handshake (file change, and SIGHUP), and a broken
//! replacement (a certificate without its key) keeps the previous one in
//! force and says why. Checks the certificate served, never timings.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";

fn have_openssl() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The first PEM certificate in `text`.
fn first_pem(text: &str) -> String {
    let start = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text[start..].find("-----END CERTIFICATE-----").unwrap() + start;
    text[start..end].to_owned()
}

/// The certificate the gateway at `port` serves now.
fn served(dir: &Path, port: u16) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", HOST, "-showcerts"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    first_pem(&String::from_utf8_lossy(&out.stdout))
}

fn file_pem(p: &Path) -> String {
    first_pem(&std::fs::read_to_string(p).unwrap())
}

/// Replace `to` with `from` atomically (as a renewal tool does).
fn install(from: &Path, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// Start a gateway logging to `log`; its port.
fn gateway(dir: &Path, log: &str, refresh: &str) -> (Guard, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--backend"])
        .arg(backend().to_string())
        .args(["--key", "k1.key", "--record", "k1.rec"])
        .args(["--cert", "cert.pem", "--cert-key", "cert.key"])
        .args(["--refresh", refresh])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(log)).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .unwrap_or_else(|| panic!("{line:?}"))
        .port();
    (Guard(child), port)
}

/// Wait (bounded) until `log` has `n` lines containing `what`.
fn wait_log(dir: &Path, log: &str, what: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        if text.matches(what).count() >= n {
            return text;
        }
        assert!(Instant::now() < deadline, "no {what:?} in {log}: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn hup(g: &Guard) {
    let ok = Command::new("kill")
        .args(["-HUP", &g.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    if !have_openssl() {
        eprintln!("skipped: openssl not installed (run scripts/install-deps.sh)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    ok(dir, &["keys", "cert", "--name", HOST, "--out-dir", "new"]);
    std::fs::copy(dir.join("cert.pem"), dir.join("old.pem")).unwrap();
    std::fs::copy(dir.join("cert.key"), dir.join("old.key")).unwrap();
    let (old, new) = (
        file_pem(&dir.join("old.pem")),
        file_pem(&dir.join("new/cert.pem")),
    );
    assert_ne!(old, new);

    // SIGHUP: a certificate without its key is refused, the old one served.
    let (gw, port) = gateway(dir, "hup.log", "1h");
    assert_eq!(served(dir, port), old);
    install(&dir.join("new/cert.pem"), &dir.join("cert.pem"));
    hup(&gw);
    let log = wait_log(dir, "hup.log", "certificate not reloaded", 1);
    assert!(log.contains("cert.pem"), "the reason names the file: {log}");
    assert_eq!(served(dir, port), old, "a broken renewal changes nothing");
    // With its key in place, SIGHUP puts it in force.
    install(&dir.join("new/cert.key"), &dir.join("cert.key"));
    hup(&gw);
    wait_log(dir, "hup.log", "certificate reloaded", 1);
    assert_eq!(served(dir, port), new);
    drop(gw);

    // Without a signal: the changed files are noticed (checked every second).
    install(&dir.join("old.pem"), &dir.join("cert.pem"));
    install(&dir.join("old.key"), &dir.join("cert.key"));
    let (_gw, port) = gateway(dir, "poll.log", "1s");
    assert_eq!(served(dir, port), old);
    install(&dir.join("new/cert.key"), &dir.join("cert.key"));
    install(&dir.join("new/cert.pem"), &dir.join("cert.pem"));
    // A check may see the key before its certificate (refused, logged);
    // the next one sees both.
    wait_log(dir, "poll.log", "certificate reloaded", 1);
    assert_eq!(served(dir, port), new);
}
