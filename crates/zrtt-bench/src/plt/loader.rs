//! The page loader: in-process, one current-thread tokio runtime inside the
//! client's namespace, shared by every stack. The HTML first, then its
//! objects over up to [`PER_HOST`] keep-alive connections per host (the
//! HTML's connection is reused); timed from the first connection to the
//! last object's last byte, with no rendering. [`Proto::ZrttH2`]: hyper's
//! HTTP/2 client over one [`ZrttStream`] per host, every object of the
//! host requested at once ([`Loader::load_h2`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zrtt_net::client::{CertKeySource, ClientConfig, KeySource, Target, ZrttStream};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

use super::{parse_objects, Proto, HOSTS, PER_HOST};
use crate::stack::Site;

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

/// An HTTP/2 connection's request sender, and its connection's info until
/// the first answer counted the mode.
struct H2 {
    sender: hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    info: Option<zrtt_net::client::ConnInfoHandle>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Pin<Box<dyn Io>>;

/// Everything a page load needs; cheap to share between tasks.
pub(super) struct Loader {
    pub(super) proto: Proto,
    /// Where each host of the page listens for `proto`.
    pub(super) addrs: HashMap<String, SocketAddr>,
    pub(super) zrtt: Arc<ClientConfig>,
    pub(super) tls: Arc<ClientConfig>,
    /// Connections opened, by how they were answered (`Mode::as_str`, or
    /// "tcp"): what the page load measured, checked by the lab's test.
    pub(super) modes: Mutex<BTreeMap<&'static str, usize>>,
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
            Proto::Tcp | Proto::TcpTfo => {
                self.count("tcp");
                self.open_tcp(addr, first, t).await?
            }
            Proto::Tls13 | Proto::Zrtt | Proto::ZrttStrict | Proto::ZrttH2 => {
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
                let mode = s
                    .info()
                    .lock()
                    .ok()
                    .and_then(|i| i.as_ref().map(|i| i.mode.as_str()));
                self.count(mode.unwrap_or("unknown"));
                Box::pin(s)
            }
        })
    }

    fn count(&self, mode: &'static str) {
        if let Ok(mut m) = self.modes.lock() {
            *m.entry(mode).or_default() += 1;
        }
    }

    async fn open_tcp(&self, addr: SocketAddr, first: &[u8], t: Duration) -> Result<Conn> {
        Ok(match self.proto {
            Proto::Tcp => Box::pin(
                zrtt_net::tfo::connect_with_data(addr, first, false, t)
                    .await?
                    .0,
            ),
            _ => Box::pin(
                zrtt_net::tfo::connect_with_data_cookie(addr, first, t)
                    .await?
                    .0,
            ),
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

    /// A new HTTP/2 connection to `host` (nothing is sent before the first
    /// request, which rides the first flight).
    async fn open_h2(&self, host: &str) -> Result<H2> {
        let addr = *self
            .addrs
            .get(host)
            .ok_or_else(|| anyhow!("unknown host {host}"))?;
        let target = Target {
            host: host.into(),
            addr,
        };
        let s = ZrttStream::new(self.zrtt.clone(), target);
        if !s.negotiated_h2() {
            bail!("{host}: the key record does not offer HTTP/2");
        }
        let info = s.info();
        let io = hyper_util::rt::TokioIo::new(s);
        let exec = hyper_util::rt::TokioExecutor::new();
        let (sender, conn) = hyper::client::conn::http2::handshake(exec, io).await?;
        tokio::task::spawn_local(async move { drop(conn.await) });
        Ok(H2 {
            sender,
            info: Some(info),
        })
    }

    /// GET `path` from `host` on `h2`; the body. The first answer on a
    /// connection counts its mode.
    async fn get_h2(&self, h2: &mut H2, host: &str, path: &str) -> Result<bytes::Bytes> {
        use http_body_util::BodyExt;
        let req = hyper::Request::get(format!("https://{host}{path}"))
            .header("user-agent", "zrtt-plt")
            .body(http_body_util::Empty::<bytes::Bytes>::new())?;
        let resp = h2.sender.send_request(req).await?;
        if let Some(info) = h2.info.take() {
            let mode = info
                .lock()
                .ok()
                .and_then(|i| i.as_ref().map(|i| i.mode.as_str()));
            self.count(mode.unwrap_or("unknown"));
        }
        if resp.status() != 200 {
            bail!("{host}{path}: status {}", resp.status());
        }
        Ok(resp.into_body().collect().await?.to_bytes())
    }

    /// One page load over HTTP/2: the HTML, then every object of each host
    /// at once on that host's one connection.
    async fn load_h2(self: Arc<Self>) -> Result<(f64, usize)> {
        let t0 = Instant::now();
        let www = HOSTS[0].to_string();
        let mut first = self.open_h2(&www).await?;
        let page = self.get_h2(&mut first, &www, "/index.html").await?;
        let mut by_host: HashMap<String, Vec<String>> = HashMap::new();
        for (h, p) in parse_objects(&String::from_utf8_lossy(&page)) {
            by_host.entry(h).or_default().push(p);
        }
        let mut reuse = Some(first);
        let mut jobs = tokio::task::JoinSet::new();
        for (h, paths) in by_host {
            let conn = match (h == www).then(|| reuse.take()).flatten() {
                Some(c) => c,
                None => self.open_h2(&h).await?,
            };
            let mut conn = conn;
            for p in paths {
                let (me, h) = (self.clone(), h.clone());
                // The connection's first request counts its mode.
                let mut c = H2 {
                    sender: conn.sender.clone(),
                    info: conn.info.take(),
                };
                jobs.spawn_local(async move { me.get_h2(&mut c, &h, &p).await });
            }
        }
        let mut total = page.len();
        while let Some(r) = jobs.join_next().await {
            total += r.map_err(|e| anyhow!("task: {e}"))??.len();
        }
        Ok((t0.elapsed().as_secs_f64() * 1000.0, total))
    }

    /// One page load: milliseconds from the first connection to the last byte.
    async fn load(self: Arc<Self>) -> Result<(f64, usize)> {
        if self.proto == Proto::ZrttH2 {
            return self.load_h2().await;
        }
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

/// Client configurations for the page's sites: zrtt only (their key
/// records and the client's provenance certificates), TLS 1.3 only, and
/// zrtt with HTTP/2 where the records offer it.
pub(super) fn client_configs(
    sites: &[Site],
    provenance_state: &Path,
) -> Result<(Arc<ClientConfig>, Arc<ClientConfig>, Arc<ClientConfig>)> {
    let mut roots = rustls::RootCertStore::empty();
    let mut keys = HashMap::new();
    for s in sites {
        roots.add(s.ca_der()?)?;
        keys.insert(s.name.clone(), s.key_source()?);
    }
    let tls = zrtt_net::client::tls_client_config(roots)?;
    let keys: Arc<dyn KeySource> = Arc::new(MultiKeys(keys));
    let provenance = Arc::new(zrtt_net::verifier::ProvenanceStore::load(provenance_state)?);
    let zrtt = |http2| {
        let mut z = ClientConfig::builder(keys.clone()).with_tls_config(tls.clone());
        z.tls_fallback = false;
        z.provenance = Some(provenance.clone());
        z.http2 = http2;
        Arc::new(z)
    };
    let (z, z2) = (
        zrtt(zrtt_net::client::Http2Policy::Never),
        zrtt(zrtt_net::client::Http2Policy::WhenAdvertised),
    );
    let t = ClientConfig::builder(Arc::new(NoKeys)).with_tls_config(tls);
    Ok((z, Arc::new(t), z2))
}

/// Loads the page `n` times (after `warm` unmeasured loads) in the
/// calling thread (which must be in the client's namespace).
pub(super) fn load_pages(
    loader: Arc<Loader>,
    warm: usize,
    n: usize,
    think: Duration,
    expect: usize,
) -> Result<(Vec<f64>, BTreeMap<&'static str, usize>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let mut out = Vec::new();
        for i in 0..warm + n {
            if i > 0 {
                tokio::time::sleep(think).await;
            }
            let (ms, bytes) = loader.clone().load().await?;
            if bytes != expect {
                bail!("page load got {bytes} bytes, expected {expect}");
            }
            if i + 1 == warm {
                // Count the measured loads' connections only.
                loader
                    .modes
                    .lock()
                    .map_err(|_| anyhow!("poisoned"))?
                    .clear();
            }
            if i >= warm {
                out.push(ms);
            }
        }
        let modes = std::mem::take(&mut *loader.modes.lock().map_err(|_| anyhow!("poisoned"))?);
        Ok((out, modes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
