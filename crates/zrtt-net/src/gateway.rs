//! `zrtt gateway`: a reverse proxy in front of an unmodified HTTP/1.1
//! backend, serving zrtt and TLS 1.3 on one Fast Open port.
//!
//! Per connection: peek one byte (`0xD7` zrtt, `0x14`-`0x18` TLS, anything
//! else is closed); for zrtt read the first flight (bounded size and time),
//! run [`ServerConfig::accept`] with the shared replay filter, then serve
//! HTTP/1.1 with hyper over the channel, the early request first.
//!
//! **Gating** ([`Gate`]): a reply goes out before the TCP handshake
//! completes only to a proven address (a valid token, or a configured
//! trusted network). Otherwise the early request is held, not forwarded to
//! the backend, and every byte to the client (Reject frames included) waits
//! until `TCP_INFO` reports the handshake complete; TLS and anything else
//! wait too (docs/PROTOCOL.md §8: no execution for spoofed sources, no
//! amplification). Even to a proven address, before the handshake completes
//! at most three times the bytes received go out (or, opted into with
//! [`Limits::proven_window`], up to an initial congestion window); the rest
//! waits.
//! Soft limits (connections, decryptions per second) force the gated path;
//! hard limits answer Reject Busy (gated).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{ready, Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::handshake::{
    encode_reject, ext, read_frame, Accepted, Expect, Extensions, RecordKind, RejectReason,
    ServerConfig, Transport, FRAME_FIRST_FLIGHT,
};
use zrtt_proto::replay::ReplayFilter;
use zrtt_proto::UnixTime;

use crate::error::{Error, Result};
use crate::gate::Gate;
use crate::metrics::Metrics;
use crate::stream::ChannelStream;
use crate::tfo::{self, ListenOptions};
use crate::token::TokenKey;

/// Body type the gateway sends and forwards.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// An IP network (`addr/prefix`), e.g. a trusted data-centre range whose
/// addresses count as proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Config(format!("{s:?} is not an address or addr/prefix"));
        let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().map_err(|_| bad())?,
            None => max,
        };
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }
}

/// Load limits. A rate of 0 means unlimited.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Concurrent connections beyond which first flights are always gated.
    pub max_connections: usize,
    /// Concurrent connections beyond which zrtt gets Reject Busy and TLS is closed.
    pub hard_max_connections: usize,
    /// First-flight decryptions per second answered early at most (token bucket).
    pub decrypts_per_sec: f64,
    /// Decryptions per second beyond which flights get Reject Busy.
    pub hard_decrypts_per_sec: f64,
    /// Bytes a proven address may receive before its TCP handshake
    /// completes, when more than three times its first flight
    /// (docs/PROTOCOL.md §8). Default 0: the strict 3x bound;
    /// [`INITIAL_WINDOW`] is the opt-in value (one round trip less for
    /// answers up to 14.6 KB, more reflection from stale proofs). Capped at
    /// one channel record.
    pub proven_window: usize,
}

/// An initial congestion window of ten 1460-byte segments (RFC 6928): what
/// a TCP Fast Open server sends to a cookie holder before the handshake.
pub const INITIAL_WINDOW: usize = 14_600;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            hard_max_connections: 20_000,
            decrypts_per_sec: 5_000.0,
            hard_decrypts_per_sec: 20_000.0,
            proven_window: 0,
        }
    }
}

/// Time bounds.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Reading the first byte and the first flight (or the TLS handshake).
    pub first_flight: Duration,
    /// Waiting for an unproven client's TCP handshake to complete.
    pub gate: Duration,
    /// Connecting to the backend.
    pub backend_connect: Duration,
    /// Backend response headers (then 504).
    pub backend_response: Duration,
    /// Waiting for a request's headers on a kept-alive connection.
    pub idle: Duration,
    /// Whole connection lifetime.
    pub connection: Duration,
    /// After shutdown, how long open connections may finish.
    pub shutdown_grace: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            first_flight: Duration::from_secs(5),
            gate: Duration::from_secs(3),
            backend_connect: Duration::from_secs(2),
            backend_response: Duration::from_secs(15),
            idle: Duration::from_secs(30),
            connection: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Gateway settings.
