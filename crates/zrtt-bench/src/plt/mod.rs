//! `zrtt lab plt`: page-load time of a generated multi-object page spread
//! over three hosts, fetched like a browser: the HTML first, then its
//! objects with up to six HTTP/1.1 keep-alive connections per host (the
//! HTML's connection is reused). Stacks: TCP, TCP + Fast Open (cookie
//! cached, as in the TFO reproduction), TLS 1.3 and zrtt on first contact
//! (proven by provenance verifiers), against nginx on every host; and zrtt
//! with HTTP/2 inside the channel, one connection per host carrying all of
//! its objects at once (issue 16's target: no more round trips than six
//! HTTP/1.1 connections).
//!
//! The loader is in-process (tokio, one current-thread runtime inside the
//! client's namespace) so that all four stacks share it: it times from the
//! first connection to the last object's last byte; there is no rendering.
//! docs/LAB.md (section plt) has the method and the reading.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;
use zrtt_lab::{Lab, Topology};

mod loader;

use crate::proc::{self, WorkDir};
use crate::progress::Progress;
use crate::report::{round3, Axis, Chart, Report, Series, Summary, Table};
use crate::stack::{Gateway, NginxTls, Site, SiteStack, Verifiers};
use crate::Bench;
use loader::{client_configs, load_pages, Loader};

/// The page's hosts; the first serves the HTML.
pub(crate) const HOSTS: [&str; 3] = ["www.example.com", "static.example.com", "img.example.com"];
/// Object sizes (KB) on each host: ten per host, 30 in all, median about 11 KB.
const OBJECT_KB: [usize; 10] = [2, 4, 6, 8, 10, 12, 16, 24, 40, 64];
/// Connections per host, as browsers do.
const PER_HOST: usize = 6;
const HTTP_PORT: u16 = 80;
const TLS_PORT: u16 = 443;
const GW_PORT: u16 = 4435;
const GW_STRICT_PORT: u16 = 4436;

/// A stack the page is loaded with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Proto {
    Tcp,
    TcpTfo,
    Tls13,
    Zrtt,
    ZrttStrict,
    ZrttH2,
}

const PROTOS: [Proto; 6] = [
    Proto::Tcp,
    Proto::TcpTfo,
    Proto::Tls13,
    Proto::Zrtt,
    Proto::ZrttStrict,
    Proto::ZrttH2,
];

impl Proto {
    fn id(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::TcpTfo => "tcp-tfo",
            Proto::Tls13 => "tls13",
            Proto::Zrtt => "zrtt",
            Proto::ZrttStrict => "zrtt-strict",
            Proto::ZrttH2 => "zrtt-h2",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Proto::Tcp => "HTTP over TCP",
            Proto::TcpTfo => "HTTP over TCP + TFO (cookies cached)",
            Proto::Tls13 => "HTTPS, TLS 1.3",
            Proto::Zrtt => "zrtt, first contact, proven",
            Proto::ZrttStrict => "zrtt, proven, --strict-amplification (3x)",
            Proto::ZrttH2 => "zrtt h2, proven, one connection per host",
        }
    }
    fn port(self) -> u16 {
        match self {
            Proto::Tcp | Proto::TcpTfo => HTTP_PORT,
            Proto::Tls13 => TLS_PORT,
            Proto::Zrtt | Proto::ZrttH2 => GW_PORT,
            Proto::ZrttStrict => GW_STRICT_PORT,
        }
    }
}

/// The TFO reproduction (CS244, Wikipedia page, Chrome): page-load time in
/// seconds without / with TFO at RTT 20, 100, 200 ms.
const TFO_PAPER: [(u64, f64, f64); 3] = [(20, 1.72, 1.53), (100, 4.01, 2.88), (200, 7.7, 5.43)];

/// Options of `zrtt lab plt`.
#[derive(Clone, Debug)]
pub struct PltOpts {
    /// Round-trip times, milliseconds.
    pub rtts_ms: Vec<u64>,
    /// Measured page loads per stack and RTT.
    pub loads: usize,
    /// Pause before each load but the first (a user's time between pages):
    /// without it, back-to-back loads from one address would spend the
    /// gateways' per-destination budgets faster than any reader
    /// (docs/PROTOCOL.md §8) and measure that instead.
    pub think: Duration,
    /// Keep the working directory (configs, keys, logs) for inspection.
    pub keep: bool,
}

impl Default for PltOpts {
    fn default() -> Self {
        PltOpts {
            rtts_ms: vec![20, 100, 200],
            loads: 9,
            think: Duration::from_millis(1500),
            keep: false,
        }
    }
}

/// The objects of the page, as (host index, path, bytes).
pub(crate) fn objects() -> Vec<(usize, String, usize)> {
    let mut v = Vec::new();
    for h in 0..HOSTS.len() {
        for (i, kb) in OBJECT_KB.iter().enumerate() {
            v.push((h, format!("/h{h}/o{i}.bin"), kb * 1024));
        }
    }
    v
}

