//! `zrtt gateway`: a reverse proxy in front of an unmodified HTTP/1.1
//! backend, serving zrtt and TLS 1.3 on one Fast Open port.
//!
//! One job per file, in the order a connection meets them:
//! - [`config`]: what a gateway serves and how ([`GatewayConfig`]);
//! - [`certs`]: the TLS certificate in force, replaceable while serving;
//! - `listener`: the accept loop and the dispatch on a connection's first
//!   byte (`0xD7` zrtt, `0x14`-`0x18` TLS, anything else is closed);
//! - `first_flight`: **where a first flight is accepted**: read it (bounded
//!   size and time), the admission intake, [`ServerConfig::accept`] with the
//!   shared replay filter, then the admission decision (proof of address,
//!   byte budget) from the sans-IO core ([`zrtt_proto::admission`]);
//! - `early_answer`: **where the answer is held until the handshake**: the
//!   stream hyper serves over, which hands out the early request first and
//!   turns the first response bytes into the Reply, sent at once within the
//!   budget to a proven address, else when the handshake completes;
//!   `reply_timer`: the Reply leaves no later than
//!   [`REPLY_BOUND`](crate::reply_bound::REPLY_BOUND) after it may, with or
//!   without response bytes;
//! - [`gate`]: whether the TCP handshake has completed (`TCP_INFO`);
//! - `close`: how a connection ends (reset if unanswered, lingering close);
//! - `tls`: the TLS path on the same port;
//! - `relay`: the HTTP relay to the backend (early-data marking, 425);
//! - `backend`: the backends (address, host name or Unix socket; HTTP/1.1
//!   or h2c; PROXY v2 optional) and their pooled clients;
//! - `pool`: a site's backends, round robin over the healthy ones, and
//!   which failed requests may go to another; `health`: passive marks and
//!   active checks; `proxy_header`: PROXY protocol v2 headers;
//! - `body`: request bodies streamed with a size limit and a timeout;
//!   `idle`: a connection on which nothing moves is closed;
//! - `sites`: which site (names, backend) a request and a connection are
//!   for, when one gateway serves several;
//! - `static_files`: a site whose backend is a directory (`files:DIR`,
//!   `--root`), answered by the gateway itself where relay.rs would go to
//!   a backend;
//! - `upgrade`: upgraded connections (WebSocket) relayed both ways until
//!   idle;
//! - `shortcut`: the DNS shortcut's answer service (docs/DNS.md §8), shared
//!   by the SDNS and the gateway's port: the answer cache looked up before
//!   decryption, the flight accepted through the replay filter, its compact
//!   request run by `shortcut_backend`; `sdns`: the SDNS's UDP and TCP
//!   loops (`--sdns`), `sdns_zone`: what it answers (the zones `zq.S`),
//!   `sdns_limits`: how many runs unproven queriers start;
//! - [`replay_store`]: the replay store a fleet shares (Redis), checked
//!   in `first_flight` after the local filter accepted a flight;
//! - [`metrics`]: counters and histograms (served by [`crate::admin`]).
//!
//! **Gating** (docs/PROTOCOL.md §8): a reply goes out before the TCP
//! handshake completes only to a proven address, and then only within the
//! connection's [`AmplificationBudget`](zrtt_proto::admission::AmplificationBudget).
//! Otherwise the early request is held, not forwarded to the backend, and
//! every byte to the client (Reject frames included) waits until the
//! handshake completes; TLS and anything else wait too.
//!
//! [`ServerConfig::accept`]: zrtt_proto::handshake::ServerConfig::accept

mod access_log;
mod backend;
mod body;
pub mod certs;
mod close;
pub mod config;
mod early_answer;
mod early_rules;
mod first_flight;
pub mod gate;
mod health;
mod idle;
mod listener;
pub mod metrics;
mod pool;
mod proxy_header;
mod relay;
pub mod replay_store;
mod reply_timer;
mod sdns;
mod sdns_limits;
mod sdns_zone;
mod shortcut;
mod shortcut_backend;
mod sites;
mod static_files;
mod tls;
mod trim;
mod upgrade;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use zrtt_proto::admission::Admission;

pub use crate::http::Body;
pub use backend::{Backend, BackendTarget};
pub use certs::{load_certified_key, ReloadableCert, SniCerts};
pub use config::{
    new_replay_filter, shared_trust_policy, tls_server_config, tls_server_config_with,
    GatewayConfig, SharedTrustPolicy, Timeouts, DEFAULT_MAX_CONCURRENT_STREAMS,
    DEFAULT_MAX_EARLY_REQUESTS, DEFAULT_MAX_REQUEST_BODY,
};
pub use health::{
    BackendHealth, HealthCheck, DEFAULT_CHECK_INTERVAL, DEFAULT_CHECK_TIMEOUT,
    DEFAULT_FAIL_TIMEOUT, DEFAULT_FALL, DEFAULT_MAX_FAILS, DEFAULT_RISE,
};
pub use listener::{AcceptControl, Gateway};

/// Fuzz entry point (fuzz/fuzz_targets/early_use.rs): whether a first
/// flight's early data would be served before the client confirms. Only
/// one complete safe request without a body may be.
#[doc(hidden)]
pub fn fuzz_early_use(early: &[u8]) -> bool {
    let serve = matches!(early_rules::early_use(early), early_answer::EarlyUse::Serve);
    if serve {
        // Empty lines before the request line are skipped (RFC 9112 §2.2).
        let start = early
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(early.len());
        let method = early[start..]
            .split(|&b| b == b' ')
            .next()
            .unwrap_or_default();
        assert!(
            matches!(method, b"GET" | b"HEAD" | b"OPTIONS"),
            "unsafe method served early"
        );
        // The head ends with an empty line (httparse, like hyper, takes
        // CRLF or LF line ends, mixed).
        assert!(early.ends_with(b"\n\r\n") || early.ends_with(b"\n\n"));
    }
    serve
}
pub use crate::admin::Readiness;
pub use metrics::Metrics;
pub use replay_store::{ReplayStore, ReplayStoreConfig, StoreAddress};
pub use shortcut::{
    ShortcutConfig, DEFAULT_MAX_RUNNING, DEFAULT_MAX_RUNNING_PER_PREFIX,
    DEFAULT_RUNS_PER_SEC_PER_PREFIX, DNS_CLIENT_ADDRESS, DNS_MAX_RESPONSE,
};
pub use sites::Site;
pub use static_files::StaticRoot;
#[doc(hidden)]
pub use tls::fuzz_tls_sessions;
pub use tls::{SessionLimits, TlsSessions, DEFAULT_SESSION_TTL};

/// What every connection of one gateway shares.
struct Shared {
    cfg: GatewayConfig,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
    /// Each site's backends, in the sites' order.
    pools: Vec<Arc<pool::Pool>>,
    /// Each site's files when its backend is a directory (static_files.rs).
    files: Vec<Option<static_files::StaticFiles>>,
    sites: sites::Sites,
    active: AtomicUsize,
    /// Most connections open at once since the memory trim last looked (trim.rs).
    peak_active: AtomicUsize,
    /// `true` once the gateway stops (upgraded streams then get the grace).
    shutdown: tokio::sync::watch::Sender<bool>,
    /// `true` while accepting is paused (listener::AcceptControl).
    paused: tokio::sync::watch::Sender<bool>,
    /// The DNS shortcut's answer cache and zones (shortcut.rs).
    shortcuts: shortcut::Shortcuts,
}

fn lock<T: ?Sized>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
