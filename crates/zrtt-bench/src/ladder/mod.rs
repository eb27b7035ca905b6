//! `zrtt lab ladder`: time to the first response byte, client to server, no
//! DNS, for every stack people deploy today and for zrtt, at several RTTs.
//!
//! Real peers: curl 7.88 (HTTP, TLS 1.2, TLS 1.3, TFO), `openssl s_client`
//! (TLS 1.3 0-RTT resumption, with TFO through an LD_PRELOAD shim), ngtcp2's
//! `gtlsclient`/`gtlsserver` (HTTP/3 1-RTT and 0-RTT), nginx 1.22 as the
//! server; `zrtt get` against `zrtt gateway` in front of the same nginx.
//!
//! curl and `zrtt get` time themselves (`time_starttransfer`); openssl and
//! ngtcp2 have no such timer, so they are timed from their first packet
//! leaving the client (the hub's timestamp) to the response showing up in
//! their output, which leaves out their process start-up. docs/LAB.md
//! (section ladder) has the method and the reading.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::json;
use zrtt_lab::Lab;

mod clients;

use crate::client::ModeNotes;
use crate::proc::{self, run_capture, WorkDir};
use crate::progress::{Failures, Progress};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};
use crate::stack::{self, Gateway, NginxTls, Site, SiteStack, Verifiers};
use crate::Bench;
use clients::{build_preload, measure, warm_sessions, zrtt_get, Env};

const NAME: &str = "www.example.com";
const PAGE_BYTES: usize = 1024;

/// A row of the ladder: a client stack against its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stack {
    Http,
    Tls12,
    Tls13,
    Tls13TfoFirst,
    Tls13TfoRevisit,
    Tls13ZeroRtt,
    Tls13ZeroRttTfo,
    GwTls13ZeroRtt,
    GwTls13ZeroRttTfo,
    H3,
    H3ZeroRtt,
    ZrttProven,
    ZrttUnproven,
    ZrttRevisit,
}

const STACKS: [Stack; 14] = [
    Stack::Http,
    Stack::Tls12,
    Stack::Tls13,
    Stack::Tls13TfoFirst,
    Stack::Tls13TfoRevisit,
    Stack::Tls13ZeroRtt,
    Stack::Tls13ZeroRttTfo,
    Stack::GwTls13ZeroRtt,
    Stack::GwTls13ZeroRttTfo,
    Stack::H3,
    Stack::H3ZeroRtt,
    Stack::ZrttProven,
    Stack::ZrttUnproven,
    Stack::ZrttRevisit,
];

