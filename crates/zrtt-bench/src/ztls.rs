//! `zrtt lab ztls`: ZTLS (WWW 2023) Table 3 in the lab: first-response time
//! with DNS included, for three resolver placements (a cache on the client
//! itself, a resolver in the client's LAN, a public resolver further away)
//! and three server distances (Seoul, Tokyo, Ohio as seen from Seoul), cold
//! and warm caches; TLS 1.3 (curl through the system resolver, i.e. glibc
//! and `/etc/resolv.conf`) against zrtt (`zrtt get --dns-server`, which
//! looks up HTTPS, A, AAAA and TLSA in parallel).
//!
//! Real components: unbound 1.17 (default settings, QNAME minimisation on)
//! as every resolver, `zrtt dns` as the authoritative server for
//! example.com, nginx as the TLS 1.3 server, `zrtt gateway` in front of
//! nginx for zrtt. docs/LAB.md (section ztls) has the method and the
//! reading. With `--shortcut`, the DNS shortcut's rows instead
//! (`ztls_shortcut.rs`, report `ztls_shortcut`): the gateway's SDNS on
//! `www` (`--sdns`, delegated as `zq.www`), which every run starts.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;
use zrtt_lab::{Lab, Topology};

use crate::client::{secs_field, write_out, ModeNotes};
use crate::proc::{self, run_capture, Children, WorkDir};
use crate::progress::{Failures, Progress};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};
use crate::stack::{Gateway, NginxTls, Site, SiteStack, Verifiers};
use crate::Bench;

#[path = "ztls_shortcut.rs"]
mod shortcut;

const ZRTT_NAME: &str = "www.example.com";
const TLS_NAME: &str = "tls.example.com";

/// Server locations: name and RTT from the client (ZTLS Fig. 4, Seoul client).
const LOCATIONS: [(&str, f64); 3] = [("Seoul", 8.2), ("Tokyo", 39.8), ("Ohio", 180.6)];

/// Resolver placements: name, lab host running unbound, client RTT (ms).
/// The RTTs follow ZTLS Table 4's warm lookup times (stub 0.5, local about
/// 6, public about 40 ms).
const PLACEMENTS: [(&str, &str, f64); 3] = [
    ("stub", "client", 0.0),
    ("local", "local", 6.0),
    ("public", "public", 40.0),
];

/// ZTLS Table 3 medians (ms): [placement][location] = (ZTLS, TLS).
const PAPER: [[(f64, f64); 3]; 3] = [
    [(26.1, 29.4), (88.4, 122.7), (366.5, 544.5)],
    [(33.2, 38.2), (95.9, 132.9), (367.4, 544.2)],
    [(63.8, 67.8), (127.5, 160.5), (405.2, 580.4)],
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tls13,
    ZrttUnproven,
    ZrttProven,
    /// The default client (proven): TLS starts beside key records that
    /// come after the address, whichever is ready first carries the request.
    ZrttRaced,
}

const KINDS: [Kind; 4] = [
    Kind::Tls13,
    Kind::ZrttUnproven,
    Kind::ZrttProven,
    Kind::ZrttRaced,
];

impl Kind {
    fn id(self) -> &'static str {
        match self {
            Kind::Tls13 => "tls13",
            Kind::ZrttUnproven => "zrtt-unproven",
            Kind::ZrttProven => "zrtt-proven",
            Kind::ZrttRaced => "zrtt-raced",
        }
    }
}

/// Options of `zrtt lab ztls`.
#[derive(Clone, Debug)]
pub struct ZtlsOpts {
    /// Fetches per cell (the tables show medians).
    pub samples: usize,
    /// RTT between every resolver and the authoritative server (cold
    /// lookups), milliseconds.
    pub auth_rtt_ms: f64,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
    /// Measure the DNS shortcut's rows instead of Table 3 (the report
    /// `ztls_shortcut`; docs/LAB.md, section ztls).
    pub shortcut: bool,
}

impl Default for ZtlsOpts {
    fn default() -> Self {
        ZtlsOpts {
            samples: 9,
            auth_rtt_ms: 50.0,
            keep: false,
            shortcut: false,
        }
    }
}

fn ms(v: f64) -> Duration {
    Duration::from_micros((v * 1000.0).round() as u64)
}

