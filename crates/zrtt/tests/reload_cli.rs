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

/// The key store's certificate is renewed and its record re-signed while a
/// client still holds the previous record (as resolvers do until its TTL
/// runs out): its first flights still decrypt at the gateway, which keeps
/// the previous record of the same key and terms (PROTOCOL.md §6). Before,
/// they went unanswered and the client fell back to TLS after its reply
/// timeout.
#[test]
fn flights_on_the_previous_record_are_answered_after_a_renewal() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    ok(dir, &["keys", "cert", "--name", HOST, "--out-dir", "pki2"]);
    keystore(dir, HOST, "pki", &[]);
    let record = |name: &str| {
        let rec = std::fs::read_dir(dir.join("ks/keys"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "record"))
            .unwrap();
        std::fs::copy(rec, dir.join(name)).unwrap();
    };
    record("old.rec");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let admin = format!("127.0.0.1:{}", free_port());
    let _gw = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["gateway", "--listen", &listen, "--backend"])
            .arg(backend().to_string())
            .args(["--keystore", "ks", "--refresh", "1", "--admin", &admin])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&listen);
    // The replay filter refuses flights stamped in its first 2 s.
    std::thread::sleep(Duration::from_millis(2500));
    let get = |rec: &str, pki: &str| {
        let out = zrtt(
            dir,
            &[
                "get",
                "--no-state",
                "--zrtt-only",
                "-m",
                "20s",
                "-o",
                "/dev/null",
                "-w",
                "%{zrtt_mode}",
                "--record",
                rec,
                "--cert",
                &format!("{pki}/cert.pem"),
                "--resolve",
                &format!("{HOST}:{port}:127.0.0.1"),
                &format!("https://{HOST}:{port}/"),
            ],
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (okay, mode, err) = get("old.rec", "pki");
    assert!(okay && mode.starts_with("0rtt"), "{mode} {err}");

    // Renewal: a new certificate in the key store, the record re-signed.
    install(&dir.join("pki2/cert.pem"), &dir.join("ks/cert.pem"));
    install(&dir.join("pki2/cert.key"), &dir.join("ks/cert.key"));
    let out = ok(dir, &["keys", "rotate", "--keystore", "ks"]);
    assert!(out.contains("re-signed"), "{out}");
    record("new.rec");
    assert_ne!(
        std::fs::read(dir.join("old.rec")).unwrap(),
        std::fs::read(dir.join("new.rec")).unwrap()
    );
    // The gateway has the new record once a flight on it is answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (okay, mode, err) = get("new.rec", "pki2");
        if okay && mode.starts_with("0rtt") {
            break;
        }
        assert!(Instant::now() < deadline, "new record not served: {err}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // A client still on the previous record is answered over zrtt.
    assert_eq!(gateway_counter(&admin, "zrtt_on_previous_record"), 0);
    let (okay, mode, err) = get("old.rec", "pki");
    assert!(okay && mode.starts_with("0rtt"), "{mode} {err}");
    assert_eq!(gateway_counter(&admin, "zrtt_on_previous_record"), 1);
}
