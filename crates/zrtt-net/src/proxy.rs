//! A local HTTP/1.1 forward proxy that gives unmodified programs zrtt.
//!
//! Point a program at it (`curl -x http://127.0.0.1:8080 http://www.example.com/`,
//! `http_proxy=...`) and:
//!
//! - an absolute-form `http://` request to a host for which the
//!   [`KeySource`](crate::client::KeySource) of the [`ClientConfig`] yields a
//!   verified key record goes over zrtt (the client of [`crate::client`],
//!   with its TLS 1.3 fallback) to the host's gateway: the port is the
//!   [`ZrttPorts`] mapping for the host, else the URL's explicit port, else
//!   443;
//! - a request to any other host is forwarded unchanged as plain HTTP to the
//!   URL's host and port (80 by default);
//! - `CONNECT host:port` is tunnelled unchanged (a plain TCP splice), so
//!   `https://` URLs keep working through the proxy.
//!
//! Connections to origins (zrtt channels and plain TCP) are kept alive and
//! reused per scheme and authority (hyper-util's pool). Failures become a
//! `502 Bad Gateway` (`504` when the origin's response head does not arrive
//! in time) with a one-line `text/plain` body saying what went wrong.
//!
//! Names resolve through a [`Resolve`] implementation ([`SystemResolver`]:
//! `--resolve` style overrides, then the system resolver). Which hosts get
//! zrtt is decided by [`KeySource::lookup`](crate::client::KeySource::lookup),
//! called on a blocking thread after the key source's
//! [`prefetch`](crate::client::KeySource::prefetch), so a DNS-backed key
//! source ([`DnsKeySource`](crate::client::DnsKeySource)) plugs in through
//! [`ClientConfig::keys`] without changing the proxy. zrtt hosts are
//! reached through the public [`ZrttConnector`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{ClientConfig, Http2Policy, ZrttConnector};
use crate::error::{Error, Result};
use crate::http::{strip_hop_by_hop, text_response as text};
use crate::sidecar::SidecarMap;

pub use crate::client::{Resolve, ResolveFuture, SystemResolver};

/// Which port a zrtt host's gateway listens on.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ZrttPorts {
    /// Per host (lower case).
    pub hosts: HashMap<String, u16>,
    /// For hosts not in `hosts`; `None`: the URL's explicit port, else 443.
    pub default: Option<u16>,
}

impl ZrttPorts {
    /// Parse `HOST=PORT` (one host) or `PORT` (every zrtt host) and add it.
    pub fn add_spec(&mut self, spec: &str) -> Result<()> {
        let bad = || Error::Config(format!("--zrtt-port {spec:?}: use HOST=PORT or PORT"));
        match spec.split_once('=') {
            Some((host, port)) if !host.is_empty() => {
                let port = port.parse().map_err(|_| bad())?;
                self.hosts.insert(host.to_ascii_lowercase(), port);
            }
            Some(_) => return Err(bad()),
            None => self.default = Some(spec.parse().map_err(|_| bad())?),
        }
        Ok(())
    }

    /// The gateway port for `host`, given the request URL's explicit port.
    pub fn port_for(&self, host: &str, url_port: Option<u16>) -> u16 {
        self.hosts
            .get(&host.to_ascii_lowercase())
            .copied()
            .or(self.default)
            .or(url_port)
            .unwrap_or(443)
    }
}

/// Time bounds of the proxy; the defaults are defined once, in its
/// `Default`, and fields are changed on a default value.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ProxyTimeouts {
    /// Receiving a request head from a client (also bounds idle keep-alive).
    pub header_read: Duration,
    /// Resolving and connecting to a plain origin or a `CONNECT` target.
    pub connect: Duration,
    /// From a request's dispatch (after the host's key lookup; a wait for
    /// a free origin connection included,
    /// [`ProxyConfig::max_conns_per_origin`]) until the origin's response
    /// head (then 504).
    pub response: Duration,
    /// Whole lifetime of a `CONNECT` tunnel.
    pub tunnel: Duration,
    /// Idle pooled origin connections are closed after this long.
    pub pool_idle: Duration,
}

impl Default for ProxyTimeouts {
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(30),
            connect: Duration::from_secs(10),
            response: Duration::from_secs(60),
            tunnel: Duration::from_secs(3600),
            pool_idle: Duration::from_secs(60),
        }
    }
}