fn unbound_conf(
    dir: &Path,
    listen: Ipv4Addr,
    port: u16,
    auth: Ipv4Addr,
    tag: &str,
    extra: &str,
) -> String {
    format!(
        "server:\n{extra}  interface: {listen}\n  port: {port}\n  access-control: 198.18.0.0/15 allow\n  access-control: 127.0.0.0/8 allow\n  do-ip6: no\n  do-not-query-localhost: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound-{tag}.pid\"\n  use-syslog: no\n  logfile: \"\"\n  module-config: \"iterator\"\n  edns-buffer-size: 1232\nremote-control:\n  control-enable: yes\n  control-interface: \"{d}/unbound-{tag}.ctl\"\nstub-zone:\n  name: \"example.com\"\n  stub-addr: {auth}\n",
        d = dir.display()
    )
}

struct Env<'a> {
    bench: &'a Bench,
    lab: &'a Lab,
    www: &'a Site,
    tls: &'a Site,
    provenance_state: PathBuf,
    dir: PathBuf,
    modes: ModeNotes,
}

/// Empties unbound's caches for example.com on `host`.
fn flush(env: &Env, host: &str, tag: &str) -> Result<()> {
    let mut c = env.lab.command(host, "unbound-control")?;
    c.arg("-c")
        .arg(env.dir.join(format!("unbound-{tag}.conf")))
        .args(["flush_zone", "example.com"]);
    run_capture(c).map(|_| ())
}

/// Drops www.example.com's A records from the cache of the unbound whose
/// config is `unbound-<tag>.conf` (the delegation of its shortcut zone and
/// its key records stay).
fn flush_type(env: &Env, tag: &str) -> Result<()> {
    let host = tag.split('-').next().unwrap_or(tag);
    let host = PLACEMENTS
        .iter()
        .find(|p| p.0 == host)
        .map_or("client", |p| p.1);
    let mut c = env.lab.command(host, "unbound-control")?;
    c.arg("-c")
        .arg(env.dir.join(format!("unbound-{tag}.conf")))
        .args(["flush_type", ZRTT_NAME, "A"]);
    run_capture(c).map(|_| ())
}

/// One fetch with DNS: ms from the client's start to the first response
/// byte, and whether the request went over TLS.
fn fetch(env: &Env, k: Kind, resolver: Ipv4Addr) -> Result<(f64, bool)> {
    match k {
        Kind::Tls13 => {
            let mut c = env.lab.command("client", "curl")?;
            c.args([
                "-sS",
                "-4",
                "-o",
                "/dev/null",
                "--max-time",
                "15",
                "--tlsv1.3",
                "--cacert",
            ])
            .arg(&env.tls.ca)
            .args([
                "-w",
                "%{time_namelookup} %{time_starttransfer} %{http_code}",
                &format!("https://{TLS_NAME}/"),
            ]);
            let f = write_out(c, "curl", 3, 2)?;
            Ok((secs_field(&f[1])?, true))
        }
        Kind::ZrttUnproven | Kind::ZrttProven | Kind::ZrttRaced => {
            let mut c = env.lab.command("client", &env.bench.zrtt)?;
            c.args(["get", "--no-state"]);
            if k != Kind::ZrttUnproven {
                c.arg("--provenance-state").arg(&env.provenance_state);
            }
            c.args(["-o", "/dev/null", "-m", "15s"]);
            if k != Kind::ZrttRaced {
                c.args(["--zrtt-only", "--no-key-race"]);
            }
            c.arg("--dns-server")
                .arg(format!("{resolver}:53"))
                .arg("--cacert")
                .arg(&env.www.ca)
                .arg("--cert")
                .arg(&env.www.cert)
                .args([
                    "-w",
                    "%{time_namelookup} %{time_starttransfer} %{http_code} %{zrtt_mode}",
                    &format!("https://{ZRTT_NAME}/"),
                ]);
            let f = write_out(c, "zrtt get", 4, 2)?;
            if k == Kind::ZrttRaced {
                // Either path is this row's answer; the report counts them.
                let tls = f[3] == "tls-fallback";
                if !tls {
                    env.modes.check(&f[3], "0rtt-early", k.id())?;
                }
                return Ok((secs_field(&f[1])?, tls));
            }
            let expect = if k == Kind::ZrttProven {
                "0rtt-early"
            } else {
                "0rtt-gated"
            };
            env.modes.check(&f[3], expect, k.id())?;
            Ok((secs_field(&f[1])?, false))
        }
    }
}

