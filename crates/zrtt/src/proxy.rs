//! `zrtt proxy`: a local HTTP/1.1 forward proxy (over TLS with HTTP/2 too,
//! given `--tls-cert`). Unmodified programs
//! (`curl -x http://127.0.0.1:8080 http://www.example.com/`) get zrtt for
//! hosts with a verified key record; other hosts and `CONNECT` tunnels pass
//! through unchanged. The work is in `zrtt_net::proxy`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use zrtt_dns::resolver::{Resolver, ResolverConfig, Trust};
use zrtt_net::client::{
    CertKeySource, ClientConfig, DnsAddresses, DnsKeySource, KeySource, Resolve, SystemResolver,
};
use zrtt_net::proxy::{Proxy, ProxyConfig, ZrttPorts};

use crate::dnskeys::ClientFlags;
use crate::{keys, util};

#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// TOML config file: its `[proxy]` section holds these flags by their
    /// names (docs/GATEWAY.md "Configuration file"); flags given here
    /// replace its single values and add to its lists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (keep it on loopback: the proxy has no authentication).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve the proxy over TLS with this PEM certificate chain (an HTTPS
    /// proxy: HTTP/2 to clients that offer it, e.g. Chromium's
    /// `--proxy-server=https://127.0.0.1:8443`); needs --tls-key. The
    /// certificate is for the address clients connect to and
    /// authenticates the proxy only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Key record file(s); hosts with a valid record go over zrtt. Without
    /// them, keys (and addresses) come from DNS.
    #[arg(long = "record")]
    records: Vec<PathBuf>,
    /// DNS server for keys and addresses (`ADDR` or `ADDR:PORT`); default: /etc/resolv.conf.
    #[arg(long, value_parser = crate::dnskeys::parse_dns_server)]
    dns_server: Option<SocketAddr>,
    /// Do not look keys up in DNS (only --record files).
    #[arg(long)]
    no_dns: bool,
    /// The certificate (PEM) that signs the records.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// CA certificates (PEM) for the TLS fallback; default the system's roots (SSL_CERT_FILE, SSL_CERT_DIR, else the distribution's bundle).
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// Use ADDR for HOST:PORT (`HOST:PORT:ADDR`, PORT as connected to); repeatable.
    #[arg(long)]
    resolve: Vec<String>,
    /// Gateway port of zrtt hosts: `HOST=PORT`, or `PORT` for all; else the
    /// URL's explicit port, else 443. Repeatable.
    #[arg(long = "zrtt-port")]
    zrtt_ports: Vec<String>,
    /// Sidecar port, `LOCAL=https://host[:port]` (repeatable): an application
    /// calling http://LOCAL/... reaches the origin over zrtt (TLS when the
    /// origin has no usable key); LOCAL is a port on 127.0.0.1 or ADDR:PORT.
    #[arg(long = "map", value_name = "LOCAL=URL")]
    maps: Vec<zrtt_net::sidecar::SidecarMap>,
    #[command(flatten)]
    flags: ClientFlags,
    /// Provenance state (from `zrtt verifier fetch`): certificates for this host's
    /// address let gateways that trust the verifiers answer first flights
    /// before the TCP handshake completes. Saved back after refreshes.
    /// Without it (and without --no-state) certificates are kept in memory.
    /// Either way the proxy also fetches certificates from the verifiers
    /// that origins' key records name (port 4480 of the names' addresses).
    #[arg(long, alias = "pv-state")]
    provenance_state: Option<PathBuf>,
    /// Provenance verifiers to refresh certificates from in the background
    /// (before half their validity is gone, and when the local address
    /// changes); repeatable.
    #[arg(long = "verifier")]
    verifiers: Vec<SocketAddr>,
    /// How often the background refresh checks the certificates and the local address.
    #[arg(long, default_value = "30s", value_parser = util::parse_duration)]
    provenance_check: Duration,
    /// Concurrent client connections.
    #[arg(long, default_value_t = ProxyConfig::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Idle origin connections kept per scheme and authority for later
    /// requests; 0 opens a new connection for every request (as HAProxy's
    /// `http-reuse never`), so each one is a first flight.
    #[arg(long, default_value_t = ProxyConfig::DEFAULT_MAX_IDLE_PER_ORIGIN)]
    max_idle_per_origin: usize,
    /// HTTP/1.1 requests in flight per scheme and authority (origin
    /// connections in use), for all clients together; further ones wait
    /// for a response to finish and reuse its connection. A response body
    /// that lasts over 10 s stops counting. 0: no bound. Matters for
    /// clients that speak HTTP/2 to the HTTPS proxy (a browser sends every
    /// request at once).
    #[arg(long, default_value_t = ProxyConfig::DEFAULT_MAX_CONNS_PER_ORIGIN)]
    max_conns_per_origin: usize,
    /// Admin endpoint on this address, e.g. 127.0.0.1:9155: /metrics
    /// (OpenMetrics: requests, errors, time to first byte by mode, key
    /// lookups), /healthz, /readyz (200 while serving with trust roots).
    /// Prints `admin ADDR`.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Bound on an origin's response head (then 504); default 60s.
    #[arg(long, value_parser = util::parse_duration)]
    response_timeout: Option<Duration>,
}

