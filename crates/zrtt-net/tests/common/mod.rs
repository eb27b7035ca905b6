//! Shared test harness: an in-process backend, a gateway on 127.0.0.1:0
//! and a hyper client over `ZrttStream`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod redis;
pub mod shortcut;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pki_types::pem::PemObject;
use zrtt_net::client::{CertKeySource, ClientConfig, ConnInfo, Target, ZrttStream};
use zrtt_net::gateway::{
    shared_trust_policy, tls_server_config, Gateway, GatewayConfig, Metrics, SharedTrustPolicy,
    Timeouts,
};
use zrtt_proto::admission::{AdmissionLimits, IpNet, TokenKey, TokenKeyRing, TokenKeys};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::handshake::{ServerConfig, ServerKey};
use zrtt_proto::provenance::TrustPolicy;
use zrtt_proto::record::KeyRecord;
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
use zrtt_proto::testing;

pub const HOST: &str = "www.example.com";
const CA_PEM: &str = include_str!("../../../zrtt-proto/tests/data/ed25519-ca.pem");
const CERT_PEM: &str = include_str!("../../../zrtt-proto/tests/data/ed25519-cert.pem");
const KEY_PEM: &str = include_str!("../../../zrtt-proto/tests/data/ed25519-cert.key");

pub fn now_secs() -> u64 {
    zrtt_net::client::system_clock().as_secs()
}

/// A record for a semi-static key derived from `label`, valid now, signed by the test cert.
pub fn record(label: &str, max_early: u32) -> (KeyRecord, X25519KeyPair) {
    let key = testing::semi_static(label);
    let mut body = testing::body(&key, &testing::ed25519_cert());
    body.not_before = now_secs() - 60;
    body.not_after = now_secs() + 3600;
    body.max_early_data_bytes = max_early;
    let rec = body
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    (rec, key)
}

/// [`record`] with the `h2` flag: the gateway says it serves HTTP/2 in zrtt.
pub fn record_h2(label: &str, max_early: u32) -> (KeyRecord, X25519KeyPair) {
    let key = testing::semi_static(label);
    let mut body = testing::body(&key, &testing::ed25519_cert());
    body.not_before = now_secs() - 60;
    body.not_after = now_secs() + 3600;
    body.max_early_data_bytes = max_early;
    body.flags = zrtt_proto::record::RecordFlags::from_bits(
        body.flags.bits() | zrtt_proto::record::RecordFlags::HTTP2,
    )
    .unwrap();
    let rec = body
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    (rec, key)
}

pub fn server_keys(keys: &[(KeyRecord, X25519KeyPair)]) -> ServerConfig {
    ServerConfig::new(
        keys.iter()
            .map(|(r, k)| ServerKey::new(r.clone(), k.clone()).unwrap())
            .collect(),
    )
    .unwrap()
}

/// A 100,000-byte body whose first 100 bytes come at once and the rest
/// 50 ms later, so that the gateway sees the head before the body.
struct Trickle {
    first: Option<Bytes>,
    rest: Option<Bytes>,
    pause: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Trickle {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(b) = self.first.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(b))));
        }
        if self.rest.is_none() {
            return std::task::Poll::Ready(None);
        }
        std::task::ready!(std::future::Future::poll(self.pause.as_mut(), cx));
        std::task::Poll::Ready(self.rest.take().map(|b| Ok(hyper::body::Frame::data(b))))
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(100_000)
    }
}

/// Backend: echoes path and Early-Data; `/425` answers 425 to early requests;
/// `/slow` waits 3 s; `/hang` never answers; `/big` answers 100,000 bytes, `/big-trickle` too, with
/// a pause after the first 100.
pub async fn start_backend() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let seen = seen2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let early = req
                            .headers()
                            .get("early-data")
                            .map(|v| v.to_str().unwrap_or("?").to_owned())
                            .unwrap_or_else(|| "-".into());
                        let path = req.uri().path().to_owned();
                        let method = req.method().to_string();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        seen.lock()
                            .unwrap()
                            .push(format!("{method} {path} early={early}"));
                        if path == "/slow" {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                        }
                        if path == "/hang" {
                            std::future::pending::<()>().await;
                        }
                        if path == "/big-trickle" {
                            let body = Trickle {
                                first: Some(Bytes::from("x".repeat(100))),
                                rest: Some(Bytes::from("x".repeat(99_900))),
                                pause: Box::pin(tokio::time::sleep(Duration::from_millis(50))),
                            };
                            return Ok(Response::new(body.boxed()));
                        }
                        let (status, text) = if path == "/big" {
                            (StatusCode::OK, "x".repeat(100_000))
                        } else if path == "/425" && early == "1" {
                            (StatusCode::TOO_EARLY, "too early".to_owned())
                        } else {
                            (
                                StatusCode::OK,
                                format!("{method} {path} early={early} body={}", body.len()),
                            )
                        };
                        let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
                        *r.status_mut() = status;
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// Provenance verifiers a test gateway trusts, and its signature-check rate.
pub struct Pv {
    pub policy: SharedTrustPolicy,
    pub checks_per_sec: f64,
}

