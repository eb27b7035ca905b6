//! `zrtt lab ztls --shortcut`: the DNS shortcut's rows (issue #17,
//! docs/DNS.md §8). The client holds the key record (`--record`,
//! `--cert`) and the resolver has the `zq.www.example.com` delegation
//! cached but not www's address (`unbound-control flush_type
//! www.example.com A` before each fetch): the case the shortcut is for.
//! Two clients under that cache state: `zrtt get` as usual (keys from DNS,
//! cached; A cold, then zrtt to the gateway, proven) and `zrtt get
//! --dns-shortcut` (the request inside a TXT query to the gateway's SDNS
//! on `www`, raced against the same plain path). Resolvers: unbound with
//! QNAME minimisation on (the default, port 53) and off (port 5353), and
//! off with `ratelimit: 1` (port 5354, the local placement only): a
//! resolver that rate-limits queries per zone refuses unique names.
//! Resolver-to-`www` RTT = client-to-`www` RTT (the resolver sits near
//! the client, as the placements say).

use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::Result;
use serde_json::json;

use super::{flush_type, ms, unbound_conf, Env, LOCATIONS, PLACEMENTS, ZRTT_NAME};
use crate::client::{secs_field, write_out};
use crate::progress::{Failures, Progress};
use crate::report::{round3, Report, Summary, Table};

/// The page both clients fetch: the other ztls rows' page (100 bytes) at
/// its ordinary path. Shortcut flights are padded to the longest name
/// (docs/PROTOCOL.md §13.1), so every target gets the same answer room
/// (3x the query, docs/DNS.md §8.3) and it fits the DNS answer.
pub(super) const PAGE: &str = "index.html";
/// Its body size (bytes).
pub(super) const PAGE_BYTES: usize = 100;

/// Resolver variants: label, unbound port, extra unbound settings, and
/// whether every placement runs it (else only `local`).
pub(super) const VARIANTS: [(&str, u16, &str, bool); 3] = [
    ("qmin on (default)", 53, "", true),
    ("qmin off", 5353, "  qname-minimisation: no\n", true),
    (
        "qmin off, ratelimit zq 1/s",
        5354,
        "  qname-minimisation: no\n  ratelimit: 1000\n  ratelimit-for-domain: zq.www.example.com 1\n  ratelimit-factor: 0\n",
        false,
    ),
];

/// The two clients.
const KINDS: [&str; 2] = ["zrtt", "zrtt-shortcut"];

/// ASAP §5.2 (Fig. 3b, PlanetLab, server IP not cached at the LDNS):
/// "ASAP can save up to two RTTs" against TCP; the paper gives no medians
/// in its text. zrtt already saves the handshakes, so the shortcut can
/// save at most the resolver's authoritative round trip.
pub(super) const PAPER: &str =
    "ASAP §5.2 (Fig. 3b): IP not cached at the LDNS, up to two RTTs saved against TCP";

/// The extra unbound instances (variants beyond port 53): config files
/// written in `dir`, (placement host, listen address, conf path) each.
pub(super) fn extra_resolvers(
    dir: &Path,
    resolvers: &[Ipv4Addr],
    auth: Ipv4Addr,
) -> Result<Vec<(&'static str, std::path::PathBuf)>> {
    let mut out = Vec::new();
    for (pi, (tag, host, _)) in PLACEMENTS.iter().enumerate() {
        for (_, port, extra, everywhere) in VARIANTS.iter().skip(1) {
            if !everywhere && *tag != "local" {
                continue;
            }
            let t = format!("{tag}-{port}");
            let conf = dir.join(format!("unbound-{t}.conf"));
            let text = unbound_conf(dir, resolvers[pi], *port, auth, &t, extra);
            std::fs::write(&conf, text)?;
            out.push((*host, conf));
        }
    }
    Ok(out)
}

