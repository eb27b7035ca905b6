//! `zrtt lab sidecar`: the DZone article's sidecar pair
//! (`../shared/seeds/dzone-handshake-acceleration.txt`) against zrtt's. An
//! unmodified application (curl) calls `http://127.0.0.1:PORT/` on its own
//! host; a sidecar there carries the request to the server's host, where
//! another sidecar (or the zrtt gateway) hands it to the backend (nginx).
//!
//! Stacks, all with Debian's HAProxy where the article used it:
//! - direct: curl to the server's nginx over plain TCP, no sidecar;
//! - HAProxy sidecars with TCP Fast Open (the article's setup, no TLS);
//! - HAProxy sidecars with TLS 1.3 + Fast Open;
//! - the same with TLS 1.3 0-RTT (`allow-0rtt` on both sides);
//! - `zrtt proxy --map` to a `zrtt gateway`, first contact unproven, and
//!   proven by the lab's two provenance verifiers.
//!
//! Each sample is a **new connection** from the sidecar to the server:
//! HAProxy with `http-reuse never` and the server side closed after each
//! response, `zrtt proxy --max-idle-per-origin 0`. "First connection":
//! the client-side sidecar restarted and the client's TCP metrics (where
//! Fast Open cookies live) flushed, so there is no cookie, TLS session or
//! token; "later connection": a second request through the same sidecar,
//! with whatever the first one left (cookie, TLS session ticket).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;
use zrtt_lab::{Lab, LabChild};

use crate::client::{secs_field, write_out};
use crate::proc::{self, run_capture, wait_listening, WorkDir};
use crate::progress::{Failures, Progress};
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};
use crate::stack::{self, Gateway, Site, SiteStack, Verifiers, BACKEND};
use crate::Bench;

const NAME: &str = "www.example.com";
const PAGE: &str = "page.html";
const PAGE_BYTES: usize = 1024;
/// nginx plain HTTP facing the client (the "direct" row).
const DIRECT_PORT: u16 = 8082;
/// The server-side HAProxy: plain with Fast Open, TLS 1.3 with Fast Open.
const SRV_TFO_PORT: u16 = 8081;
const SRV_TLS_PORT: u16 = 8443;
const GW_PLAIN: u16 = 4433;
const GW_PROVEN: u16 = 4435;

/// Options of `zrtt lab sidecar`.
#[derive(Clone, Debug)]
pub struct SidecarOpts {
    /// Round-trip times, milliseconds.
    pub rtts_ms: Vec<u64>,
    /// Samples per stack, RTT and connection kind (medians).
    pub samples: usize,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
}

