//! `--admin` of `zrtt dns`, `zrtt verifier serve` and `zrtt proxy` through
//! the real binary: real clients do the work (dig, `zrtt verifier fetch`,
//! curl through the proxy), curl scrapes `/metrics`, and Python's
//! prometheus_client OpenMetrics parser (Debian's python3-prometheus-client)
//! reads the exposition; the counters must have moved by exactly the work
//! done.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";
const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\nwww IN TXT \"v=spf1 -all\"\n";

/// The zone, plus a TXT set at `big` over 512 bytes.
fn zone() -> String {
    let mut z = ZONE.to_owned();
    for i in 0..3 {
        z.push_str(&format!("big IN TXT \"{i}{}\"\n", "x".repeat(200)));
    }
    z
}

/// Parses OpenMetrics text from stdin; prints `[[type, sample, labels, value], ...]`.
const PARSER: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append([fam.type, s.name, s.labels, s.value])
print(json.dumps(out))
"#;

/// Whether the tools are here; says which is missing otherwise.
fn tools(test: &str, more: &[&str]) -> bool {
    let python = Command::new("/usr/bin/python3")
        .args(["-c", "import prometheus_client.openmetrics.parser"])
        .output()
        .is_ok_and(|o| o.status.success());
    let missing: Vec<&str> = ["curl"]
        .iter()
        .chain(more)
        .copied()
        .filter(|t| !have(t))
        .chain((!python).then_some("python3-prometheus-client"))
        .collect();
    if !missing.is_empty() {
        eprintln!("{test}: skipped, missing {missing:?} (scripts/install-deps.sh)");
    }
    missing.is_empty()
}

