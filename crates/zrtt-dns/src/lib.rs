//! zrtt keys in DNS.
//!
//! - [`store`]: the key-store engine under both stores: directory, lock,
//!   policy file, rotation schedule, status;
//! - [`keystore`]: the key store (semi-static keys and their records),
//!   shared by `zrtt dns`, the gateway and `zrtt keys rotate`;
//! - [`token_keys`]: the address-token keys a key store keeps for every
//!   gateway reading it (created on first need, rotated by epoch);
//! - [`verifier_store`]: the verifier key store (provenance verifier keys, their
//!   signed records and rotation), shared by `zrtt verifier serve` and `zrtt dns`;
//! - [`records`]: the DNS records (HTTPS `key65380`, TXT, AAAA tunnel, TLSA)
//!   built from a store's published records;
//! - [`zone`]: RFC 1035 zone files, with errors that name the file and line;
//! - [`server`]: the authoritative server (`zrtt dns`) on hickory-server;
//! - [`publish`]: RFC 2136 dynamic update with TSIG into an existing DNS;
//! - [`client`]: a minimal stub client (one query to one server) used by
//!   publishing, tests and measurements;
//! - [`resolver`]: verified key resolution for clients (parallel HTTPS, A,
//!   AAAA and TLSA queries, TXT/AAAA-tunnel fallback, caching).
//!
//! Only the binary reads the clock: every function here takes the time.
//! docs/DNS.md describes the design and the rotation timeline.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod fsutil;
pub mod keyfile;
pub mod keystore;
pub mod publish;
pub mod records;
pub mod resolver;
pub mod server;
pub mod store;
pub mod token_keys;
pub mod transfer;
pub mod verifier_store;
pub mod zone;

/// The DNS wire types used in this crate's API (hickory-proto).
pub use hickory_proto as proto;
pub use keystore::{KeyStore, KeyStoreError, KeyStoreRandom, Policy, RotationReport, Status};
pub use verifier_store::{VerifierPolicy, VerifierStore};

/// Every error of this crate, by category.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key store.
    #[error(transparent)]
    KeyStore(#[from] KeyStoreError),
    /// A zone file.
    #[error(transparent)]
    Zone(#[from] zone::ZoneError),
    /// Dynamic update.
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    /// A DNS exchange.
    #[error(transparent)]
    Client(#[from] client::ClientError),
    /// The server.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// Client resolution.
    #[error(transparent)]
    Resolve(#[from] resolver::ResolveError),
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn fmt_time(secs: u64) -> String {
    let (y, m, d, h, mi, s) = zrtt_proto::time::civil_from_unix(secs);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}
