//! `zrtt keys` end to end through the real binary.

mod common;
use common::*;

use std::os::unix::fs::PermissionsExt;

fn setup(alg: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    ok(
        d.path(),
        &[
            "keys",
            "cert",
            "--name",
            "www.example.com",
            "--alg",
            alg,
            "--out-dir",
            "pki",
        ],
    );
    ok(d.path(), &["keys", "generate", "--out", "k1.pem"]);
    ok(
        d.path(),
        &[
            "keys",
            "sign",
            "--key",
            "k1.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
            "--name",
            "WWW.example.com.",
            "--lifetime",
            "30m",
            "--max-early-data",
            "4096",
            "--tokens",
            "--out",
            "k1.record",
        ],
    );
    d
}

#[test]
fn sign_show_verify_encode_with_both_certificate_keys() {
    for alg in ["ecdsa-p256", "ed25519"] {
        let d = setup(alg);
        let p = d.path();
        let mode = std::fs::metadata(p.join("k1.pem"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "private key readable by others");
        let mode = std::fs::metadata(p.join("pki/cert.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);

        let show = ok(p, &["keys", "show", "k1.record"]);
        assert!(show.contains("name:             www.example.com"), "{show}");
        assert!(show.contains("lifetime:         1800 s"), "{show}");
        assert!(show.contains("max early data:   4096 bytes"), "{show}");
        assert!(show.contains("issues tokens:    yes"), "{show}");

        let v = ok(
            p,
            &[
                "keys",
                "verify",
                "k1.record",
                "--cert",
                "pki/cert.pem",
                "--name",
                "www.example.com",
            ],
        );
        assert!(v.contains("valid for www.example.com"), "{v}");

        let zone = ok(
            p,
            &[
                "keys",
                "encode",
                "k1.record",
                "--cert",
                "pki/cert.pem",
                "--ipv4hint",
                "198.18.0.2",
            ],
        );
        assert!(zone.contains(
            "www.example.com. 300 IN HTTPS 1 . alpn=\"http/1.1\" ipv4hint=198.18.0.2 key65380=\""
        ));
        assert!(zone.contains("www.example.com. 300 IN TXT \"v=zrtt1 id="));
        assert!(zone.contains("zrtt-tunnel.www.example.com. 300 IN AAAA 0:"));
        assert!(zone.contains("www.example.com. 300 IN TLSA 3 0 0 30"));
        // The lines load in BIND with its defaults for a primary zone
        // (check-names fail: no underscore in an address record's owner).
        let checkzone = ["/usr/bin/named-checkzone", "/usr/sbin/named-checkzone"]
            .into_iter()
            .find(|c| std::path::Path::new(c).exists());
        match checkzone {
            None => {
                eprintln!("named-checkzone not installed (run scripts/install-deps.sh): skipped")
            }
            Some(c) => {
                let file = format!(
                    "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\n{zone}"
                );
                std::fs::write(p.join("example.com.zone"), file).unwrap();
                let out = std::process::Command::new(c)
                    .args(["-k", "fail", "-n", "fail", "example.com"])
                    .arg(p.join("example.com.zone"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "named-checkzone: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
        }

        // The TXT text itself is a record file the tools accept.
        let txt = ok(p, &["keys", "encode", "k1.record", "--format", "txt"]);
        let text: String = txt.trim().trim_matches('"').split("\" \"").collect();
        std::fs::write(p.join("k1.txt"), text).unwrap();
        assert_eq!(ok(p, &["keys", "show", "k1.txt"]), show);
    }
}

#[test]
fn refusals_exit_2_with_the_reason() {
    let d = setup("ecdsa-p256");
    let p = d.path();
    let cases: [(&[&str], &str); 3] = [
        (
            &["--name", "other.example.com"],
            "record is for \"www.example.com\", expected \"other.example.com\"",
        ),
        (
            &["--name", "www.example.com", "--at", "2100-01-01T00:00:00Z"],
            "expired at",
        ),
        (
            &["--name", "www.example.com", "--at", "2000-01-01T00:00:00Z"],
            "not valid before",
        ),
    ];
    for (extra, reason) in cases {
        let mut args = vec!["keys", "verify", "k1.record", "--cert", "pki/cert.pem"];
        args.extend_from_slice(extra);
        let out = zrtt(p, &args);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(reason),
            "{:?}",
            out
        );
    }
    // Tampered public key: bad signature.
    let mut rec = std::fs::read(p.join("k1.record")).unwrap();
    rec[10] ^= 1;
    std::fs::write(p.join("bad.record"), &rec).unwrap();
    let out = zrtt(
        p,
        &[
            "keys",
            "verify",
            "bad.record",
            "--cert",
            "pki/cert.pem",
            "--name",
            "www.example.com",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bad signature"));
    // A malformed record is refused (2) with its reason; a missing file is
    // an error (1).
    std::fs::write(p.join("junk.record"), b"not a record at all").unwrap();
    for (file, code, says) in [
        ("junk.record", 2, "malformed record"),
        ("missing.record", 1, "reading missing.record"),
    ] {
        let out = zrtt(
            p,
            &[
                "keys",
                "verify",
                file,
                "--cert",
                "pki/cert.pem",
                "--name",
                "www.example.com",
            ],
        );
        assert_eq!(out.status.code(), Some(code), "{out:?}");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(says), "{text}");
    }
    // Another certificate: mismatch.
    ok(
        p,
        &[
            "keys",
            "cert",
            "--name",
            "www.example.com",
            "--out-dir",
            "pki2",
        ],
    );
    let out = zrtt(
        p,
        &[
            "keys",
            "verify",
            "k1.record",
            "--cert",
            "pki2/cert.pem",
            "--name",
            "www.example.com",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("certificate does not match"));
    // Truncated file: error exit 1 naming the file.
    std::fs::write(p.join("short.record"), &rec[..50]).unwrap();
    let out = zrtt(p, &["keys", "show", "short.record"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("short.record: not a zrtt record: malformed: truncated"),
        "{err}"
    );
}

#[test]
fn signing_with_a_key_that_is_not_the_certificates_fails() {
    let d = setup("ecdsa-p256");
    let p = d.path();
    ok(
        p,
        &[
            "keys",
            "cert",
            "--name",
            "www.example.com",
            "--out-dir",
            "pki2",
        ],
    );
    let out = zrtt(
        p,
        &[
            "keys",
            "sign",
            "--key",
            "k1.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki2/cert.key",
            "--name",
            "www.example.com",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not verify against the certificate")
    );
    // A name the certificate does not cover.
    let out = zrtt(
        p,
        &[
            "keys",
            "sign",
            "--key",
            "k1.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
            "--name",
            "evil.example.org",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not cover the name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn records_may_not_outlive_their_certificate() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    ok(
        p,
        &[
            "keys",
            "cert",
            "--name",
            "www.example.com",
            "--days",
            "1",
            "--out-dir",
            "pki",
        ],
    );
    ok(p, &["keys", "generate", "--out", "k.pem"]);
    let sign = |nb: u64| {
        zrtt(
            p,
            &[
                "keys",
                "sign",
                "--key",
                "k.pem",
                "--cert",
                "pki/cert.pem",
                "--cert-key",
                "pki/cert.key",
                "--name",
                "www.example.com",
                "--not-before",
                &nb.to_string(),
                "--lifetime",
                "1h",
                "--out",
                "r.record",
            ],
        )
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(sign(now).status.success());
    // The certificate ends at midnight UTC after tomorrow at the latest.
    let out = sign(now + 3 * 86400);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("outside its certificate"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Longer than a week is refused whatever the certificate says.
    let out = zrtt(
        p,
        &[
            "keys",
            "sign",
            "--key",
            "k.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
            "--name",
            "www.example.com",
            "--lifetime",
            "8d",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the maximum"));
}

#[test]
fn rotation_overlap_encodes_both_keys_and_refuses_duplicates() {
    let d = setup("ed25519");
    let p = d.path();
    ok(p, &["keys", "generate", "--out", "k2.pem"]);
    ok(
        p,
        &[
            "keys",
            "sign",
            "--key",
            "k2.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
            "--name",
            "www.example.com",
            "--out",
            "k2.record",
        ],
    );
    let hex = ok(
        p,
        &[
            "keys",
            "encode",
            "k1.record",
            "k2.record",
            "--format",
            "hex",
        ],
    );
    std::fs::write(p.join("list.hex"), hex).unwrap();
    let v = ok(
        p,
        &[
            "keys",
            "verify",
            "list.hex",
            "--cert",
            "pki/cert.pem",
            "--name",
            "www.example.com",
        ],
    );
    assert_eq!(v.lines().count(), 2, "{v}");
    let out = zrtt(p, &["keys", "encode", "k1.record", "k1.record"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate key id"));
}

/// Diagnostics go through `tracing`: `RUST_LOG` filters them, and a
/// malformed `RUST_LOG` is refused before the command does anything.
#[test]
fn rust_log_filters_diagnostics_and_bad_values_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let run = |rust_log: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["keys", "generate", "--out", "k.pem"])
            .env("RUST_LOG", rust_log)
            .current_dir(d.path())
            .output()
            .unwrap()
    };
    let out = run("zrtt=loud");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RUST_LOG=\"zrtt=loud\""), "{err}");
    assert!(
        !d.path().join("k.pem").exists(),
        "nothing done on bad input"
    );
    // "wrote FILE" after signing is an info line: shown by default, hidden
    // with RUST_LOG=warn.
    let d = setup("ed25519");
    let sign = |out: &str, rust_log: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_zrtt"));
        c.args([
            "keys",
            "sign",
            "--key",
            "k1.pem",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
            "--name",
            "www.example.com",
            "--out",
            out,
        ])
        .env_remove("RUST_LOG")
        .current_dir(d.path());
        if let Some(v) = rust_log {
            c.env("RUST_LOG", v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let loud = sign("a.record", None);
    assert!(loud.contains("wrote a.record"), "info by default: {loud:?}");
    let quiet = sign("b.record", Some("warn"));
    assert!(
        !quiet.contains("wrote"),
        "RUST_LOG=warn hides info: {quiet:?}"
    );
    assert!(d.path().join("b.record").exists());
}

/// `zrtt get -v --record FILE` says why the file's key is not used (the
/// DNS path says it too: tests/get_dns.rs).
#[test]
fn get_verbose_says_why_a_record_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    key_and_record(p, "www.example.com");
    // Nothing listens there: the notes come before the connection fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = zrtt(
        p,
        &[
            "get",
            "-v",
            "-m",
            "5s",
            "--resolve",
            &format!("other.example.com:{port}:127.0.0.1"),
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            &format!("https://other.example.com:{port}/"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused key 0x") && err.contains("record is for \"www.example.com\""),
        "{err}"
    );
}
