//! `zrtt get --http2` against `zrtt gateway` with the real binary on
//! loopback: a record signed with `--h2` makes the client speak HTTP/2
//! inside zrtt, the request still in the first flight; without the flag
//! the same command speaks HTTP/1.1. Checks the gateway's counters and
//! `-v` output, never timings.

mod common;
use common::*;

use std::path::Path;

const HOST: &str = "a.example";

/// Certificate, key and a record signed with `extra` policy flags.
fn keys(dir: &Path, extra: &[&str]) {
    ok(dir, &["keys", "cert", "--name", HOST, "--out-dir", "."]);
    ok(dir, &["keys", "generate", "--out", "k1.key"]);
    let mut args = vec![
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
        "--out",
        "k1.rec",
    ];
    args.extend_from_slice(extra);
    ok(dir, &args);
}

/// A gateway serving `k1.key` with `extra` flags; its port and admin address.
fn gateway(dir: &Path, extra: &[&str]) -> (Guard, u16, String) {
    let port = free_port();
    let (gw, admin) = (
        format!("127.0.0.1:{port}"),
        format!("127.0.0.1:{}", free_port()),
    );
    let flags = [KEY_FLAGS, extra].concat();
    let child = spawn_gateway(dir, &gw, &backend().to_string(), &admin, &flags);
    (child, port, admin)
}

/// `zrtt get --http2 -v` (`--zrtt-only` if `zrtt_only`); asked again while
/// the fresh gateway's replay filter answers Busy (at most 20 s).
fn get_h2(dir: &Path, port: u16, zrtt_only: bool) -> String {
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let url = format!("https://{HOST}:{port}/x");
    let mut args = vec![
        "get",
        "--http2",
        "-v",
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
        &url,
    ];
    if zrtt_only {
        args.insert(1, "--zrtt-only");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = zrtt(dir, &args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("server busy") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        assert!(out.status.success(), "zrtt get: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
        return err;
    }
}

#[test]
fn get_speaks_http2_in_zrtt_where_the_record_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir, &["--h2"]);
    assert!(ok(dir, &["keys", "show", "k1.rec"]).contains("http/2 in zrtt:   yes"));
    let (_gw, port, admin) = gateway(dir, &[]);
    let err = get_h2(dir, port, true);
    assert!(err.contains("< HTTP/2.0 200"), "{err}");
    assert!(err.contains("early data: true"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_h2_connections"), 1);
    assert_eq!(gateway_counter(&admin, "early_requests"), 1);
}

#[test]
fn get_speaks_http1_where_the_record_does_not_offer_http2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir, &[]);
    assert!(ok(dir, &["keys", "show", "k1.rec"]).contains("http/2 in zrtt:   no"));
    let (_gw, port, admin) = gateway(dir, &[]);
    let err = get_h2(dir, port, true);
    assert!(err.contains("< HTTP/1.1 200"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_h2_connections"), 0);
    assert_eq!(gateway_counter(&admin, "early_requests"), 1);
}

#[test]
fn get_falls_back_to_tls_h2_where_zrtt_does_not_serve_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir, &["--h2"]);
    let (_gw, port, admin) = gateway(dir, &["--no-zrtt-http2"]);
    let err = get_h2(dir, port, false);
    assert!(err.contains("< HTTP/2.0 200"), "{err}");
    assert!(err.contains("mode tls-fallback"), "{err}");
    assert!(err.contains("unsupported"), "{err}");
    assert_eq!(gateway_counter(&admin, "zrtt_h2_connections"), 0);
    // (Earlier attempts refused Busy by the fresh replay filter also fell
    // back to TLS h2.)
    assert!(gateway_counter(&admin, "tls_h2_connections") >= 1);
}