impl Default for SidecarOpts {
    fn default() -> Self {
        SidecarOpts {
            rtts_ms: vec![20, 100, 200],
            samples: 9,
            keep: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Direct,
    HaproxyTfo,
    HaproxyTls,
    HaproxyTls0rtt,
    CurlTfo,
    CurlTlsTfo,
    ZrttUnproven,
    ZrttProven,
}

const KINDS: [Kind; 8] = [
    Kind::Direct,
    Kind::HaproxyTfo,
    Kind::HaproxyTls,
    Kind::HaproxyTls0rtt,
    Kind::CurlTfo,
    Kind::CurlTlsTfo,
    Kind::ZrttUnproven,
    Kind::ZrttProven,
];

impl Kind {
    fn id(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::HaproxyTfo => "haproxy-tfo",
            Kind::HaproxyTls => "haproxy-tls13-tfo",
            Kind::HaproxyTls0rtt => "haproxy-tls13-tfo-0rtt",
            Kind::CurlTfo => "curl-tfo",
            Kind::CurlTlsTfo => "curl-tls13-tfo",
            Kind::ZrttUnproven => "zrtt-unproven",
            Kind::ZrttProven => "zrtt-proven",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Kind::Direct => "no sidecar, plain TCP (curl to nginx)",
            Kind::HaproxyTfo => "HAProxy sidecars, TCP Fast Open, no TLS (the article's setup)",
            Kind::HaproxyTls => "HAProxy sidecars, TLS 1.3 + Fast Open",
            Kind::HaproxyTls0rtt => "HAProxy sidecars, TLS 1.3 + Fast Open + 0-RTT",
            Kind::CurlTfo => "curl with Fast Open to the server's HAProxy, no TLS",
            Kind::CurlTlsTfo => "curl with Fast Open + TLS 1.3 to the server's HAProxy",
            Kind::ZrttUnproven => "zrtt proxy --map, gateway, address unproven",
            Kind::ZrttProven => "zrtt proxy --map, gateway, address proven (2 verifiers)",
        }
    }
    /// The local port the application calls (none without a client sidecar).
    fn local_port(self) -> Option<u16> {
        match self {
            Kind::Direct | Kind::CurlTfo | Kind::CurlTlsTfo => None,
            Kind::HaproxyTfo => Some(9101),
            Kind::HaproxyTls => Some(9102),
            Kind::HaproxyTls0rtt => Some(9103),
            Kind::ZrttUnproven => Some(9201),
            Kind::ZrttProven => Some(9202),
        }
    }
    fn secure(self) -> bool {
        !matches!(self, Kind::Direct | Kind::HaproxyTfo | Kind::CurlTfo)
    }
}

/// The client-side HAProxy: one frontend per HAProxy stack.
fn client_haproxy_conf(server: Ipv4Addr, ca: &Path) -> String {
    let ca = ca.display();
    format!(
        "global\n  maxconn 256\n\
         defaults\n  mode http\n  timeout connect 10s\n  timeout client 30s\n  timeout server 30s\n  http-reuse never\n  option http-server-close\n  retry-on conn-failure empty-response response-timeout\n\
         frontend fe_tfo\n  bind 127.0.0.1:9101\n  default_backend be_tfo\n\
         backend be_tfo\n  server s1 {server}:{SRV_TFO_PORT} tfo\n\
         frontend fe_tls\n  bind 127.0.0.1:9102\n  default_backend be_tls\n\
         backend be_tls\n  server s1 {server}:{SRV_TLS_PORT} tfo ssl verify required ca-file {ca} sni str({NAME}) ssl-min-ver TLSv1.3 alpn http/1.1\n\
         frontend fe_0rtt\n  bind 127.0.0.1:9103\n  default_backend be_0rtt\n\
         backend be_0rtt\n  server s1 {server}:{SRV_TLS_PORT} tfo ssl verify required ca-file {ca} sni str({NAME}) ssl-min-ver TLSv1.3 alpn http/1.1 allow-0rtt\n"
    )
}

/// The server-side HAProxy in front of the backend.
fn server_haproxy_conf(server: Ipv4Addr, pem: &Path) -> String {
    format!(
        "global\n  maxconn 256\n\
         defaults\n  mode http\n  timeout connect 10s\n  timeout client 30s\n  timeout server 30s\n  option http-server-close\n\
         frontend fe_tfo\n  bind {server}:{SRV_TFO_PORT} tfo\n  default_backend be\n\
         frontend fe_tls\n  bind {server}:{SRV_TLS_PORT} tfo ssl crt {pem} ssl-min-ver TLSv1.3 alpn http/1.1 allow-0rtt\n  default_backend be\n\
         backend be\n  server nginx {BACKEND}\n",
        pem = pem.display()
    )
}

/// The client-side sidecars (one HAProxy with three frontends, two zrtt
/// proxies), restartable for "first connection" samples.
struct ClientSidecars<'a> {
    bench: &'a Bench,
    lab: &'a Lab,
    site: &'a Site,
    dir: PathBuf,
    server: Ipv4Addr,
    provenance_state: PathBuf,
    running: Vec<(Kind, LabChild)>,
}

