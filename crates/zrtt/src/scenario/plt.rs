//! `zrtt lab plt`: page-load time of a generated multi-object page spread
//! over three hosts, fetched like a browser: the HTML first, then its
//! objects with up to six HTTP/1.1 keep-alive connections per host (the
//! HTML's connection is reused). Stacks: TCP, TCP + Fast Open (cookie
//! cached, as in the TFO reproduction), TLS 1.3 and zrtt on first contact
//! (proven by provenance verifiers), against nginx on every host.
//!
//! The loader is in-process (tokio, one current-thread runtime inside the
//! client's namespace) so that all four stacks share it: it times from the
//! first connection to the last object's last byte; there is no rendering.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zrtt_lab::{Lab, Topology};
use zrtt_net::client::{CertKeySource, ClientConfig, KeySource, Target, ZrttStream};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

use super::report::{round3, Axis, Chart, Progress, Report, Series, Summary, Table};
use super::stack::{self, Children, GatewayOpts, Nginx, NginxServer, NginxTls, Site};

/// The page's hosts; the first serves the HTML.
pub const HOSTS: [&str; 3] = ["www.example.com", "static.example.com", "img.example.com"];
/// Object sizes (KB) on each host: ten per host, 30 in all, median about 11 KB.
const OBJECT_KB: [usize; 10] = [2, 4, 6, 8, 10, 12, 16, 24, 40, 64];
/// Connections per host, as browsers do.
pub const PER_HOST: usize = 6;
const HTTP_PORT: u16 = 80;
const TLS_PORT: u16 = 443;
const GW_PORT: u16 = 4435;
const GW_WINDOW_PORT: u16 = 4436;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    Tcp,
    TcpTfo,
    Tls13,
    Zrtt,
    ZrttWindow,
}

pub const PROTOS: [Proto; 5] = [
    Proto::Tcp,
    Proto::TcpTfo,
    Proto::Tls13,
    Proto::Zrtt,
    Proto::ZrttWindow,
];

impl Proto {
    pub fn id(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::TcpTfo => "tcp-tfo",
            Proto::Tls13 => "tls13",
            Proto::Zrtt => "zrtt",
            Proto::ZrttWindow => "zrtt-window",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Proto::Tcp => "HTTP over TCP",
            Proto::TcpTfo => "HTTP over TCP + TFO (cookies cached)",
            Proto::Tls13 => "HTTPS, TLS 1.3",
            Proto::Zrtt => "zrtt, first contact, proven",
            Proto::ZrttWindow => "zrtt, proven, --proven-window 14600",
        }
    }
    fn port(self) -> u16 {
        match self {
            Proto::Tcp | Proto::TcpTfo => HTTP_PORT,
            Proto::Tls13 => TLS_PORT,
            Proto::Zrtt => GW_PORT,
            Proto::ZrttWindow => GW_WINDOW_PORT,
        }
    }
}

/// The TFO reproduction (CS244, Wikipedia page, Chrome): page-load time in
/// seconds without / with TFO at RTT 20, 100, 200 ms.
const TFO_PAPER: [(u64, f64, f64); 3] = [(20, 1.72, 1.53), (100, 4.01, 2.88), (200, 7.7, 5.43)];

pub struct PltOpts {
    pub rtts_ms: Vec<u64>,
    pub loads: usize,
    pub keep: bool,
}

/// The objects of the page, as (host index, path, bytes).
pub fn objects() -> Vec<(usize, String, usize)> {
    let mut v = Vec::new();
    for h in 0..HOSTS.len() {
        for (i, kb) in OBJECT_KB.iter().enumerate() {
            v.push((h, format!("/h{h}/o{i}.bin"), kb * 1024));
        }
    }
    v
}

/// The HTML page listing every object (as `src="//host/path"`).
pub fn html() -> String {
    let mut s = String::from("<!doctype html><title>zrtt plt</title>\n");
    for (h, path, _) in objects() {
        s.push_str(&format!("<img src=\"//{}{path}\">\n", HOSTS[h]));
    }
    s.push_str(&"<p>filler text of a real page. ".repeat(300));
    s.push('\n');
    s
}

