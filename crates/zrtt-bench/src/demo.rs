//! `zrtt demo`: the main job. An emulated WAN (client and server in network
//! namespaces, a delay hub between them), nginx as the backend and as the
//! ordinary TLS 1.3 server, three zrtt gateways, then the same page fetched
//! with curl over TLS 1.3 and with `zrtt get` on first contact, as a table
//! of milliseconds and round trips. Everything is torn down at the end.
//! docs/LAB.md (section demo) explains the rows.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Result};
use zrtt_lab::Lab;

use crate::client::{self, secs_field, write_out};
use crate::proc::{self, WorkDir};
use crate::report::Summary;
use crate::stack::{self, Gateway, NginxTls, Site, SiteStack, Verifiers};
use crate::Bench;

const NAME: &str = "www.example.com";
const STEPS: usize = 6;

/// Options of `zrtt demo`.
#[derive(Clone, Debug)]
pub struct DemoOpts {
    /// Round-trip time between client and server, milliseconds.
    pub rtt_ms: u64,
    /// Fetches per row; the table shows medians.
    pub runs: usize,
    /// Keep the working directory (keys, configs, logs) instead of deleting it.
    pub keep: bool,
}

impl Default for DemoOpts {
    fn default() -> Self {
        DemoOpts {
            rtt_ms: 100,
            runs: 5,
            keep: false,
        }
    }
}

/// One row of the demo's table: a fetch, repeated.
struct Row {
    name: &'static str,
    ttfb_ms: Vec<f64>,
    connect_ms: Vec<f64>,
    tls_ms: Vec<f64>,
    modes: Vec<String>,
}

impl Row {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            ttfb_ms: vec![],
            connect_ms: vec![],
            tls_ms: vec![],
            modes: vec![],
        }
    }
}

fn median(v: &[f64]) -> f64 {
    Summary::of(v).median
}

/// What the demo measured: a table for the terminal and JSON for files.
pub struct DemoReport {
    rtt_ms: u64,
    runs: usize,
    page_bytes: usize,
    rows: Vec<Row>,
}

impl DemoReport {
    /// The results as the demo prints them: a title, the table (medians),
    /// and the round trips computed from it.
    pub fn text(&self) -> String {
        let rtt_ms = self.rtt_ms as f64;
        let mut s = String::new();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "zrtt demo: https://{NAME}/ ({} bytes) across an emulated WAN, RTT {} ms, median of {} fetches, DNS warm",
            self.page_bytes, self.rtt_ms, self.runs
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| fetch | first byte (ms) | round trips | where the time went | mode |"
        );
        let _ = writeln!(s, "|---|---:|---:|---|---|");
        for (i, r) in self.rows.iter().enumerate() {
            let ttfb = median(&r.ttfb_ms);
            let c = median(&r.connect_ms);
            let where_ = if i == 0 {
                let tls = median(&r.tls_ms);
                format!(
                    "TCP handshake {c:.0} + TLS handshake {tls:.0} + request {:.0}",
                    ttfb - c - tls
                )
            } else if i == 1 {
                format!("request in the SYN; SYN-ACK after {c:.0}; answer held until the client's ACK proved its address, {:.0} more", ttfb - c)
            } else {
                format!("request in the SYN with proof of address; answer in the SYN-ACK's round trip ({c:.0}), first byte at {ttfb:.0}")
            };
            let mut modes = r.modes.clone();
            modes.sort();
            modes.dedup();
            let _ = writeln!(
                s,
                "| {} | {ttfb:.1} | {:.2} | {where_} | {} |",
                r.name,
                ttfb / rtt_ms,
                modes.join(", ")
            );
        }
        let rts: Vec<f64> = self
            .rows
            .iter()
            .map(|r| median(&r.ttfb_ms) / rtt_ms)
            .collect();
        if let [tls, unproven, trusted, verifiers] = rts[..] {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "Round trips to the first byte: TLS 1.3 {tls:.2}; zrtt from an unproven address {unproven:.2}, from a proven one {trusted:.2} (trusted network) and {verifiers:.2} (provenance verifiers)."
            );
            let _ = writeln!(s, "How to read them: docs/LAB.md, section demo.");
        }
        s
    }

    /// The medians as one line of JSON: `rtt_ms`, and per row `fetch`,
    /// `first_byte_ms`, `round_trips` and `runs`.
    pub fn json(&self) -> String {
        let rtt_ms = self.rtt_ms as f64;
        let rows_json: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let ttfb = median(&r.ttfb_ms);
                format!(
                    "{{\"fetch\":{:?},\"first_byte_ms\":{ttfb:.3},\"round_trips\":{:.3},\"runs\":{}}}",
                    r.name,
                    ttfb / rtt_ms,
                    r.ttfb_ms.len()
                )
            })
            .collect();
        format!(
            "{{\"rtt_ms\":{},\"rows\":[{}]}}\n",
            self.rtt_ms,
            rows_json.join(",")
        )
    }
}