impl Pv {
    pub fn new(policy: TrustPolicy, checks_per_sec: f64) -> Self {
        Self {
            policy: shared_trust_policy(policy),
            checks_per_sec,
        }
    }
}

pub struct GatewayOpts {
    pub keys: Vec<(KeyRecord, X25519KeyPair)>,
    pub backend: Option<SocketAddr>,
    pub trusted: Vec<IpNet>,
    pub provenance: Option<Pv>,
    pub tokens: bool,
    pub limits: AdmissionLimits,
    /// 0 (the default here): the strict 3x bound, which most tests measure.
    pub proven_window: usize,
    pub timeouts: Timeouts,
    pub addr: SocketAddr,
    /// Listening sockets on the port (SO_REUSEPORT when more than one).
    pub listeners: usize,
    /// Pre-handshake byte budgets per destination (the default's if `None`).
    pub destinations: Option<zrtt_proto::admission::DestinationLimits>,
    /// Listen backlog and Fast Open queue (the defaults if `None`).
    pub queues: Option<(i32, i32)>,
    /// A replay store shared with other gateways (tests/fleet.rs).
    pub replay_store: Option<Arc<zrtt_net::gateway::ReplayStore>>,
    /// Most concurrent HTTP/2 streams per connection (the default's if `None`).
    pub max_streams: Option<u32>,
    /// The TLS sessions (the default's if `None`; tests/tls_sessions.rs).
    pub tls_sessions: Option<Arc<zrtt_net::gateway::TlsSessions>>,
    /// Serve HTTP/2 in the zrtt channel (ALPN h2).
    pub zrtt_http2: bool,
    /// Most early requests run before the confirmation (the default's if `None`).
    pub max_early_requests: Option<usize>,
    /// A replay filter shared with other gateways (their own if `None`).
    pub replay: Option<Arc<Mutex<dyn zrtt_proto::replay::ReplayFilter>>>,
    /// The DNS shortcut's settings (tests/sdns.rs); `None`: the default's.
    pub shortcut: Option<zrtt_net::gateway::ShortcutConfig>,
    /// The backend as `--backend` writes it (`proxy-v2+ADDR`), for `backend`.
    pub backend_spec: Option<String>,
}

impl Default for GatewayOpts {
    fn default() -> Self {
        Self {
            keys: vec![record("zrtt test key 1", 16384)],
            backend: None,
            trusted: Vec::new(),
            provenance: None,
            tokens: false,
            limits: AdmissionLimits::default(),
            proven_window: 0,
            timeouts: {
                let mut t = Timeouts::default();
                t.backend_response = Duration::from_secs(1);
                t
            },
            addr: "127.0.0.1:0".parse().unwrap(),
            listeners: 1,
            destinations: None,
            queues: None,
            replay_store: None,
            max_streams: None,
            tls_sessions: None,
            zrtt_http2: true,
            max_early_requests: None,
            replay: None,
            shortcut: None,
            backend_spec: None,
        }
    }
}

pub struct Env {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    pub seen: Arc<Mutex<Vec<String>>>,
    pub records: Vec<KeyRecord>,
    /// The SDNS's addresses (UDP and TCP each).
    pub sdns: Vec<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Env {
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }

    pub fn metric(&self, name: &str) -> u64 {
        self.metrics
            .snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .unwrap()
    }
}

pub fn token_key() -> Arc<TokenKey> {
    Arc::new(TokenKey::new(&[7u8; 32], Duration::from_secs(3600)))
}