/// Runs every location, resolver placement and cache state, `samples`
/// times. Needs root, nginx, curl and unbound.
pub fn run(bench: &Bench, o: &ZtlsOpts) -> Result<Report> {
    proc::require_tools(&["nginx", "curl", "unbound", "unbound-control"])?;
    if o.samples == 0 {
        bail!("need at least one sample");
    }
    let work = WorkDir::new(&bench.console, "ztls", o.keep)?;
    let dir = work.path.clone();
    let www = Site::create(bench, &dir.join("www"), ZRTT_NAME)?;
    let tls = Site::create(bench, &dir.join("tls"), TLS_NAME)?;
    // ZTLS's answer was five bytes of application data; ours is a small page.
    www.page("index.html", 100)?;
    if shortcut::PAGE != "index.html" {
        www.page(shortcut::PAGE, shortcut::PAGE_BYTES)?;
    }
    tls.page("index.html", 100)?;
    let auth_rtt = ms(o.auth_rtt_ms);
    let first = ms(LOCATIONS[0].1);
    let lab = Lab::up(
        Topology::new()
            .host("client")
            .host("local")
            .host("public")
            .host("auth")
            .host("www")
            .host("tls")
            .host("verifier")
            .rtt("client", "local", ms(PLACEMENTS[1].2))
            .rtt("client", "public", ms(PLACEMENTS[2].2))
            .rtt("client", "auth", auth_rtt)
            .rtt("local", "auth", auth_rtt)
            .rtt("public", "auth", auth_rtt)
            .rtt("client", "www", first)
            // The shortcut's SDNS on `www`: resolvers as far as the client.
            .rtt("local", "www", first)
            .rtt("public", "www", first)
            .rtt("client", "tls", first)
            .rtt("client", "verifier", Duration::from_millis(10)),
    )?;
    let auth = lab.addr("auth")?;
    let www_ip = lab.addr("www")?;
    let tls_ip = lab.addr("tls")?;
    let mut children = Children::default();

    // Authoritative: example.com with both names, and www's key records.
    let zone = format!(
        "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A {auth}\nwww IN A {www_ip}\ntls IN A {tls_ip}\nzq.www IN NS ns.zq.www\nns.zq.www IN A {www_ip}\n"
    );
    std::fs::write(dir.join("example.com.zone"), zone)?;
    let mut dns = lab.command("auth", &bench.zrtt)?;
    dns.args(["dns", "--zone"])
        .arg(dir.join("example.com.zone"))
        .arg("--keystore")
        .arg(&www.keystore)
        .args([
            "--no-rotate",
            "--listen",
            &format!("{auth}:53"),
            "--log-level",
            "warn",
        ]);
    dns.stdout(Stdio::null()).stderr(Stdio::null());
    children.0.push(lab.spawn("auth", dns)?);

    // Resolvers.
    let mut resolvers = Vec::new();
    for (tag, host, _) in PLACEMENTS {
        let listen = if host == "client" {
            Ipv4Addr::LOCALHOST
        } else {
            lab.addr(host)?
        };
        let conf = dir.join(format!("unbound-{tag}.conf"));
        std::fs::write(&conf, unbound_conf(&dir, listen, 53, auth, tag, ""))?;
        let mut u = lab.command(host, "unbound")?;
        u.args(["-d", "-c"]).arg(&conf);
        u.stdout(Stdio::null()).stderr(Stdio::null());
        children.0.push(lab.spawn(host, u)?);
        resolvers.push(listen);
    }
    if o.shortcut {
        for (host, conf) in shortcut::extra_resolvers(&dir, &resolvers, auth)? {
            let mut u = lab.command(host, "unbound")?;
            u.args(["-d", "-c"]).arg(&conf);
            u.stdout(Stdio::null()).stderr(Stdio::null());
            children.0.push(lab.spawn(host, u)?);
        }
    }

    // Servers: the zrtt site's nginx backend and gateway on `www`, the TLS
    // site's nginx on `tls`.
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let zrtt_server = SiteStack::new(bench, "www", &www)
        .gateway(Gateway {
            sdns: Some(SocketAddr::from((www_ip, 53))),
            ..Gateway::proven_by(SocketAddr::from((www_ip, 443)), &verifiers)
        })
        .start(&lab, "client")?;
    let tls_server = SiteStack::new(bench, "tls", &tls)
        .without_backend()
        .tls(SocketAddr::from((tls_ip, 443)), NginxTls::TLS13, false)
        .start(&lab, "client")?;
    zrtt_server.settle();
    let env = Env {
        bench,
        lab: &lab,
        www: &www,
        tls: &tls,
        provenance_state: verifiers.state.clone(),
        dir: dir.clone(),
        modes: ModeNotes::default(),
    };

    // Every resolver answers before measuring (unbound starts in the background).
    for (pi, (tag, _, _)) in PLACEMENTS.iter().enumerate() {
        lab.set_resolv_conf(
            "client",
            &format!(
                "nameserver {}\noptions attempts:3 timeout:2\n",
                resolvers[pi]
            ),
        )?;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while fetch(&env, Kind::Tls13, resolvers[pi]).is_err() {
            if std::time::Instant::now() > deadline {
                bail!("the {tag} resolver chain does not answer");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    if o.shortcut {
        let r = shortcut::run(&env, &resolvers, o.samples, o.auth_rtt_ms);
        drop(env);
        drop((zrtt_server, tls_server, verifiers, children));
        lab.down().context("tearing the lab down")?;
        return r;
    }
    // samples[loc][placement][cold=0/warm=1][kind]
    let mut samples =
        vec![vec![vec![vec![Vec::new(); KINDS.len()]; 2]; PLACEMENTS.len()]; LOCATIONS.len()];
    // Raced samples that went over TLS: [loc][placement][cold/warm].
    let mut raced_tls = vec![vec![[0usize; 2]; PLACEMENTS.len()]; LOCATIONS.len()];
    let mut failures = Failures::new("ztls");
    let total = LOCATIONS.len() * PLACEMENTS.len() * 2 * o.samples * KINDS.len();
    let mut progress = Progress::new(&bench.console, "ztls", total);
    for (li, (loc, rtt)) in LOCATIONS.iter().enumerate() {
        lab.set_rtt("client", "www", ms(*rtt))?;
        lab.set_rtt("client", "tls", ms(*rtt))?;
        for (pi, (tag, host, _)) in PLACEMENTS.iter().enumerate() {
            lab.set_resolv_conf(
                "client",
                &format!(
                    "nameserver {}\noptions attempts:3 timeout:2\n",
                    resolvers[pi]
                ),
            )?;
            for (ci, cache) in ["cold", "warm"].iter().enumerate() {
                if ci == 1 {
                    for k in KINDS {
                        let _ = fetch(&env, k, resolvers[pi]);
                    }
                }
                for _ in 0..o.samples {
                    for (ki, k) in KINDS.iter().enumerate() {
                        progress.tick(&format!("{loc} {tag} {cache} {}", k.id()));
                        let r = if ci == 0 {
                            flush(&env, host, tag)
                        } else {
                            Ok(())
                        }
                        .and_then(|()| fetch(&env, *k, resolvers[pi]));
                        match r {
                            Ok((v, tls)) => {
                                samples[li][pi][ci][ki].push(v);
                                if tls && *k == Kind::ZrttRaced {
                                    raced_tls[li][pi][ci] += 1;
                                }
                            }
                            Err(e) => failures.record(
                                &progress,
                                format!("{loc} {tag} {cache} {}: {e:#}", k.id()),
                            ),
                        }
                    }
                }
            }
        }
    }
    let modes = env.modes.note();
    drop(env);
    drop((zrtt_server, tls_server, verifiers, children));
    lab.down().context("tearing the lab down")?;
    failures.at_most(total / 10, "more than 10% of fetches failed")?;
    let notes = failures.note("fetches").into_iter().chain(modes).collect();
    Ok(report(o, &samples, &raced_tls, notes))
}

type Samples = Vec<Vec<Vec<Vec<Vec<f64>>>>>;

fn report(
    o: &ZtlsOpts,
    samples: &Samples,
    raced_tls: &[Vec<[usize; 2]>],
    notes: Vec<String>,
) -> Report {
    let mut r = Report::new("ztls", "ZTLS Table 3: first response with DNS, by resolver placement and server distance (`zrtt lab ztls`)");
    r.standard_setup();
    r.setup.push(format!(
        "Client in Seoul-like position; server RTTs {}; resolvers (unbound 1.17, defaults) on the client itself, {} ms away (LAN) and {} ms away (public); authoritative `zrtt dns` {} ms from every resolver; median of {} fetches per cell.",
        LOCATIONS.iter().map(|(n, r)| format!("{n} {r} ms")).collect::<Vec<_>>().join(", "),
        PLACEMENTS[1].2, PLACEMENTS[2].2, o.auth_rtt_ms, o.samples
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab ztls --samples {} --auth-rtt {}`.",
        o.samples, o.auth_rtt_ms
    ));
    let mut t = Table::new(
        "Median first-response time, DNS included (ms)",
        &[
            "resolver",
            "server",
            "cache",
            "TLS 1.3",
            "zrtt unproven (≈ ZTLS)",
            "zrtt proven",
            "proven saves",
            "zrtt client, keys raced (TLS used)",
            "raced − TLS 1.3",
            "paper ZTLS / TLS (warm)",
        ],
    );
    t.numeric = (3..10).collect();
    let mut cats = Vec::new();
    let mut ser: Vec<Series> = [
        "TLS 1.3 (warm)",
        "zrtt unproven (warm)",
        "zrtt proven (warm)",
    ]
    .iter()
    .map(|n| Series {
        name: n.to_string(),
        values: Vec::new(),
        reference: false,
    })
    .collect();
    let mut paper_tls = Series {
        name: "paper: TLS 1.3".into(),
        values: Vec::new(),
        reference: true,
    };
    let mut paper_ztls = Series {
        name: "paper: ZTLS".into(),
        values: Vec::new(),
        reference: true,
    };
    let mut cells = Vec::new();
    for (pi, (tag, _, _)) in PLACEMENTS.iter().enumerate() {
        for (li, (loc, rtt)) in LOCATIONS.iter().enumerate() {
            for (ci, cache) in ["cold", "warm"].iter().enumerate() {
                let m: Vec<Summary> = (0..KINDS.len())
                    .map(|ki| Summary::of(&samples[li][pi][ci][ki]))
                    .collect();
                let (pz, pt) = PAPER[pi][li];
                t.row(vec![
                    tag.to_string(),
                    format!("{loc} ({rtt} ms)"),
                    cache.to_string(),
                    format!("{:.1}", m[0].median),
                    format!("{:.1}", m[1].median),
                    format!("{:.1}", m[2].median),
                    format!(
                        "{:.1} ({:.2} RTT)",
                        m[0].median - m[2].median,
                        (m[0].median - m[2].median) / rtt
                    ),
                    format!(
                        "{:.1} ({}/{})",
                        m[3].median,
                        raced_tls[li][pi][ci],
                        samples[li][pi][ci][3].len()
                    ),
                    format!("{:+.1}", m[3].median - m[0].median),
                    if ci == 1 {
                        format!("{pz} / {pt}")
                    } else {
                        String::new()
                    },
                ]);
                if ci == 1 {
                    cats.push(format!("{tag}/{loc}"));
                    for (ki, s) in ser.iter_mut().enumerate() {
                        s.values.push(Some(m[ki].median));
                    }
                    paper_tls.values.push(Some(pt));
                    paper_ztls.values.push(Some(pz));
                }
                cells.push(json!({
                    "resolver": tag, "server": loc, "server_rtt_ms": rtt, "cache": cache,
                    "raced_over_tls": raced_tls[li][pi][ci],
                    "paper_median_ms": {"ztls": pz, "tls": pt},
                    "stacks": KINDS.iter().enumerate().map(|(ki, k)| json!({
                        "id": k.id(), "summary_ms": m[ki].to_json(),
                        "samples_ms": samples[li][pi][ci][ki].iter().map(|v| round3(*v)).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                }));
            }
        }
    }
    r.tables.push(t);
    ser.push(paper_tls);
    ser.push(paper_ztls);
    r.charts.push(Chart {
        title: "First response with DNS, warm caches (dashed: ZTLS paper)".into(),
        x_label: "resolver / server".into(),
        y_label: "ms".into(),
        x: Axis::Categories(cats),
        series: ser,
    });
    r.notes = notes;
    r.data = json!({"samples": o.samples, "auth_rtt_ms": o.auth_rtt_ms, "cells": cells});
    r
}