pub struct GatewayConfig {
    /// The semi-static keys (replace the inner config to rotate keys).
    pub keys: Arc<RwLock<ServerConfig>>,
    /// TLS 1.3 with the certificate that signs the key records.
    pub tls: Arc<rustls::ServerConfig>,
    /// The HTTP/1.1 backend.
    pub backend: SocketAddr,
    /// Replay filter shared by every connection (and, ideally, every gateway sharing the keys).
    pub replay: Arc<Mutex<dyn ReplayFilter>>,
    /// Token sealing key; `None` disables tokens.
    pub tokens: Option<Arc<TokenKey>>,
    /// Networks whose addresses count as proven (answered before the handshake).
    pub trusted_networks: Vec<IpNet>,
    /// Provenance verifiers whose certificates prove an address; `None` disables them.
    pub provenance: Option<ProvenanceConfig>,
    /// Listener options (Fast Open queue).
    pub listen: ListenOptions,
    /// Load limits.
    pub limits: Limits,
    /// Time bounds.
    pub timeouts: Timeouts,
    /// Randomness (server ephemerals, tokens).
    pub rng: Arc<dyn SecureRandom>,
    /// Wall clock.
    pub clock: fn() -> UnixTime,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("backend", &self.backend)
            .field("tokens", &self.tokens.is_some())
            .field("trusted_networks", &self.trusted_networks)
            .field("limits", &self.limits)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// A trust policy that can be replaced while the gateway serves (keys
/// learned from DNS are refreshed in the background): readers take the
/// `Arc` in force and check certificates without holding the lock.
pub type SharedTrustPolicy = Arc<std::sync::RwLock<Arc<zrtt_proto::provenance::TrustPolicy>>>;

/// Which provenance verifiers a gateway trusts, and how hard it may work on
/// their certificates (docs/PROTOCOL.md §11).
#[derive(Clone, Debug)]
pub struct ProvenanceConfig {
    /// Trusted verifier keys and the quorum; replace the inner `Arc` to
    /// change them while serving.
    pub policy: SharedTrustPolicy,
    /// Certificate signature checks per second at most (0 = unlimited);
    /// beyond it flights are treated as unproven (answered after the
    /// handshake), never refused (ASAP §2.5).
    pub checks_per_sec: f64,
    /// Verified certificates remembered.
    pub cache_capacity: usize,
}

impl ProvenanceConfig {
    /// A config with a fixed `policy`.
    pub fn new(
        policy: zrtt_proto::provenance::TrustPolicy,
        checks_per_sec: f64,
        cache_capacity: usize,
    ) -> Self {
        Self {
            policy: Arc::new(std::sync::RwLock::new(Arc::new(policy))),
            checks_per_sec,
            cache_capacity,
        }
    }
}

/// A rustls server config (ring, TLS 1.3 only, ALPN http/1.1).
pub fn tls_server_config(
    chain: Vec<pki_types::CertificateDer<'static>>,
    key: pki_types::PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.send_tls13_tickets = 0;
    Ok(Arc::new(cfg))
}

struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: f64) -> Self {
        Self {
            rate,
            tokens: rate.max(1.0),
            last: Instant::now(),
        }
    }

    fn try_take(&mut self, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate.max(1.0));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Shared {
    cfg: GatewayConfig,
    metrics: Arc<Metrics>,
    backend: Client<HttpConnector, Body>,
    soft_bucket: Mutex<TokenBucket>,
    hard_bucket: Mutex<TokenBucket>,
    pv_bucket: Mutex<TokenBucket>,
    pv_cache: Mutex<zrtt_proto::provenance::VerifiedCache>,
    active: AtomicUsize,
}

