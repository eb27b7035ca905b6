//! [`ClientConfig`], its builder, and the settings that weaken security
//! behind [`ClientConfig::dangerous`] (rustls's model).

use std::sync::Arc;
use std::time::Duration;

use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::UnixTime;

use super::keys::KeySource;
use super::paths::PathMemory;
use super::state::{ProvenanceStore, TokenStore};
use crate::error::Result;

/// Which requests may travel in the first flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EarlyDataPolicy {
    /// GET, HEAD and OPTIONS without a body (RFC 8470 advice). The default.
    IdempotentOnly,
    /// Never: every request waits for the server's reply (one round trip
    /// more, but nothing the client sends can be replayed).
    Never,
}

/// Whether connections speak HTTP/2 inside the zrtt channel (first-flight
/// ALPN `h2`, docs/PROTOCOL.md §4.2). The choice is made when a
/// connection is created, before any byte is sent, so that hyper knows
/// which protocol to speak ([`super::ZrttStream::negotiated_h2`]); the TLS
/// fallback of an HTTP/2 connection offers only ALPN `h2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Http2Policy {
    /// HTTP/1.1 only (the default).
    Never,
    /// HTTP/2 to hosts whose verified key record carries the `h2` flag
    /// (the gateway says it serves HTTP/2 in the channel); HTTP/1.1 to the
    /// others and when the records are not known yet.
    WhenAdvertised,
    /// HTTP/2 to every host, advertised or not (prior knowledge: a gateway
    /// without it refuses the flight, Reject 8, and TLS with ALPN `h2`
    /// follows).
    Always,
}

impl Http2Policy {
    /// Whether a new connection to a host speaks HTTP/2; `advertised` (does
    /// the host's verified record carry the `h2` flag) is asked only under
    /// [`Http2Policy::WhenAdvertised`].
    pub(crate) fn speaks_h2(self, advertised: impl FnOnce() -> bool) -> bool {
        match self {
            Http2Policy::Never => false,
            Http2Policy::WhenAdvertised => advertised(),
            Http2Policy::Always => true,
        }
    }
}

/// Client settings, shared by every connection made with them
/// (`Arc<ClientConfig>`).
///
/// Built with [`ClientConfig::builder`]: the key source and the TLS trust
/// are required, everything else has a default defined here and is a public
/// field to change afterwards. The wall clock and the random number
/// generator can only be replaced through [`ClientConfig::dangerous`].
#[non_exhaustive]
#[derive(Clone)]
pub struct ClientConfig {
    /// Key records per host: whoever verifies them decides which hosts get
    /// zrtt at all (a host without a verified record gets TLS).
    pub keys: Arc<dyn KeySource>,
    /// TLS for the fallback (ALPN should be `http/1.1`; HTTP/2 connections
    /// use a copy that offers only `h2`).
    pub tls: Arc<rustls::ClientConfig>,
    /// Send the first flight in the SYN (default on). Off costs one round
    /// trip per connection; the handshake is otherwise the same.
    pub fast_open: bool,
    /// Per-destination memory: measured RTTs (they set the race delay) and
    /// what failed recently (Fast Open, zrtt), skipped for a while.
    pub paths: Arc<PathMemory>,
    /// Address tokens (default none). `Some` makes the client use Noise IK
    /// with a static key per server name so that the gateway can issue
    /// tokens, and a later visit from the same address is answered before
    /// the TCP handshake completes. Cost: each server can link the client's
    /// visits (one key per server name, so servers cannot link it to each
    /// other).
    pub tokens: Option<Arc<TokenStore>>,
    /// Provenance certificates per local address (default none); when the
    /// local address has valid ones, the client uses Noise IK with that
    /// address's static key and carries them, so that gateways that trust
    /// the verifiers answer before the TCP handshake completes
    /// (docs/PROTOCOL.md §11). Cost: the certificates name the client's
    /// address and key to every server it visits from that address.
    pub provenance: Option<Arc<ProvenanceStore>>,
    /// Resumption (default on; docs/PROTOCOL.md §12): with a `tokens`
    /// store, ask every server for a resumption ticket, keep the tickets
    /// there (in memory and in its file) and use each once: a later flight
    /// with one skips the server's semi-static DH and, from the same
    /// address, proves it like a token. Off: no tickets asked for or used.
    pub resume: bool,
    /// Which requests go as early data (default: idempotent ones).
    pub early_data: EarlyDataPolicy,
    /// HTTP/2 inside the channel (default: never).
    pub http2: Http2Policy,
    /// Fall back to TLS 1.3 on the same port when zrtt is not possible
    /// (default on). Off turns those connections into errors.
    pub tls_fallback: bool,
    /// The DNS shortcut (default off; docs/DNS.md §8, ASAP §3): a GET or
    /// HEAD without a body to a host whose key record is held but whose
    /// address is not known yet goes inside a DNS query too, raced against
    /// the plain lookup and connection ([`ZrttStream::with_shortcut`](super::ZrttStream::with_shortcut)).
    /// Such a request may then run twice on the backend (both copies marked
    /// `Early-Data: 1`), as with the TLS race.
    pub dns_shortcut: bool,
    /// Bound on TCP connects and TLS handshakes (and, by default, on a
    /// [`ZrttConnector`](super::ZrttConnector)'s name resolution).
    pub connect_timeout: Duration,
    /// Longest wait before racing (RFC 8305): without a SYN-ACK to a SYN
    /// with data, retry without Fast Open; without a zrtt answer, start TLS
    /// on the same port in parallel. With a measured RTT the wait is three
    /// round trips, at least 250 ms ([`PathMemory::race_delay`]).
    pub syn_timeout: Duration,
    /// Bound on waiting for the zrtt reply. Once a TLS handshake raced
    /// beside zrtt has completed, an acknowledged flight's Reply is waited
    /// for only until [`reply_overdue_at`](super::reply_overdue_at) (a few
    /// round trips; servers send it within
    /// [`REPLY_BOUND`](crate::reply_bound::REPLY_BOUND) of the handshake).
    pub reply_timeout: Duration,
    pub(crate) rng: Arc<dyn SecureRandom>,
    pub(crate) clock: fn() -> UnixTime,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("fast_open", &self.fast_open)
            .field("early_data", &self.early_data)
            .field("http2", &self.http2)
            .field("tls_fallback", &self.tls_fallback)
            .field("dns_shortcut", &self.dns_shortcut)
            .field("tokens", &self.tokens.is_some())
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Start a configuration whose key records come from `keys`; the
    /// builder then asks for the TLS trust of the fallback.
    pub fn builder(keys: Arc<dyn KeySource>) -> ClientConfigBuilder {
        ClientConfigBuilder { keys }
    }