/// One fetch of [`PAGE`] through `resolver`:`port`, the address flushed
/// there first: ms to the first response byte, and the mode.
fn fetch(
    env: &Env,
    kind: &str,
    (resolver, port, conf): (Ipv4Addr, u16, &str),
    settle_ms: f64,
) -> Result<(f64, String)> {
    flush_type(env, conf)?;
    let mut c = env.lab.command("client", &env.bench.zrtt)?;
    c.args(["get", "--no-state", "--provenance-state"])
        .arg(&env.provenance_state)
        .args(["-o", "/dev/null", "-m", "15s", "--dns-server"])
        .arg(format!("{resolver}:{port}"))
        .arg("--cert")
        .arg(&env.www.cert);
    // The same TLS trust for both (loading the system's bundle instead
    // costs about 5 ms of CPU before the first byte).
    c.arg("--cacert").arg(&env.www.ca);
    if kind == "zrtt-shortcut" {
        c.arg("--dns-shortcut")
            .arg("--record")
            .arg(&env.www.records);
    }
    c.args([
        "-w",
        "%{time_starttransfer} %{http_code} %{zrtt_mode}",
        &format!("https://{ZRTT_NAME}/{PAGE}"),
    ]);
    let f = write_out(c, "zrtt get", 3, 1)?;
    if kind == "zrtt-shortcut" {
        // The shortcut client's own A lookup may still be on its way to
        // the authoritative server: let it land before the next flush,
        // or it would warm the cache for the next sample.
        std::thread::sleep(ms(2.0 * settle_ms + 20.0));
    }
    Ok((secs_field(&f[0])?, f[2].clone()))
}

/// One row's samples: per kind, (ms, mode).
type Row = Vec<Vec<(f64, String)>>;