impl Stack {
    fn id(self) -> &'static str {
        match self {
            Stack::Http => "http",
            Stack::Tls12 => "tls12",
            Stack::Tls13 => "tls13",
            Stack::Tls13TfoFirst => "tls13-tfo-first",
            Stack::Tls13TfoRevisit => "tls13-tfo-revisit",
            Stack::Tls13ZeroRtt => "tls13-0rtt",
            Stack::Tls13ZeroRttTfo => "tls13-0rtt-tfo",
            Stack::GwTls13ZeroRtt => "gw-tls13-0rtt",
            Stack::GwTls13ZeroRttTfo => "gw-tls13-0rtt-tfo",
            Stack::H3 => "h3",
            Stack::H3ZeroRtt => "h3-0rtt",
            Stack::ZrttProven => "zrtt-first-proven",
            Stack::ZrttUnproven => "zrtt-first-unproven",
            Stack::ZrttRevisit => "zrtt-revisit",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Stack::Http => "HTTP/1.1 over TCP (curl)",
            Stack::Tls12 => "TLS 1.2 (curl)",
            Stack::Tls13 => "TLS 1.3 (curl)",
            Stack::Tls13TfoFirst => "TLS 1.3 + TFO, first connection (curl)",
            Stack::Tls13TfoRevisit => "TLS 1.3 + TFO, cookie cached (curl)",
            Stack::Tls13ZeroRtt => "TLS 1.3 0-RTT resumption (openssl s_client)",
            Stack::Tls13ZeroRttTfo => "TLS 1.3 0-RTT + TFO, both cached (openssl s_client)",
            Stack::GwTls13ZeroRtt => "TLS 1.3 0-RTT resumption, zrtt gateway's TLS path (openssl s_client)",
            Stack::GwTls13ZeroRttTfo => {
                "TLS 1.3 0-RTT + TFO, zrtt gateway's TLS path, ticket bound to the address (openssl s_client)"
            }
            Stack::H3 => "HTTP/3 1-RTT (ngtcp2)",
            Stack::H3ZeroRtt => "HTTP/3 0-RTT, resumed (ngtcp2)",
            Stack::ZrttProven => "zrtt, first contact, proven (2 verifiers)",
            Stack::ZrttUnproven => "zrtt, first contact, unproven",
            Stack::ZrttRevisit => "zrtt, revisit (address token)",
        }
    }

    /// Needs state from an earlier visit to the same server.
    fn needs_earlier_visit(self) -> bool {
        matches!(
            self,
            Stack::Tls13TfoRevisit
                | Stack::Tls13ZeroRtt
                | Stack::Tls13ZeroRttTfo
                | Stack::GwTls13ZeroRtt
                | Stack::GwTls13ZeroRttTfo
                | Stack::H3ZeroRtt
                | Stack::ZrttRevisit
        )
    }

    /// The reference lab's medians (docs/RESULTS.md, from
    /// `../shared/reference/baselines.md`) at RTT 20, 100, 200 ms.
    fn reference_ms(self) -> Option<[f64; 3]> {
        Some(match self {
            Stack::Http => [40.7, 200.9, 401.2],
            Stack::Tls12 => [86.4, 406.7, 807.4],
            Stack::Tls13 => [66.0, 305.8, 606.7],
            Stack::Tls13TfoFirst => [65.9, 306.2, 606.6],
            Stack::Tls13TfoRevisit => [45.0, 205.4, 405.8],
            Stack::Tls13ZeroRtt => [42.2, 203.9, 404.1],
            Stack::Tls13ZeroRttTfo => [22.2, 101.6, 202.9],
            Stack::H3 => [53.0, 204.0, 405.0],
            Stack::H3ZeroRtt => [21.0, 101.0, 201.0],
            _ => return None,
        })
    }

    /// Round trips to the first response byte by protocol design.
    fn design_rtts(self) -> u32 {
        match self {
            Stack::Tls12 => 4,
            Stack::Tls13 | Stack::Tls13TfoFirst => 3,
            Stack::Http
            | Stack::Tls13TfoRevisit
            | Stack::Tls13ZeroRtt
            | Stack::GwTls13ZeroRtt
            | Stack::H3
            | Stack::ZrttUnproven => 2,
            Stack::Tls13ZeroRttTfo
            | Stack::GwTls13ZeroRttTfo
            | Stack::H3ZeroRtt
            | Stack::ZrttProven
            | Stack::ZrttRevisit => 1,
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Stack::Tls13ZeroRtt
            | Stack::Tls13ZeroRttTfo
            | Stack::GwTls13ZeroRtt
            | Stack::GwTls13ZeroRttTfo => "openssl",
            Stack::H3 | Stack::H3ZeroRtt => "gtlsclient",
            Stack::ZrttProven | Stack::ZrttUnproven | Stack::ZrttRevisit => "zrtt",
            _ => "curl",
        }
    }
}

/// Options of `zrtt lab ladder`.
#[derive(Clone, Debug)]
pub struct LadderOpts {
    /// Round-trip times, milliseconds.
    pub rtts_ms: Vec<u64>,
    /// Runs per stack and RTT (the tables show medians).
    pub samples: usize,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
}

impl Default for LadderOpts {
    fn default() -> Self {
        LadderOpts {
            rtts_ms: vec![20, 100, 200],
            samples: 9,
            keep: false,
        }
    }
}

/// Ports on the server host.
const HTTP_PORT: u16 = 80;
const TLS_PORT: u16 = 443;
const GW_TOKENS: u16 = 4433;
const GW_PROVEN: u16 = 4435;