/// Proxy settings: [`ProxyConfig::new`] with the defaults, then change
/// the public fields.
#[non_exhaustive]
pub struct ProxyConfig {
    /// The zrtt client: key source, TLS fallback, Fast Open, early data.
    pub client: Arc<ClientConfig>,
    /// Name resolution for every outgoing connection.
    pub resolver: Arc<dyn Resolve>,
    /// Gateway ports of zrtt hosts.
    pub zrtt_ports: ZrttPorts,
    /// Serve the listener over TLS ([`proxy_tls_config`]): an HTTPS proxy
    /// (Chromium's `--proxy-server=https://...`, curl's `--proxy
    /// https://...`) that speaks HTTP/2 to clients that offer it, so a
    /// browser multiplexes its `http://` requests to it instead of queueing
    /// them behind six connections per host. `None` (the default): plain
    /// HTTP/1.1. Sidecar ports stay plain either way.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Time bounds.
    pub timeouts: ProxyTimeouts,
    /// Concurrent client connections; further accepts wait.
    pub max_connections: usize,
    /// Idle origin connections kept per scheme and authority.
    pub pool_max_idle_per_origin: usize,
    /// HTTP/1.1 requests in flight per scheme and authority, i.e. origin
    /// connections in use (0: no bound), for all the proxy's clients
    /// together. Further requests wait, first come first served, for a
    /// response to finish and then usually reuse its connection. A response
    /// whose body lasts longer than 10 s (a long poll, an event stream, a
    /// client that stopped reading) stops counting against the bound then.
    /// Requests that go over HTTP/2 in the zrtt channel ([`Http2Policy`])
    /// are not bounded (they share one connection), nor are sidecar ports.
    pub max_conns_per_origin: usize,
    /// Sidecar ports: each local address serves one HTTPS origin over zrtt
    /// (crate::sidecar).
    pub maps: Vec<SidecarMap>,
    /// The resolver for the DNS shortcut's queries (with
    /// `client.dns_shortcut`; none: the shortcut is not used).
    pub shortcut_dns: Option<Arc<zrtt_dns::resolver::Resolver>>,
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("client", &self.client)
            .field("zrtt_ports", &self.zrtt_ports)
            .field("tls", &self.tls.is_some())
            .field("timeouts", &self.timeouts)
            .field("max_connections", &self.max_connections)
            .field("max_conns_per_origin", &self.max_conns_per_origin)
            .finish_non_exhaustive()
    }
}

impl ProxyConfig {
    /// Concurrent client connections by default.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// Idle origin connections kept per scheme and authority by default.
    pub const DEFAULT_MAX_IDLE_PER_ORIGIN: usize = 8;
    /// HTTP/1.1 requests in flight per origin by default: six, as browsers
    /// open per host, and as many early answers as a zrtt gateway has
    /// pending per client address (docs/PROTOCOL.md §8).
    pub const DEFAULT_MAX_CONNS_PER_ORIGIN: usize = 6;

    /// Defaults: system resolver, gateway on 443, [`Self::DEFAULT_MAX_CONNECTIONS`]
    /// connections, 8 idle connections and 6 HTTP/1.1 requests in flight
    /// per origin, [`ProxyTimeouts::default`].
    pub fn new(client: Arc<ClientConfig>) -> Self {
        Self {
            client,
            resolver: Arc::new(SystemResolver::new()),
            zrtt_ports: ZrttPorts::default(),
            tls: None,
            timeouts: ProxyTimeouts::default(),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            pool_max_idle_per_origin: Self::DEFAULT_MAX_IDLE_PER_ORIGIN,
            max_conns_per_origin: Self::DEFAULT_MAX_CONNS_PER_ORIGIN,
            maps: Vec::new(),
            shortcut_dns: None,
        }
    }
}

mod metrics;
mod plain;
mod slots;
mod tls;
pub(crate) use metrics::inc;
pub use metrics::ProxyMetrics;
pub use tls::proxy_tls_config;

/// The body type the proxy answers with.
pub type ProxyBody = crate::http::Body;

/// What every connection of the proxy (and of its sidecar ports) shares.
pub(crate) struct ProxyShared {
    pub(crate) cfg: ProxyConfig,
    own: SocketAddr,
    pub(crate) metrics: Arc<ProxyMetrics>,
    plain: Client<plain::PlainConnector, Incoming>,
    pub(crate) zrtt: Client<ZrttConnector, Incoming>,
    /// HTTP/1.1 only, for upgrades (WebSocket) when `zrtt` may speak
    /// HTTP/2 (which has no `Upgrade`); `None`: `zrtt` is HTTP/1.1.
    pub(crate) zrtt_h1: Option<Client<ZrttConnector, Incoming>>,
    /// [`ProxyConfig::max_conns_per_origin`].
    origin_slots: slots::OriginSlots,
}