/// A bound gateway; [`Gateway::run`] serves it.
pub struct Gateway {
    listener: TcpListener,
    shared: Arc<Shared>,
    fast_open: bool,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("local_addr", &self.listener.local_addr().ok())
            .field("fast_open", &self.fast_open)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Bind `addr` (port 0 for any) with a Fast Open listener.
    pub fn bind(addr: SocketAddr, cfg: GatewayConfig) -> Result<Self> {
        let (listener, fast_open) = tfo::bind_listener(addr, cfg.listen)?;
        if fast_open && tfo::fast_open_sysctl().is_some_and(|v| v & 2 == 0) {
            tracing::warn!(
                "net.ipv4.tcp_fastopen lacks bit 0x2: SYN data will be ignored \
                 (set it to 3 in this network namespace)"
            );
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(cfg.timeouts.backend_connect));
        connector.set_nodelay(true);
        let backend = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_timer(TokioTimer::new())
            .build(connector);
        let shared = Arc::new(Shared {
            soft_bucket: Mutex::new(TokenBucket::new(cfg.limits.decrypts_per_sec)),
            hard_bucket: Mutex::new(TokenBucket::new(cfg.limits.hard_decrypts_per_sec)),
            pv_bucket: Mutex::new(TokenBucket::new(
                cfg.provenance.as_ref().map_or(0.0, |p| p.checks_per_sec),
            )),
            pv_cache: Mutex::new(zrtt_proto::provenance::VerifiedCache::new(
                cfg.provenance.as_ref().map_or(0, |p| p.cache_capacity),
            )),
            cfg,
            metrics: Arc::new(Metrics::default()),
            backend,
            active: AtomicUsize::new(0),
        });
        Ok(Self {
            listener,
            shared,
            fast_open,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(Error::io("local address"))
    }

    /// Whether the listener accepted the Fast Open options.
    pub fn fast_open(&self) -> bool {
        self.fast_open
    }

    /// The gateway's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// Serve until `shutdown` resolves, then give open connections
    /// `timeouts.shutdown_grace` to finish and abort the rest.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                r = self.listener.accept() => match r {
                    Ok((tcp, peer)) => {
                        let shared = self.shared.clone();
                        tasks.spawn(async move {
                            let limit = shared.cfg.timeouts.connection;
                            let _ = tokio::time::timeout(limit, handle(shared, tcp, peer)).await;
                        });
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(self.listener);
        let grace = self.shared.cfg.timeouts.shutdown_grace;
        let _ =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.shutdown().await;
        Ok(())
    }
}

/// Serve `GET /metrics` (any path) as text on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (mut tcp, _) = tokio::select! {
            () = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
        };
        let body = metrics.render();
        let _ = tokio::time::timeout(Duration::from_secs(2), async move {
            let mut req = [0u8; 1024];
            let _ = tcp.read(&mut req).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = tcp.write_all(head.as_bytes()).await;
            let _ = tcp.write_all(body.as_bytes()).await;
            let _ = tcp.shutdown().await;
        })
        .await;
    }
}

struct ActiveGuard<'a>(&'a AtomicUsize);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(shared: Arc<Shared>, tcp: TcpStream, peer: SocketAddr) {
    let active = shared.active.fetch_add(1, Ordering::Relaxed) + 1;
    let _guard = ActiveGuard(&shared.active);
    Metrics::inc(&shared.metrics.connections);
    let _ = tcp.set_nodelay(true);
    let t = &shared.cfg.timeouts;
    let mut first = [0u8; 1];
    match tokio::time::timeout(t.first_flight, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    let gate_fd = match tcp.as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::warn!("dup: {e}");
            return;
        }
    };
    let over_soft = active > shared.cfg.limits.max_connections;
    let over_hard = active > shared.cfg.limits.hard_max_connections;
    match first[0] {
        FRAME_FIRST_FLIGHT => {
            if let Err(e) = serve_zrtt(&shared, tcp, peer, gate_fd, over_soft, over_hard).await {
                tracing::debug!("zrtt {peer}: {e}");
            }
        }
        0x14..=0x18 => {
            if over_hard {
                return;
            }
            Metrics::inc(&shared.metrics.tls_connections);
            // A ClientHello may have ridden in the SYN too: the certificate
            // flight waits for the handshake like everything else.
            let gate = Arc::new(Gate::new(gate_fd, false, t.gate));
            if gate.wait_to_send().await.is_err() {
                Metrics::inc(&shared.metrics.gate_timeouts);
                return;
            }
            let acceptor = tokio_rustls::TlsAcceptor::from(shared.cfg.tls.clone());
            let Ok(Ok(tls)) = tokio::time::timeout(t.first_flight, acceptor.accept(tcp)).await
            else {
                return;
            };
            serve_http(shared.clone(), tls, peer, gate, false).await;
        }
        _ => Metrics::inc(&shared.metrics.other_refused),
    }
}