    /// A copy of these settings with another [`Http2Policy`] (the same
    /// key source, stores and path memory).
    pub fn with_http2(&self, http2: Http2Policy) -> ClientConfig {
        ClientConfig {
            http2,
            ..self.clone()
        }
    }

    /// Settings that weaken security: use only in tests and benchmarks.
    pub fn dangerous(&mut self) -> DangerousClientConfig<'_> {
        DangerousClientConfig { cfg: self }
    }
}

/// The second step of [`ClientConfig::builder`]: how the TLS fallback
/// trusts servers. Each method finishes the configuration with the
/// defaults, all set in [`ClientConfigBuilder::with_tls_config`].
#[derive(Clone)]
pub struct ClientConfigBuilder {
    keys: Arc<dyn KeySource>,
}

impl std::fmt::Debug for ClientConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfigBuilder")
            .finish_non_exhaustive()
    }
}

impl ClientConfigBuilder {
    /// Use `tls` for the fallback as it is (its ALPN should be `http/1.1`).
    /// The one place the defaults are defined: Fast Open on, idempotent
    /// early data, HTTP/1.1 only, TLS fallback on, DNS shortcut off, no
    /// tokens, no provenance, 10 s connect
    /// and reply bounds, races after at most 1 s, the system clock and ring's
    /// system random number generator.
    pub fn with_tls_config(self, tls: Arc<rustls::ClientConfig>) -> ClientConfig {
        ClientConfig {
            keys: self.keys,
            tls,
            fast_open: true,
            paths: Arc::new(PathMemory::default()),
            tokens: None,
            provenance: None,
            resume: true,
            early_data: EarlyDataPolicy::IdempotentOnly,
            http2: Http2Policy::Never,
            tls_fallback: true,
            dns_shortcut: false,
            connect_timeout: Duration::from_secs(10),
            syn_timeout: Duration::from_secs(1),
            reply_timeout: Duration::from_secs(10),
            rng: Arc::new(ring::rand::SystemRandom::new()),
            clock: system_clock,
        }
    }

    /// TLS 1.3 trusting `roots` ([`tls_client_config`]).
    pub fn with_root_certificates(self, roots: rustls::RootCertStore) -> Result<ClientConfig> {
        Ok(self.with_tls_config(tls_client_config(roots)?))
    }

    /// TLS 1.3 trusting the system's CA bundle ([`system_roots`]); reads
    /// the bundle once, here.
    pub fn with_system_roots(self) -> Result<ClientConfig> {
        self.with_root_certificates(system_roots())
    }
}

/// The settings of a [`ClientConfig`] that weaken security, reached through
/// [`ClientConfig::dangerous`] so that a reader sees them.
#[derive(Debug)]
pub struct DangerousClientConfig<'a> {
    cfg: &'a mut ClientConfig,
}

impl DangerousClientConfig<'_> {
    /// Replace the random number generator of handshakes and static keys.
    /// A predictable one (a seeded test generator) gives away every key
    /// the client makes, and with them its requests.
    pub fn set_rng(&mut self, rng: Arc<dyn SecureRandom>) {
        self.cfg.rng = rng;
    }

    /// Replace the wall clock. Key records and provenance certificates are
    /// checked against it: a clock behind the real time accepts expired
    /// (possibly revoked) keys.
    pub fn set_clock(&mut self, clock: fn() -> UnixTime) {
        self.cfg.clock = clock;
    }
}

/// The system clock as [`UnixTime`].
pub fn system_clock() -> UnixTime {
    UnixTime::since_epoch(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// A rustls client config (ring, TLS 1.3 only, ALPN http/1.1) trusting `roots`.
pub fn tls_client_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The platform's CA roots ([`zrtt_dns::resolver::system_roots`], the
/// same the DNS key lookup trusts); an empty store when there are none, so
/// only zrtt (whose keys are verified apart) can then succeed.
pub fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let (_added, _unusable) = roots.add_parsable_certificates(zrtt_dns::resolver::system_roots());
    roots
}
