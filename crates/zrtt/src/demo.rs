//! `zrtt demo`: the main job. An emulated WAN (client and server in network
//! namespaces, a delay hub between them), nginx as the backend and as the
//! ordinary TLS 1.3 server, two zrtt gateways, then the same page fetched
//! with curl over TLS 1.3 and with `zrtt get` on first contact, as a table
//! of milliseconds and round trips. Everything is torn down at the end.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use zrtt_dns::{KeyStore, Policy};
use zrtt_lab::{Lab, LabChild, Topology};

use crate::keys::{self, CertAlg};
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
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn step(n: usize, total: usize, what: &str) {
    eprintln!("[{n}/{total}] {what}");
}

struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Children are terminated by PID even on early return; the lab's own
/// teardown would also catch them.
struct Children(Vec<LabChild>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = c.terminate(Duration::from_secs(2));
        }
    }
}

fn nginx_conf(dir: &Path, server_ip: Ipv4Addr) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx/nginx.pid;\nerror_log {d}/nginx/error.log warn;\n\
events {{ worker_connections 256; }}\n\
http {{\n  access_log off;\n  client_body_temp_path {d}/nginx/body;\n  proxy_temp_path {d}/nginx/proxy;\n  fastcgi_temp_path {d}/nginx/fastcgi;\n  uwsgi_temp_path {d}/nginx/uwsgi;\n  scgi_temp_path {d}/nginx/scgi;\n  default_type text/html;\n\
  server {{ listen 127.0.0.1:8080; root {d}/www; }}\n\
  server {{ listen {server_ip}:443 ssl; server_name {NAME}; ssl_protocols TLSv1.3; ssl_session_tickets off; ssl_session_cache off;\n    ssl_certificate {d}/pki/cert.pem; ssl_certificate_key {d}/pki/cert.key; root {d}/www; }}\n}}\n"
    )
}

fn wait_listening(lab: &Lab, host: &str, addr: SocketAddr) -> Result<()> {
    let ok = lab.in_host(host, move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    })?;
    if !ok {
        bail!("nothing listens on {addr} after 15 s");
    }
    Ok(())
}