/// Measures every location, placement and variant, `samples` times, and
/// reports them (the report `ztls_shortcut`).
pub(super) fn run(
    env: &Env,
    resolvers: &[Ipv4Addr],
    samples: usize,
    auth_rtt: f64,
) -> Result<Report> {
    let rows_wanted: Vec<(usize, usize)> = (0..PLACEMENTS.len())
        .flat_map(|pi| (0..VARIANTS.len()).map(move |vi| (pi, vi)))
        .filter(|&(pi, vi)| VARIANTS[vi].3 || PLACEMENTS[pi].0 == "local")
        .collect();
    let total = LOCATIONS.len() * rows_wanted.len() * samples * KINDS.len();
    let mut progress = Progress::new(&env.bench.console, "ztls shortcut", total);
    let mut failures = Failures::new("ztls shortcut");
    // rows[loc][row] = per kind samples.
    let mut rows: Vec<Vec<Row>> =
        vec![vec![vec![Vec::new(); KINDS.len()]; rows_wanted.len()]; LOCATIONS.len()];
    for (li, (loc, rtt)) in LOCATIONS.iter().enumerate() {
        for peer in ["client", "local", "public"] {
            env.lab.set_rtt(peer, "www", ms(*rtt))?;
        }
        env.lab.set_rtt("client", "tls", ms(*rtt))?;
        for (ri, &(pi, vi)) in rows_wanted.iter().enumerate() {
            let (tag, _, _) = PLACEMENTS[pi];
            let (variant, port, _, _) = VARIANTS[vi];
            let conf_tag = if port == 53 {
                tag.to_owned()
            } else {
                format!("{tag}-{port}")
            };
            // Warm: the resolver answers, has the keys and the delegation
            // of zq.www.example.com.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while let Err(e) = fetch(env, KINDS[0], (resolvers[pi], port, &conf_tag), auth_rtt) {
                if std::time::Instant::now() > deadline {
                    anyhow::bail!("{tag} {variant}: the resolver does not answer: {e:#}");
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            let _ = fetch(env, KINDS[1], (resolvers[pi], port, &conf_tag), auth_rtt);
            for _ in 0..samples {
                for (ki, k) in KINDS.iter().enumerate() {
                    progress.tick(&format!("{loc} {tag} {variant} {k}"));
                    match fetch(env, k, (resolvers[pi], port, &conf_tag), auth_rtt) {
                        Ok(s) => rows[li][ri][ki].push(s),
                        Err(e) => {
                            failures.record(&progress, format!("{loc} {tag} {variant} {k}: {e:#}"))
                        }
                    }
                }
            }
        }
    }
    failures.at_most(total / 10, "more than 10% of fetches failed")?;
    Ok(report(
        samples,
        auth_rtt,
        &rows_wanted,
        &rows,
        failures.note("fetches"),
    ))
}

/// "mode n/N, ..." of one kind's samples.
fn modes(s: &[(f64, String)]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for (_, m) in s {
        match counts.iter_mut().find(|(k, _)| *k == m.as_str()) {
            Some((_, n)) => *n += 1,
            None => counts.push((m, 1)),
        }
    }
    counts
        .iter()
        .map(|(m, n)| format!("{m} {n}/{}", s.len()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn report(
    samples: usize,
    auth_rtt: f64,
    rows_wanted: &[(usize, usize)],
    rows: &[Vec<Row>],
    failed: Option<String>,
) -> Report {
    let mut r = Report::new(
        "ztls_shortcut",
        "The DNS shortcut: first response with the address cold at the resolver, key record held (`zrtt lab ztls --shortcut`)",
    );
    r.standard_setup();
    r.setup.push(format!(
        "Topology and servers of `zrtt lab ztls` (client to resolver: stub 0, local {} ms, public {} ms; resolver to authoritative `zrtt dns` {auth_rtt} ms); `zrtt gateway --sdns <www>:53` on `www`, delegated `zq.www.example.com` (NS + glue); every resolver as far from `www` as the client is; before each fetch `unbound-control flush_type www.example.com A` (the delegation and the key records stay cached); a {PAGE_BYTES}-byte page; median of {samples} fetches per cell.",
        PLACEMENTS[1].2, PLACEMENTS[2].2
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab ztls --shortcut --samples {samples} --auth-rtt {auth_rtt}`."
    ));
    r.setup.push(format!("Reference: {PAPER}."));
    let mut t = Table::new(
        "Median first-response time, address cold at the resolver (ms)",
        &[
            "resolver",
            "unbound",
            "server",
            "zrtt (A cold)",
            "zrtt + DNS shortcut",
            "shortcut − plain",
            "shortcut modes",
        ],
    );
    t.numeric = (3..6).collect();
    let mut cells = Vec::new();
    for (ri, &(pi, vi)) in rows_wanted.iter().enumerate() {
        for (li, (loc, rtt)) in LOCATIONS.iter().enumerate() {
            let s = &rows[li][ri];
            let m: Vec<Summary> = s
                .iter()
                .map(|k| Summary::of(&k.iter().map(|(v, _)| *v).collect::<Vec<_>>()))
                .collect();
            t.row(vec![
                PLACEMENTS[pi].0.to_owned(),
                VARIANTS[vi].0.to_owned(),
                format!("{loc} ({rtt} ms)"),
                format!("{:.1}", m[0].median),
                format!("{:.1}", m[1].median),
                format!("{:+.1}", m[1].median - m[0].median),
                modes(&s[1]),
            ]);
            cells.push(json!({
                "resolver": PLACEMENTS[pi].0, "unbound": VARIANTS[vi].0, "server": loc,
                "server_rtt_ms": rtt,
                "stacks": KINDS.iter().enumerate().map(|(ki, k)| json!({
                    "id": k, "summary_ms": m[ki].to_json(),
                    "samples_ms": s[ki].iter().map(|(v, _)| round3(*v)).collect::<Vec<_>>(),
                    "modes": s[ki].iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            }));
        }
    }
    r.tables.push(t);
    r.notes = failed.into_iter().collect();
    r.data = json!({"samples": samples, "auth_rtt_ms": auth_rtt, "cells": cells});
    r
}
