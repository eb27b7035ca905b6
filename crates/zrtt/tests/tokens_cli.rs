//! Address tokens without configuration (issue 12 item 4), with the real
//! binary on loopback: the gateway issues tokens by default (a key made at
//! start, or the key store's token keys, shared by every gateway reading
//! the store), and `zrtt get` keeps them in its per-user state directory
//! (`XDG_STATE_HOME`, here a directory of the test), so a returning client
//! is answered before the TCP handshake completes. Checks the gateway's
//! counters and the state files, never timings.

mod common;
use common::*;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const HOST: &str = "www.example.com";

/// A gateway on free ports with `extra` flags; its listen and admin addresses.
fn gateway(dir: &Path, extra: &[&str]) -> (Guard, String, String) {
    gateway_on(dir, &format!("127.0.0.1:{}", free_port()), extra)
}

/// A gateway listening on `gw`.
fn gateway_on(dir: &Path, gw: &str, extra: &[&str]) -> (Guard, String, String) {
    let (gw, admin) = (gw.to_string(), format!("127.0.0.1:{}", free_port()));
    let backend = backend().to_string();
    let mut args = vec![
        "gateway",
        "--listen",
        &gw,
        "--backend",
        &backend,
        "--admin",
        &admin,
    ];
    args.extend_from_slice(extra);
    let child = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(&args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&gw);
    wait_listening(&admin);
    (child, gw, admin)
}