pub fn run(a: ProxyArgs) -> Result<ExitCode> {
    let mut records = Vec::new();
    for p in &a.records {
        records.extend(keys::load_records(p)?);
    }
    let cert_der = match (&a.cert, records.is_empty()) {
        (Some(p), _) => util::load_cert(p)?.to_vec(),
        (None, false) => anyhow::bail!("--record needs --cert (the certificate that signs it)"),
        (None, true) => Vec::new(),
    };
    let roots = util::load_roots(a.cacert.as_deref())?;
    let have_roots = !roots.is_empty();
    // Keys from record files, or from DNS (verified against TLSA chained
    // to --cacert, or the pinned --cert).
    let dns = if records.is_empty() && !a.no_dns {
        let cfg = match a.dns_server {
            Some(s) => ResolverConfig::new(s),
            None => ResolverConfig::system()?,
        };
        let trust = match &a.cacert {
            Some(p) => Trust::from_pem_file(p)?,
            None => Trust::system(),
        };
        Some(DnsKeySource::new(Arc::new(Resolver::new(cfg, trust))))
    } else {
        None
    };
    let key_source: Arc<dyn KeySource> = match &dns {
        Some(d) => Arc::new(d.clone()),
        None => Arc::new(CertKeySource::new(cert_der, records)),
    };
    let mut client = ClientConfig::builder(key_source).with_root_certificates(roots)?;
    a.flags.apply(&mut client);
    let verifier_store = match &a.provenance_state {
        Some(p) => Some(Arc::new(zrtt_net::verifier::ProvenanceStore::load(p)?)),
        None if !a.verifiers.is_empty() || !a.flags.no_state() => {
            Some(Arc::new(zrtt_net::verifier::ProvenanceStore::new()))
        }
        None => None,
    };
    client.provenance = verifier_store.clone();
    let token_state = a
        .flags
        .token_state()
        .context("creating the state directory")?;
    let tokens = match &token_state {
        Some(p) => {
            let store = zrtt_net::client::TokenStore::load(p)
                .with_context(|| format!("{} (--no-state to ignore it)", p.display()))?;
            let store = Arc::new(store);
            client.tokens = Some(store.clone());
            Some((p.clone(), store))
        }
        None => None,
    };
    let mut resolver = SystemResolver::new();
    for r in &a.resolve {
        resolver.add_curl_override(r)?;
    }
    // Addresses from the DNS lookup the key source made, then the rest.
    let resolver: Arc<dyn Resolve> = match &dns {
        Some(d) => Arc::new(DnsAddresses::new(d, Arc::new(resolver))),
        None => Arc::new(resolver),
    };
    let mut ports = ZrttPorts::default();
    for p in &a.zrtt_ports {
        ports.add_spec(p)?;
    }
    // --dns-shortcut: its queries through the key lookup's resolver, else
    // through --dns-server or /etc/resolv.conf.
    let shortcut_dns = match (&dns, a.flags.dns_shortcut()) {
        (_, false) => None,
        (Some(d), true) => Some(d.resolver().clone()),
        (None, true) => Some(Arc::new(Resolver::new(
            match a.dns_server {
                Some(s) => ResolverConfig::new(s),
                None => ResolverConfig::system()?,
            },
            Trust::none(),
        ))),
    };
    let mut cfg = ProxyConfig::new(Arc::new(client));
    cfg.shortcut_dns = shortcut_dns;
    cfg.resolver = resolver;
    cfg.zrtt_ports = ports;
    cfg.max_connections = a.max_connections;
    cfg.pool_max_idle_per_origin = a.max_idle_per_origin;
    cfg.max_conns_per_origin = a.max_conns_per_origin;
    cfg.maps = a.maps.clone();
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        cfg.tls = Some(zrtt_net::proxy::proxy_tls_config(cert, key)?);
    }
    if let Some(t) = a.response_timeout {
        cfg.timeouts.response = t;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let proxy = Proxy::bind(a.listen, cfg)
            .await
            .with_context(|| format!("binding {}", a.listen))?;
        let metrics = proxy.metrics();
        let render = metrics.clone();
        let admin = crate::admin::Admin::start(
            a.admin,
            Arc::new(move || zrtt_net::admin::encode(&render.registry())),
        )
        .await?;
        for (m, addr) in a.maps.iter().zip(proxy.sidecar_addrs()?) {
            println!("sidecar {addr} -> https://{}:{}", m.host, m.port);
        }
        println!("listening {}", proxy.local_addr()?);
        if let Some(store) = verifier_store {
            tokio::spawn(refresh_provenance(
                store,
                a.verifiers.clone(),
                a.provenance_state.clone(),
                a.provenance_check,
            ));
        }
        // Tokens learned while serving are saved every minute and at the end.
        let saver = tokens.clone().map(|(p, store)| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(TOKEN_SAVE_EVERY).await;
                    save_tokens(&p, &store);
                }
            })
        });
        // Ready while serving, once the TLS trust roots are loaded.
        admin.set_ready(have_roots);
        proxy.run(util::shutdown_signal()).await?;
        admin.stop().await;
        if let Some(s) = saver {
            s.abort();
        }
        if let Some((p, store)) = &tokens {
            save_tokens(p, store);
        }
        let report: Vec<String> = metrics
            .snapshot()
            .into_iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        tracing::info!("{}", report.join(" "));
        Ok(ExitCode::SUCCESS)
    })
}

