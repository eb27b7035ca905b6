//! zrtt-net: the tokio shell around the sans-IO core in `zrtt-proto`.
//!
//! - [`client`]: the first request in the SYN (TCP Fast Open without
//!   cookies), encrypted to the server's published key; TLS 1.3 fallback;
//!   [`client::ZrttConnector`] plugs it into hyper-util's `Client`, keys
//!   come from files or DNS ([`client::DnsKeySource`]);
//! - [`gateway`]: a reverse proxy serving zrtt and TLS 1.3 on one Fast Open
//!   port, with address gating ([`gateway::gate`]), limits and metrics;
//! - [`proxy`]: a local HTTP forward proxy sending `http://` requests to
//!   zrtt hosts over zrtt, everything else unchanged;
//! - [`http`]: hop-by-hop headers and generated answers, shared by the
//!   gateway and the proxy;
//! - [`verifier`]: provenance verifiers: the service, the certificate request,
//!   verifier keys from DNS;
//! - [`admin`]: the `/metrics`, `/healthz`, `/readyz` endpoint every role
//!   serves with `--admin`;
//! - [`stream`]: the zrtt channel as `AsyncRead + AsyncWrite`;
//! - [`reply_bound`]: how long a server may hold its Reply (both roles);
//! - [`tfo`] and [`sys`]: Fast Open sockets and `TCP_INFO`.
//!
//! Operational notes are in docs/GATEWAY.md.

#![warn(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod admin;
pub mod client;
pub mod error;
pub mod gateway;
pub mod http;
pub mod proxy;
pub mod reply_bound;
pub mod sidecar;
pub mod stream;
pub mod sys;
pub mod tfo;
pub mod verifier;

pub use error::{Error, Result};