/// The `(host, path)` pairs an HTML page references.
pub fn parse_objects(html: &str) -> Vec<(String, String)> {
    html.split("src=\"//")
        .skip(1)
        .filter_map(|rest| {
            let url = rest.split('"').next()?;
            let (host, path) = url.split_once('/')?;
            Some((host.to_string(), format!("/{path}")))
        })
        .collect()
}

/// Key records of several hosts, each checked against its own certificate.
struct MultiKeys(HashMap<String, CertKeySource>);

impl KeySource for MultiKeys {
    fn lookup(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord> {
        self.0.get(host)?.lookup(host, now)
    }
    fn verify_retry(
        &self,
        host: &str,
        records: &[KeyRecord],
        now: UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        self.0.get(host)?.verify_retry(host, records, now)
    }
}

/// No keys anywhere: every `ZrttStream` does TLS 1.3.
struct NoKeys;

impl KeySource for NoKeys {
    fn lookup(&self, _: &str, _: UnixTime) -> Option<VerifiedKeyRecord> {
        None
    }
    fn verify_retry(&self, _: &str, _: &[KeyRecord], _: UnixTime) -> Option<VerifiedKeyRecord> {
        None
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Pin<Box<dyn Io>>;

/// Everything a page load needs; cheap to share between tasks.
struct Loader {
    proto: Proto,
    addrs: HashMap<String, SocketAddr>,
    zrtt: Arc<ClientConfig>,
    tls: Arc<ClientConfig>,
}

fn request(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: zrtt-plt\r\nAccept: */*\r\n\r\n")
        .into_bytes()
}

impl Loader {
    /// A new connection to `host` that has sent `first` (in the SYN where the stack allows).
    async fn open(&self, host: &str, first: &[u8]) -> Result<Conn> {
        let addr = *self
            .addrs
            .get(host)
            .ok_or_else(|| anyhow!("unknown host {host}"))?;
        let t = Duration::from_secs(10);
        Ok(match self.proto {
            Proto::Tcp => Box::pin(
                zrtt_net::tfo::connect_with_data(addr, first, false, t)
                    .await?
                    .0,
            ),
            Proto::TcpTfo => Box::pin(
                zrtt_net::tfo::connect_with_data_cookie(addr, first, t)
                    .await?
                    .0,
            ),
            Proto::Tls13 | Proto::Zrtt | Proto::ZrttWindow => {
                let cfg = if self.proto == Proto::Tls13 {
                    &self.tls
                } else {
                    &self.zrtt
                };
                let mut s = ZrttStream::new(
                    cfg.clone(),
                    Target {
                        host: host.into(),
                        addr,
                    },
                );
                s.write_all(first).await?;
                s.flush().await?;
                Box::pin(s)
            }
        })
    }

    /// Fetches `paths` from `host` over up to `PER_HOST` connections (`reuse`
    /// first, if given); returns total body bytes.
    async fn fetch_host(
        self: &Arc<Self>,
        host: String,
        paths: Vec<String>,
        reuse: Option<(Conn, Vec<u8>)>,
    ) -> Result<usize> {
        let queue = Arc::new(Mutex::new(paths.into_iter().collect::<VecDeque<_>>()));
        let n = queue.lock().map_err(|_| anyhow!("poisoned"))?.len();
        let mut tasks = tokio::task::JoinSet::new();
        let mut reuse = reuse;
        for _ in 0..PER_HOST.min(n) {
            let (me, q, h) = (self.clone(), queue.clone(), host.clone());
            let conn = reuse.take();
            tasks.spawn_local(async move { me.worker(h, q, conn).await });
        }
        let mut total = 0;
        while let Some(r) = tasks.join_next().await {
            total += r.map_err(|e| anyhow!("task: {e}"))??;
        }
        Ok(total)
    }

    async fn worker(
        &self,
        host: String,
        queue: Arc<Mutex<VecDeque<String>>>,
        conn: Option<(Conn, Vec<u8>)>,
    ) -> Result<usize> {
        let (mut conn, mut buf) = match conn {
            Some(c) => (Some(c.0), c.1),
            None => (None, Vec::new()),
        };
        let mut total = 0;
        loop {
            let Some(path) = queue.lock().map_err(|_| anyhow!("poisoned"))?.pop_front() else {
                return Ok(total);
            };
            let req = request(&host, &path);
            let c = match conn.as_mut() {
                Some(c) => {
                    c.write_all(&req).await?;
                    c
                }
                None => conn.insert(self.open(&host, &req).await?),
            };
            let body = read_response(c, &mut buf)
                .await
                .with_context(|| format!("{host}{path}"))?;
            total += body.len();
        }
    }

    /// One page load: milliseconds from the first connection to the last byte.
    async fn load(self: Arc<Self>) -> Result<(f64, usize)> {
        let t0 = Instant::now();
        let www = HOSTS[0].to_string();
        let mut conn = self.open(&www, &request(&www, "/index.html")).await?;
        let mut buf = Vec::new();
        let page = read_response(&mut conn, &mut buf)
            .await
            .context("the HTML")?;
        let mut by_host: HashMap<String, Vec<String>> = HashMap::new();
        for (h, p) in parse_objects(&String::from_utf8_lossy(&page)) {
            by_host.entry(h).or_default().push(p);
        }
        let mut total = page.len();
        let mut jobs = Vec::new();
        let mut reuse = Some((conn, buf));
        for (h, paths) in by_host {
            let r = if h == www { reuse.take() } else { None };
            let me = self.clone();
            jobs.push(tokio::task::spawn_local(async move {
                me.fetch_host(h, paths, r).await
            }));
        }
        for j in jobs {
            total += j.await.map_err(|e| anyhow!("task: {e}"))??;
        }
        Ok((t0.elapsed().as_secs_f64() * 1000.0, total))
    }
}

/// Reads one HTTP/1.1 response (status 200, `Content-Length` body) from
/// `c`; `buf` keeps bytes read past it. Returns the body.
async fn read_response(c: &mut Conn, buf: &mut Vec<u8>) -> Result<Vec<u8>> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = resp.parse(buf)? {
            if resp.code != Some(200) {
                bail!("status {:?}", resp.code);
            }
            let len: usize = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .ok_or_else(|| anyhow!("no Content-Length"))?;
            while buf.len() < head + len {
                let n = c.read(&mut chunk).await?;
                if n == 0 {
                    bail!("connection closed mid-body");
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[head..head + len].to_vec();
            buf.drain(..head + len);
            return Ok(body);
        }
        let n = c.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed before the response");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn client_configs(
    sites: &[Site],
    pv_state: &Path,
) -> Result<(Arc<ClientConfig>, Arc<ClientConfig>)> {
    let mut roots = rustls::RootCertStore::empty();
    let mut keys = HashMap::new();
    for s in sites {
        roots
            .roots
            .extend(crate::util::load_roots(Some(&s.ca))?.roots);
        let records = crate::keys::load_records(&s.records)?;
        let cert = crate::util::load_cert(&s.cert)?;
        keys.insert(s.name.clone(), CertKeySource::new(cert.to_vec(), records));
    }
    let tls = zrtt_net::client::tls_client_config(roots)?;
    let mut z = ClientConfig::builder(Arc::new(MultiKeys(keys))).with_tls_config(tls.clone());
    z.tls_fallback = false;
    z.provenance = Some(Arc::new(zrtt_net::pv::ProvenanceStore::load(pv_state)?));
    let t = ClientConfig::builder(Arc::new(NoKeys)).with_tls_config(tls);
    Ok((Arc::new(z), Arc::new(t)))
}

/// Loads the page `n` times (after `warm` unmeasured loads) in the
/// calling thread (which must be in the client's namespace).
fn load_pages(loader: Arc<Loader>, warm: usize, n: usize, expect: usize) -> Result<Vec<f64>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let mut out = Vec::new();
        for i in 0..warm + n {
            let (ms, bytes) = loader.clone().load().await?;
            if bytes != expect {
                bail!("page load got {bytes} bytes, expected {expect}");
            }
            if i >= warm {
                out.push(ms);
            }
        }
        Ok(out)
    })
}

pub fn run(o: PltOpts) -> Result<Report> {
    stack::require_tools(&["nginx"])?;
    if o.loads == 0 || o.rtts_ms.is_empty() {
        bail!("need at least one load and one RTT");
    }
    let work = stack::WorkDir::new("plt", o.keep)?;
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
        let site = Site::create(&dir.join(format!("s{i}")), name)?;
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
    let mut children = Children::default();
    let pv_state = dir.join("pv.state");
    let (pvs, pv_keys) = stack::verifiers_and_certificates(
        &lab,
        "verifier",
        &[4480, 4481],
        &dir,
        "client",
        &pv_state,
    )?;
    children.0.extend(pvs);
    let mut addrs: HashMap<Proto, HashMap<String, SocketAddr>> = HashMap::new();
    let started = Instant::now();
    for (i, site) in sites.iter().enumerate() {
        let host = format!("s{i}");
        let ip = lab.addr(&host)?;
        let nginx = Nginx {
            servers: vec![
                NginxServer {
                    listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
                    tls: None,
                    fast_open: false,
                },
                NginxServer {
                    listen: SocketAddr::from((ip, HTTP_PORT)),
                    tls: None,
                    fast_open: true,
                },
                NginxServer {
                    listen: SocketAddr::from((ip, TLS_PORT)),
                    tls: Some(NginxTls {
                        protocols: "TLSv1.3",
                        resumption: false,
                        early_data: false,
                    }),
                    fast_open: false,
                },
            ],
            keepalive_requests: 1000,
        };
        children.0.push(nginx.spawn(&lab, &host, site, "nginx")?);
        for (port, window) in [
            (GW_PORT, None),
            (GW_WINDOW_PORT, Some(zrtt_proto::admission::INITIAL_WINDOW)),
        ] {
            children.0.push(stack::spawn_gateway(
                &lab,
                &host,
                site,
                &GatewayOpts {
                    listen: Some(SocketAddr::from((ip, port))),
                    verifiers: pv_keys.clone(),
                    proven_window: window,
                    ..GatewayOpts::default()
                },
            )?);
        }
        for p in PROTOS {
            addrs
                .entry(p)
                .or_default()
                .insert(site.name.clone(), SocketAddr::from((ip, p.port())));
        }
        for port in [HTTP_PORT, TLS_PORT, GW_PORT, GW_WINDOW_PORT] {
            stack::wait_listening(&lab, "client", SocketAddr::from((ip, port)))?;
        }
    }
    stack::settle_gateways(started);
    let (zcfg, tcfg) = client_configs(&sites, &pv_state)?;

    let mut samples = vec![vec![Vec::new(); PROTOS.len()]; o.rtts_ms.len()];
    let mut progress = Progress::new("plt", o.rtts_ms.len() * PROTOS.len());
    for (ri, &rtt_ms) in o.rtts_ms.iter().enumerate() {
        for i in 0..HOSTS.len() {
            lab.set_rtt("client", &format!("s{i}"), Duration::from_millis(rtt_ms))?;
        }
        for (pi, &p) in PROTOS.iter().enumerate() {
            progress.tick(&format!("RTT {rtt_ms} ms: {}", p.id()));
            let loader = Arc::new(Loader {
                proto: p,
                addrs: addrs[&p].clone(),
                zrtt: zcfg.clone(),
                tls: tcfg.clone(),
            });
            // One unmeasured load first: it gives TFO its cookies.
            let loads = o.loads;
            samples[ri][pi] = lab
                .in_host("client", move || load_pages(loader, 1, loads, expect))?
                .with_context(|| format!("RTT {rtt_ms} ms, {}", p.id()))?;
        }
    }
    drop(children);
    lab.down()?;
    Ok(report(&o, &samples, expect))
}

fn report(o: &PltOpts, samples: &[Vec<Vec<f64>>], bytes: usize) -> Report {
    let mut r = Report::new(
        "plt",
        "Page-load time of a 31-object page on three hosts (`zrtt lab plt`)",
    );
    r.setup = super::machine_lines();
    r.setup.push(format!(
        "Page: HTML ({} B) on {} plus {} objects ({} KB in all, 2-64 KB each) on three hosts, each its own namespace at the same RTT; browser-like loader: HTML first, then up to {PER_HOST} keep-alive connections per host; median of {} loads after one unmeasured load; nginx on every host.",
        html().len(), HOSTS[0], objects().len(), bytes / 1024, o.loads
    ));
    r.setup.push(format!(
        "Reproduce: `sudo zrtt lab plt --rtt {} --loads {}`.",
        o.rtts_ms
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(","),
        o.loads
    ));
    let mut t = Table::new(
        "Median page-load time, ms (and against TCP)",
        &[
            "RTT (ms)",
            "TCP",
            "TCP + TFO",
            "TLS 1.3",
            "zrtt",
            "zrtt, window 14.6 KB (opt-in)",
            "TFO gain",
            "zrtt vs TLS 1.3",
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
            format!("{:.0}%", (1.0 - m[1] / m[0]) * 100.0),
            format!("{:.0}% faster", (1.0 - m[3] / m[2]) * 100.0),
            paper,
        ]);
        rows.push(json!({
            "rtt_ms": rtt,
            "stacks": PROTOS.iter().enumerate().map(|(pi, p)| json!({
                "id": p.id(), "label": p.label(),
                "summary_ms": Summary::of(&samples[ri][pi]).to_json(),
                "samples_ms": samples[ri][pi].iter().map(|v| round3(*v)).collect::<Vec<_>>(),
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
    r.notes.push("The TFO reproduction (Stanford CS244, after Radhakrishnan et al. 2011) loaded a cached Wikipedia page in Chrome: 1.72 s / 1.53 s (TCP / TFO) at 20 ms, 4.01 / 2.88 at 100 ms, 7.7 / 5.43 at 200 ms, gains of 11%, 28% and 29%. Its absolute times include a browser's parsing and rendering and a larger page; compare the gains, not the seconds.".into());
    r.notes.push("Every new connection costs TCP one handshake, TLS 1.3 two round trips before its first request, TFO (cookie cached) and zrtt none; keep-alive connections carry the rest, so the page's critical path is HTML, then the slowest host's object queue. Before the handshake completes, TFO sends a cookie holder one initial window; a zrtt gateway sends a proven client three times its first flight by default, so every object larger than about 1.3 KB (three first flights) on a new connection waits a round trip for the handshake, and one initial window with the opt-in `--proven-window 14600` (docs/PROTOCOL.md §8 explains why that is not the default).".into());
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

    #[tokio::test]
    async fn reads_pipelined_responses() {
        let (a, mut b) = tokio::io::duplex(64 * 1024);
        b.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nxy")
            .await
            .unwrap();
        let mut c: Conn = Box::pin(a);
        let mut buf = Vec::new();
        assert_eq!(read_response(&mut c, &mut buf).await.unwrap(), b"abc");
        assert_eq!(read_response(&mut c, &mut buf).await.unwrap(), b"xy");
        b.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut c, &mut buf).await.is_err());
        buf.clear(); // a failed load is abandoned with its connection
        b.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab")
            .await
            .unwrap();
        drop(b);
        let e = read_response(&mut c, &mut buf).await.unwrap_err();
        assert!(e.to_string().contains("mid-body"), "{e}");
    }
}