/// The HTML page listing every object (as `src="//host/path"`).
fn html() -> String {
    let mut s = String::from("<!doctype html><title>zrtt plt</title>\n");
    for (h, path, _) in objects() {
        s.push_str(&format!("<img src=\"//{}{path}\">\n", HOSTS[h]));
    }
    s.push_str(&"<p>filler text of a real page. ".repeat(300));
    s.push('\n');
    s
}

/// The `(host, path)` pairs an HTML page references.
fn parse_objects(html: &str) -> Vec<(String, String)> {
    html.split("src=\"//")
        .skip(1)
        .filter_map(|rest| {
            let url = rest.split('"').next()?;
            let (host, path) = url.split_once('/')?;
            Some((host.to_string(), format!("/{path}")))
        })
        .collect()
}

/// Loads the page with every stack at every RTT, `loads` times after one
/// unmeasured load. Needs root and nginx.
pub fn run(bench: &Bench, o: &PltOpts) -> Result<Report> {
    proc::require_tools(&["nginx"])?;
    if o.loads == 0 || o.rtts_ms.is_empty() {
        bail!("need at least one load and one RTT");
    }
    let work = WorkDir::new(&bench.console, "plt", o.keep)?;
    let dir = work.path.clone();
    let mut topo = Topology::new().host("client").host("verifier");
    let first = Duration::from_millis(o.rtts_ms[0]);
    for i in 0..HOSTS.len() {
        topo = topo
            .host(&format!("s{i}"))
            .rtt("client", &format!("s{i}"), first);
    }
    topo = topo.rtt("client", "verifier", Duration::from_millis(10));
    let mut sites = Vec::new();
    for (i, name) in HOSTS.iter().enumerate() {
        // The gateways serve HTTP/2 in zrtt: the records say so (the
        // HTTP/1.1 rows' clients do not ask for it).
        let mut policy = zrtt_dns::Policy::default();
        policy.flags = zrtt_proto::record::RecordFlags::from_bits(
            policy.flags.bits() | zrtt_proto::record::RecordFlags::HTTP2,
        )
        .unwrap_or_default();
        let site = Site::create_with(bench, &dir.join(format!("s{i}")), name, policy)?;
        if i == 0 {
            std::fs::write(site.www.join("index.html"), html())?;
        }
        sites.push(site);
    }
    for (h, path, size) in objects() {
        sites[h].page(&path, size)?;
    }
    let expect: usize = html().len() + objects().iter().map(|o| o.2).sum::<usize>();
    let lab = Lab::up(topo)?;
    let verifiers = Verifiers::start(bench, &lab, &dir)?;
    let mut addrs: HashMap<Proto, HashMap<String, SocketAddr>> = HashMap::new();
    let mut servers = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        let host = format!("s{i}");
        let ip = lab.addr(&host)?;
        let at = |port| SocketAddr::from((ip, port));
        servers.push(
            SiteStack::new(bench, &host, site)
                .http(at(HTTP_PORT), true)
                .tls(at(TLS_PORT), NginxTls::TLS13, false)
                .keepalive_requests(1000)
                .gateway(Gateway::proven_by(at(GW_PORT), &verifiers))
                .gateway(Gateway {
                    strict: true,
                    ..Gateway::proven_by(at(GW_STRICT_PORT), &verifiers)
                })
                .start(&lab, "client")?,
        );
        for p in PROTOS {
            addrs
                .entry(p)
                .or_default()
                .insert(site.name.clone(), at(p.port()));
        }
    }
    for s in &servers {
        s.settle();
    }
    let (zcfg, tcfg, h2cfg) = client_configs(&sites, &verifiers.state)?;

    let mut samples = vec![vec![Vec::new(); PROTOS.len()]; o.rtts_ms.len()];
    let mut modes = vec![vec![BTreeMap::new(); PROTOS.len()]; o.rtts_ms.len()];
    let mut progress = Progress::new(&bench.console, "plt", o.rtts_ms.len() * PROTOS.len());
    for (ri, &rtt_ms) in o.rtts_ms.iter().enumerate() {
        for i in 0..HOSTS.len() {
            lab.set_rtt("client", &format!("s{i}"), Duration::from_millis(rtt_ms))?;
        }
        for (pi, &p) in PROTOS.iter().enumerate() {
            progress.tick(&format!("RTT {rtt_ms} ms: {}", p.id()));
            let loader = Arc::new(Loader {
                proto: p,
                addrs: addrs[&p].clone(),
                zrtt: if p == Proto::ZrttH2 {
                    h2cfg.clone()
                } else {
                    zcfg.clone()
                },
                tls: tcfg.clone(),
                modes: Default::default(),
            });
            // One unmeasured load first: it gives TFO its cookies.
            let (loads, think) = (o.loads, o.think);
            (samples[ri][pi], modes[ri][pi]) = lab
                .in_host("client", move || {
                    load_pages(loader, 1, loads, think, expect)
                })?
                .with_context(|| format!("RTT {rtt_ms} ms, {}", p.id()))?;
        }
    }
    drop(servers);
    drop(verifiers);
    lab.down()?;
    Ok(report(o, &samples, &modes, expect))
}

