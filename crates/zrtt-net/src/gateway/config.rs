//! What a gateway serves and how: keys, TLS, backend, replay filter,
//! admission (proofs of address, limits), time bounds.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use zrtt_proto::admission::AdmissionConfig;
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::handshake::ServerConfig;
use zrtt_proto::provenance::TrustPolicy;
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig, ReplayFilter};
use zrtt_proto::UnixTime;

use crate::error::{Error, Result};
use crate::tfo::ListenOptions;

/// Time bounds.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Reading the first byte and the first flight (or the TLS handshake).
    pub first_flight: Duration,
    /// Waiting for an unproven client's TCP handshake to complete.
    pub gate: Duration,
    /// Connecting to the backend.
    pub backend_connect: Duration,
    /// Backend response headers (then 504).
    pub backend_response: Duration,
    /// Waiting for a request head on HTTP/1.1, from the connection's start
    /// or the end of the previous answer: a head begun and not finished
    /// then gets 408 and the connection closes (nginx
    /// `client_header_timeout`, HAProxy `timeout http-request`); a
    /// connection that sent nothing of a head is closed silently
    /// (keep-alive timeout).
    pub request_head: Duration,
    /// A connection on which no byte moved either way for this long is
    /// closed (there is no cut of a live connection or stream).
    pub stream_idle: Duration,
    /// A request body from which nothing arrives for this long is cut:
    /// 408 if the backend has not answered yet (nginx's
    /// `client_body_timeout`).
    pub request_body: Duration,
    /// An upgraded stream (WebSocket) with no bytes either way is closed
    /// after this.
    pub upgraded_idle: Duration,
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
            request_head: Duration::from_secs(30),
            stream_idle: Duration::from_secs(60),
            request_body: Duration::from_secs(60),
            upgraded_idle: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// A trust policy that can be replaced while the gateway serves (keys
/// learned from DNS are refreshed in the background): readers take the
/// `Arc` in force and check certificates without holding the lock.
pub type SharedTrustPolicy = Arc<RwLock<Arc<TrustPolicy>>>;

/// A [`SharedTrustPolicy`] holding `policy`.
pub fn shared_trust_policy(policy: TrustPolicy) -> SharedTrustPolicy {
    Arc::new(RwLock::new(Arc::new(policy)))
}

/// A process-local replay filter with the default settings, keyed from
/// the OS RNG, its restart guard starting at `start` (docs/PROTOCOL.md §7).
pub fn new_replay_filter(start: UnixTime) -> Result<BloomReplayFilter> {
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| Error::Config("OS random number generator failed".into()))?;
    Ok(BloomReplayFilter::new(
        ReplayConfig::default(),
        secret,
        start,
    ))
}

