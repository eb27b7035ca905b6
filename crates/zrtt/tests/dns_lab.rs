//! Issue 3's measurement: through a real recursive resolver (unbound,
//! default settings, QNAME minimisation on) in network namespaces, a lookup
//! of address plus verified key costs no more round trips than the address
//! alone, cold and warm. Client to resolver 20 ms RTT, resolver to the
//! authoritative `zrtt dns` 100 ms RTT. Needs root and unbound
//! (scripts/install-deps.sh); says why when it skips.

mod common;
use common::*;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zrtt_dns::client::{exchange, query_message, DnsTransport};
use zrtt_dns::proto::rr::RecordType;
use zrtt_dns::resolver::{Resolver, ResolverConfig, Trust};
use zrtt_lab::{Lab, Topology};

fn address_only(server: SocketAddr, name: &str) -> Duration {
    let mut m = query_message(name, RecordType::A).unwrap();
    m.metadata.recursion_desired = true;
    let t = Instant::now();
    let (answer, _) = exchange(server, &m, DnsTransport::Udp, Duration::from_secs(5)).unwrap();
    let d = t.elapsed();
    assert!(!answer.answers.is_empty(), "no A answer for {name}");
    d
}

fn address_and_key(server: SocketAddr, name: &str, ca: &std::path::Path) -> (Duration, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resolver = Resolver::new(
        ResolverConfig::new(server),
        Trust::from_pem_file(ca).unwrap(),
    );
    let t = Instant::now();
    let r = rt
        .block_on(resolver.resolve(name, zrtt_net::client::system_clock()))
        .unwrap();
    let d = t.elapsed();
    assert!(!r.addrs.is_empty(), "no address for {name}: {r:?}");
    assert_eq!(
        r.keys.len(),
        1,
        "no verified key for {name}: refused {:?}",
        r.refused
    );
    (d, r.lookups)
}

fn unbound_conf(
    dir: &std::path::Path,
    res: std::net::Ipv4Addr,
    port: u16,
    auth: std::net::Ipv4Addr,
    minimise: bool,
) -> String {
    format!(
        "server:\n  interface: {res}\n  port: {port}\n  access-control: 198.18.0.0/15 allow\n  do-ip6: no\n  do-not-query-localhost: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound-{port}.pid\"\n  use-syslog: no\n  logfile: \"\"\n  module-config: \"iterator\"\n  edns-buffer-size: 1232\n  qname-minimisation: {}\nstub-zone:\n  name: \"example.com\"\n  stub-addr: {auth}\nremote-control:\n  control-enable: yes\n  control-interface: \"{d}/unbound-{port}.ctl\"\n  control-use-cert: no\n",
        if minimise { "yes" } else { "no" },
        d = dir.display()
    )
}

/// Samples of each lookup; the fastest counts.
const SAMPLES: usize = 3;

