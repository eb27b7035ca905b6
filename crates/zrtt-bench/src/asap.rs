//! `zrtt lab asap`: transfer time by object size at one RTT (ASAP's kernel
//! transport experiment, §5): a whole fetch on a new connection, from the
//! client's start to the last byte, for TCP + TLS 1.3 (curl against nginx)
//! and zrtt on first contact (proven by provenance verifiers; unproven at
//! the median object size only), with the distribution at ASAP's median
//! object size of 11.18 KB.
//!
//! TCP metrics caching is off in both hosts (`tcp_no_metrics_save`), so no
//! trial inherits a congestion window or ssthresh from an earlier one.
//! docs/LAB.md (section asap) has the method and the reading.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::json;
use zrtt_lab::Lab;

use crate::client::{self, secs_field, write_out, ModeNotes, ZRTT_ONLY};
use crate::proc::{self, WorkDir};
use crate::progress::{Failures, Progress};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};
use crate::stack::{self, Gateway, NginxTls, Site, SiteStack, Verifiers};
use crate::Bench;

const NAME: &str = "www.example.com";
/// ASAP's median web object size (KB).
pub const MEDIAN_KB: f64 = 11.18;
const TLS_PORT: u16 = 443;
const GW_PROVEN: u16 = 4435;
const GW_PLAIN: u16 = 4433;
const GW_STRICT: u16 = 4436;

/// Options of `zrtt lab asap`.
#[derive(Clone, Debug)]
pub struct AsapOpts {
    /// Round-trip time, milliseconds.
    pub rtt_ms: u64,
    /// Object sizes, KB (1 KB = 1024 bytes; [`MEDIAN_KB`] is always added).
    pub sizes_kb: Vec<f64>,
    /// Fetches per size and stack (medians; ASAP-style: at least 200).
    pub trials: usize,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
}

impl Default for AsapOpts {
    fn default() -> Self {
        AsapOpts {
            rtt_ms: 100,
            sizes_kb: vec![1.0, 4.0, MEDIAN_KB, 32.0, 100.0, 500.0],
            trials: 200,
            keep: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tls13,
    ZrttProven,
    ZrttUnproven,
    ZrttStrict,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Tls13 => "TCP + TLS 1.3 (curl, nginx)",
            Kind::ZrttProven => "zrtt, first contact, proven",
            Kind::ZrttUnproven => "zrtt, first contact, unproven",
            Kind::ZrttStrict => "zrtt, first contact, proven, --strict-amplification (3x)",
        }
    }
    fn id(self) -> &'static str {
        match self {
            Kind::Tls13 => "tls13",
            Kind::ZrttProven => "zrtt-proven",
            Kind::ZrttUnproven => "zrtt-unproven",
            Kind::ZrttStrict => "zrtt-proven-strict",
        }
    }
}

fn bytes(kb: f64) -> usize {
    (kb * 1024.0).round() as usize
}

fn object(kb: f64) -> String {
    format!("o{}.bin", bytes(kb))
}

/// What every fetch needs.
struct Env<'a> {
    bench: &'a Bench,
    lab: &'a Lab,
    site: &'a Site,
    server: Ipv4Addr,
    provenance_state: &'a Path,
    modes: ModeNotes,
}

/// One fetch: (first byte, last byte) in ms from the client's start.
fn fetch(env: &Env, k: Kind, kb: f64) -> Result<(f64, f64)> {
    let (lab, site, server) = (env.lab, env.site, env.server);
    let path = object(kb);
    let f = match k {
        Kind::Tls13 => {
            let mut c = lab.command("client", "curl")?;
            c.args([
                "-sS",
                "-o",
                "/dev/null",
                "--max-time",
                "30",
                "--tlsv1.3",
                "--cacert",
            ])
            .arg(&site.ca)
            .args([
                "--resolve",
                &format!("{NAME}:{TLS_PORT}:{server}"),
                "-w",
                "%{time_starttransfer} %{time_total} %{http_code} %{size_download}",
                &format!("https://{NAME}/{path}"),
            ]);
            write_out(c, k.id(), 4, 2)?
        }
        Kind::ZrttProven | Kind::ZrttUnproven | Kind::ZrttStrict => {
            let port = match k {
                Kind::ZrttUnproven => GW_PLAIN,
                Kind::ZrttStrict => GW_STRICT,
                _ => GW_PROVEN,
            };
            let mut c = client::zrtt_get(
                env.bench,
                lab,
                "client",
                site,
                server,
                port,
                &format!("/{path}"),
            )?;
            // Every sample a first contact: no token state.
            c.args(ZRTT_ONLY).arg("--no-state").args([
                "-w",
                "%{time_starttransfer} %{time_total} %{http_code} %{size_download} %{zrtt_mode}",
            ]);
            if k != Kind::ZrttUnproven {
                c.arg("--provenance-state").arg(env.provenance_state);
            }
            write_out(c, k.id(), 5, 2)?
        }
    };
    if f[3] != bytes(kb).to_string() {
        bail!("{}: {} bytes, expected {}", k.id(), f[3], bytes(kb));
    }
    if k != Kind::Tls13 {
        let expect = if k == Kind::ZrttUnproven {
            "0rtt-gated"
        } else {
            "0rtt-early"
        };
        let got = f.get(4).map_or("none", String::as_str);
        env.modes
            .check(got, expect, &format!("{kb} KB {}", k.id()))?;
    }
    Ok((secs_field(&f[0])?, secs_field(&f[1])?))
}

