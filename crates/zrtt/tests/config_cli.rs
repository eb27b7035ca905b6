//! `--config FILE` with the real binary: a gateway configured by one TOML
//! file (paths relative to the file), `--check-config` accepting it and
//! refusing broken ones with the reason, the command line overriding the
//! file, and a request served through the configured gateway.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const HOST: &str = "www.example.com";

const CONF: &str = r#"
# A site in front of a backend; paths are relative to this file.
[gateway]
listen = "127.0.0.1:1"          # replaced on the command line below
backend = "BACKEND"
key = ["../k1.key"]
record = ["../k1.rec"]
cert = "../cert.pem"
cert_key = "../cert.key"
token_lifetime = "30m"
no_fast_open = false

[dns]
zone = "example.com.zone"
"#;

#[test]
fn a_gateway_runs_from_a_config_file_and_bad_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    std::fs::create_dir(dir.join("etc")).unwrap();
    let conf = dir.join("etc/zrtt.toml");
    let backend = backend().to_string();
    // `no_fast_open` is not a gateway flag: refused with its name.
    std::fs::write(&conf, CONF.replace("BACKEND", &backend)).unwrap();
    let out = zrtt(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[gateway] no_fast_open: unknown setting"),
        "{err}"
    );

    let good = CONF
        .replace("BACKEND", &backend)
        .replace("no_fast_open = false\n", "");
    std::fs::write(&conf, &good).unwrap();
    let out = ok(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.trim(), "configuration ok");

    // A file the configuration names is missing: refused, saying which.
    std::fs::write(&conf, good.replace("../k1.key", "../k9.key")).unwrap();
    let out = zrtt(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("k9.key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&conf, &good).unwrap();

    // A fleet's shared replay store (docs/FLEET.md): checked, not contacted.
    let with_store = good.replace(
        "[dns]",
        "replay_store = \"redis+cluster://10.0.0.1:7000,10.0.0.2:7000\"\nreplay_store_timeout = \"2ms\"\nreplay_store_prefix = \"www\"\n\n[dns]",
    );
    std::fs::write(&conf, &with_store).unwrap();
    let out = ok(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.trim(), "configuration ok");
    std::fs::write(
        &conf,
        with_store.replace("redis+cluster://", "memcached://"),
    )
    .unwrap();
    let out = zrtt(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("replay store \"memcached://"), "{err}");
    std::fs::write(&conf, with_store.replace("\"2ms\"", "\"2 weeks\"")).unwrap();
    let out = zrtt(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.status.code(), Some(2), "refused by the flag's parser");
    std::fs::write(&conf, &good).unwrap();

    // Slow-client bounds (docs/GATEWAY.md, Request bodies and streams).
    let bounds = good.replace(
        "[dns]",
        "request_head_timeout = \"10s\"\nmax_concurrent_streams = 64\nmax_early_requests = 4\n\n[dns]",
    );
    std::fs::write(&conf, &bounds).unwrap();
    let out = ok(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.trim(), "configuration ok");
    std::fs::write(&conf, bounds.replace("= 64", "= 0")).unwrap();
    let out = zrtt(
        dir,
        &["gateway", "--config", "etc/zrtt.toml", "--check-config"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-concurrent-streams"), "{err}");
    std::fs::write(&conf, &good).unwrap();

    // Served from the file; --listen on the command line replaces its value.
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args([
            "gateway",
            "--config",
            "etc/zrtt.toml",
            "--listen",
            "127.0.0.1:0",
        ])
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
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let port = addr.port();
    let out = zrtt(
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
            &format!("https://{HOST}:{port}/"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");

    // Without --cacert the TLS fallback trusts the system's roots, found
    // as rustls-native-certs finds them: SSL_CERT_FILE names the test CA.
    let tls_get = |ssl_cert_file: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_zrtt"));
        c.args(["get", "-m", "20s", "--no-state", "--no-dns"])
            .args(["--resolve", &format!("{HOST}:{port}:127.0.0.1")])
            .arg(format!("https://{HOST}:{port}/"))
            .current_dir(dir)
            .env("XDG_STATE_HOME", dir.join(".state"))
            .env_remove("SSL_CERT_DIR");
        match ssl_cert_file {
            Some(f) => c.env("SSL_CERT_FILE", dir.join(f)),
            None => c.env_remove("SSL_CERT_FILE"),
        };
        c.output().unwrap()
    };
    let out = tls_get(Some("ca.pem"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
    let out = tls_get(None);
    assert_eq!(
        out.status.code(),
        Some(35),
        "the test CA is not a system root"
    );
}

/// The shipped systemd unit (dist/systemd/zrtt-gateway.service) passes
/// `systemd-analyze verify` with this build's binary in place of
/// /usr/local/bin/zrtt, and its pre-start check runs the real command.
#[test]
fn systemd_unit_verifies() {
    let have = Command::new("sh")
        .args(["-c", "command -v systemd-analyze"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("systemd_unit_verifies: skipped: systemd-analyze not installed");
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/systemd/zrtt-gateway.service"
    ))
    .unwrap();
    assert!(unit.contains(
        "ExecStartPre=/usr/local/bin/zrtt gateway --config /etc/zrtt/zrtt.toml --check-config"
    ));
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // A successor started by SIGHUP becomes the service (docs/GATEWAY.md).
    assert!(unit.contains("Type=notify") && unit.contains("NotifyAccess=all"));
    assert!(unit.contains("--handover /run/zrtt/gateway.sock"));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("zrtt-gateway.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/zrtt", env!("CARGO_BIN_EXE_zrtt")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("zrtt-gateway.service:"), "{text}");
    // The fleet's rotator: a oneshot service and its timer.
    for name in ["zrtt-keys-rotate.service", "zrtt-keys-rotate.timer"] {
        let unit = std::fs::read_to_string(format!(
            "{}/../../dist/systemd/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        std::fs::write(
            tmp.path().join(name),
            unit.replace("/usr/local/bin/zrtt", env!("CARGO_BIN_EXE_zrtt")),
        )
        .unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(tmp.path().join("zrtt-keys-rotate.timer"))
        .arg(tmp.path().join("zrtt-keys-rotate.service"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("zrtt-keys-rotate"), "{text}");
}

/// Private key files others can read are refused before anything starts
/// (exit 2), naming the file, its mode and the fix; mode 0600 works.
#[test]
fn key_files_others_can_read_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    // 32 bytes as 64 hex digits, as docs/GATEWAY.md makes it.
    std::fs::write(dir.join("token.key"), format!("{}\n", "ab".repeat(32))).unwrap();
    let backend = backend().to_string();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "gateway",
            "--listen",
            "127.0.0.1:1",
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
            "--token-key",
            "token.key",
            "--check-config",
        ];
        args.extend_from_slice(extra);
        zrtt(dir, &args)
    };
    let set_mode = |file: &str, mode: u32| {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set_mode("token.key", 0o644);
    for file in ["token.key", "k1.key", "cert.key"] {
        set_mode(file, 0o644);
        let out = check(&[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert!(
            err.contains(file) && err.contains("mode 0644") && err.contains("chmod 600"),
            "{file}: {err}"
        );
        set_mode(file, 0o600);
    }
    let out = check(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "configuration ok"
    );

    // `zrtt keys sign` and `zrtt verifier serve` read private keys too.
    set_mode("cert.key", 0o640);
    let out = zrtt(
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
            "--out",
            "k2.rec",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mode 0640"));
    ok(dir, &["verifier", "keygen", "--out", "pv.key"]);
    set_mode("pv.key", 0o604);
    let out = zrtt(
        dir,
        &[
            "verifier",
            "serve",
            "--listen",
            "127.0.0.1:1",
            "--key",
            "pv.key",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pv.key: mode 0604"));
}
