//! zrtt-proto: the sans-IO core of zrtt.
//!
//! - [`record`]: signed key records and their DNS encodings;
//! - [`handshake`]: the one-round-trip Noise handshake and the channel after it;
//! - [`replay`]: the first-flight replay filter;
//! - [`crypto`]: the randomness seam and X25519 key pairs;
//! - [`shortcut`]: the DNS shortcut's names, answers and answer cache;
//! - [`admission`]: who may be answered before the TCP handshake, and with
//!   how many bytes (proofs of address, tokens, the amplification budget).
//!
//! No sockets, no clock, no OS randomness: every entry point takes the time
//! ([`UnixTime`]) and a [`crypto::SecureRandom`] as arguments. The wire
//! formats are specified in `docs/PROTOCOL.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod admission;
pub mod codec;
pub mod crypto;
pub mod error;
pub mod handshake;
pub mod http2;
pub mod provenance;
pub mod record;
pub mod replay;
pub mod shortcut;
pub mod time;

#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod tests;

pub use error::{Error, HandshakeError, InvalidMessage, RecordError, ReplayError};
pub use time::UnixTime;
