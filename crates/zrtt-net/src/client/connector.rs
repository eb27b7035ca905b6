//! [`ZrttConnector`]: the client as a tower `Service<Uri>` for hyper-util's
//! pooled `Client` (as hyper-rustls's `HttpsConnector` is for TLS).
//!
//! ```no_run
//! # async fn f(keys: std::sync::Arc<dyn zrtt_net::client::KeySource>) -> Result<(), Box<dyn std::error::Error>> {
//! use http_body_util::Empty;
//! use hyper_util::{client::legacy::Client, rt::TokioExecutor};
//! use zrtt_net::client::{ClientConfig, ZrttConnector};
//!
//! let config = ClientConfig::builder(keys).with_system_roots()?;
//! let client = Client::builder(TokioExecutor::new())
//!     .build::<_, Empty<bytes::Bytes>>(ZrttConnector::new(config.into()));
//! let response = client.get("https://www.example.com/".parse()?).await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;

use super::config::ClientConfig;
use super::connect::{ConnInfo, Target};
use super::resolve::{Resolve, SystemResolver};
use super::stream::{ConnInfoHandle, ZrttStream};
use crate::error::{Error, Result};

/// Connects `https://` URIs over zrtt (the first request in the SYN),
/// with the TLS 1.3 fallback of its [`ClientConfig`] on the same port.
///
/// Each call resolves the host while the key source's
/// [`prefetch`](super::KeySource::prefetch) runs, and returns a
/// [`ZrttStream`] once the address is known: nothing is sent until hyper
/// writes the first request, which becomes the early data (HTTP/2: the
/// leading run of bodiless GETs written by then). Keys that are
/// still coming then race a TLS handshake ([`super::establish_when_keys`]). Connections are pooled by hyper-util's `Client`
/// per scheme and authority; later requests on a pooled connection travel
/// inside its channel. HTTP/1.1, or HTTP/2 as the config's
/// [`Http2Policy`](super::Http2Policy) chooses per host (then one
/// connection carries all the host's requests). Cheap to clone (three `Arc`s).
///
/// Responses carry a [`ConnInfoHandle`] extension (see [`conn_info`]).
#[derive(Clone)]
pub struct ZrttConnector {
    config: Arc<ClientConfig>,
    resolver: Arc<dyn Resolve>,
    resolve_timeout: Duration,
    shortcut_dns: Option<Arc<zrtt_dns::resolver::Resolver>>,
}

impl std::fmt::Debug for ZrttConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZrttConnector")
            .field("config", &self.config)
            .field("resolve_timeout", &self.resolve_timeout)
            .finish_non_exhaustive()
    }
}

impl ZrttConnector {
    /// A connector with the defaults of [`ZrttConnector::builder`].
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self::builder(config).build()
    }

    /// A builder for a connector using `config` for every connection.
    pub fn builder(config: Arc<ClientConfig>) -> ZrttConnectorBuilder {
        ZrttConnectorBuilder {
            resolve_timeout: config.connect_timeout,
            config,
            resolver: Arc::new(SystemResolver::new()),
            shortcut_dns: None,
        }
    }
}

/// Settings of a [`ZrttConnector`]. Defaults: [`SystemResolver`] without
/// overrides; the prefetch and the name resolution each bounded by the
/// client's `connect_timeout`.
pub struct ZrttConnectorBuilder {
    config: Arc<ClientConfig>,
    resolver: Arc<dyn Resolve>,
    resolve_timeout: Duration,
    shortcut_dns: Option<Arc<zrtt_dns::resolver::Resolver>>,
}

impl std::fmt::Debug for ZrttConnectorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZrttConnectorBuilder")
            .field("resolve_timeout", &self.resolve_timeout)
            .finish_non_exhaustive()
    }
}

impl ZrttConnectorBuilder {
    /// Where hosts' addresses come from (e.g. a [`SystemResolver`] with
    /// overrides, or [`DnsAddresses`](super::DnsAddresses)).
    pub fn resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Bound on the key source's prefetch and, separately, on the name
    /// resolution. A prefetch that runs out only costs zrtt (TLS follows);
    /// a resolution that runs out fails the connection.
    pub fn resolve_timeout(mut self, timeout: Duration) -> Self {
        self.resolve_timeout = timeout;
        self
    }

    /// With [`ClientConfig::dns_shortcut`] on: the resolver the DNS
    /// shortcut's TXT queries go through (typically the
    /// [`DnsKeySource`](super::DnsKeySource)'s). Without one the shortcut
    /// is not used.
    pub fn shortcut_dns(mut self, dns: Arc<zrtt_dns::resolver::Resolver>) -> Self {
        self.shortcut_dns = Some(dns);
        self
    }