/// Start zrtt with `args` in `dir`; its stdout lines until every prefix in
/// `want` was seen (20 s at most), by prefix: the rest of the line.
fn start(dir: &Path, args: &[&str], want: &[&str]) -> (Guard, BTreeMap<String, String>) {
    let mut child = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(args)
            .current_dir(dir)
            .env("XDG_STATE_HOME", dir.join(".state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = mpsc::channel();
    let out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while want.iter().any(|w| !seen.contains_key(*w)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("zrtt {args:?}: no {want:?} lines; got {seen:?}"));
        for w in want {
            if let Some(rest) = line.strip_prefix(w) {
                seen.insert((*w).to_owned(), rest.trim().to_owned());
            }
        }
    }
    (child, seen)
}

/// curl `http://{admin}{path}`: (status, body).
fn admin_get(admin: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}"])
        .arg(format!("http://{admin}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

/// Poll `/readyz` until it answers `want` (20 s at most).
fn wait_ready(admin: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _) = admin_get(admin, "/readyz");
        if code == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stays {code}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One parsed sample.
#[derive(Debug)]
struct Sample {
    kind: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// `/metrics` scraped with curl and parsed by prometheus_client.
struct Scrape(Vec<Sample>);

impl Scrape {
    fn take(admin: &str) -> Self {
        let (code, body) = admin_get(admin, "/metrics");
        assert_eq!(code, 200, "{body}");
        let mut py = Command::new("/usr/bin/python3")
            .args(["-c", PARSER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut py.stdin.take().unwrap(), body.as_bytes()).unwrap();
        let out = py.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "prometheus_client refused the exposition: {}\n{body}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<(String, String, BTreeMap<String, String>, f64)> =
            serde_json::from_slice(&out.stdout).unwrap();
        Self(
            rows.into_iter()
                .map(|(kind, name, labels, value)| Sample {
                    kind,
                    name,
                    labels,
                    value,
                })
                .collect(),
        )
    }

    /// The sum of the samples named `name` carrying every label of `with`.
    fn get(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                with.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// The metric family type of sample `name`.
    fn kind(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|s| s.name == name)
            .map_or("", |s| s.kind.as_str())
    }
}

/// What moved between two scrapes.
fn delta(before: &Scrape, after: &Scrape, name: &str, with: &[(&str, &str)]) -> f64 {
    after.get(name, with) - before.get(name, with)
}

fn dig(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .args(["+norec", "+time=3", "+tries=1", "@127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A secondary that answers every NOTIFY (the query sent back with QR set).
fn notify_answerer() -> (SocketAddr, mpsc::Receiver<()>) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let addr = s.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            if n > 2 {
                buf[2] |= 0x80;
                let _ = s.send_to(&buf[..n], from);
                let _ = tx.send(());
            }
        }
    });
    (addr, rx)
}

#[test]
fn dns_metrics_count_digs_queries_transfers_and_notifies() {
    if !tools("dns_metrics", &["dig"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    keystore(d, HOST, "pki", &[]);
    std::fs::write(d.join("example.com.zone"), zone()).unwrap();
    let (secondary, notified) = notify_answerer();
    let secondary = secondary.to_string();
    let (_dns, lines) = start(
        d,
        &[
            "dns",
            "--zone",
            "example.com.zone",
            "--keystore",
            "ks",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--allow-transfer",
            "127.0.0.1",
            "--notify",
            &secondary,
            "--log-level",
            "warn",
        ],
        &["admin ", "listening "],
    );
    let admin = &lines["admin "];
    let port: u16 = lines["listening "]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp="))
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .unwrap()
        .port();
    assert_eq!(admin_get(admin, "/healthz").0, 200);
    wait_ready(admin, 200);
    // The first refresh changed the serial: one NOTIFY, answered.
    notified.recv_timeout(Duration::from_secs(20)).unwrap();
    let soa = dig(port, &["+short", "example.com", "SOA"]);
    let serial: f64 = soa.split_whitespace().nth(2).unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let before = loop {
        let s = Scrape::take(admin);
        if s.get("zrtt_dns_notifies_total", &[("outcome", "answered")]) == 1.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "NOTIFY not counted");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(before.kind("zrtt_dns_serial"), "gauge");
    assert_eq!(before.get("zrtt_dns_serial", &[]), serial, "{soa}");

    // The work: answered over UDP and TCP, NXDOMAIN, REFUSED (not our
    // zone), truncated (no EDNS, a TXT set over 512 bytes),
    // AXFR allowed from 127.0.0.1 and refused from 127.0.0.2.
    let out = dig(port, &[HOST, "HTTPS"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    let out = dig(port, &["+tcp", HOST, "A"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    let out = dig(port, &["nope.example.com", "A"]);
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    let out = dig(port, &["www.example.org", "A"]);
    assert!(out.contains("status: REFUSED"), "{out}");
    let out = dig(port, &["+noedns", "+ignore", "big.example.com", "TXT"]);
    assert!(out.contains("flags: qr aa tc;"), "{out}");
    let out = dig(port, &["example.com", "AXFR"]);
    assert!(out.contains("XFR size:"), "{out}");
    let out = dig(port, &["-b", "127.0.0.2", "example.com", "AXFR"]);
    assert!(out.contains("Transfer failed"), "{out}");

    let after = Scrape::take(admin);
    assert_eq!(after.kind("zrtt_dns_queries_total"), "counter");
    assert_eq!(after.kind("zrtt_dns_answer_seconds_count"), "histogram");
    let q = |t: &str, outcome: &str, transport: &str| {
        delta(
            &before,
            &after,
            "zrtt_dns_queries_total",
            &[("type", t), ("outcome", outcome), ("transport", transport)],
        )
    };
    assert_eq!(q("HTTPS", "answered", "udp"), 1.0);
    assert_eq!(q("A", "answered", "tcp"), 1.0);
    assert_eq!(q("A", "nxdomain", "udp"), 1.0);
    assert_eq!(q("A", "refused", "udp"), 1.0);
    assert_eq!(q("TXT", "truncated", "udp"), 1.0);
    assert_eq!(q("AXFR", "answered", "tcp"), 1.0);
    assert_eq!(q("AXFR", "refused", "tcp"), 1.0);
    assert_eq!(
        delta(&before, &after, "zrtt_dns_queries_total", &[]),
        7.0,
        "nothing else was asked"
    );
    let t = |outcome: &str| {
        delta(
            &before,
            &after,
            "zrtt_dns_transfers_total",
            &[("type", "AXFR"), ("outcome", outcome)],
        )
    };
    assert_eq!((t("served"), t("refused")), (1.0, 1.0));
    let h = |transport: &str| {
        delta(
            &before,
            &after,
            "zrtt_dns_answer_seconds_count",
            &[("transport", transport)],
        )
    };
    assert_eq!((h("udp"), h("tcp")), (4.0, 3.0));
    assert_eq!(
        after.get(
            "zrtt_dns_answer_seconds_bucket",
            &[("transport", "udp"), ("le", "+Inf")]
        ),
        after.get("zrtt_dns_answer_seconds_count", &[("transport", "udp")])
    );
    assert_eq!(
        after.get("zrtt_dns_serial", &[]),
        serial,
        "no rotation since"
    );
}

#[test]
fn verifier_metrics_count_fetches_refusals_and_readiness() {
    if !tools("verifier_metrics", &[]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A verifier key store without a key yet: not ready, refuses.
    ok(
        d,
        &[
            "keys",
            "cert",
            "--name",
            "pv.example.com",
            "--out-dir",
            "pki",
        ],
    );
    ok(
        d,
        &[
            "verifier",
            "init",
            "--keystore",
            "vs",
            "--name",
            "pv.example.com",
            "--cert",
            "pki/cert.pem",
            "--cert-key",
            "pki/cert.key",
        ],
    );
    let (_pv, lines) = start(
        d,
        &[
            "verifier",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--keystore",
            "vs",
            "--refresh",
            "1s",
            "--admin",
            "127.0.0.1:0",
        ],
        &["admin ", "listening "],
    );
    let (admin, pv) = (&lines["admin "], lines["listening "].clone());
    assert_eq!(admin_get(admin, "/healthz").0, 200);
    assert_eq!(admin_get(admin, "/readyz").0, 503, "no key can sign");
    let before = Scrape::take(admin);
    let fetch = |state: &str| {
        zrtt(
            d,
            &[
                "verifier",
                "fetch",
                "--verifier",
                &pv,
                "--state",
                state,
                "--local",
                "127.0.0.1",
            ],
        )
    };
    assert!(!fetch("st").status.success(), "no key: refused");
    let after = Scrape::take(admin);
    let refused =
        |s: &Scrape, reason: &str| s.get("zrtt_verifier_refused_total", &[("reason", reason)]);
    assert_eq!(refused(&after, "no_key") - refused(&before, "no_key"), 1.0);
    assert_eq!(
        delta(&before, &after, "zrtt_verifier_requests_total", &[]),
        1.0
    );
    assert_eq!(
        delta(&before, &after, "zrtt_verifier_issued_total", &[]),
        0.0
    );

    // A key appears (rotated elsewhere): ready, and certificates issued.
    ok(d, &["verifier", "rotate", "--keystore", "vs"]);
    wait_ready(admin, 200);
    let before = Scrape::take(admin);
    assert!(fetch("st").status.success());
    // A second fetch refreshes the first certificate (doubled duration).
    assert!(fetch("st").status.success());
    // curl is no verifier client: malformed.
    let _ = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o", "/dev/null"])
        .arg(format!("http://{pv}/"))
        .output()
        .unwrap();
    let after = Scrape::take(admin);
    let moved = |name: &str, with: &[(&str, &str)]| delta(&before, &after, name, with);
    assert_eq!(moved("zrtt_verifier_requests_total", &[]), 3.0);
    assert_eq!(moved("zrtt_verifier_issued_total", &[]), 2.0);
    assert_eq!(moved("zrtt_verifier_refreshed_total", &[]), 1.0);
    assert_eq!(
        moved("zrtt_verifier_refused_total", &[("reason", "malformed")]),
        1.0
    );
    assert_eq!(moved("zrtt_verifier_refused_total", &[]), 1.0);
    assert_eq!(moved("zrtt_verifier_signing_seconds_count", &[]), 2.0);
    assert_eq!(
        after.kind("zrtt_verifier_signing_seconds_count"),
        "histogram"
    );
}

#[test]
fn proxy_metrics_count_curls_requests_by_mode_and_lookup() {
    if !tools("proxy_metrics", &[]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    key_and_record(d, HOST);
    let plain = backend();
    let (_gw, gw) = start(
        d,
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            &plain.to_string(),
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--admin",
            "127.0.0.1:0",
        ],
        &["admin ", "listening "],
    );
    let gw_port = gw["listening "].parse::<SocketAddr>().unwrap().port();
    let (_proxy, px) = start(
        d,
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--zrtt-port",
            &format!("{HOST}={gw_port}"),
            "--resolve",
            &format!("{HOST}:{gw_port}:127.0.0.1"),
            "--resolve",
            &format!("plain.test:{}:127.0.0.1", plain.port()),
        ],
        &["admin ", "listening "],
    );
    let (admin, proxy) = (&px["admin "], px["listening "].clone());
    assert_eq!(admin_get(admin, "/healthz").0, 200);
    wait_ready(admin, 200);
    let before = Scrape::take(admin);
    let gw_before = Scrape::take(&gw["admin "]);
    let curl = |url: &str| {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-x",
            ])
            .arg(format!("http://{proxy}"))
            .arg(url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Two requests to the zrtt host, one to a plain host, one to a closed port.
    assert_eq!(curl(&format!("http://{HOST}/")), "200");
    assert_eq!(curl(&format!("http://{HOST}/again")), "200");
    assert_eq!(curl(&format!("http://plain.test:{}/", plain.port())), "200");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert_eq!(curl(&format!("http://{closed}/")), "502");
    // A CONNECT tunnel (curl's TLS then fails against the plain backend).
    let _ = curl(&format!("https://127.0.0.1:{}/", plain.port()));

    let after = Scrape::take(admin);
    let gw_after = Scrape::take(&gw["admin "]);
    let moved = |name: &str, with: &[(&str, &str)]| delta(&before, &after, name, with);
    assert_eq!(moved("zrtt_proxy_zrtt_requests_total", &[]), 2.0);
    assert_eq!(moved("zrtt_proxy_passthrough_requests_total", &[]), 2.0);
    assert_eq!(moved("zrtt_proxy_bad_gateway_total", &[]), 1.0);
    assert_eq!(moved("zrtt_proxy_tunnels_total", &[]), 1.0);
    assert_eq!(moved("zrtt_proxy_connections_total", &[]), 5.0);
    assert_eq!(
        moved("zrtt_proxy_key_lookups_total", &[("outcome", "verified")]),
        2.0
    );
    assert_eq!(
        moved("zrtt_proxy_key_lookups_total", &[("outcome", "none")]),
        2.0
    );
    assert_eq!(moved("zrtt_proxy_key_lookup_seconds_count", &[]), 4.0);
    // Time to first byte: one sample per answered request, by mode; the
    // zrtt requests took whichever mode the gateway chose (early, gated or
    // TLS fallback), told by the gateway's own counters.
    let fb = |mode: &str| moved("zrtt_proxy_first_byte_seconds_count", &[("mode", mode)]);
    assert_eq!(fb("plain"), 1.0);
    assert_eq!(
        fb("zrtt_early") + fb("zrtt_gated") + fb("tls_fallback"),
        2.0
    );
    let gw_moved = |name: &str| delta(&gw_before, &gw_after, name, &[]);
    assert_eq!(gw_moved("zrtt_gateway_requests_total"), 2.0);
    let tls = gw_moved("zrtt_gateway_tls_connections_total");
    let zrtt_conns = moved("zrtt_proxy_zrtt_connections_total", &[]);
    assert!(
        (1.0..=2.0).contains(&zrtt_conns),
        "one pooled connection, or two: {zrtt_conns}"
    );
    assert_eq!(
        moved("zrtt_proxy_connection_setup_seconds_count", &[]),
        zrtt_conns
    );
    if tls == 0.0 {
        assert_eq!(fb("tls_fallback"), 0.0);
        assert_eq!(
            moved(
                "zrtt_proxy_zrtt_connections_total",
                &[("mode", "zrtt_early")]
            ) + moved(
                "zrtt_proxy_zrtt_connections_total",
                &[("mode", "zrtt_gated")]
            ),
            zrtt_conns
        );
    }
}
