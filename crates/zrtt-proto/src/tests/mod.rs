//! Cross-module tests: the handshake driven as a sans-IO pair, records
//! against real certificates, and the byte-exact vectors.

// Tests may use the OS RNG for ECDSA signing and panic on failure.
#![allow(clippy::disallowed_methods, clippy::expect_used)]

mod accept_lock;
mod fuzz;
mod handshake;
mod records;
mod resume;
mod shortcut;
mod shortcut_props;
mod vectors;
mod verifier_records;