async fn read_first_flight(tcp: &mut TcpStream, limit: Duration) -> Result<(Vec<u8>, usize)> {
    let mut buf = Vec::with_capacity(2048);
    let read = async {
        loop {
            match read_frame(&buf, Expect::FirstFlight) {
                Ok(Some((_, used))) => return Ok(used),
                Ok(None) => {}
                Err(_) => return Err(Error::Protocol("not a first flight")),
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tcp
                .read(&mut chunk)
                .await
                .map_err(Error::io("reading first flight"))?;
            if n == 0 {
                return Err(Error::NoAnswer);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let used = tokio::time::timeout(limit, read)
        .await
        .map_err(|_| Error::Timeout("first flight"))??;
    Ok((buf, used))
}

async fn send_gated(tcp: &mut TcpStream, gate: &Gate, bytes: &[u8], metrics: &Metrics) {
    if gate.wait_to_send().await.is_err() {
        Metrics::inc(&metrics.gate_timeouts);
        return;
    }
    let _ = tcp.write_all(bytes).await;
    let _ = tcp.shutdown().await;
}

async fn serve_zrtt(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    gate_fd: std::os::fd::OwnedFd,
    over_soft: bool,
    over_hard: bool,
) -> Result<()> {
    let m = &shared.metrics;
    let t = shared.cfg.timeouts;
    let (buf, used) = match read_first_flight(&mut tcp, t.first_flight).await {
        Ok(v) => v,
        Err(e) => {
            Metrics::inc(&m.zrtt_silent_drops);
            return Err(e);
        }
    };
    Metrics::inc(&m.zrtt_flights);
    let frame = match read_frame(&buf[..used], Expect::FirstFlight) {
        Ok(Some((f, _))) => f,
        _ => return Err(Error::Protocol("first flight")),
    };
    let now_i = Instant::now();
    let hard_ok = !over_hard && lock(&shared.hard_bucket).try_take(now_i);
    if !hard_ok {
        Metrics::inc(&m.zrtt_busy);
        let gate = Gate::new(gate_fd, false, t.gate);
        send_gated(&mut tcp, &gate, &encode_reject(RejectReason::Busy, &[]), m).await;
        return Ok(());
    }
    let soft_ok = !over_soft && lock(&shared.soft_bucket).try_take(now_i);
    let now = (shared.cfg.clock)();
    let result = {
        let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut replay = lock(&shared.cfg.replay);
        keys.accept(
            &frame,
            Transport::Tcp,
            now,
            &mut *replay,
            shared.cfg.rng.as_ref(),
        )
    };
    let accepted = match result {
        Ok(a) => a,
        Err(refusal) => {
            tracing::debug!("first flight from {peer} refused: {}", refusal.error);
            match refusal.reply {
                Some(bytes) => {
                    Metrics::inc(&m.zrtt_rejects_sent);
                    let gate = Gate::new(gate_fd, false, t.gate);
                    send_gated(&mut tcp, &gate, &bytes, m).await;
                }
                None => Metrics::inc(&m.zrtt_silent_drops),
            }
            return Ok(());
        }
    };
    Metrics::inc(&m.zrtt_accepted);
    let mut proven = shared
        .cfg
        .trusted_networks
        .iter()
        .any(|n| n.contains(peer.ip()));
    if let (Some(key), Some(token)) = (
        &shared.cfg.tokens,
        accepted.extensions.get(ext::ADDRESS_TOKEN),
    ) {
        match key.verify(token, peer.ip(), accepted.client_static.as_ref(), now) {
            Ok(()) => {
                Metrics::inc(&m.tokens_accepted);
                proven = true;
            }
            Err(e) => {
                Metrics::inc(&m.tokens_refused);
                tracing::debug!("token from {peer} refused: {e}");
            }
        }
    }
    if let (false, Some(pv), Some(bytes)) = (
        proven,
        &shared.cfg.provenance,
        accepted.extensions.get(ext::PROVENANCE),
    ) {
        if lock(&shared.pv_bucket).try_take(Instant::now()) {
            let policy = pv.policy.read().unwrap_or_else(|p| p.into_inner()).clone();
            let checked = zrtt_proto::provenance::decode_certificates(bytes).and_then(|certs| {
                policy.verify(
                    &certs,
                    peer.ip(),
                    accepted.client_static.as_ref(),
                    now,
                    &mut lock(&shared.pv_cache),
                )
            });
            match checked {
                Ok(q) => {
                    Metrics::inc(&m.provenance_accepted);
                    if q.signatures_checked == 0 {
                        Metrics::inc(&m.provenance_cache_hits);
                    }
                    proven = true;
                }
                Err(e) => {
                    Metrics::inc(&m.provenance_refused);
                    tracing::debug!("provenance from {peer} refused: {e}");
                }
            }
        } else {
            // Overload defence: no certificate checks beyond the rate; the
            // flight is served on the gated path instead.
            Metrics::inc(&m.provenance_overload);
            tracing::debug!("provenance check rate exceeded: {peer} answered after the handshake");
        }
    }
    if proven && !soft_ok {
        Metrics::inc(&m.zrtt_forced_gating);
        proven = false;
    }
    let gate = Arc::new(Gate::new(gate_fd, proven, t.gate));
    let issue = match (&shared.cfg.tokens, accepted.client_static) {
        (Some(key), Some(client_static)) => Some(TokenIssue {
            key: key.clone(),
            ip: peer.ip(),
            client_static,
            rng: shared.cfg.rng.clone(),
            clock: shared.cfg.clock,
        }),
        _ => None,
    };
    let early = !accepted.early_data.is_empty();
    let leftover = buf[used..].to_vec();
    let stream = GatewayStream::new(
        tcp,
        accepted,
        leftover,
        gate.clone(),
        m.clone(),
        issue,
        // RFC 9000 §8's factor on what the flight brought (at most a SYN's
        // payload from an off-path sender, so at most about 4.4 KB), or the
        // window a proven address may earn (capped at one record, whose
        // overhead the budget accounting charges once).
        (3 * used).max(
            shared
                .cfg
                .limits
                .proven_window
                .min(zrtt_proto::handshake::MAX_RECORD_BODY),
        ),
    );
    serve_http(shared.clone(), stream, peer, gate, early).await;
    Ok(())
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct ConnCtx {
    gate: Arc<Gate>,
    peer: SocketAddr,
    /// The next request is the one that arrived in the first flight.
    early_pending: AtomicBool,
}

async fn serve_http<S>(shared: Arc<Shared>, io: S, peer: SocketAddr, gate: Arc<Gate>, early: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle_timeout = shared.cfg.timeouts.idle;
    let ctx = Arc::new(ConnCtx {
        gate,
        peer,
        early_pending: AtomicBool::new(early),
    });
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(proxy(&shared, &ctx, req).await) }
    });
    let idle = {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(idle_timeout);
        b
    };
    if let Err(e) = idle.serve_connection(TokioIo::new(io), svc).await {
        tracing::debug!("http {peer}: {e}");
    }
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "early-data",
];

fn error_response(status: StatusCode, msg: &'static str) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from_static(msg.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    r
}

async fn proxy(shared: &Shared, ctx: &ConnCtx, req: Request<Incoming>) -> Response<Body> {
    let m = &shared.metrics;
    // An unproven source may be spoofed: its request reaches the backend
    // only once the TCP handshake has proven the address.
    if !ctx.gate.proven() && ctx.gate.wait_complete().await.is_err() {
        Metrics::inc(&m.gate_timeouts);
        return error_response(StatusCode::GATEWAY_TIMEOUT, "handshake incomplete\n");
    }
    Metrics::inc(&m.requests);
    let early = ctx.early_pending.swap(false, Ordering::AcqRel);
    if early {
        Metrics::inc(&m.early_requests);
    }
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Ok(uri) = hyper::Uri::try_from(format!("http://{}{}", shared.cfg.backend, path)) else {
        return error_response(StatusCode::BAD_REQUEST, "bad request target\n");
    };
    let mut headers = parts.headers.clone();
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
    if let Ok(v) = HeaderValue::from_str(&ctx.peer.ip().to_string()) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), v);
    }
    // An early request may have to be sent twice (425): keep its body.
    let (mut body, saved): (Body, Option<Bytes>) = if early {
        match Limited::new(body, 64 * 1024).collect().await {
            Ok(c) => {
                let b = c.to_bytes();
                (
                    Full::new(b.clone()).map_err(|never| match never {}).boxed(),
                    Some(b),
                )
            }
            Err(_) => {
                return error_response(StatusCode::PAYLOAD_TOO_LARGE, "early body too large\n")
            }
        }
    } else {
        (body.boxed(), None)
    };
    let mut attempt_early = early;
    loop {
        let mut breq = Request::new(body);
        *breq.method_mut() = parts.method.clone();
        *breq.uri_mut() = uri.clone();
        *breq.headers_mut() = headers.clone();
        if attempt_early {
            breq.headers_mut().insert(
                HeaderName::from_static("early-data"),
                HeaderValue::from_static("1"),
            );
        }
        let resp = match tokio::time::timeout(
            shared.cfg.timeouts.backend_response,
            shared.backend.request(breq),
        )
        .await
        {
            Err(_) => {
                Metrics::inc(&m.backend_timeouts);
                return error_response(StatusCode::GATEWAY_TIMEOUT, "backend timed out\n");
            }
            Ok(Err(e)) => {
                tracing::debug!("backend: {e}");
                Metrics::inc(&m.backend_errors);
                return error_response(StatusCode::BAD_GATEWAY, "backend unavailable\n");
            }
            Ok(Ok(r)) => r,
        };
        if attempt_early && resp.status() == StatusCode::TOO_EARLY {
            if let Some(b) = &saved {
                Metrics::inc(&m.backend_425_retries);
                if ctx.gate.wait_complete().await.is_err() {
                    Metrics::inc(&m.gate_timeouts);
                    return error_response(StatusCode::GATEWAY_TIMEOUT, "handshake incomplete\n");
                }
                attempt_early = false;
                body = Full::new(b.clone()).map_err(|never| match never {}).boxed();
                continue;
            }
        }
        let (mut rparts, rbody) = resp.into_parts();
        for h in HOP_BY_HOP {
            rparts.headers.remove(h);
        }
        return Response::from_parts(rparts, rbody.boxed());
    }
}