/// Builds the WAN and the servers, fetches `runs` times per row, tears
/// everything down. Needs root, nginx and curl; steps go to the console.
pub fn run(bench: &Bench, o: &DemoOpts) -> Result<DemoReport> {
    if !zrtt_lab::is_root() {
        bail!("the demo builds network namespaces: run it as root");
    }
    proc::require_tools(&["nginx", "curl"])?;
    let step = |n: usize, what: &str| bench.console.line(&format!("[{n}/{STEPS}] {what}"));
    let work = WorkDir::new(&bench.console, "demo", o.keep)?;
    let dir = work.path.clone();

    step(
        1,
        "certificate, key store with a fresh semi-static key, a page to serve",
    );
    let site = Site::create(bench, &dir, NAME)?;
    let page = std::fs::read(site.page("index.html", 1000)?)?;

    step(
        2,
        &format!(
            "emulated WAN: client and server namespaces, RTT {} ms",
            o.rtt_ms
        ),
    );
    // Two provenance verifiers run on a host 10 ms from the client.
    let lab = Lab::up(stack::wan_with_verifier(Duration::from_millis(o.rtt_ms)))?;
    let server_ip = lab.addr("server")?;
    let client_ip = lab.addr("client")?;

    step(
        3,
        "server: nginx (backend on loopback, TLS 1.3 on :443), three zrtt gateways; two provenance verifiers",
    );
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let at = |port| SocketAddr::from((server_ip, port));
    let servers = SiteStack::new(bench, "server", &site)
        .tls(at(443), NginxTls::TLS13, false)
        .gateway(Gateway::new(at(4433)))
        .gateway(Gateway {
            trust: Some(client_ip),
            ..Gateway::new(at(4434))
        })
        .gateway(Gateway::proven_by(at(4435), &verifiers))
        .start(&lab, "client")?;
    servers.settle();

    step(4, &format!("client: {} fetches per row", o.runs));
    let mut rows = vec![
        Row::new("curl, TLS 1.3 (nginx)"),
        Row::new("zrtt get, first contact, address not proven"),
        Row::new("zrtt get, first contact, address proven (trusted network)"),
        Row::new("zrtt get, first contact, address proven (2 provenance verifiers)"),
    ];
    for _ in 0..o.runs {
        let mut curl = lab.command("client", "curl")?;
        curl.args([
            "-sS",
            "-o",
            "/dev/null",
            "--max-time",
            "10",
            "--tlsv1.3",
            "--cacert",
        ])
        .arg(&site.ca)
        .args([
            "--resolve",
            &format!("{NAME}:443:{server_ip}"),
            "-w",
            "%{time_connect} %{time_appconnect} %{time_starttransfer} %{http_code}",
        ])
        .arg(format!("https://{NAME}/"));
        let f = write_out(curl, "curl", 4, 3)?;
        let (c, tls, ttfb) = (secs_field(&f[0])?, secs_field(&f[1])?, secs_field(&f[2])?);
        rows[0].connect_ms.push(c);
        rows[0].tls_ms.push(tls - c);
        rows[0].ttfb_ms.push(ttfb);
        rows[0].modes.push("tls1.3".into());
        for (i, port) in [(1usize, 4433u16), (2, 4434), (3, 4435)] {
            let mut get = client::zrtt_get(bench, &lab, "client", &site, server_ip, port, "/")?;
            // Every sample a first contact: no token state.
            get.args(["--no-state", "-m", "10s", "-w"])
                .arg("%{time_connect} %{time_starttransfer} %{http_code} %{zrtt_mode} %{syn_data}");
            if i == 3 {
                get.arg("--provenance-state").arg(&verifiers.state);
            }
            let f = write_out(get, "zrtt get", 5, 2)?;
            rows[i].connect_ms.push(secs_field(&f[0])?);
            rows[i].ttfb_ms.push(secs_field(&f[1])?);
            rows[i].modes.push(format!("{} syn_data={}", f[3], f[4]));
        }
    }

    step(5, "tearing down");
    drop(servers);
    drop(verifiers);
    lab.down()?;

    step(6, "results");
    Ok(DemoReport {
        rtt_ms: o.rtt_ms,
        runs: o.runs,
        page_bytes: page.len(),
        rows,
    })
}