/// Connections of one stack's measured loads, by how they were answered.
type Modes = BTreeMap<&'static str, usize>;

fn report(o: &PltOpts, samples: &[Vec<Vec<f64>>], modes: &[Vec<Modes>], bytes: usize) -> Report {
    let mut r = Report::new(
        "plt",
        "Page-load time of a 31-object page on three hosts (`zrtt lab plt`)",
    );
    r.standard_setup();
    r.setup.push(format!(
        "Page: HTML ({} B) on {} plus {} objects ({} KB in all, 2-64 KB each) on three hosts, each its own namespace at the same RTT; browser-like loader: HTML first, then up to {PER_HOST} keep-alive connections per host (zrtt h2: the HTML's connection and one per other host, every object requested at once); median of {} loads after one unmeasured load, {:?} apart (a reader's pause between pages); nginx on every host.",
        html().len(), HOSTS[0], objects().len(), bytes / 1024, o.loads, o.think
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab plt --rtt {} --loads {} --think {}ms`.",
        o.rtts_ms
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(","),
        o.loads,
        o.think.as_millis()
    ));
    let mut t = Table::new(
        "Median page-load time, ms (and against TCP)",
        &[
            "RTT (ms)",
            "TCP",
            "TCP + TFO",
            "TLS 1.3",
            "zrtt",
            "zrtt, strict 3x (opt-in)",
            "zrtt h2, 1 conn/host",
            "TFO gain",
            "zrtt vs TLS 1.3",
            "zrtt h2 vs zrtt 6x h1",
            "paper: TCP / TFO (s), gain",
        ],
    );
    let mut series: Vec<Series> = PROTOS
        .iter()
        .map(|p| Series {
            name: p.label().into(),
            values: Vec::new(),
            reference: false,
        })
        .collect();
    let mut rows = Vec::new();
    for (ri, &rtt) in o.rtts_ms.iter().enumerate() {
        let m: Vec<f64> = (0..PROTOS.len())
            .map(|pi| Summary::of(&samples[ri][pi]).median)
            .collect();
        for (pi, s) in series.iter_mut().enumerate() {
            s.values.push(Some(m[pi]));
        }
        let paper = TFO_PAPER
            .iter()
            .find(|p| p.0 == rtt)
            .map(|p| format!("{} / {} ({:.0}%)", p.1, p.2, (1.0 - p.2 / p.1) * 100.0))
            .unwrap_or_else(|| "–".into());
        t.row(vec![
            rtt.to_string(),
            format!("{:.0}", m[0]),
            format!("{:.0}", m[1]),
            format!("{:.0}", m[2]),
            format!("{:.0}", m[3]),
            format!("{:.0}", m[4]),
            format!("{:.0}", m[5]),
            format!("{:.0}%", (1.0 - m[1] / m[0]) * 100.0),
            format!("{:.0}% faster", (1.0 - m[3] / m[2]) * 100.0),
            format!("{:+.0}%", (m[5] / m[3] - 1.0) * 100.0),
            paper,
        ]);
        rows.push(json!({
            "rtt_ms": rtt,
            "stacks": PROTOS.iter().enumerate().map(|(pi, p)| json!({
                "id": p.id(), "label": p.label(),
                "summary_ms": Summary::of(&samples[ri][pi]).to_json(),
                "samples_ms": samples[ri][pi].iter().map(|v| round3(*v)).collect::<Vec<_>>(),
                "connections": modes[ri][pi],
            })).collect::<Vec<_>>(),
        }));
    }
    r.tables.push(t);
    r.charts.push(Chart {
        title: "Median page-load time".into(),
        x_label: "RTT (ms)".into(),
        y_label: "ms".into(),
        x: Axis::Categories(o.rtts_ms.iter().map(|r| r.to_string()).collect()),
        series,
    });
    r.data = json!({"page_bytes": bytes, "objects": objects().len(), "per_host": PER_HOST, "loads": o.loads, "rtts": rows});
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_lists_every_object_once() {
        let objs = parse_objects(&html());
        assert_eq!(objs.len(), 30);
        for (h, path, _) in objects() {
            assert!(
                objs.contains(&(HOSTS[h].to_string(), path.clone())),
                "{path}"
            );
        }
        let mut sizes: Vec<usize> = objects().iter().map(|o| o.2).collect();
        sizes.sort();
        assert_eq!(sizes[15], 12 * 1024);
        assert!(parse_objects("<img src=\"//nohost\">").is_empty());
    }
}