fn run_capture(mut cmd: Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("running a client")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "client failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

fn secs_field(s: &str) -> Result<f64> {
    s.parse::<f64>()
        .map(|v| v * 1000.0)
        .with_context(|| format!("bad timing {s:?}"))
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    if !zrtt_lab::is_root() {
        bail!("the demo builds network namespaces: run it as root");
    }
    for tool in ["nginx", "curl"] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()?
            .success()
        {
            bail!("{tool} not found: run scripts/install-deps.sh (scripts/demo.sh does)");
        }
    }
    let exe = std::env::current_exe()?;
    let total = 6;
    let work = WorkDir {
        path: std::env::temp_dir().join(format!("zrtt-demo-{}", std::process::id())),
        keep: a.keep,
    };
    let dir = work.path.clone();
    for sub in ["pki", "www", "nginx"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }

    step(
        1,
        total,
        "certificate, key store with a fresh semi-static key, a page to serve",
    );
    let (ca, cert, key) = keys::test_certificate(NAME, CertAlg::EcdsaP256, 30)?;
    util::write_atomic(&dir.join("pki/ca.pem"), ca.as_bytes(), false)?;
    util::write_atomic(&dir.join("pki/cert.pem"), cert.as_bytes(), false)?;
    util::write_atomic(&dir.join("pki/cert.key"), key.as_bytes(), true)?;
    let mut ks = KeyStore::init(
        &dir.join("ks"),
        NAME,
        &dir.join("pki/cert.pem"),
        &dir.join("pki/cert.key"),
        Policy::default(),
    )?;
    ks.rotate(util::now(), &ring::rand::SystemRandom::new())?;
    let records = ks.published_records(util::now());
    if records.is_empty() {
        bail!("the key store published no record");
    }
    let list = zrtt_proto::record::encode_record_list(&records);
    util::write_atomic(
        &dir.join("records.hex"),
        zrtt_proto::record::hex(&list).as_bytes(),
        false,
    )?;
    let page = format!(
        "<!doctype html><title>zrtt demo</title><h1>Hello from {NAME}</h1><p>{}</p>\n",
        "The first secure request in one round trip. ".repeat(20)
    );
    std::fs::write(dir.join("www/index.html"), &page)?;

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
    let verifier_ip = lab.addr("verifier")?;

    step(
        3,
        total,
        "server: nginx (backend on loopback, TLS 1.3 on :443), three zrtt gateways; two provenance verifiers",
    );
    std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir, server_ip))?;
    let mut children = Children(Vec::new());
    let mut nginx = lab.command("server", "nginx")?;
    nginx
        .arg("-p")
        .arg(dir.join("nginx"))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("nginx/error.log"));
    nginx.stdout(Stdio::null()).stderr(Stdio::null());
    children.0.push(lab.spawn("server", nginx)?);
    let mut pv_keys = Vec::new();
    for (i, port) in [(1, 4480u16), (2, 4481)] {
        let key_file = dir.join(format!("pv{i}.key"));
        pv_keys.push(crate::pv::write_new_key(&key_file)?);
        let mut p = lab.command("verifier", &exe)?;
        p.args([
            "pv",
            "serve",
            "--listen",
            &format!("{verifier_ip}:{port}"),
            "--key",
        ])
        .arg(&key_file);
        p.stdout(Stdio::null()).stderr(Stdio::null());
        children.0.push(lab.spawn("verifier", p)?);
    }
    let gateway = |port: u16, trust: Option<Ipv4Addr>, verifiers: &[String]| -> Result<LabChild> {
        let mut g = lab.command("server", &exe)?;
        g.args([
            "gateway",
            "--listen",
            &format!("{server_ip}:{port}"),
            "--backend",
            "127.0.0.1:8080",
            "--keystore",
        ])
        .arg(dir.join("ks"));
        if let Some(ip) = trust {
            g.args(["--trust", &format!("{ip}/32")]);
        }
        for v in verifiers {
            g.args(["--verifier", v]);
        }
        if !verifiers.is_empty() {
            g.args(["--quorum", &verifiers.len().to_string()]);
        }
        g.stdout(Stdio::null()).stderr(Stdio::null());
        lab.spawn("server", g)
    };
    let pv_hex: Vec<String> = pv_keys
        .iter()
        .map(|k| zrtt_proto::record::hex(&k.public))
        .collect();
    children.0.push(gateway(4433, None, &[])?);
    children.0.push(gateway(4434, Some(client_ip), &[])?);
    children.0.push(gateway(4435, None, &pv_hex)?);
    let started = Instant::now();
    for port in [443, 4433, 4434, 4435] {
        wait_listening(&lab, "client", SocketAddr::from((server_ip, port)))?;
    }
    for port in [4480, 4481] {
        wait_listening(&lab, "client", SocketAddr::from((verifier_ip, port)))?;
    }
    // The client obtains provenance certificates once (as when it gets its
    // address); they serve first contact with any gateway trusting the verifiers.
    let pv_state = dir.join("pv.state");
    let mut fetch = lab.command("client", &exe)?;
    fetch
        .args(["pv", "fetch", "--verifier", &format!("{verifier_ip}:4480")])
        .args(["--verifier", &format!("{verifier_ip}:4481"), "--state"])
        .arg(&pv_state);
    run_capture(fetch).context("obtaining provenance certificates")?;
    // A fresh gateway's replay filter refuses flights stamped before its
    // start plus 2 s (docs/PROTOCOL.md §7): let that pass.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));

    step(4, total, &format!("client: {} fetches per row", a.runs));
    let mut rows = [
        Row::new("curl, TLS 1.3 (nginx)"),
        Row::new("zrtt get, first contact, address not proven"),
        Row::new("zrtt get, first contact, address proven (trusted network)"),
        Row::new("zrtt get, first contact, address proven (2 provenance verifiers)"),
    ];
    let records_file = dir.join("records.hex");
    let ca_file = dir.join("pki/ca.pem");
    let cert_file = dir.join("pki/cert.pem");
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
