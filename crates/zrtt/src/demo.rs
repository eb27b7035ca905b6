//! `zrtt demo`: the main job. An emulated WAN (client and server in network
//! namespaces, a delay hub between them), nginx as the backend and as the
//! ordinary TLS 1.3 server, two zrtt gateways, then the same page fetched
//! with curl over TLS 1.3 and with `zrtt get` on first contact, as a table
//! of milliseconds and round trips. Everything is torn down at the end.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use zrtt_lab::{Lab, Topology};

use crate::scenario::report::Summary;
use crate::scenario::stack::{
    self, run_capture, secs_field, wait_listening, Children, GatewayOpts, Nginx, NginxServer,
    NginxTls, Site, WorkDir,
};
use crate::util;

const NAME: &str = "www.example.com";

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Round-trip time between client and server, milliseconds.
    #[arg(long, default_value_t = 100)]
    rtt_ms: u64,
    /// Fetches per row; the table shows medians.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Keep the working directory (keys, configs, logs) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

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

fn step(n: usize, total: usize, what: &str) {
    eprintln!("[{n}/{total}] {what}");
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    if !zrtt_lab::is_root() {
        bail!("the demo builds network namespaces: run it as root");
    }
    stack::require_tools(&["nginx", "curl"])?;
    let exe = std::env::current_exe()?;
    let total = 6;
    let work = WorkDir::new("demo", a.keep)?;
    let dir = work.path.clone();

    step(
        1,
        total,
        "certificate, key store with a fresh semi-static key, a page to serve",
    );
    let site = Site::create(&dir, NAME)?;
    let page = std::fs::read(site.page("index.html", 1000)?)?;

    step(
        2,
        total,
        &format!(
            "emulated WAN: client and server namespaces, RTT {} ms",
            a.rtt_ms
        ),
    );
    let rtt = Duration::from_millis(a.rtt_ms);
    // Two provenance verifiers run on a host 10 ms from the client.
    let lab = Lab::up(
        Topology::new()
            .host("client")
            .host("server")
            .host("verifier")
            .rtt("client", "server", rtt)
            .rtt("client", "verifier", Duration::from_millis(10))
            .rtt("server", "verifier", rtt),
    )?;
    let server_ip = lab.addr("server")?;
    let client_ip = lab.addr("client")?;

    step(
        3,
        total,
        "server: nginx (backend on loopback, TLS 1.3 on :443), three zrtt gateways; two provenance verifiers",
    );
    let mut children = Children::default();
    let nginx = Nginx {
        servers: vec![
            NginxServer {
                listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
                tls: None,
                fast_open: false,
            },
            NginxServer {
                listen: SocketAddr::from((server_ip, 443)),
                tls: Some(NginxTls {
                    protocols: "TLSv1.3",
                    resumption: false,
                    early_data: false,
                }),
                fast_open: false,
            },
        ],
        keepalive_requests: 100,
    };
    children
        .0
        .push(nginx.spawn(&lab, "server", &site, "nginx")?);
    // The client obtains provenance certificates once (as when it gets its
    // address); they serve first contact with any gateway trusting the verifiers.
    let pv_state = dir.join("pv.state");
    let (pvs, pv_hex) = stack::verifiers_and_certificates(
        &lab,
        "verifier",
        &[4480, 4481],
        &dir,
        "client",
        &pv_state,
    )?;
    children.0.extend(pvs);
    let gateway = |port: u16, trust: Option<Ipv4Addr>, verifiers: &[String]| {
        let o = GatewayOpts {
            listen: Some(SocketAddr::from((server_ip, port))),
            trust,
            verifiers: verifiers.to_vec(),
            ..GatewayOpts::default()
        };
        stack::spawn_gateway(&lab, "server", &site, &o)
    };
    children.0.push(gateway(4433, None, &[])?);
    children.0.push(gateway(4434, Some(client_ip), &[])?);
    children.0.push(gateway(4435, None, &pv_hex)?);
    let started = Instant::now();
    for port in [443, 4433, 4434, 4435] {
        wait_listening(&lab, "client", SocketAddr::from((server_ip, port)))?;
    }
    stack::settle_gateways(started);

    step(4, total, &format!("client: {} fetches per row", a.runs));
    let mut rows = [
        Row::new("curl, TLS 1.3 (nginx)"),
        Row::new("zrtt get, first contact, address not proven"),
        Row::new("zrtt get, first contact, address proven (trusted network)"),
        Row::new("zrtt get, first contact, address proven (2 provenance verifiers)"),
    ];
    let records_file = site.records.clone();
    let ca_file = site.ca.clone();
    let cert_file = site.cert.clone();
    for _ in 0..a.runs {
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
        .arg(&ca_file)
        .args([
            "--resolve",
            &format!("{NAME}:443:{server_ip}"),
            "-w",
            "%{time_connect} %{time_appconnect} %{time_starttransfer} %{http_code}",
        ])
        .arg(format!("https://{NAME}/"));
        let out = run_capture(curl)?;
        let f: Vec<&str> = out.split_whitespace().collect();
        if f.len() != 4 || f[3] != "200" {
            bail!("curl: unexpected output {out:?}");
        }
        let (c, tls, ttfb) = (secs_field(f[0])?, secs_field(f[1])?, secs_field(f[2])?);
        rows[0].connect_ms.push(c);
        rows[0].tls_ms.push(tls - c);
        rows[0].ttfb_ms.push(ttfb);
        rows[0].modes.push("tls1.3".into());
        for (i, port) in [(1usize, 4433u16), (2, 4434), (3, 4435)] {
            let mut get = lab.command("client", &exe)?;
            get.arg("get");
            if i == 3 {
                get.arg("--pv-state").arg(&pv_state);
            }
            get.args(["-o", "/dev/null", "-m", "10s", "--cacert"])
                .arg(&ca_file)
                .arg("--cert")
                .arg(&cert_file)
                .arg("--record")
                .arg(&records_file)
                .args([
                    "--resolve",
                    &format!("{NAME}:{port}:{server_ip}"),
                    "-w",
                    "%{time_connect} %{time_starttransfer} %{http_code} %{zrtt_mode} %{syn_data}",
                ])
                .arg(format!("https://{NAME}:{port}/"));
            let out = run_capture(get)?;
            let f: Vec<&str> = out.split_whitespace().collect();
            if f.len() != 5 || f[2] != "200" {
                bail!("zrtt get: unexpected output {out:?}");
            }
            rows[i].connect_ms.push(secs_field(f[0])?);
            rows[i].ttfb_ms.push(secs_field(f[1])?);
            rows[i].modes.push(format!("{} syn_data={}", f[3], f[4]));
        }
    }

    step(5, total, "tearing down");
    drop(children);
    lab.down()?;

    step(6, total, "results");
    let rtt_ms = a.rtt_ms as f64;
    println!();
    println!("zrtt demo: https://{NAME}/ ({} bytes) across an emulated WAN, RTT {} ms, median of {} fetches", page.len(), a.rtt_ms, a.runs);
    println!(
        "DNS is warm here: the key record is handed to the client (docs/DNS.md covers serving it)."
    );
    println!();
    println!("| fetch | first byte (ms) | round trips | where the time went | mode |");
    println!("|---|---:|---:|---|---|");
    for (i, r) in rows.iter().enumerate() {
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
        println!(
            "| {} | {ttfb:.1} | {:.2} | {where_} | {} |",
            r.name,
            ttfb / rtt_ms,
            modes.join(", ")
        );
    }
    if let Some(path) = &a.json {
        let rows_json: Vec<String> = rows
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
        let json = format!(
            "{{\"rtt_ms\":{},\"rows\":[{}]}}\n",
            a.rtt_ms,
            rows_json.join(",")
        );
        util::write_atomic(path, json.as_bytes(), false)?;
    }
    println!();
    println!("TLS 1.3 needs three round trips to the first byte (TCP, TLS, request); zrtt needs two from an");
    println!(
        "unproven address (it never answers before the TCP handshake proves the address) and one"
    );
    println!(
        "from a proven one: a trusted network, a token from an earlier visit, or certificates from"
    );
    println!("provenance verifiers the gateway trusts (first contact with any such gateway).");
    Ok(ExitCode::SUCCESS)
}