/// Gateway settings. [`GatewayConfig::new`] fills in the defaults; change
/// the public fields after it.
#[non_exhaustive]
pub struct GatewayConfig {
    /// The semi-static keys (replace the inner config to rotate keys,
    /// carrying its `resumption` over: the gateway sets it from
    /// `admission.tokens` when it starts, see [`Self::resumption`]).
    pub keys: Arc<RwLock<ServerConfig>>,
    /// TLS with the certificate that signs the key records.
    pub tls: Arc<rustls::ServerConfig>,
    /// The default site's backends (at least one).
    pub backends: Vec<super::Backend>,
    /// How backends are judged healthy (passive marks, active checks):
    /// the default site's, and every site's without its own
    /// (`Site::health`).
    pub backend_health: super::BackendHealth,
    /// Largest request body passed to a backend (413 beyond it); `None`:
    /// no limit.
    pub max_request_body: Option<u64>,
    /// Host names served (the key records' and certificate's names);
    /// requests for any other host get 421 Misdirected Request. Empty:
    /// every host is passed to the backend.
    pub server_names: Vec<String>,
    /// Further sites (names and backends each; their keys are in `keys`,
    /// their certificates in `tls`, e.g. [`super::SniCerts`]); `backends`
    /// and `server_names` are the default site (docs/GATEWAY.md, Sites).
    pub sites: Vec<super::Site>,
    /// Replay filter shared by every connection (and every gateway that
    /// shares the keys and answers early: docs/PROTOCOL.md §7).
    pub replay: Arc<Mutex<dyn ReplayFilter>>,
    /// A replay store shared with the other gateways of a fleet
    /// (docs/FLEET.md), checked after the local filter accepted a flight;
    /// `None`: the local filter alone.
    pub replay_store: Option<Arc<super::replay_store::ReplayStore>>,
    /// The TLS sessions (resumption, 0-RTT): in this process, handed over
    /// at a restart, and shared through `replay_store` when set (sealed
    /// under keys derived from the admission's token keys).
    pub tls_sessions: Arc<super::tls::TlsSessions>,
    /// Proofs of address and load limits (docs/PROTOCOL.md §8).
    pub admission: AdmissionConfig,
    /// Provenance verifiers whose certificates prove an address; `None`
    /// disables them.
    pub provenance: Option<SharedTrustPolicy>,
    /// Listener options (Fast Open queue).
    pub listen: ListenOptions,
    /// Time bounds.
    pub timeouts: Timeouts,
    /// Randomness (server ephemerals, tokens).
    pub rng: Arc<dyn SecureRandom>,
    /// Wall clock.
    pub clock: fn() -> UnixTime,
    /// Log one line per request (target `zrtt_access`, access_log.rs).
    pub access_log: bool,
    /// Most concurrent HTTP/2 streams per client connection (its SETTINGS;
    /// streams beyond it are refused with REFUSED_STREAM), and most
    /// requests a connection has in flight (head received, response not
    /// ended): further ones wait for one to end before reaching a backend.
    pub max_concurrent_streams: u32,
    /// Serve HTTP/2 inside the zrtt channel to a first flight whose ALPN
    /// extension says `h2` (default on); off: such flights get Reject 8
    /// (unsupported) with the current records. Key records should carry
    /// the `h2` flag only where this is on.
    pub zrtt_http2: bool,
    /// Most requests of one first flight's early data that run before the
    /// client confirms the handshake (HTTP/2; HTTP/1.1 sends one): a
    /// replayed flight costs a backend at most this many requests per
    /// gateway. Requests past it are held until the confirmation (else
    /// 425 Too Early) and still marked `Early-Data: 1`; 0 holds them all
    /// (docs/PROTOCOL.md §7).
    pub max_early_requests: usize,
    /// Grant resumption tickets and accept resumed flights (docs/PROTOCOL.md
    /// §12) when address tokens are on (`admission.tokens`: the ticket keys
    /// derive from the token keys). Default on.
    pub resumption: bool,
    /// The DNS shortcut (docs/DNS.md §8): SDNS addresses, zones, answer
    /// cache and limits. The gateway's port answers a shortcut flight's
    /// TCP form whatever these say.
    pub shortcut: super::ShortcutConfig,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("backends", &self.backends)
            .field("backend_health", &self.backend_health)
            .field("max_request_body", &self.max_request_body)
            .field("admission", &self.admission)
            .field("provenance", &self.provenance.is_some())
            .field("replay_store", &self.replay_store)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl GatewayConfig {
    /// Serve `keys` and `tls` in front of `backend`, with the defaults: a
    /// fresh process-local replay filter (keyed from the OS RNG, its
    /// restart guard starting now: call this right before
    /// [`Gateway::bind`](super::Gateway::bind), after any slow set-up), no proof
    /// of address configured (every answer waits for the handshake), the
    /// default limits and time bounds, the OS RNG and the system clock.
    pub fn new(
        keys: Arc<RwLock<ServerConfig>>,
        tls: Arc<rustls::ServerConfig>,
        backend: impl Into<super::Backend>,
    ) -> Result<Self> {
        let rng = ring::rand::SystemRandom::new();
        let clock: fn() -> UnixTime = crate::client::system_clock;
        let replay = new_replay_filter(clock())?;
        Ok(Self {
            keys,
            tls,
            backends: vec![backend.into()],
            backend_health: super::BackendHealth::default(),
            max_request_body: Some(DEFAULT_MAX_REQUEST_BODY),
            server_names: Vec::new(),
            sites: Vec::new(),
            replay: Arc::new(Mutex::new(replay)),
            replay_store: None,
            tls_sessions: super::tls::TlsSessions::new(
                TLS_SESSION_CACHE,
                super::tls::DEFAULT_SESSION_TTL,
            ),
            admission: AdmissionConfig::default(),
            provenance: None,
            listen: ListenOptions::default(),
            timeouts: Timeouts::default(),
            rng: Arc::new(rng),
            clock,
            access_log: false,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            zrtt_http2: true,
            max_early_requests: DEFAULT_MAX_EARLY_REQUESTS,
            resumption: true,
            shortcut: super::ShortcutConfig::default(),
        })
    }
}

/// Largest request body by default (1 GiB): large enough for uploads a
/// site behind the gateway accepts, which applies its own limit (nginx's
/// `client_max_body_size` is 1 MiB by default).
pub const DEFAULT_MAX_REQUEST_BODY: u64 = 1 << 30;

/// Most concurrent HTTP/2 streams (and so backend requests) per client
/// connection by default: nginx's `http2_max_concurrent_streams`, HAProxy's
/// `tune.h2.fe.max-concurrent-streams` is 100.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 128;

/// Most requests of one first flight's early data run before the client's
/// confirmation by default ([`GatewayConfig::max_early_requests`]): a
/// page's first burst (its document, then what its head names) fits, and
/// a replayed flight costs a backend at most this many requests.
pub const DEFAULT_MAX_EARLY_REQUESTS: usize = 8;

/// Most TLS 1.3 early data accepted from a resumed client (as zrtt's
/// default `max_early_data`).
pub const TLS_MAX_EARLY_DATA: u32 = 16_384;

/// Sessions remembered in this process for resumption (TLS 1.2 session
/// ids and TLS 1.3 tickets, which are single-use: [`super::TlsSessions`]).
pub const TLS_SESSION_CACHE: usize = 32_768;

/// A rustls server config (ring) as a TLS edge serves it: TLS 1.3 and 1.2,
/// ALPN `h2` and `http/1.1`, stateful resumption, 0-RTT early data on
/// resumption.
/// The config itself keeps no sessions: the gateway gives each connection
/// its [`super::TlsSessions`] (gateway/tls: this process, handed over at a
/// restart, or the fleet's store), which make every TLS 1.3 ticket
/// single-use, what lets a server accept 0-RTT data without replays (RFC
/// 8446 §8.1).
pub fn tls_server_config(
    chain: Vec<pki_types::CertificateDer<'static>>,
    key: pki_types::PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>> {
    let cert = super::certs::ReloadableCert::new(super::certs::certified_key(chain, key)?);
    tls_server_config_with(cert)
}

/// [`tls_server_config`] serving the certificate `cert` holds at each
/// handshake (replace it to renew without a restart).
pub fn tls_server_config_with(
    cert: Arc<dyn rustls::server::ResolvesServerCert>,
) -> Result<Arc<rustls::ServerConfig>> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
    .with_no_client_auth()
    .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    // Two tickets (a browser opens parallel connections); one in a fleet
    // (gateway/tls).
    cfg.send_tls13_tickets = 2;
    // TLS 1.3 0-RTT for resumed clients (single-use tickets above), and
    // the answer as half-RTT data: the gateway's TLS path decides when it
    // may go out (gateway/tls).
    cfg.max_early_data_size = TLS_MAX_EARLY_DATA;
    cfg.send_half_rtt_data = true;
    Ok(Arc::new(cfg))
}