type Shared = ProxyShared;

/// A bound forward proxy; [`Proxy::run`] serves it.
pub struct Proxy {
    listener: TcpListener,
    /// The listener's TLS ([`ProxyConfig::tls`]).
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// Sidecar ports and their origins.
    maps: Vec<(TcpListener, Arc<SidecarMap>)>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("listener", &self.listener)
            .field("cfg", &self.shared.cfg)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Bind `addr` (port 0 for any). Must be called inside a tokio runtime.
    pub async fn bind(addr: SocketAddr, cfg: ProxyConfig) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(Error::io("binding the proxy"))?;
        let own = listener.local_addr().map_err(Error::io("local address"))?;
        let mut maps = Vec::new();
        for m in &cfg.maps {
            let l = TcpListener::bind(m.local)
                .await
                .map_err(Error::io("binding a sidecar port"))?;
            maps.push((l, Arc::new(m.clone())));
        }
        let t = cfg.timeouts;
        let plain = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(t.pool_idle)
            .pool_max_idle_per_host(cfg.pool_max_idle_per_origin)
            .pool_timer(TokioTimer::new())
            .build(plain::PlainConnector {
                resolver: cfg.resolver.clone(),
                timeout: t.connect,
                own,
            });
        let zrtt_client = |client: Arc<ClientConfig>| {
            let mut c = ZrttConnector::builder(client)
                .resolver(cfg.resolver.clone())
                .resolve_timeout(t.connect);
            if let Some(dns) = &cfg.shortcut_dns {
                c = c.shortcut_dns(dns.clone());
            }
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(t.pool_idle)
                .pool_max_idle_per_host(cfg.pool_max_idle_per_origin)
                .pool_timer(TokioTimer::new())
                .build(c.build())
        };
        let zrtt = zrtt_client(cfg.client.clone());
        let zrtt_h1 = (cfg.client.http2 != Http2Policy::Never)
            .then(|| zrtt_client(Arc::new(cfg.client.with_http2(Http2Policy::Never))));
        let tls = cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        let origin_slots = slots::OriginSlots::new(cfg.max_conns_per_origin);
        Ok(Self {
            listener,
            tls,
            maps,
            shared: Arc::new(Shared {
                cfg,
                own,
                metrics: Arc::new(ProxyMetrics::default()),
                plain,
                zrtt,
                zrtt_h1,
                origin_slots,
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(Error::io("local address"))
    }

    /// The bound sidecar addresses, in the order of [`ProxyConfig::maps`].
    pub fn sidecar_addrs(&self) -> Result<Vec<SocketAddr>> {
        self.maps
            .iter()
            .map(|(l, _)| l.local_addr().map_err(Error::io("local address")))
            .collect()
    }

    /// The proxy's counters.
    pub fn metrics(&self) -> Arc<ProxyMetrics> {
        self.shared.metrics.clone()
    }

    /// Serve until `shutdown` resolves, then give open connections 5 s and
    /// abort the rest.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let limit = Arc::new(Semaphore::new(self.shared.cfg.max_connections.max(1)));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut sidecars = JoinSet::new();
        for (l, map) in self.maps {
            sidecars.spawn(accept_loop(
                l,
                Some(map),
                None,
                self.shared.clone(),
                limit.clone(),
                stop_rx.clone(),
            ));
        }
        let shared = self.shared.clone();
        let main = tokio::spawn(accept_loop(
            self.listener,
            None,
            self.tls,
            shared,
            limit,
            stop_rx,
        ));
        shutdown.await;
        stop_tx.send_replace(true);
        let _ = main.await;
        while sidecars.join_next().await.is_some() {}
        Ok(())
    }
}

/// Accepts on `listener` (a sidecar port when `map` is set; TLS first
/// with `tls`) until `stop`, then gives open connections 5 s and aborts
/// the rest.
async fn accept_loop(
    listener: TcpListener,
    map: Option<Arc<SidecarMap>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    limit: Arc<Semaphore>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    {
        let mut tasks = JoinSet::new();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => break,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            tokio::select! {
                () = &mut shutdown => break,
                r = listener.accept() => match r {
                    Ok((tcp, _peer)) => {
                        inc(&shared.metrics.connections);
                        let (shared, map, tls) = (shared.clone(), map.clone(), tls.clone());
                        tasks.spawn(async move {
                            match tls {
                                None => serve_connection(shared, tcp, map, false).await,
                                Some(tls) => tls::serve_tls(shared, tcp, tls).await,
                            }
                            drop(permit);
                        });
                    }
                    Err(e) => {
                        tracing::warn!("proxy accept: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(listener);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.shutdown().await;
    }
}

async fn serve_connection<I>(shared: Arc<Shared>, io: I, map: Option<Arc<SidecarMap>>, h2: bool)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let header_read = shared.cfg.timeouts.header_read;
    let svc = hyper::service::service_fn(move |req| {
        let (shared, map) = (shared.clone(), map.clone());
        async move {
            Ok::<_, Infallible>(match map {
                Some(map) => crate::sidecar::handle(shared, &map, req).await,
                None => handle(shared, req).await,
            })
        }
    });
    let served = if h2 {
        // CONNECT streams become tunnels (RFC 9113 §8.5) through the same
        // upgrade as HTTP/1.1's; an idle connection is closed by the
        // client or at shutdown.
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(io), svc)
            .await
    } else {
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read)
            .serve_connection(TokioIo::new(io), svc)
            .with_upgrades()
            .await
    };
    if let Err(e) = served {
        tracing::debug!("proxy connection: {e}");
    }
}

/// `err` and its sources, joined by `: ` (hyper's errors hide the cause).
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !msg.contains(&s) {
            msg.push_str(": ");
            msg.push_str(&s);
        }
        cur = e.source();
    }
    msg
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        return tunnel(shared, req).await;
    }
    let m = &shared.metrics;
    let uri = req.uri().clone();
    match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("http") => {}
        Some(s) => {
            inc(&m.bad_requests);
            return text(
                StatusCode::BAD_REQUEST,
                format!("zrtt proxy: scheme {s:?} not supported; use http:// or CONNECT"),
            );
        }
        None => {
            inc(&m.bad_requests);
            return text(
                StatusCode::BAD_REQUEST,
                "zrtt proxy: not a proxy request (expected an absolute http:// URL)",
            );
        }
    }
    let (Some(raw_host), Some(authority)) = (uri.host(), uri.authority()) else {
        inc(&m.bad_requests);
        return text(StatusCode::BAD_REQUEST, "zrtt proxy: URL without a host");
    };
    let host = raw_host.trim_matches(['[', ']']).to_owned();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());

    // zrtt if the key source has a verified record for the host.
    let keys = shared.cfg.client.keys.clone();
    let clock = shared.cfg.client.clock;
    let started = std::time::Instant::now();
    // Some(whether the record says the gateway serves HTTP/2) if a verified
    // record is held.
    let held = |keys: Arc<dyn crate::client::KeySource>, host: String| async move {
        tokio::task::spawn_blocking(move || {
            keys.lookup(&host, clock()).map(|r| r.body().flags.http2())
        })
        .await
        .unwrap_or(None)
    };
    // With the DNS shortcut, a key already held does not wait for the
    // lookup: the connector races it (client::ZrttStream::with_shortcut).
    let mut record = None;
    if shortcut_ok(&shared, &req) {
        record = held(keys.clone(), host.clone()).await;
    }
    let shortcut = record.is_some();
    let prefetched = match shortcut {
        true => Ok(()),
        false => {
            tokio::time::timeout(shared.cfg.timeouts.connect, keys.prefetch(&host, clock())).await
        }
    };
    if !shortcut {
        record = held(keys, host.clone()).await;
    }
    let zrtt = record.is_some();
    let outcome = match (zrtt, prefetched) {
        (true, _) => "verified",
        (false, Ok(())) => "none",
        (false, Err(_)) => "timeout",
    };
    m.key_lookup(outcome, started.elapsed());

    let target = if zrtt {
        let port = shared.cfg.zrtt_ports.port_for(&host, uri.port_u16());
        format!("https://{raw_host}:{port}{path}")
    } else {
        format!("http://{raw_host}:{}{path}", uri.port_u16().unwrap_or(80))
    };
    let Ok(target) = target.parse::<Uri>() else {
        inc(&m.bad_requests);
        return text(StatusCode::BAD_REQUEST, "zrtt proxy: malformed URL");
    };
    let host_header = HeaderValue::from_str(authority.as_str()).ok();
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(header::HOST) {
        if let Some(h) = host_header {
            parts.headers.insert(header::HOST, h);
        }
    }
    parts.uri = target.clone();
    // The origin connection's version is the pool's choice (a request that
    // came in over HTTP/2 would be refused on an HTTP/1.1 connection).
    parts.version = hyper::Version::HTTP_11;
    let out = Request::from_parts(parts, body);

    let response = shared.cfg.timeouts.response;
    let deadline = tokio::time::Instant::now() + response;
    // HTTP/1.1 to the origin: one request per connection at a time, so a
    // bounded number in flight (HTTP/2 in the channel multiplexes).
    let h1 = !zrtt || !shared.cfg.client.http2.speaks_h2(|| record == Some(true));
    let slot = if h1 {
        match shared.origin_slots.acquire(&target, deadline, m).await {
            Some(s) => s,
            None => {
                inc(&m.gateway_timeout);
                return text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "zrtt proxy: {host}: no free connection within {response:?} ({} requests in flight)",
                        shared.cfg.max_conns_per_origin
                    ),
                );
            }
        }
    } else {
        slots::Slot::Unbounded
    };
    // Time to first byte from here: a wait for a slot is not the origin's.
    let started = std::time::Instant::now();
    let result = if zrtt {
        inc(&m.zrtt_requests);
        tokio::time::timeout_at(deadline, shared.zrtt.request(out)).await
    } else {
        inc(&m.passthrough_requests);
        tokio::time::timeout_at(deadline, shared.plain.request(out)).await
    };
    let via = if zrtt { "zrtt" } else { "plain HTTP" };
    match result {
        Ok(Ok(resp)) => {
            m.first_byte(
                resp.extensions().get::<crate::client::ConnInfoHandle>(),
                started.elapsed(),
            );
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(
                parts,
                slots::hold(body.boxed(), slot, m.origin_long_holds.clone()),
            )
        }
        Ok(Err(e)) => {
            inc(&m.bad_gateway);
            let msg = format!(
                "zrtt proxy: {host} via {via} ({target}): {}",
                error_chain(&e)
            );
            tracing::debug!("{msg}");
            text(StatusCode::BAD_GATEWAY, msg)
        }
        Err(_) => {
            inc(&m.gateway_timeout);
            text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("zrtt proxy: {host} via {via}: no response within {response:?}"),
            )
        }
    }
}