/// `zrtt get` over zrtt only (so a silent fall back to TLS fails the
/// test), with the test's state directory.
fn get(dir: &Path, gw: &str, record: &str, extra: &[&str]) {
    let port = gw.rsplit(':').next().unwrap();
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let url = format!("https://{HOST}:{port}/");
    let mut args = vec![
        "get",
        "-m",
        "20s",
        "-o",
        "body.txt",
        "--zrtt-only",
        "--record",
        record,
        "--cert",
        "cert.pem",
        "--cacert",
        "ca.pem",
        "--resolve",
        &resolve,
    ];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = zrtt(dir, &args);
    assert!(
        out.status.success(),
        "zrtt get: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(dir.join("body.txt")).unwrap(), "ok");
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_returning_client_is_answered_early_without_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let (_gw, gw, admin) = gateway(
        dir,
        &[
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
        ],
    );
    // The replay filter refuses flights stamped in the gateway's first seconds.
    std::thread::sleep(Duration::from_secs(3));

    // First visit: no token yet; the gateway issues one, the client keeps it.
    // (--no-resume: a resumption ticket would prove the next visit instead;
    // resume_cli.rs.)
    get(dir, &gw, "k1.rec", &["--no-resume"]);
    assert_eq!(gateway_counter(&admin, "tokens_issued"), 1);
    assert_eq!(gateway_counter(&admin, "tokens_accepted"), 0);
    let state = dir.join(".state/zrtt/tokens");
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(text.contains(&format!("token {HOST} 127.0.0.1 ")), "{text}");
    assert_eq!(mode(&state), 0o600);
    assert_eq!(mode(&dir.join(".state/zrtt")), 0o700);

    // Second visit from the same address: the token proves it.
    get(dir, &gw, "k1.rec", &["--no-resume"]);
    assert_eq!(gateway_counter(&admin, "tokens_accepted"), 1);
    assert_eq!(gateway_counter(&admin, "tokens_refused"), 0);

    // --no-state: a first visit again, the state file untouched.
    let before = std::fs::read(&state).unwrap();
    get(dir, &gw, "k1.rec", &["--no-state"]);
    assert_eq!(gateway_counter(&admin, "tokens_accepted"), 1);
    assert_eq!(std::fs::read(&state).unwrap(), before);
}

#[test]
fn gateways_sharing_a_key_store_accept_each_others_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keystore(dir, HOST, ".", &[]);
    let (_a, gw_a, admin_a) = gateway(dir, &["--keystore", "ks"]);
    let (_b, gw_b, admin_b) = gateway(dir, &["--keystore", "ks"]);
    // The store's token keys: the sealing epoch's and the next, owner-only.
    let tokens: Vec<_> = std::fs::read_dir(dir.join("ks/tokens"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert!(tokens.iter().all(|p| mode(p) == 0o600));
    let record = std::fs::read_dir(dir.join("ks/keys"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "record"))
        .unwrap();
    let record = record.to_str().unwrap();
    std::thread::sleep(Duration::from_secs(3));

    // A token from gateway A opens at gateway B (same host name and address).
    get(dir, &gw_a, record, &["--no-resume"]);
    assert_eq!(gateway_counter(&admin_a, "tokens_issued"), 1);
    get(dir, &gw_b, record, &["--no-resume"]);
    assert_eq!(gateway_counter(&admin_b, "tokens_accepted"), 1);
    assert_eq!(gateway_counter(&admin_b, "tokens_refused"), 0);
}

/// A restart keeps the replay filter (docs/PROTOCOL.md §7): the stopping
/// gateway saves it (owner-only), the next one reads and removes it and
/// accepts a flight at once, where a fresh filter refuses every flight
/// stamped in its first two seconds.
#[test]
fn a_restart_keeps_the_replay_filter_and_accepts_flights_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let args = [
        "--key",
        "k1.key",
        "--record",
        "k1.rec",
        "--cert",
        "cert.pem",
        "--cert-key",
        "cert.key",
        "--replay-state",
        "replay.state",
    ];
    let state = dir.join("replay.state");
    let (mut first, gw, admin) = gateway(dir, &args);
    assert!(!state.exists());
    // No snapshot yet: this start refuses flights stamped in its first seconds.
    std::thread::sleep(Duration::from_secs(3));
    get(dir, &gw, "k1.rec", &["--no-state"]);
    assert_eq!(gateway_counter(&admin, "zrtt_accepted"), 1);
    let st = Command::new("kill")
        .args(["-TERM", &first.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(first.0.wait().unwrap().success());
    assert!(state.exists(), "saved at shutdown");
    assert_eq!(mode(&state), 0o600);

    // The same gateway (host and listen address) starts again.
    let (_second, gw, admin) = gateway_on(dir, &gw, &args);
    assert!(!state.exists(), "read once, then removed");
    get(dir, &gw, "k1.rec", &["--no-state"]);
    assert_eq!(gateway_counter(&admin, "zrtt_accepted"), 1);
    assert_eq!(
        gateway_counter(&admin, "zrtt_rejects_sent"),
        0,
        "no restart refusal"
    );
}

/// A key record names the provenance verifiers its gateway trusts (issue 12
/// item 4): after a first contact `zrtt get` fetches certificates from them
/// into its default state, and its next first contact (no token: a state
/// holding only the certificates) is proven by them.
#[test]
fn a_client_learns_the_verifiers_a_record_names_and_is_proven_next_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
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
            HOST,
            "--quorum",
            "1",
            "--verifier-name",
            "pv1.example.net",
            "--out",
            "pv.rec",
        ],
    );
    let show = ok(dir, &["keys", "show", "pv.rec"]);
    assert!(show.contains("verifiers: pv1.example.net"), "{show}");
    let keygen = ok(dir, &["verifier", "keygen", "--out", "pv.key"]);
    let pv_hex = keygen
        .lines()
        .find_map(|l| l.strip_prefix("public key:"))
        .unwrap()
        .trim()
        .to_owned();
    // The verifier at port 4480 (the port a named verifier is reached at),
    // on a loopback address of its own.
    let n = std::process::id();
    let pv_ip = format!(
        "127.{}.{}.{}",
        100 + n % 100,
        (n >> 8) % 250 + 1,
        n % 250 + 1
    );
    let pv = format!("{pv_ip}:4480");
    let _pv = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["verifier", "serve", "--listen", &pv, "--key", "pv.key"])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&pv);
    let (_gw, gw, admin) = gateway(
        dir,
        &[
            "--key",
            "k1.key",
            "--record",
            "pv.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--verifier",
            &pv_hex,
            "--quorum",
            "1",
        ],
    );
    std::thread::sleep(Duration::from_secs(3));
    let resolve = format!("--resolve=pv1.example.net:4480:{pv_ip}");

    // First contact: not proven; afterwards the state holds a certificate.
    get(dir, &gw, "pv.rec", &[&resolve]);
    assert_eq!(gateway_counter(&admin, "provenance_accepted"), 0);
    let state = dir.join(".state/zrtt/provenance");
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(text.lines().any(|l| l.starts_with("127.0.0.1 ")), "{text}");
    assert_eq!(mode(&state), 0o600);

    // Next first contact (the token state removed): proven by the certificate.
    std::fs::remove_file(dir.join(".state/zrtt/tokens")).unwrap();
    get(dir, &gw, "pv.rec", &[&resolve]);
    assert_eq!(gateway_counter(&admin, "provenance_accepted"), 1);
    assert_eq!(gateway_counter(&admin, "tokens_accepted"), 0);
    assert_eq!(gateway_counter(&admin, "provenance_refused"), 0);
}