struct TokenIssue {
    key: Arc<TokenKey>,
    ip: IpAddr,
    client_static: [u8; 32],
    rng: Arc<dyn SecureRandom>,
    clock: fn() -> UnixTime,
}

impl TokenIssue {
    fn seal(&self) -> Option<Vec<u8>> {
        self.key
            .issue(
                self.ip,
                &self.client_static,
                (self.clock)(),
                self.rng.as_ref(),
            )
            .ok()
    }
}

type GateFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

struct Pending {
    tcp: TcpStream,
    accepted: Accepted,
    early_pos: usize,
    /// Response bytes written before the reply went out.
    out: Vec<u8>,
    leftover: Vec<u8>,
    gate_wait: Option<GateFuture>,
}

// One per connection; the open state is the hot one and stays inline.
#[allow(clippy::large_enum_variant)]
enum GState {
    Pending(Box<Pending>),
    Open(ChannelStream<TcpStream>),
    Failed,
}

/// The server side of a zrtt connection before and after the reply: reads
/// return the early request first; the first response bytes written become
/// the reply, sent when the gate allows it.
struct GatewayStream {
    state: GState,
    gate: Arc<Gate>,
    metrics: Arc<Metrics>,
    read_waker: Option<Waker>,
    token: Option<TokenIssue>,
    /// Bytes that may go out before the handshake completes (proven peers).
    budget: usize,
    /// Bytes put on the wire (or queued for it) so far while the handshake
    /// was not known to be complete: the reply frame and any records after
    /// it, whatever way hyper happens to split its writes.
    spent: usize,
    /// Response bytes over that budget, sealed only once the handshake completes.
    held: Vec<u8>,
    held_wait: Option<GateFuture>,
}

