//! Cross-module tests: the handshake driven as a sans-IO pair, records
//! against real certificates, and the byte-exact vectors.

mod handshake;
mod records;
mod vectors;