pub async fn start_gateway(opts: GatewayOpts) -> Env {
    let (backend, seen) = match opts.backend {
        Some(b) => (b, Arc::new(Mutex::new(Vec::new()))),
        None => start_backend().await,
    };
    let chain = vec![pki_types::CertificateDer::from_pem_slice(CERT_PEM.as_bytes()).unwrap()];
    let key = pki_types::PrivateKeyDer::from_pem_slice(KEY_PEM.as_bytes()).unwrap();
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret).unwrap();
    let records = opts.keys.iter().map(|(r, _)| r.clone()).collect();
    let mut cfg = GatewayConfig::new(
        Arc::new(RwLock::new(server_keys(&opts.keys))),
        tls_server_config(chain, key).unwrap(),
        backend,
    )
    .unwrap();
    // Started a few seconds in the past so that flights are accepted at
    // once (the filter refuses `max_future` after its start).
    cfg.replay = Arc::new(Mutex::new(BloomReplayFilter::new(
        ReplayConfig {
            capacity: 1 << 12,
            ..ReplayConfig::default()
        },
        secret,
        zrtt_net::client::system_clock().saturating_sub(Duration::from_secs(5)),
    )));
    if let Some(shared) = opts.replay {
        cfg.replay = shared;
    }
    cfg.admission.tokens = opts
        .tokens
        .then(|| TokenKeyRing::new(TokenKeys::new(token_key(), Vec::new())));
    cfg.admission.limits = opts.limits;
    cfg.admission.proven_window = opts.proven_window;
    cfg.admission.dangerous().set_trusted_networks(opts.trusted);
    if let Some(pv) = opts.provenance {
        cfg.admission.limits.provenance_checks_per_sec = pv.checks_per_sec;
        cfg.provenance = Some(pv.policy);
    }
    cfg.timeouts = opts.timeouts;
    cfg.replay_store = opts.replay_store;
    cfg.listen.listeners = opts.listeners;
    if let Some((backlog, fast_open)) = opts.queues {
        cfg.listen.backlog = backlog;
        cfg.listen.fast_open_queue = fast_open;
    }
    if let Some(n) = opts.max_streams {
        cfg.max_concurrent_streams = n;
    }
    if let Some(s) = opts.tls_sessions {
        cfg.tls_sessions = s;
    }
    cfg.zrtt_http2 = opts.zrtt_http2;
    if let Some(n) = opts.max_early_requests {
        cfg.max_early_requests = n;
    }
    if let Some(d) = opts.destinations {
        cfg.admission.destinations = d;
    }
    if let Some(s) = opts.shortcut {
        cfg.shortcut = s;
    }
    if let Some(b) = opts.backend_spec {
        cfg.backends = vec![b.parse().unwrap()];
    }
    let gw = Gateway::bind(opts.addr, cfg).unwrap();
    let addr = gw.local_addr().unwrap();
    let sdns = gw.sdns_addrs();
    let metrics = gw.metrics();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        gw.run(async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Env {
        addr,
        metrics,
        seen,
        records,
        sdns,
        stop: Some(tx),
        task: Some(task),
    }
}

pub fn cert_der() -> Vec<u8> {
    testing::ed25519_cert()
}

/// The roots that trust the test gateway's certificate.
pub fn tls_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(pki_types::CertificateDer::from_pem_slice(CA_PEM.as_bytes()).unwrap())
        .unwrap();
    roots
}

pub fn client_config(records: Vec<KeyRecord>) -> ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(pki_types::CertificateDer::from_pem_slice(CA_PEM.as_bytes()).unwrap())
        .unwrap();
    let mut cfg = ClientConfig::builder(Arc::new(CertKeySource::new(cert_der(), records)))
        .with_root_certificates(roots)
        .unwrap();
    cfg.reply_timeout = Duration::from_secs(5);
    cfg
}

pub fn get(path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(path)
        .header("host", HOST)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Send `reqs` over one connection; returns (status, body) per request and the connection info.
pub async fn fetch(
    cfg: Arc<ClientConfig>,
    addr: SocketAddr,
    reqs: Vec<Request<Full<Bytes>>>,
) -> Result<(Vec<(u16, String)>, ConnInfo), String> {
    let (out, info, _) = fetch_timed(cfg, addr, reqs).await?;
    Ok((out, info))
}

/// Like [`fetch`], also returning when each response's head arrived, from the start.
pub async fn fetch_timed(
    cfg: Arc<ClientConfig>,
    addr: SocketAddr,
    reqs: Vec<Request<Full<Bytes>>>,
) -> Result<(Vec<(u16, String)>, ConnInfo, Vec<Duration>), String> {
    let t0 = std::time::Instant::now();
    let mut times = Vec::new();
    let stream = ZrttStream::new(
        cfg,
        Target {
            host: HOST.into(),
            addr,
        },
    );
    let info = stream.info();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let mut out = Vec::new();
    for req in reqs {
        let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
            .await
            .map_err(|_| "timeout".to_string())?
            .map_err(|e| format!("{e:?}"))?;
        times.push(t0.elapsed());
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        out.push((status, String::from_utf8_lossy(&body).into_owned()));
    }
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    let info = info.lock().unwrap().clone().ok_or("no conn info")?;
    Ok((out, info, times))
}