/// Runs the sweep: every size and stack, `trials` times, interleaved.
/// Needs root, nginx and curl.
pub fn run(bench: &Bench, o: &AsapOpts) -> Result<Report> {
    proc::require_tools(&["nginx", "curl"])?;
    if o.trials == 0 || o.sizes_kb.is_empty() || o.sizes_kb.iter().any(|k| k.is_nan() || *k <= 0.0)
    {
        bail!("need at least one trial and positive sizes");
    }
    let work = WorkDir::new(&bench.console, "asap", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(bench, &dir, NAME)?;
    let mut sizes = o.sizes_kb.clone();
    if !sizes.iter().any(|&k| (k - MEDIAN_KB).abs() < 1e-9) {
        sizes.push(MEDIAN_KB);
    }
    sizes.sort_by(f64::total_cmp);
    for &kb in &sizes {
        site.page(&object(kb), bytes(kb))?;
    }
    let lab = Lab::up(stack::wan_with_verifier(Duration::from_millis(o.rtt_ms)))?;
    proc::sysctl(
        &lab,
        &["client", "server"],
        "net.ipv4.tcp_no_metrics_save",
        "1",
    )?;
    let server = lab.addr("server")?;
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let at = |port| SocketAddr::from((server, port));
    let servers = SiteStack::new(bench, "server", &site)
        .tls(at(TLS_PORT), NginxTls::TLS13, false)
        .gateway(Gateway::proven_by(at(GW_PROVEN), &verifiers))
        .gateway(Gateway::new(at(GW_PLAIN)))
        .gateway(Gateway {
            strict: true,
            ..Gateway::proven_by(at(GW_STRICT), &verifiers)
        })
        .start(&lab, "client")?;
    servers.settle();
    let env = Env {
        bench,
        lab: &lab,
        site: &site,
        server,
        provenance_state: &verifiers.state,
        modes: ModeNotes::default(),
    };

    // samples[size][kind] = (first byte, total)
    let kinds = [
        Kind::Tls13,
        Kind::ZrttProven,
        Kind::ZrttUnproven,
        Kind::ZrttStrict,
    ];
    // The sweep compares TLS 1.3 with proven zrtt; the other variants run at
    // the median object size only.
    let runs_for = |kb: f64, k: Kind| k != Kind::ZrttUnproven || (kb - MEDIAN_KB).abs() < 1e-9;
    let total: usize = sizes
        .iter()
        .map(|&kb| kinds.iter().filter(|&&k| runs_for(kb, k)).count() * o.trials)
        .sum();
    let mut progress = Progress::new(&bench.console, "asap", total);
    let mut samples = vec![vec![(Vec::new(), Vec::new()); kinds.len()]; sizes.len()];
    let mut failures = Failures::new("asap");
    for t in 0..o.trials {
        for (si, &kb) in sizes.iter().enumerate() {
            for (ki, &k) in kinds.iter().enumerate() {
                if !runs_for(kb, k) {
                    continue;
                }
                progress.tick(&format!("trial {}: {kb} KB {}", t + 1, k.id()));
                match fetch(&env, k, kb) {
                    Ok((fb, tot)) => {
                        samples[si][ki].0.push(fb);
                        samples[si][ki].1.push(tot);
                    }
                    Err(e) => failures.record(&progress, format!("{kb} KB {}: {e:#}", k.id())),
                }
            }
        }
    }
    let modes = env.modes.note();
    drop(env);
    drop(servers);
    drop(verifiers);
    lab.down()?;
    failures.at_most(total / 10, "more than 10% of fetches failed")?;
    let notes = failures.note("fetches").into_iter().chain(modes).collect();
    Ok(report(o, &sizes, &kinds, &samples, notes))
}

type Samples = Vec<Vec<(Vec<f64>, Vec<f64>)>>;

fn report(
    o: &AsapOpts,
    sizes: &[f64],
    kinds: &[Kind],
    samples: &Samples,
    notes: Vec<String>,
) -> Report {
    let rtt = o.rtt_ms as f64;
    let mut r = Report::new(
        "asap",
        &format!(
            "Transfer time by object size at RTT {} ms (`zrtt lab asap`)",
            o.rtt_ms
        ),
    );
    r.standard_setup();
    r.setup.push(format!(
        "New connection per fetch, whole object (first to last byte, from the client's start); {} trials per size and stack, interleaved; TCP metrics caching off; initial window 10 on both sides.",
        o.trials
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab asap --rtt {} --sizes {} --trials {}`.",
        o.rtt_ms,
        o.sizes_kb
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(","),
        o.trials
    ));
    let mut t = Table::new(
        "Median transfer time (ms) and what zrtt saves",
        &[
            "size (KB)",
            "TLS 1.3",
            "zrtt proven (default window)",
            "saved (RTTs)",
            "zrtt proven, strict 3x",
            "saved (RTTs)",
            "strict / TLS 1.3",
            "ASAP paper",
        ],
    );
    let mut tls_series = Vec::new();
    let mut z_series = Vec::new();
    let mut w_series = Vec::new();
    let mut rows = Vec::new();
    for (si, &kb) in sizes.iter().enumerate() {
        let tls = Summary::of(&samples[si][0].1);
        let z = Summary::of(&samples[si][1].1);
        let w = Summary::of(&samples[si][3].1);
        t.row(vec![
            format!("{kb}"),
            format!("{:.1}", tls.median),
            format!("{:.1}", z.median),
            format!("{:.2}", (tls.median - z.median) / rtt),
            format!("{:.1}", w.median),
            format!("{:.2}", (tls.median - w.median) / rtt),
            format!("{:.2}", w.median / tls.median),
            if si == 0 {
                "saves about 1 RTT (against TCP) at every size, 1 KB to 500 KB".into()
            } else {
                String::new()
            },
        ]);
        tls_series.push(Some(tls.median));
        z_series.push(Some(z.median));
        w_series.push(Some(w.median));
        let mut per_kind = serde_json::Map::new();
        for (ki, k) in kinds.iter().enumerate() {
            let (fb, tot) = &samples[si][ki];
            if tot.is_empty() {
                continue;
            }
            per_kind.insert(
                k.id().into(),
                json!({
                    "label": k.label(),
                    "total_ms": Summary::of(tot).to_json(),
                    "first_byte_ms": Summary::of(fb).to_json(),
                    "samples_total_ms": tot.iter().map(|v| round3(*v)).collect::<Vec<_>>(),
                }),
            );
        }
        rows.push(json!({"size_kb": kb, "bytes": bytes(kb), "stacks": per_kind}));
    }
    r.tables.push(t);
    // The distribution at the median object size.
    if let Some(mi) = sizes.iter().position(|&k| (k - MEDIAN_KB).abs() < 1e-9) {
        let mut d = Table::new(
            format!("Distribution at {MEDIAN_KB} KB (ASAP's median web object), ms"),
            &[
                "stack",
                "n",
                "p5",
                "median",
                "mean",
                "p95",
                "p99",
                "median RTTs",
            ],
        );
        for (ki, k) in kinds.iter().enumerate() {
            let s = Summary::of(&samples[mi][ki].1);
            d.row(vec![
                k.label().into(),
                s.n.to_string(),
                format!("{:.1}", s.p5),
                format!("{:.1}", s.median),
                format!("{:.1}", s.mean),
                format!("{:.1}", s.p95),
                format!("{:.1}", s.p99),
                format!("{:.2}", s.median / rtt),
            ]);
        }
        r.tables.push(d);
    }
    r.charts.push(Chart {
        title: format!("Median transfer time by object size, RTT {} ms", o.rtt_ms),
        x_label: "object size (KB, log scale)".into(),
        y_label: "ms".into(),
        x: Axis::Numbers {
            xs: sizes.to_vec(),
            log: true,
        },
        series: vec![
            Series {
                name: "TCP + TLS 1.3".into(),
                values: tls_series.clone(),
                reference: false,
            },
            Series {
                name: "zrtt, first contact (default window)".into(),
                values: z_series,
                reference: false,
            },
            Series {
                name: "zrtt, first contact, strict 3x".into(),
                values: w_series,
                reference: false,
            },
            Series {
                name: "ASAP claim: TLS 1.3 - 1 RTT".into(),
                values: tls_series.iter().map(|v| v.map(|x| x - rtt)).collect(),
                reference: true,
            },
        ],
    });
    r.notes = notes;
    r.data = json!({"rtt_ms": o.rtt_ms, "trials": o.trials, "sizes": rows});
    r
}
