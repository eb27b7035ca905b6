//! Fetch a URL with hyper-util's client over zrtt: the first request rides
//! in the TCP SYN, encrypted to the key the host publishes in DNS; hosts
//! without one get TLS 1.3 on the same port.
//!
//! ```sh
//! cargo run -p zrtt-net --example fetch -- https://www.example.com/
//! ```
//!
//! `tests/example.rs` runs [`fetch`] against a gateway on loopback.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use zrtt_net::client::{
    conn_info, ClientConfig, DnsKeySource, Mode, Resolve, SystemResolver, ZrttConnector,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// GET `url` with `config`, addresses from `resolver`: the status, the
/// body, and how the connection was made (zrtt, or the TLS fallback).
pub async fn fetch(
    config: ClientConfig,
    resolver: Arc<dyn Resolve>,
    url: &str,
) -> Result<(StatusCode, Bytes, Option<Mode>), BoxError> {
    let connector = ZrttConnector::builder(Arc::new(config))
        .resolver(resolver)
        .build();
    let client = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
    let response = client.get(url.parse()?).await?;
    let mode = conn_info(&response).map(|info| info.mode);
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body, mode))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: fetch https://HOST/PATH")?;
    // Keys from the system's DNS resolver (their certificate from TLSA);
    // the TLS fallback trusts the system's CA bundle.
    let keys = Arc::new(DnsKeySource::system()?);
    let config = ClientConfig::builder(keys).with_system_roots()?;
    let (status, body, mode) = fetch(config, Arc::new(SystemResolver::new()), &url).await?;
    eprintln!("{status} via {}", mode.map_or("?", Mode::as_str));
    std::io::Write::write_all(&mut std::io::stdout(), &body)?;
    Ok(())
}
