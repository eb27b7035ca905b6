//! zrtt resumption (docs/PROTOCOL.md §12, issue 15 item 3) with the real
//! binary on loopback: `zrtt get --token-state FILE` keeps the ticket a
//! gateway grants, the next visit resumes it (Noise NNpsk0, no semi-static
//! DH at the gateway) and is proven by it; `--no-resume` turns it off; a
//! ticket whose key the gateway no longer holds is refused (Reject 9) and
//! the client retries at once without it. Checks the gateway's counters,
//! `-v` and the state file, never timings.

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

const HOST: &str = "www.example.com";

/// The test key's flags (`key_and_record`).
const KEY: &[&str] = KEY_FLAGS;

/// A gateway on `gw` (free ports when `None`) with `keys` (its key
/// flags); its listen and admin addresses.
fn gateway(dir: &Path, gw: Option<&str>, keys: &[&str]) -> (Guard, String, String) {
    let gw = gw.map_or_else(|| format!("127.0.0.1:{}", free_port()), str::to_owned);
    let admin = format!("127.0.0.1:{}", free_port());
    let child = spawn_gateway(dir, &gw, &backend().to_string(), &admin, keys);
    // The replay filter refuses flights stamped in the gateway's first seconds.
    std::thread::sleep(Duration::from_secs(3));
    (child, gw, admin)
}

/// `zrtt get -v` over zrtt only with the state file `state` and the
/// record `record`; its stderr.
fn get_with(dir: &Path, gw: &str, record: &str, extra: &[&str]) -> String {
    let port = gw.rsplit(':').next().unwrap();
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let url = format!("https://{HOST}:{port}/");
    let mut args = vec![
        "get",
        "-v",
        "-m",
        "20s",
        "-o",
        "body.txt",
        "--zrtt-only",
        "--token-state",
        "state",
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
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "zrtt get: {err}");
    assert_eq!(std::fs::read_to_string(dir.join("body.txt")).unwrap(), "ok");
    err
}

fn get(dir: &Path, gw: &str, extra: &[&str]) -> String {
    get_with(dir, gw, "k1.rec", extra)
}

fn tickets_in_state(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("state"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(&format!("ticket {HOST} ")))
        .count()
}