/// Bytes a channel record adds to its data (length 2, kind 1, tag 16).
const RECORD_OVERHEAD: usize = 2 + 1 + 16;

/// Largest response buffered before the reply is forced out.
const MAX_REPLY_BUFFER: usize = 256 * 1024;

impl GatewayStream {
    fn new(
        tcp: TcpStream,
        accepted: Accepted,
        leftover: Vec<u8>,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
        token: Option<TokenIssue>,
        budget: usize,
    ) -> Self {
        Self {
            state: GState::Pending(Box::new(Pending {
                tcp,
                accepted,
                early_pos: 0,
                out: Vec::new(),
                leftover,
                gate_wait: None,
            })),
            gate,
            metrics,
            read_waker: None,
            token,
            budget,
            spent: 0,
            held: Vec::new(),
            held_wait: None,
        }
    }

    /// How many of `want` bytes may be written now: all of them once the
    /// handshake is complete; before that, what still fits in the budget
    /// (one record's overhead included), waiting for the handshake when
    /// nothing fits.
    fn poll_room(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        loop {
            if self.gate.handshake_complete().unwrap_or(false) {
                return Poll::Ready(Ok(want));
            }
            let room = self
                .budget
                .saturating_sub(self.spent)
                .saturating_sub(RECORD_OVERHEAD);
            if room > 0 {
                let n = want.min(room);
                self.spent += n + RECORD_OVERHEAD;
                return Poll::Ready(Ok(n));
            }
            if self.held_wait.is_none() {
                Metrics::inc(&self.metrics.amplification_holds);
            }
            let gate = self.gate.clone();
            let fut = self
                .held_wait
                .get_or_insert_with(|| Box::pin(async move { gate.wait_complete().await }));
            let r = ready!(fut.as_mut().poll(cx));
            self.held_wait = None;
            if let Err(e) = r {
                Metrics::inc(&self.metrics.gate_timeouts);
                self.state = GState::Failed;
                return Poll::Ready(Err(e.into()));
            }
        }
    }

