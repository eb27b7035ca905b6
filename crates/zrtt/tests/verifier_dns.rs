//! Verifier keys published in DNS, end to end on loopback with the real
//! binary: a verifier key store (`zrtt verifier init/rotate`), `zrtt dns
//! --verifier-keystore` publishing it, `zrtt verifier serve --keystore` signing
//! with its current key, and `zrtt gateway --verifier-name` trusting what
//! DNS publishes: a certificate signed by the published key is accepted
//! (answered before the handshake), one signed by an unpublished key is
//! refused (gated path), and the request is served either way.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const HOST: &str = "www.example.com";
const PV: &str = "pv1.example.com";
const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 127.0.0.1\nwww IN A 127.0.0.1\npv1 IN A 127.0.0.1\n";

fn spawn(dir: &Path, args: &[&str], stderr: Stdio) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

fn metric(admin: &str, name: &str) -> u64 {
    gateway_counter(admin, name)
}

#[test]
fn gateway_trusts_the_keys_a_verifier_publishes_in_dns_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The gateway's key and record (from files), and the verifier's
    // certificate for its own name, from another CA.
    key_and_record(dir, HOST);
    ok(dir, &["keys", "cert", "--name", PV, "--out-dir", "pvpki"]);
    ok(
        dir,
        &[
            "verifier",
            "init",
            "--keystore",
            "pvks",
            "--name",
            PV,
            "--cert",
            "pvpki/cert.pem",
            "--cert-key",
            "pvpki/cert.key",
        ],
    );
    // `zrtt pv` is the short alias of `zrtt verifier`.
    let rotated = ok(dir, &["pv", "rotate", "--keystore", "pvks"]);
    assert!(rotated.contains("created"), "{rotated}");
    let status = ok(dir, &["verifier", "status", "--keystore", "pvks"]);
    let published_id = status
        .lines()
        .find(|l| l.contains(" current "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no current key: {status}"))
        .to_owned();
    let fragment = ok(dir, &["verifier", "records", "--keystore", "pvks"]);
    assert!(
        fragment.contains(&format!(
            "_zrttpv.{PV}. 300 IN TXT \"v=zrttpv1 id={published_id} "
        )) && fragment.contains(&format!("_zrttpv.{PV}. 300 IN TLSA 3 0 0 ")),
        "{fragment}"
    );

    // `zrtt dns` publishes the verifier's keys.
    std::fs::write(dir.join("example.com.zone"), ZONE).unwrap();
    let mut dns = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args([
                "dns",
                "--zone",
                "example.com.zone",
                "--verifier-keystore",
                "pvks",
                "--no-rotate",
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "warn",
            ])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(dns.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let dns_addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp="))
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();

    // Two verifiers: one signing from the published store, one with a key
    // nobody published.
    ok(dir, &["verifier", "keygen", "--out", "rogue.key"]);
    let (pv_port, rogue_port, gw_port, admin_port) =
        (free_port(), free_port(), free_port(), free_port());
    let pv = format!("127.0.0.1:{pv_port}");
    let rogue = format!("127.0.0.1:{rogue_port}");
    let gw = format!("127.0.0.1:{gw_port}");
    let admin = format!("127.0.0.1:{admin_port}");
    let _pv = spawn(
        dir,
        &["verifier", "serve", "--listen", &pv, "--keystore", "pvks"],
        Stdio::null(),
    );
    let _rogue = spawn(
        dir,
        &[
            "verifier",
            "serve",
            "--listen",
            &rogue,
            "--key",
            "rogue.key",
        ],
        Stdio::null(),
    );

    // The gateway learns the verifier's keys from DNS (TLSA chained to the
    // verifier's CA) before it serves.
    let gw_log = dir.join("gateway.log");
    let _gw = spawn(
        dir,
        &[
            "gateway",
            "--listen",
            &gw,
            "--backend",
            &backend().to_string(),
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--admin",
            &admin,
            "--verifier-name",
            PV,
            "--dns-server",
            &dns_addr,
            "--verifier-cacert",
            "pvpki/ca.pem",
            "--quorum",
            "1",
        ],
        Stdio::from(std::fs::File::create(&gw_log).unwrap()),
    );
    wait_listening(&pv);
    wait_listening(&rogue);
    wait_listening(&gw);
    wait_listening(&admin);
    let log = std::fs::read_to_string(&gw_log).unwrap();
    assert!(
        log.contains(&format!(
            "verifier {PV}: trusting 1 key(s): {published_id} until"
        )),
        "{log}"
    );

    // Certificates for this host's address from each verifier.
    let fetched = ok(
        dir,
        &[
            "verifier",
            "fetch",
            "--verifier",
            &pv,
            "--state",
            "good.state",
            "--local",
            "127.0.0.1",
        ],
    );
    assert!(fetched.contains("valid 1800 s"), "{fetched}");
    ok(
        dir,
        &[
            "verifier",
            "fetch",
            "--verifier",
            &rogue,
            "--state",
            "rogue.state",
            "--local",
            "127.0.0.1",
        ],
    );
    // The published key signed the first: its id is in the state file.
    let good = std::fs::read_to_string(dir.join("good.state")).unwrap();
    assert!(good.contains(&format!(" 01{published_id}")), "{good}");

    // The gateway's replay filter refuses flights from its first seconds.
    std::thread::sleep(Duration::from_secs(3));
    let get = |state: &str| {
        let out = zrtt(
            dir,
            &[
                "get",
                "-m",
                "20s",
                "-o",
                "body.txt",
                "--provenance-state",
                state,
                // The certificates must prove the address, not a
                // resumption ticket from the previous visit.
                "--no-resume",
                "--record",
                "k1.rec",
                "--cert",
                "cert.pem",
                "--cacert",
                "ca.pem",
                "--resolve",
                &format!("{HOST}:{gw_port}:127.0.0.1"),
                &format!("https://{HOST}:{gw_port}/"),
            ],
        );
        assert!(
            out.status.success(),
            "zrtt get failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(dir.join("body.txt")).unwrap(), "ok");
    };

    // Signed by the published key: accepted, answered before the handshake.
    get("good.state");
    assert_eq!(
        metric(&admin, "provenance_accepted"),
        1,
        "{}",
        admin_metrics(&admin)
    );
    assert_eq!(metric(&admin, "zrtt_answered_early"), 1);
    assert_eq!(metric(&admin, "provenance_refused"), 0);

    // Signed by a key nobody published: refused, served on the gated path.
    get("rogue.state");
    assert_eq!(
        metric(&admin, "provenance_refused"),
        1,
        "{}",
        admin_metrics(&admin)
    );
    assert_eq!(metric(&admin, "provenance_accepted"), 1);
    assert_eq!(metric(&admin, "zrtt_answered_gated"), 1);
}

#[test]
fn gateway_serves_when_the_verifier_lookup_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    // A DNS server that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dns = silent.local_addr().unwrap().to_string();
    let (gw_port, admin_port) = (free_port(), free_port());
    let gw = format!("127.0.0.1:{gw_port}");
    let log = dir.join("gateway.log");
    let _gw = spawn(
        dir,
        &[
            "gateway",
            "--listen",
            &gw,
            "--backend",
            &backend().to_string(),
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--admin",
            &format!("127.0.0.1:{admin_port}"),
            "--verifier-name",
            PV,
            "--dns-server",
            &dns,
        ],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    wait_listening(&gw);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("verifier {PV}: no usable keys from DNS"))
            && text.contains("keeping 0 key(s)"),
        "{text}"
    );
    // And it serves.
    std::thread::sleep(Duration::from_secs(3));
    let out = zrtt(
        dir,
        &[
            "get",
            "-m",
            "20s",
            "-o",
            "body.txt",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--resolve",
            &format!("{HOST}:{gw_port}:127.0.0.1"),
            &format!("https://{HOST}:{gw_port}/"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(dir.join("body.txt")).unwrap(), "ok");
}