/// Runs the ladder: every stack at every RTT, `samples` times, rows
/// interleaved. Needs root and the peers scripts/install-deps.sh installs.
pub fn run(bench: &Bench, o: &LadderOpts) -> Result<Report> {
    proc::require_tools(&["nginx", "curl", "openssl", "gtlsclient", "gtlsserver"])?;
    if o.samples == 0 || o.rtts_ms.is_empty() {
        bail!("need at least one sample and one RTT");
    }
    let work = WorkDir::new(&bench.console, "ladder", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(bench, &dir, NAME)?;
    site.page("index.html", PAGE_BYTES)?;
    let request = dir.join("request.txt");
    std::fs::write(
        &request,
        format!("GET / HTTP/1.1\r\nHost: {NAME}\r\nConnection: close\r\n\r\n"),
    )?;
    let preload = match build_preload(&dir) {
        Ok(p) => Some(p),
        Err(e) => {
            bench
                .console
                .line(&format!("ladder: no TFO for openssl s_client: {e:#}"));
            None
        }
    };

    let lab = Lab::up(stack::wan_with_verifier(Duration::from_millis(
        o.rtts_ms[0],
    )))?;
    let server = lab.addr("server")?;
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let at = |port| SocketAddr::from((server, port));
    let mut servers = SiteStack::new(bench, "server", &site)
        .http(at(HTTP_PORT), true)
        .tls(
            at(TLS_PORT),
            NginxTls {
                protocols: "TLSv1.2 TLSv1.3",
                resumption: true,
                early_data: true,
                http2: false,
            },
            true,
        )
        // Tokens without configuration: the gateway's default.
        .gateway(Gateway {
            log: Some(dir.join("gw-tokens.log")),
            ..Gateway::new(at(GW_TOKENS))
        })
        .gateway(Gateway::proven_by(at(GW_PROVEN), &verifiers))
        .start(&lab, "client")?;
    let mut h3 = lab.command("server", "gtlsserver")?;
    h3.arg("-q")
        .arg("-d")
        .arg(&site.www)
        .arg(server.to_string())
        .arg(TLS_PORT.to_string())
        .arg(&site.key)
        .arg(&site.cert);
    h3.stdout(Stdio::null()).stderr(Stdio::null());
    servers.adopt(lab.spawn("server", h3)?);
    let env = Env {
        bench,
        lab: &lab,
        site: &site,
        modes: ModeNotes::default(),
        server,
        preload,
        provenance_state: verifiers.state.clone(),
        state_home: dir.join("state"),
        sess: dir.join("tls.sess"),
        gw_sess: dir.join("gw-tls.sess"),
        h3_sess: dir.join("h3.sess"),
        h3_tp: dir.join("h3.tp"),
        request,
    };
    servers.settle();

    let mut notes = Vec::new();
    let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); STACKS.len()]; o.rtts_ms.len()];
    let mut failures = Failures::new("ladder");
    let mut refused = 0usize;
    let mut progress = Progress::new(
        &bench.console,
        "ladder",
        o.rtts_ms.len() * o.samples * STACKS.len(),
    );
    for (ri, &rtt_ms) in o.rtts_ms.iter().enumerate() {
        let rtt = Duration::from_millis(rtt_ms);
        lab.set_rtt("client", "server", rtt)?;
        lab.set_rtt("server", "verifier", rtt)?;
        // Warm state for the revisit rows at this RTT.
        let _ = std::fs::remove_file(&env.sess);
        let _ = std::fs::remove_file(&env.gw_sess);
        let _ = std::fs::remove_file(&env.h3_sess);
        let _ = std::fs::remove_file(&env.h3_tp);
        let _ = std::fs::remove_dir_all(&env.state_home);
        let mut w_notes = Vec::new();
        warm_sessions(&env, &mut w_notes)?;
        if ri == 0 {
            notes.extend(w_notes);
        }
        // A first visit (gated, unmeasured) obtains the address token.
        let _ = run_capture(zrtt_get(&env, Stack::ZrttRevisit)?);
        for _ in 0..o.samples {
            for (si, &s) in STACKS.iter().enumerate() {
                progress.tick(&format!("RTT {rtt_ms} ms: {}", s.id()));
                // A sample whose server refused its early data is retaken
                // (a few times), never counted as a slow sample.
                let mut result = measure(&env, s, rtt);
                for _ in 0..5 {
                    match &result {
                        Err(e) if e.is::<clients::Refused>() => {
                            refused += 1;
                            result = measure(&env, s, rtt);
                        }
                        _ => break,
                    }
                }
                match result {
                    Ok(ms) => samples[ri][si].push(ms),
                    Err(e) => failures.record(&progress, format!("RTT {rtt_ms} {}: {e:#}", s.id())),
                }
            }
        }
    }
    let modes = env.modes.note();
    drop(env);
    drop(servers);
    drop(verifiers);
    lab.down()?;
    failures.at_most(o.samples * o.rtts_ms.len(), "too many failed measurements")?;
    notes.extend(failures.note("measurements"));
    if refused > 0 {
        notes.push(format!(
            "{refused} sample(s) retaken because their early data was not sent or not accepted (TLS 1.3 and HTTP/3 0-RTT rows)"
        ));
    }
    notes.extend(modes);
    Ok(report(o, &samples, notes))
}