    /// Before the handshake completes, at most the budget goes to the
    /// client; `None` after it.
    fn amplification_budget(&self, complete: bool) -> Option<usize> {
        (!complete).then_some(self.budget)
    }

    /// Send what the budget allowed, then seal the held bytes once the
    /// handshake completes.
    fn poll_release_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.held.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.held_wait.is_none() {
            // First push out the reply frame that fits the budget.
            if let GState::Open(s) = &mut self.state {
                ready!(Pin::new(s).poll_flush(cx))?;
            }
        }
        let gate = self.gate.clone();
        let fut = self
            .held_wait
            .get_or_insert_with(|| Box::pin(async move { gate.wait_complete().await }));
        if let Err(e) = ready!(fut.as_mut().poll(cx)) {
            Metrics::inc(&self.metrics.gate_timeouts);
            self.state = GState::Failed;
            return Poll::Ready(Err(e.into()));
        }
        self.held_wait = None;
        let GState::Open(s) = &mut self.state else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut *s).poll_write(cx, &self.held))?;
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Send the reply once the gate opens; afterwards the state is `Open`.
    fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let GState::Pending(p) = &mut self.state else {
            return match self.state {
                GState::Open(_) => Poll::Ready(Ok(())),
                _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            };
        };
        let gate = self.gate.clone();
        let fut = p
            .gate_wait
            .get_or_insert_with(|| Box::pin(async move { gate.wait_to_send().await }));
        if let Err(e) = ready!(fut.as_mut().poll(cx)) {
            Metrics::inc(&self.metrics.gate_timeouts);
            self.state = GState::Failed;
            return Poll::Ready(Err(e.into()));
        }
        let GState::Pending(p) = std::mem::replace(&mut self.state, GState::Failed) else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let Pending {
            tcp,
            accepted,
            out,
            leftover,
            ..
        } = *p;
        let complete = self.gate.handshake_complete().unwrap_or(false);
        if self.gate.proven() {
            Metrics::inc(&self.metrics.zrtt_answered_early);
            if !complete {
                Metrics::inc(&self.metrics.zrtt_answered_in_syn_recv);
            }
        } else {
            Metrics::inc(&self.metrics.zrtt_answered_gated);
        }
        let exts = Extensions::new();
        // Reply header (3) + Noise e (32) + tag (16) + extensions length (2).
        let overhead = 3 + 32 + 16 + 2;
        let mut n = out.len().min(accepted.max_reply_data(&exts));
        let mut sealed_to = out.len();
        if let Some(budget) = self.amplification_budget(complete) {
            n = n.min(budget.saturating_sub(overhead));
            let rest_budget = budget.saturating_sub(overhead + n);
            sealed_to = n + rest_budget
                .saturating_sub(RECORD_OVERHEAD)
                .min(out.len() - n);
            if sealed_to < out.len() {
                Metrics::inc(&self.metrics.amplification_holds);
            }
            self.spent = overhead
                + n
                + if sealed_to > n {
                    RECORD_OVERHEAD + sealed_to - n
                } else {
                    0
                };
        }
        let (mut channel, mut frame) =
            accepted.reply(&exts, &out[..n]).map_err(io::Error::other)?;
        if sealed_to > n {
            channel
                .seal_data(&out[n..sealed_to], &mut frame)
                .map_err(io::Error::other)?;
        }
        self.held = out[sealed_to..].to_vec();
        let mut stream = ChannelStream::new(tcp, channel, Vec::new(), leftover, frame);
        if complete {
            self.issue_token(&mut stream)?;
        }
        self.state = GState::Open(stream);
        if let Some(w) = self.read_waker.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }

    fn issue_token(&mut self, stream: &mut ChannelStream<TcpStream>) -> io::Result<()> {
        if let Some(t) = self.token.take() {
            if let Some(token) = t.seal() {
                stream.queue_record(RecordKind::Token, &token)?;
                Metrics::inc(&self.metrics.tokens_issued);
            }
        }
        Ok(())
    }

    fn maybe_issue_token(&mut self) -> io::Result<()> {
        if self.token.is_none() || !self.gate.handshake_complete().unwrap_or(false) {
            return Ok(());
        }
        let mut state = std::mem::replace(&mut self.state, GState::Failed);
        let r = match &mut state {
            GState::Open(s) => self.issue_token(s),
            _ => Ok(()),
        };
        self.state = state;
        r
    }
}