/// Empties the resolver's cache of the zone (`unbound-control flush_zone`).
fn flush(conf: &std::path::Path) {
    let out = Command::new("unbound-control")
        .arg("-c")
        .arg(conf)
        .args(["flush_zone", "example.com"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "unbound-control: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn key_lookups_through_unbound_cold_and_warm() {
    if !zrtt_lab::is_root() {
        eprintln!("key_lookups_through_unbound_cold_and_warm: skipped: needs root");
        return;
    }
    if !Command::new("sh")
        .args(["-c", "command -v unbound"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("key_lookups_through_unbound_cold_and_warm: skipped: unbound not installed (scripts/install-deps.sh)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let lab = Lab::up(
        Topology::new()
            .host("client")
            .host("resolver")
            .host("auth")
            .rtt("client", "resolver", Duration::from_millis(20))
            .rtt("resolver", "auth", Duration::from_millis(100))
            .rtt("client", "auth", Duration::from_millis(100)),
    )
    .unwrap();
    let auth = lab.addr("auth").unwrap();
    let res = lab.addr("resolver").unwrap();

    // Names with keys: a/b measured through the default resolver, c/d through
    // one without QNAME minimisation (each name cold exactly once).
    let names = ["a", "b", "c", "d"];
    for n in names {
        zrtt(
            dir,
            &[
                "keys",
                "cert",
                "--name",
                &format!("{n}.example.com"),
                "--out-dir",
                &format!("p{n}"),
            ],
        );
        zrtt(
            dir,
            &[
                "keys",
                "init",
                "--keystore",
                &format!("ks{n}"),
                "--name",
                &format!("{n}.example.com"),
                "--cert",
                &format!("p{n}/cert.pem"),
                "--cert-key",
                &format!("p{n}/cert.key"),
            ],
        );
    }
    let mut zone = format!("$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A {auth}\n");
    for (i, n) in names.iter().enumerate() {
        zone.push_str(&format!("{n} IN A 198.18.1.{}\n", i + 1));
    }
    std::fs::write(dir.join("example.com.zone"), zone).unwrap();
    let mut dns = lab.command("auth", env!("CARGO_BIN_EXE_zrtt")).unwrap();
    dns.args([
        "dns",
        "--zone",
        "example.com.zone",
        "--no-rotate",
        "--listen",
        &format!("{auth}:53"),
        "--log-level",
        "warn",
    ]);
    for n in names {
        dns.args(["--keystore", &format!("ks{n}")]);
    }
    dns.current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _dns = lab.spawn("auth", dns).unwrap();
    let mut unbounds = Vec::new();
    for (port, minimise) in [(53u16, true), (5353, false)] {
        let conf = dir.join(format!("unbound-{port}.conf"));
        std::fs::write(&conf, unbound_conf(dir, res, port, auth, minimise)).unwrap();
        let mut u = lab.command("resolver", "unbound").unwrap();
        u.args(["-d", "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        unbounds.push(lab.spawn("resolver", u).unwrap());
    }

    let cas: Vec<std::path::PathBuf> = names
        .iter()
        .map(|n| dir.join(format!("p{n}/ca.pem")))
        .collect();
    let conf_dir = dir.to_path_buf();
    let rows = lab
        .in_host("client", move || {
            let mut rows = Vec::new();
            for (port, addr_name, full_name, ca) in
                [(53u16, "a", "b", &cas[1]), (5353, "c", "d", &cas[3])]
            {
                let server = SocketAddr::from((res, port));
                // Wait until the chain answers, with a name the measurements do not use.
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let mut m = query_message("ns1.example.com", RecordType::A).unwrap();
                    m.metadata.recursion_desired = true;
                    if exchange(server, &m, DnsTransport::Udp, Duration::from_secs(2))
                        .is_ok_and(|(a, _)| !a.answers.is_empty())
                    {
                        break;
                    }
                    assert!(Instant::now() < deadline, "resolver chain did not answer");
                    std::thread::sleep(Duration::from_millis(100));
                }
                let addr_name = format!("{addr_name}.example.com");
                let full_name = format!("{full_name}.example.com");
                // Three samples, the resolver's cache of the zone flushed
                // before each; the fastest of each kind counts (processing
                // on a loaded machine only adds time).
                let mut best = [Duration::MAX; 4];
                let mut lookups = 0;
                for _ in 0..SAMPLES {
                    flush(&conf_dir.join(format!("unbound-{port}.conf")));
                    let cold_addr = address_only(server, &addr_name);
                    let (cold_full, n) = address_and_key(server, &full_name, ca);
                    let warm_addr = address_only(server, &addr_name);
                    let (warm_full, _) = address_and_key(server, &full_name, ca);
                    lookups = n;
                    for (b, t) in best
                        .iter_mut()
                        .zip([cold_addr, cold_full, warm_addr, warm_full])
                    {
                        *b = (*b).min(t);
                    }
                }
                let [cold_addr, cold_full, warm_addr, warm_full] = best;
                rows.push((port, cold_addr, cold_full, warm_addr, warm_full, lookups));
            }
            rows
        })
        .unwrap();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    eprintln!("| unbound 1.17 | lookup | address only (A) | address + verified key (HTTPS, A, AAAA, TLSA in parallel) |");
    eprintln!("|---|---|---:|---:|");
    for (port, ca, cf, wa, wf, lookups) in &rows {
        let label = if *port == 53 {
            "default (QNAME minimisation on)"
        } else {
            "qname-minimisation: no"
        };
        eprintln!(
            "| {label} | cold | {:.1} ms | {:.1} ms ({lookups} queries) |",
            ms(*ca),
            ms(*cf)
        );
        eprintln!("| {label} | warm | {:.1} ms | {:.1} ms |", ms(*wa), ms(*wf));
    }
    let (_, ca, cf, wa, wf, _) = rows[0];
    // Default unbound: cold, the key costs at most one extra resolver-to-
    // authoritative round trip (its QNAME minimisation probes the name with
    // an A query before each other type); warm, nothing extra.
    assert!(
        ms(ca) > 100.0,
        "cold address lookup was served from a cache"
    );
    assert!(
        ms(cf) < ms(ca) + 150.0,
        "more than one extra round trip: {cf:?} vs {ca:?}"
    );
    // Round trips, not milliseconds: a trip to the authoritative adds 100
    // ms, so half of it separates "none" from "one" whatever the machine's
    // load adds.
    assert!(
        ms(wa) < 70.0 && ms(wf) < ms(wa) + 50.0,
        "warm: {wf:?} vs {wa:?}"
    );
    // Without QNAME minimisation: no extra round trip, cold or warm.
    let (_, ca, cf, wa, wf, _) = rows[1];
    assert!(ms(ca) > 100.0);
    assert!(
        ms(cf) < ms(ca) + 50.0,
        "without minimisation the key cost an extra round trip: {cf:?} vs {ca:?}"
    );
    assert!(ms(wf) < ms(wa) + 50.0, "warm: {wf:?} vs {wa:?}");
    drop(unbounds);
    lab.down().unwrap();
}
