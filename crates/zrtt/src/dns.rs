//! `zrtt dns`: the authoritative DNS server for a zone file plus key records.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use zrtt_dns::server::{self, DnsConfig, HostConfig, Listener, VerifierConfig, ZoneState};

/// Serve a zone from an RFC 1035 zone file on UDP and TCP (EDNS0, answers
/// within 1232 bytes), plus key records generated from one or more key
/// stores: at each host name an HTTPS record (priority 1, target ".", alpn,
/// ipv4hint/ipv6hint from the zone's A/AAAA records, key65380 = all
/// published records), one TXT `v=zrtt1 ...` per published record, TLSA
/// 3 0 0 with the certificate, and the AAAA tunnel at `zrtt-tunnel.<host>`.
/// Their TTL stays below the records' remaining validity. With
/// --verifier-keystore it also publishes provenance verifier keys: one TXT
/// `v=zrttpv1 ...` per published verifier key record and TLSA 3 0 0 with the
/// certificate that signs them, at `_zrttpv.<verifier name>`. The key stores
/// are re-read when another process rotates them, and rotated by the server
/// itself unless --no-rotate. Prints `listening udp=ADDR tcp=ADDR` on
/// stdout once per listen address, then serves until SIGINT or SIGTERM.
#[derive(Args, Debug)]
pub struct DnsArgs {
    /// Zone file (RFC 1035 syntax). Required here or in --config.
    #[arg(long)]
    zone: Option<PathBuf>,
    /// Zone origin, for a zone file without `$ORIGIN`.
    #[arg(long)]
    origin: Option<String>,
    /// Key store directory (from `zrtt keys init`); repeat for several hosts.
    /// The host name is the store's `name`, and must be in the zone.
    #[arg(long = "keystore", value_name = "DIR")]
    keystores: Vec<PathBuf>,
    /// Verifier key store directory (from `zrtt verifier init`); repeat for several
    /// verifiers. Its keys are published at `_zrttpv.<name>` (the store's
    /// `name`, which must be in the zone) for `zrtt gateway --verifier-name`.
    #[arg(long = "verifier-keystore", value_name = "DIR")]
    verifier_keystores: Vec<PathBuf>,
    /// Address to serve on, UDP and TCP on the same port; repeatable. Port 0
    /// picks a free port (read it from the `listening` line).
    #[arg(long = "listen", value_name = "ADDR:PORT")]
    listen: Vec<SocketAddr>,
    /// Do not rotate the key stores; only pick up rotations done elsewhere
    /// (`zrtt keys rotate` from a timer, or the gateway).
    #[arg(long)]
    no_rotate: bool,
    /// ALPN ids for the HTTPS records of --keystore hosts.
    #[arg(long, value_delimiter = ',', default_value = "http/1.1")]
    alpn: Vec<String>,
    /// `port` parameter for the HTTPS records of --keystore hosts (when the
    /// gateway is not on 443).
    #[arg(long)]
    https_port: Option<u16>,
    /// A secondary allowed to transfer the zone (AXFR over TCP); repeatable.
    /// Others get REFUSED.
    #[arg(long = "allow-transfer", value_name = "ADDR")]
    allow_transfer: Vec<std::net::IpAddr>,
    /// A secondary sent NOTIFY whenever the key records (and so the SOA
    /// serial) change; repeatable.
    #[arg(long = "notify", value_name = "ADDR:PORT")]
    notify: Vec<SocketAddr>,
    /// Admin endpoint on this address, e.g. 127.0.0.1:9153: /metrics
    /// (OpenMetrics: queries, answer latency, transfers, NOTIFYs, key store
    /// reloads and rotations, serial), /healthz, /readyz (200 once the zone
    /// and its key records are served). Prints `admin ADDR`.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// How often to check the key stores (reload, rotate, refresh records).
    #[arg(long, default_value = "1s", value_parser = crate::util::parse_duration)]
    refresh: std::time::Duration,
    /// TOML config: `zone`, `origin`, `listen = [..]`, `rotate`,
    /// `allow_transfer = [..]`, `notify = [..]`, `admin`,
    /// `[[host]]` tables with `keystore`, `alpn`, `port`, `[[verifier]]`
    /// tables with `keystore`, and `[[region]]` tables with `name`,
    /// `sources = ["CIDR", ..]` and `[region.addresses]` (`"NAME" = ["IP", ..]`:
    /// queries from those sources get these addresses for those names,
    /// docs/DNS.md §8.6). Flags given on the
    /// command line override or add to it; relative paths are relative to
    /// the config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Log level on stderr: error, warn, info, debug.
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
}

pub fn run(a: DnsArgs) -> Result<ExitCode> {
    let mut cfg = match &a.config {
        Some(p) => DnsConfig::from_file(p)?,
        None => DnsConfig::default(),
    };
    if a.zone.is_some() {
        cfg.zone = a.zone.clone();
    }
    if a.origin.is_some() {
        cfg.origin = a.origin.clone();
    }
    if !a.listen.is_empty() {
        cfg.listen = a.listen.clone();
    }
    if a.no_rotate {
        cfg.rotate = Some(false);
    }
    if a.admin.is_some() {
        cfg.admin = a.admin;
    }
    for k in &a.keystores {
        cfg.hosts.push(HostConfig {
            keystore: k.clone(),
            alpn: a.alpn.clone(),
            port: a.https_port,
        });
    }
    for k in &a.verifier_keystores {
        cfg.verifiers.push(VerifierConfig {
            keystore: k.clone(),
        });
    }
    let Some(zone) = cfg.zone.clone() else {
        bail!("no zone file: give --zone FILE (or `zone` in --config)");
    };
    if cfg.listen.is_empty() {
        cfg.listen.push("127.0.0.1:53".parse()?);
    }
    let mut state = ZoneState::new(
        &zone,
        cfg.origin.as_deref(),
        &cfg.hosts,
        cfg.rotate.unwrap_or(true),
    )?;
    state.add_verifiers(&cfg.verifiers)?;
    state.set_regions(&cfg.regions)?;
    cfg.allow_transfer.extend(a.allow_transfer.iter().copied());
    cfg.notify.extend(a.notify.iter().copied());
    state.set_transfer(server::TransferPolicy {
        allow: cfg.allow_transfer.clone(),
        notify: cfg.notify.clone(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let metrics = state.metrics();
        let admin = crate::admin::Admin::start(
            cfg.admin,
            Arc::new(move || zrtt_net::admin::encode(&metrics.registry())),
        )
        .await?;
        state.signal_ready(admin.readiness());
        let mut listeners = Vec::new();
        for addr in &cfg.listen {
            listeners.push(Listener::bind(*addr).await?);
        }
        {
            let mut out = std::io::stdout().lock();
            for l in &listeners {
                writeln!(out, "{}", l.describe())?;
            }
            out.flush()?;
        }
        tracing::info!(
            "zone {} from {}, {} host(s), {} verifier(s){}",
            state.origin(),
            zone.display(),
            cfg.hosts.len(),
            cfg.verifiers.len(),
            if cfg.rotate.unwrap_or(true) {
                ", rotating"
            } else {
                ""
            }
        );
        let (trigger, shutdown) = server::shutdown::channel();
        tokio::spawn(async move {
            crate::util::shutdown_signal().await;
            trigger.fire();
        });
        let rng = ring::rand::SystemRandom::new();
        server::serve(
            state,
            listeners,
            crate::util::now,
            &rng,
            a.refresh,
            shutdown,
        )
        .await?;
        admin.stop().await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