impl AsyncRead for GatewayStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let GState::Pending(p) = &mut this.state {
            let early = &p.accepted.early_data;
            if p.early_pos < early.len() {
                let n = buf.remaining().min(early.len() - p.early_pos);
                buf.put_slice(&early[p.early_pos..p.early_pos + n]);
                p.early_pos += n;
                return Poll::Ready(Ok(()));
            }
            if !early.is_empty() {
                // The client sends nothing more before our reply.
                this.read_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // No early request (e.g. a POST waiting for the reply): answer now.
            ready!(this.poll_reply(cx))?;
        }
        match &mut this.state {
            GState::Open(s) => Pin::new(s).poll_read(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }
}

impl AsyncWrite for GatewayStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let GState::Pending(p) = &mut this.state {
            if p.out.len() < MAX_REPLY_BUFFER {
                let n = data.len().min(MAX_REPLY_BUFFER - p.out.len());
                p.out.extend_from_slice(&data[..n]);
                return Poll::Ready(Ok(n));
            }
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        // Later writes stay inside the budget too (hyper may have flushed
        // the head before the body arrived from the backend).
        let n = ready!(this.poll_room(cx, data.len()))?;
        match &mut this.state {
            GState::Open(s) => Pin::new(s).poll_write(cx, &data[..n]),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let GState::Pending(p) = &this.state {
            if p.out.is_empty() {
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        this.maybe_issue_token()?;
        match &mut this.state {
            GState::Open(s) => Pin::new(s).poll_flush(cx),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, GState::Pending(_)) {
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        if matches!(this.state, GState::Open(_)) {
            // The Close record counts against the budget too.
            ready!(this.poll_room(cx, 1))?;
        }
        match &mut this.state {
            GState::Open(s) => Pin::new(s).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}