impl ClientSidecars<'_> {
    fn spawn(&self, k: Kind) -> Result<LabChild> {
        let c = match k {
            Kind::Direct | Kind::CurlTfo | Kind::CurlTlsTfo => bail!("no sidecar"),
            Kind::HaproxyTfo | Kind::HaproxyTls | Kind::HaproxyTls0rtt => {
                let mut c = self.lab.command("client", "haproxy")?;
                c.arg("-db")
                    .arg("-f")
                    .arg(self.dir.join("client-haproxy.cfg"));
                c
            }
            Kind::ZrttUnproven | Kind::ZrttProven => {
                let (gw, listen) = if k == Kind::ZrttProven {
                    (GW_PROVEN, 9302)
                } else {
                    (GW_PLAIN, 9301)
                };
                let local = k.local_port().unwrap_or_default();
                let mut c = self.lab.command("client", &self.bench.zrtt)?;
                c.args(["proxy", "--listen", &format!("127.0.0.1:{listen}")])
                    .args([
                        "--map",
                        &format!("127.0.0.1:{local}=https://{NAME}:{gw}"),
                        "--resolve",
                        &format!("{NAME}:{gw}:{}", self.server),
                        "--no-dns",
                        "--no-state",
                        "--max-idle-per-origin",
                        "0",
                    ])
                    .arg("--record")
                    .arg(&self.site.records)
                    .arg("--cert")
                    .arg(&self.site.cert)
                    .arg("--cacert")
                    .arg(&self.site.ca);
                if k == Kind::ZrttProven {
                    c.arg("--provenance-state").arg(&self.provenance_state);
                }
                c
            }
        };
        let mut c = c;
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = self.lab.spawn("client", c)?;
        for kind in KINDS {
            if same_process(kind, k) {
                if let Some(p) = kind.local_port() {
                    wait_listening(
                        self.lab,
                        "client",
                        SocketAddr::from((Ipv4Addr::LOCALHOST, p)),
                    )?;
                }
            }
        }
        Ok(child)
    }

    /// The sidecar serving `k` stopped and started again, and the client's
    /// TCP metrics (Fast Open cookies) flushed: the next request is a first
    /// connection.
    fn fresh(&mut self, k: Kind) -> Result<()> {
        if k.local_port().is_some() {
            self.restart(k)?;
        }
        let mut flush = self.lab.command("client", "ip")?;
        flush.args(["tcp_metrics", "flush", "all"]);
        // An empty table makes `flush` fail; either way it is empty after.
        let _ = run_capture(flush);
        Ok(())
    }

    fn restart(&mut self, k: Kind) -> Result<()> {
        if let Some(i) = self.running.iter().position(|(r, _)| same_process(*r, k)) {
            let (_, child) = self.running.swap_remove(i);
            child.terminate(Duration::from_secs(2))?;
        }
        let child = self.spawn(k)?;
        self.running.push((k, child));
        Ok(())
    }
}

impl Drop for ClientSidecars<'_> {
    fn drop(&mut self) {
        for (_, child) in self.running.drain(..) {
            let _ = child.terminate(Duration::from_secs(2));
        }
    }
}

/// Whether `a` and `b` are served by the same sidecar process.
fn same_process(a: Kind, b: Kind) -> bool {
    let haproxy = |k| {
        matches!(
            k,
            Kind::HaproxyTfo | Kind::HaproxyTls | Kind::HaproxyTls0rtt
        )
    };
    a == b || (haproxy(a) && haproxy(b))
}

/// Connections the client's kernel opened with data in the SYN.
fn syns_with_data(lab: &Lab) -> Result<u64> {
    let mut c = lab.command("client", "nstat")?;
    c.args(["-asz", "TcpExtTCPFastOpenActive"]);
    let out = run_capture(c)?;
    out.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some("TcpExtTCPFastOpenActive")).then(|| f.next()?.parse().ok())?
        })
        .context("nstat printed no TcpExtTCPFastOpenActive")
}

/// One request from the application: ms to the first response byte.
fn fetch(lab: &Lab, site: &Site, server: Ipv4Addr, k: Kind) -> Result<f64> {
    let url = match k {
        Kind::Direct => format!("http://{server}:{DIRECT_PORT}/{PAGE}"),
        Kind::CurlTfo => format!("http://{server}:{SRV_TFO_PORT}/{PAGE}"),
        Kind::CurlTlsTfo => format!("https://{NAME}:{SRV_TLS_PORT}/{PAGE}"),
        _ => format!(
            "http://127.0.0.1:{}/{PAGE}",
            k.local_port().unwrap_or_default()
        ),
    };
    let mut c = lab.command("client", "curl")?;
    c.args(["-sS", "-o", "/dev/null", "--max-time", "30"]);
    match k {
        Kind::CurlTfo => {
            c.arg("--tcp-fastopen");
        }
        Kind::CurlTlsTfo => {
            c.args(["--tcp-fastopen", "--tlsv1.3", "--cacert"])
                .arg(&site.ca)
                .args(["--resolve", &format!("{NAME}:{SRV_TLS_PORT}:{server}")]);
        }
        _ => {}
    }
    c.args([
        "-H",
        &format!("Host: {NAME}"),
        "-w",
        "%{time_starttransfer} %{http_code} %{size_download}",
        &url,
    ]);
    let f = write_out(c, k.id(), 3, 1)?;
    if f[2] != PAGE_BYTES.to_string() {
        bail!("{}: {} bytes, expected {PAGE_BYTES}", k.id(), f[2]);
    }
    secs_field(&f[0])
}