    /// The connector.
    pub fn build(self) -> ZrttConnector {
        ZrttConnector {
            config: self.config,
            resolver: self.resolver,
            resolve_timeout: self.resolve_timeout,
            shortcut_dns: self.shortcut_dns,
        }
    }
}

impl Connection for ZrttStream {
    /// With [`ZrttStream::negotiated_h2`], hyper-util's `Client` speaks
    /// HTTP/2 and multiplexes the requests for the host over this one
    /// connection.
    fn connected(&self) -> Connected {
        let c = Connected::new().extra(self.info());
        if self.negotiated_h2() {
            c.negotiated_h2()
        } else {
            c
        }
    }
}

/// The host and port of `uri` (IPv6 literals without brackets), with
/// `default_port` when the URI names none.
pub(crate) fn host_port(uri: &Uri, default_port: u16) -> Result<(String, u16)> {
    let host = uri
        .host()
        .ok_or(Error::Protocol("URL without a host"))?
        .trim_matches(['[', ']'])
        .to_owned();
    Ok((host, uri.port_u16().unwrap_or(default_port)))
}

impl tower_service::Service<Uri> for ZrttConnector {
    type Response = TokioIo<ZrttStream>;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if !uri
                .scheme_str()
                .is_some_and(|s| s.eq_ignore_ascii_case("https"))
            {
                return Err(Error::Config(format!(
                    "{uri}: zrtt connects only https:// URLs"
                )));
            }
            let (host, port) = host_port(&uri, 443)?;
            let cfg = &this.config;
            if let Some(stream) = this.shortcut(&host, port) {
                return Ok(TokioIo::new(stream));
            }
            // Keys and address in parallel; keys still missing once the
            // address is known race TLS, whose ClientHello waits
            // KEY_RACE_GRACE for them (`key_race.rs`).
            let mut keys = Box::pin(tokio::time::timeout(
                this.resolve_timeout,
                cfg.keys.prefetch(&host, (cfg.clock)()),
            ));
            let resolve =
                tokio::time::timeout(this.resolve_timeout, this.resolver.resolve(&host, port));
            tokio::pin!(resolve);
            let mut keys_done = false;
            let addr = loop {
                tokio::select! {
                    biased;
                    k = keys.as_mut(), if !keys_done => {
                        keys_done = true;
                        if k.is_err() {
                            tracing::debug!("{host}: key prefetch timed out");
                        }
                    }
                    r = &mut resolve => break r,
                }
            };
            let addr = addr
                .map_err(|_| Error::Timeout("resolving the gateway"))?
                .map_err(Error::io("resolving the gateway"))?;
            let target = Target { host, addr };
            Ok(TokioIo::new(if keys_done {
                ZrttStream::new(this.config.clone(), target)
            } else {
                ZrttStream::with_pending_keys(
                    this.config.clone(),
                    target,
                    Box::pin(async move {
                        let _ = keys.await;
                    }),
                )
            }))
        })
    }
}

impl ZrttConnector {
    /// A stream that races the DNS shortcut against the plain lookup (the
    /// key source's prefetch, then the resolver) when the shortcut is on,
    /// has a resolver, and a key record for `host` is held; the stream
    /// decides at the first request whether it may take it.
    fn shortcut(&self, host: &str, port: u16) -> Option<ZrttStream> {
        let cfg = &self.config;
        let dns = self.shortcut_dns.clone().filter(|_| cfg.dns_shortcut)?;
        cfg.keys.lookup(host, (cfg.clock)())?;
        let known = self.resolver.resolve_now(host, port);
        let prefetch = cfg.keys.prefetch(host, (cfg.clock)());
        let resolve = self.resolver.resolve(host, port);
        let bound = self.resolve_timeout;
        let addr = Box::pin(async move {
            let lookup = async move {
                prefetch.await;
                resolve.await
            };
            tokio::time::timeout(bound, lookup)
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "address lookup"))?
        });
        let lookup = super::ShortcutLookup { dns, addr, known };
        Some(ZrttStream::with_shortcut(
            cfg.clone(),
            host.to_owned(),
            port,
            lookup,
        ))
    }
}

/// What happened while connecting the connection that carried `response`
/// (a response of a hyper-util `Client` over a [`ZrttConnector`]): the
/// mode (zrtt early or gated, or TLS fallback), round trips, notes. `None`
/// for other responses, or before the connection was established.
pub fn conn_info<B>(response: &hyper::Response<B>) -> Option<ConnInfo> {
    response
        .extensions()
        .get::<ConnInfoHandle>()?
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}