#[test]
fn a_second_visit_resumes_and_a_refused_ticket_falls_back_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let (gw_proc, gw, admin) = gateway(dir, None, KEY);

    // First visit: NK/IK, asking for a ticket; the state keeps it.
    let err = get(dir, &gw, &[]);
    assert!(err.contains("resumed: false"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_tickets_granted"), 1);
    assert_eq!(gateway_counter(&admin, "zrtt_resumed"), 0);
    assert_eq!(tickets_in_state(dir), 1);

    // Second visit: resumed, proven by the ticket, a fresh ticket granted
    // (the used one is gone from the state).
    let early_before = gateway_counter(&admin, "zrtt_answered_early");
    let err = get(dir, &gw, &[]);
    assert!(err.contains("resumed: true"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_resumed"), 1);
    assert_eq!(gateway_counter(&admin, "zrtt_tickets_granted"), 2);
    assert_eq!(
        gateway_counter(&admin, "zrtt_answered_early"),
        early_before + 1,
        "a ticket from this address proves it"
    );
    assert_eq!(tickets_in_state(dir), 1);

    // --no-resume: no ticket used or asked for, the state's kept.
    let err = get(dir, &gw, &["--no-resume"]);
    assert!(err.contains("resumed: false"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_resumed"), 1);
    assert_eq!(gateway_counter(&admin, "zrtt_tickets_granted"), 2);
    assert_eq!(tickets_in_state(dir), 1);

    // A new gateway process (its token key, made at start, differs): the
    // ticket is refused with Reject 9 and the client retries at once
    // without it, then holds the new gateway's ticket.
    drop(gw_proc);
    let (_gw2, gw, admin) = gateway(dir, Some(&gw), KEY);
    let err = get(dir, &gw, &[]);
    assert!(err.contains("resumed: false"), "{err}");
    assert!(err.contains("resumption ticket refused"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_tickets_refused"), 1);
    assert_eq!(gateway_counter(&admin, "zrtt_accepted"), 1);
    assert_eq!(gateway_counter(&admin, "zrtt_tickets_granted"), 1);
    assert_eq!(tickets_in_state(dir), 1);
    let err = get(dir, &gw, &[]);
    assert!(err.contains("resumed: true"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_resumed"), 1);
}

/// Gateways reading one key store derive the same ticket keys (from its
/// token keys): a ticket from A resumes at B.
#[test]
fn a_ticket_from_one_gateway_resumes_at_another_sharing_the_key_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keystore(dir, HOST, ".", &[]);
    let (_a, gw_a, admin_a) = gateway(dir, None, &["--keystore", "ks"]);
    let (_b, gw_b, admin_b) = gateway(dir, None, &["--keystore", "ks"]);
    let record = std::fs::read_dir(dir.join("ks/keys"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "record"))
        .unwrap();
    let record = record.to_str().unwrap();
    let err = get_with(dir, &gw_a, record, &[]);
    assert!(err.contains("resumed: false"), "{err}");
    assert_eq!(gateway_counter(&admin_a, "zrtt_tickets_granted"), 1);
    let err = get_with(dir, &gw_b, record, &[]);
    assert!(err.contains("resumed: true"), "{err}");
    assert_eq!(gateway_counter(&admin_b, "zrtt_resumed"), 1);
    assert_eq!(gateway_counter(&admin_b, "zrtt_tickets_refused"), 0);
}

/// Gateways sharing a --token-key but each with its own semi-static key
/// (so its own replay filter, no --replay-store) do not resume each
/// other's tickets (PROTOCOL.md §12.3): B refuses A's ticket with Reject
/// 9 and the client retries at once with IK, answered once.
#[test]
fn a_gateway_with_another_semi_static_key_refuses_the_ticket() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    ok(dir, &["keys", "generate", "--out", "k2.key"]);
    ok(
        dir,
        &[
            "keys",
            "sign",
            "--key",
            "k2.key",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--name",
            HOST,
            "--out",
            "k2.rec",
        ],
    );
    std::fs::write(dir.join("token.key"), "ab".repeat(32)).unwrap();
    std::fs::set_permissions(
        dir.join("token.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let mut a_flags = KEY.to_vec();
    a_flags.extend_from_slice(&["--token-key", "token.key"]);
    let b_flags = [
        "--key",
        "k2.key",
        "--record",
        "k2.rec",
        "--cert",
        "cert.pem",
        "--cert-key",
        "cert.key",
        "--token-key",
        "token.key",
    ];
    let (_a, gw_a, admin_a) = gateway(dir, None, &a_flags);
    let (_b, gw_b, admin_b) = gateway(dir, None, &b_flags);
    let err = get_with(dir, &gw_a, "k1.rec", &[]);
    assert!(err.contains("resumed: false"), "{err}");
    assert_eq!(gateway_counter(&admin_a, "zrtt_tickets_granted"), 1);
    assert_eq!(tickets_in_state(dir), 1);

    let err = get_with(dir, &gw_b, "k2.rec", &[]);
    assert!(err.contains("resumed: false"), "{err}");
    assert!(err.contains("resumption ticket refused"), "{err}");
    assert_eq!(gateway_counter(&admin_b, "zrtt_tickets_refused"), 1);
    assert_eq!(gateway_counter(&admin_b, "zrtt_resumed"), 0);
    assert_eq!(gateway_counter(&admin_b, "zrtt_accepted"), 1);
    // B's own ticket replaces A's.
    assert_eq!(tickets_in_state(dir), 1);
    let err = get_with(dir, &gw_b, "k2.rec", &[]);
    assert!(err.contains("resumed: true"), "{err}");
    assert_eq!(gateway_counter(&admin_b, "zrtt_resumed"), 1);
}