/// Keep provenance certificates fresh: every `every`, find the local address
/// used towards the verifiers; refresh when the store says so (none for this
/// address, or under half their validity left). A verifier that is down
/// only costs its timeout; the proxy keeps serving (gated) meanwhile.
async fn refresh_provenance(
    store: Arc<zrtt_net::verifier::ProvenanceStore>,
    verifiers: Vec<SocketAddr>,
    state: Option<PathBuf>,
    every: Duration,
) {
    let rng = ring::rand::SystemRandom::new();
    let mut known: Vec<SocketAddr> = verifiers.clone();
    loop {
        // The local address towards a verifier (a configured one, else one
        // the origins' records named, resolved once and kept), and only
        // when a refresh is due, every verifier's address.
        let named = store.named();
        if known.is_empty() {
            known = resolve_named(&named, &verifiers).await;
        }
        let local = known.first().map(|v| {
            std::net::UdpSocket::bind(("0.0.0.0", 0))
                .and_then(|s| s.connect(v).and_then(|()| s.local_addr()))
                .map(|a| a.ip())
        });
        if let Some(Ok(local)) = local {
            if store.needs_refresh(local, zrtt_net::client::system_clock()) {
                known = resolve_named(&named, &verifiers).await;
                match store
                    .refresh(local, &known, 86_400, Duration::from_secs(5), &rng)
                    .await
                {
                    Ok(report) => {
                        for (v, r) in report {
                            match r {
                                Ok(d) => {
                                    tracing::info!("certificate from {v} for {local}, {d} s")
                                }
                                Err(e) => tracing::warn!("verifier {v}: {e}"),
                            }
                        }
                        if let Some(p) = &state {
                            if let Err(e) = store.save(p) {
                                tracing::error!("saving {}: {e}", p.display());
                            }
                        }
                    }
                    Err(e) => tracing::warn!("provenance refresh: {e}"),
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// The configured verifiers, then those named in origins' key records
/// (at [`zrtt_net::verifier::VERIFIER_PORT`] of their first address).
async fn resolve_named(named: &[String], configured: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut all = configured.to_vec();
    for name in named {
        let port = zrtt_net::verifier::VERIFIER_PORT;
        match tokio::net::lookup_host((name.as_str(), port)).await {
            Ok(mut it) => all.extend(it.next().filter(|a| !all.contains(a))),
            Err(e) => tracing::debug!("verifier {name}: {e}"),
        }
    }
    all
}

/// How often `zrtt proxy` saves its token state while serving.
const TOKEN_SAVE_EVERY: Duration = Duration::from_secs(60);

fn save_tokens(path: &std::path::Path, store: &zrtt_net::client::TokenStore) {
    if let Err(e) = store.save(path) {
        tracing::warn!("saving {}: {e}", path.display());
    }
}