/// Whether `req` could take the DNS shortcut (the shortcut on, with a
/// resolver; GET or HEAD): then a key held is enough to choose zrtt.
fn shortcut_ok(shared: &Shared, req: &Request<Incoming>) -> bool {
    shared.cfg.client.dns_shortcut
        && shared.cfg.shortcut_dns.is_some()
        && matches!(*req.method(), Method::GET | Method::HEAD)
}

async fn tunnel(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ProxyBody> {
    let m = &shared.metrics;
    let Some((host, port)) = req
        .uri()
        .authority()
        .and_then(|a| Some((a.host().trim_matches(['[', ']']).to_owned(), a.port_u16()?)))
    else {
        inc(&m.bad_requests);
        return text(
            StatusCode::BAD_REQUEST,
            "zrtt proxy: CONNECT needs host:port",
        );
    };
    let t = shared.cfg.timeouts;
    let connected = plain::connect_tcp(shared.cfg.resolver.as_ref(), &host, port, t.connect)
        .await
        .and_then(|tcp| match tcp.peer_addr() {
            Ok(a) if a == shared.own => {
                Err(Error::Config("the request loops back to the proxy".into()))
            }
            _ => Ok(tcp),
        });
    let mut tcp = match connected {
        Ok(tcp) => tcp,
        Err(e) => {
            inc(&m.bad_gateway);
            return text(
                StatusCode::BAD_GATEWAY,
                format!("zrtt proxy: CONNECT {host}:{port}: {}", error_chain(&e)),
            );
        }
    };
    inc(&m.tunnels);
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                let _ = tokio::time::timeout(
                    t.tunnel,
                    tokio::io::copy_bidirectional(&mut client, &mut tcp),
                )
                .await;
            }
            Err(e) => tracing::debug!("CONNECT upgrade: {e}"),
        }
    });
    Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zrtt_ports() {
        let mut p = ZrttPorts::default();
        assert_eq!(p.port_for("a.example", None), 443);
        assert_eq!(p.port_for("a.example", Some(8443)), 8443);
        assert!(p.add_spec("A.example=4433").is_ok());
        assert_eq!(p.port_for("a.EXAMPLE", Some(8443)), 4433);
        assert!(p.add_spec("5555").is_ok());
        assert_eq!(p.port_for("b.example", Some(8443)), 5555);
        assert!(p.add_spec("=1").is_err());
        assert!(p.add_spec("x=y").is_err());
    }
}