/// Runs every RTT, stack and connection kind, `samples` times,
/// interleaved. Needs root, nginx, curl and haproxy.
pub fn run(bench: &Bench, o: &SidecarOpts) -> Result<Report> {
    proc::require_tools(&["nginx", "curl", "haproxy", "ip"])?;
    if o.samples == 0 || o.rtts_ms.is_empty() {
        bail!("need at least one sample and one RTT");
    }
    let work = WorkDir::new(&bench.console, "sidecar", o.keep)?;
    let dir = work.path.clone();
    let site = Site::create(bench, &dir, NAME)?;
    site.page(PAGE, PAGE_BYTES)?;
    let lab = Lab::up(stack::wan_with_verifier(Duration::from_millis(
        o.rtts_ms[0],
    )))?;
    let server = lab.addr("server")?;
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let at = |port| SocketAddr::from((server, port));
    let mut servers = SiteStack::new(bench, "server", &site)
        .http(at(DIRECT_PORT), false)
        .gateway(Gateway::new(at(GW_PLAIN)))
        .gateway(Gateway::proven_by(at(GW_PROVEN), &verifiers))
        .start(&lab, "client")?;
    // The server-side HAProxy, with the site's certificate and key in one file.
    let pem = dir.join("haproxy.pem");
    let mut both = std::fs::read(&site.cert).context("the site's certificate")?;
    both.extend(std::fs::read(&site.key).context("the site's key")?);
    std::fs::write(&pem, both)?;
    let srv_conf = dir.join("server-haproxy.cfg");
    std::fs::write(&srv_conf, server_haproxy_conf(server, &pem))?;
    let mut c = lab.command("server", "haproxy")?;
    c.arg("-db")
        .arg("-f")
        .arg(&srv_conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    servers.adopt(lab.spawn("server", c)?);
    for p in [SRV_TFO_PORT, SRV_TLS_PORT] {
        wait_listening(&lab, "client", at(p))?;
    }
    std::fs::write(
        dir.join("client-haproxy.cfg"),
        client_haproxy_conf(server, &site.ca),
    )?;
    servers.settle();
    let mut sidecars = ClientSidecars {
        bench,
        lab: &lab,
        site: &site,
        dir: dir.clone(),
        server,
        provenance_state: verifiers.state.clone(),
        running: Vec::new(),
    };

    // samples[rtt][kind][first=0 / later=1]
    let mut samples = vec![vec![[Vec::new(), Vec::new()]; KINDS.len()]; o.rtts_ms.len()];
    // Requests whose connection carried data in its SYN, per kind.
    let mut fast_open = [0u64; KINDS.len()];
    let mut failures = Failures::new("sidecar");
    let total = o.rtts_ms.len() * KINDS.len() * 2 * o.samples;
    let mut progress = Progress::new(&bench.console, "sidecar", total);
    for (ri, rtt) in o.rtts_ms.iter().enumerate() {
        lab.set_rtt("client", "server", Duration::from_millis(*rtt))?;
        lab.set_rtt("server", "verifier", Duration::from_millis(*rtt))?;
        for _ in 0..o.samples {
            for (ki, k) in KINDS.iter().enumerate() {
                for (ci, conn) in ["first", "later"].iter().enumerate() {
                    progress.tick(&format!("{rtt} ms {} {conn}", k.id()));
                    let r = if ci == 0 { sidecars.fresh(*k) } else { Ok(()) }.and_then(|()| {
                        let before = syns_with_data(&lab)?;
                        let v = fetch(&lab, &site, server, *k)?;
                        if syns_with_data(&lab)? > before {
                            fast_open[ki] += 1;
                        }
                        Ok(v)
                    });
                    match r {
                        Ok(v) => samples[ri][ki][ci].push(v),
                        Err(e) => {
                            failures.record(&progress, format!("{rtt} ms {} {conn}: {e:#}", k.id()))
                        }
                    }
                }
            }
        }
    }
    drop(sidecars);
    drop(servers);
    drop(verifiers);
    lab.down().context("tearing the lab down")?;
    failures.at_most(total / 10, "more than 10% of requests failed")?;
    Ok(report(
        o,
        &samples,
        &fast_open,
        failures.note("requests").into_iter().collect(),
    ))
}

type Samples = Vec<Vec<[Vec<f64>; 2]>>;

fn report(o: &SidecarOpts, samples: &Samples, fast_open: &[u64], notes: Vec<String>) -> Report {
    let mut r = Report::new(
        "sidecar",
        "Sidecars for unmodified applications: the DZone pair against zrtt (`zrtt lab sidecar`)",
    );
    r.standard_setup();
    r.setup.push(format!(
        "An application (curl) asks a sidecar on its own host for a {PAGE_BYTES}-byte page; the sidecar opens a new connection to the server for every request (HAProxy `http-reuse never`, `zrtt proxy --max-idle-per-origin 0`). First connection: sidecar restarted and the client's TCP metrics flushed (no Fast Open cookie, TLS session or token). Later connection: the next request through the same sidecar. Time to the first response byte, median of {} per cell; RTTs in parentheses.",
        o.samples
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab sidecar --rtt {} --samples {}`.",
        o.rtts_ms
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        o.samples
    ));
    let mut head = vec![
        "stack".to_string(),
        "secure".to_string(),
        "data in SYN".to_string(),
    ];
    for rtt in &o.rtts_ms {
        head.push(format!("{rtt} ms, first"));
        head.push(format!("{rtt} ms, later"));
    }
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "Median time to the first response byte, ms (RTTs)",
        &head_refs,
    );
    t.numeric = (3..head.len()).collect();
    let mut series: Vec<Series> = Vec::new();
    let mut cells = Vec::new();
    for (ki, k) in KINDS.iter().enumerate() {
        let mut row = vec![
            k.label().to_string(),
            if k.secure() { "yes" } else { "no" }.to_string(),
            format!(
                "{}/{}",
                fast_open[ki],
                (0..o.rtts_ms.len())
                    .map(|ri| samples[ri][ki][0].len() + samples[ri][ki][1].len())
                    .sum::<usize>()
            ),
        ];
        for (ri, rtt) in o.rtts_ms.iter().enumerate() {
            for (ci, conn) in ["first", "later"].iter().enumerate() {
                let s = Summary::of(&samples[ri][ki][ci]);
                row.push(format!("{:.1} ({:.2})", s.median, s.median / *rtt as f64));
                cells.push(json!({
                    "stack": k.id(), "requests_with_syn_data": fast_open[ki], "rtt_ms": rtt, "connection": conn,
                    "summary_ms": s.to_json(),
                    "samples_ms": samples[ri][ki][ci].iter().map(|v| round3(*v)).collect::<Vec<_>>(),
                }));
            }
        }
        t.row(row);
        series.push(Series {
            name: k.label().to_string(),
            values: o
                .rtts_ms
                .iter()
                .enumerate()
                .map(|(ri, rtt)| Some(Summary::of(&samples[ri][ki][0]).median / *rtt as f64))
                .collect(),
            reference: false,
        });
    }
    r.tables.push(t);
    r.charts.push(Chart {
        title: "First connection through the sidecars, in round trips".into(),
        x_label: "RTT".into(),
        y_label: "RTTs to the first byte".into(),
        x: Axis::Categories(o.rtts_ms.iter().map(|r| format!("{r} ms")).collect()),
        series,
    });
    r.notes = notes;
    r.notes.push(
        "\"data in SYN\": requests whose connection the client's kernel opened with data in the SYN (TcpExtTCPFastOpenActive). Debian's HAProxy 2.6 with `tfo` on its server lines (and the `retry-on` its manual asks for) sent none here: strace shows a plain connect and the request written after it, so its rows show what the article's configuration does with this HAProxy, not what Fast Open can do; the curl rows put the same requests in the SYN to the same server-side HAProxy.".into(),
    );
    r.notes.push(
        "The article (Sydney server, Apache Bench, kept sidecar connections): 559.3 ms per request direct, 280.5 ms through the TFO sidecars (0.50x); it did not run TLS 1.3 0-RTT (\"the experiment that didn't happen\"). TFO without TLS and TLS 0-RTT are replayable; zrtt's early data is refused on replay (docs/PROTOCOL.md §7).".into(),
    );
    r.data = json!({"samples": o.samples, "rtts_ms": o.rtts_ms, "cells": cells});
    r
}
