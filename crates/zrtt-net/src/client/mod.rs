//! The client: the first request rides in the SYN, encrypted to the key the
//! server published; TLS 1.3 on the same port when that cannot work.
//!
//! - [`ZrttConnector`] (`connector.rs`): a tower `Service<Uri>` for
//!   hyper-util's pooled `Client`: a Rust program fetches `https://` URLs
//!   over zrtt in a few lines (`examples/fetch.rs`);
//! - [`ClientConfig`] (`config.rs`): the settings, built with
//!   [`ClientConfig::builder`]; what weakens security sits behind
//!   [`ClientConfig::dangerous`];
//! - [`KeySource`] (`keys.rs`): where verified key records come from, one
//!   trusted certificate ([`CertKeySource`]) or DNS ([`DnsKeySource`],
//!   `dns.rs`);
//! - [`Resolve`] (`resolve.rs`): where addresses come from
//!   ([`SystemResolver`], [`DnsAddresses`]);
//! - [`establish`] (`connect.rs`): one connection, zrtt with Fast Open,
//!   a retry with fresh keys, TLS raced in parallel when zrtt is late
//!   (`race.rs`: when TLS takes the request);
//! - [`establish_when_keys`] (`key_race.rs`): TLS started on the address
//!   while the key records are still coming, whichever is ready first;
//! - [`ZrttStream::with_shortcut`] (`shortcut.rs`): the DNS shortcut, the
//!   request inside a DNS query raced against the plain path (off by
//!   default, [`ClientConfig::dns_shortcut`]);
//! - [`PathMemory`] (`paths.rs`): per-destination RTTs and failures;
//! - [`reply_overdue_at`] (`reply_wait.rs`): when a zrtt Reply is overdue
//!   once the raced TLS handshake has completed;
//! - [`ZrttStream`] (`stream.rs`): a lazily connecting byte stream for
//!   hyper: the first request written becomes the early data (HTTP/2:
//!   the leading run of bodiless GETs written by then); HTTP/1.1,
//!   or HTTP/2 inside the channel as [`Http2Policy`] chooses per host
//!   ([`ZrttStream::negotiated_h2`]);
//! - [`TokenStore`] and [`ProvenanceStore`] (`state.rs`): what the client
//!   keeps across connections to be answered before the TCP handshake.

mod config;
mod connect;
mod connector;
mod dns;
mod key_race;
mod keys;
mod mode;
mod paths;
mod race;
mod reply_wait;
mod resolve;
mod shortcut;
mod state;
mod stream;
mod ticket_file;
mod tls_path;

pub use config::{
    system_clock, system_roots, tls_client_config, ClientConfig, ClientConfigBuilder,
    DangerousClientConfig, EarlyDataPolicy, Http2Policy,
};
pub use connect::{
    early_eligible, establish, establish_as, handshake_done, AppProtocol, Conn, ConnInfo, Fallback,
    Mode, Target,
};
pub(crate) use connector::host_port;
pub use connector::{conn_info, ZrttConnector, ZrttConnectorBuilder};
pub use dns::{DnsAddresses, DnsKeySource};
pub use key_race::{establish_when_keys, establish_when_keys_as, KEY_RACE_GRACE};
pub use keys::{CertKeySource, KeySource, PrefetchFuture};
pub use paths::{
    PathMemory, OVERDUE_STRIKES, RACE_BUDGET_BURST, RACE_BUDGET_PER_SEC, RACE_BUDGET_SHARE_PERCENT,
};
pub use reply_wait::{reply_overdue_at, MIN_OVERDUE_SLACK, OVERDUE_SLACK_RTTS};
pub use resolve::{Resolve, ResolveFuture, SystemResolver};
pub use shortcut::{compact_request, AnswerStream, ShortcutLookup, DROPPED_HEADERS};
#[doc(hidden)]
pub use state::fuzz_state_files;
pub use state::{ProvenanceStore, TokenStore, MAX_TICKETS_PER_SERVER};
pub use stream::{ConnInfoHandle, ZrttStream};