fn ref_index(rtt_ms: u64) -> Option<usize> {
    [20, 100, 200].iter().position(|&r| r == rtt_ms)
}

fn report(o: &LadderOpts, samples: &[Vec<Vec<f64>>], notes: Vec<String>) -> Report {
    let mut r = Report::new(
        "ladder",
        "Time to first response byte, no DNS (`zrtt lab ladder`)",
    );
    r.standard_setup();
    r.setup.push(format!(
        "Client and server in `zrtt-` namespaces joined by the delay hub; RTT {} ms; a {PAGE_BYTES}-byte page; median of {} runs per cell, rows interleaved.",
        o.rtts_ms.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
        o.samples
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab ladder --rtt {} --samples {}`.",
        o.rtts_ms
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(","),
        o.samples
    ));
    let mut headers: Vec<String> = vec!["stack".into(), "earlier visit needed".into()];
    for rtt in &o.rtts_ms {
        headers.push(format!("RTT {rtt}: ms (RTTs)"));
        if ref_index(*rtt).is_some() {
            headers.push(format!("RTT {rtt}: reference"));
        }
    }
    headers.push("design RTTs".into());
    let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new("Median time to first response byte", &hdr);
    t.numeric = (2..headers.len()).collect();
    let mut rows_json = Vec::new();
    let mut series: Vec<Series> = o
        .rtts_ms
        .iter()
        .map(|rtt| Series {
            name: format!("RTT {rtt} ms"),
            values: Vec::new(),
            reference: false,
        })
        .collect();
    let mut ref_series = Series {
        name: format!("reference, RTT {} ms", o.rtts_ms[0]),
        values: Vec::new(),
        reference: true,
    };
    for (si, s) in STACKS.iter().enumerate() {
        let mut row = vec![
            s.label().to_string(),
            if s.needs_earlier_visit() { "yes" } else { "no" }.to_string(),
        ];
        let mut per_rtt = Vec::new();
        for (ri, &rtt) in o.rtts_ms.iter().enumerate() {
            let sum = Summary::of(&samples[ri][si]);
            let rtts = sum.median / rtt as f64;
            row.push(if sum.n == 0 {
                "failed".into()
            } else {
                format!("{:.1} ({:.2})", sum.median, rtts)
            });
            series[ri].values.push((sum.n > 0).then_some(rtts));
            let reference = ref_index(rtt).and_then(|i| s.reference_ms().map(|v| v[i]));
            if ref_index(rtt).is_some() {
                row.push(match reference {
                    Some(v) => format!("{v:.1} ({:.1})", v / rtt as f64),
                    None => "–".into(),
                });
            }
            if ri == 0 {
                ref_series.values.push(reference.map(|v| v / rtt as f64));
            }
            per_rtt.push(json!({
                "rtt_ms": rtt, "samples_ms": samples[ri][si].iter().map(|v| round3(*v)).collect::<Vec<_>>(),
                "summary_ms": sum.to_json(), "round_trips": if sum.n > 0 { json!(round3(rtts)) } else { json!(null) },
                "reference_ms": reference,
            }));
        }
        row.push(s.design_rtts().to_string());
        t.row(row);
        rows_json.push(json!({"id": s.id(), "label": s.label(), "tool": s.tool(),
            "earlier_visit": s.needs_earlier_visit(), "design_rtts": s.design_rtts(), "rtts": per_rtt}));
    }
    r.tables.push(t);
    series.push(ref_series);
    r.charts.push(Chart {
        title: "Round trips to the first response byte (lower is better; dashed: reference lab)"
            .into(),
        x_label: "stack".into(),
        y_label: "round trips".into(),
        x: Axis::Categories(STACKS.iter().map(|s| s.id().to_string()).collect()),
        series,
    });
    r.notes = notes;
    r.data = json!({"rtts_ms": o.rtts_ms, "samples": o.samples, "page_bytes": PAGE_BYTES, "rows": rows_json});
    r
}
