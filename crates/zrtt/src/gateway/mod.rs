//! `zrtt gateway`: zrtt and TLS 1.3 on one Fast Open port in front of an
//! HTTP/1.1 backend (see docs/GATEWAY.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use zrtt_net::gateway::{
    load_certified_key, tls_server_config_with, Gateway, GatewayConfig, ReloadableCert, SniCerts,
};
use zrtt_net::tfo::ListenOptions;
use zrtt_proto::admission::{AdmissionConfig, IpNet, TokenKeyRing};

use crate::{reload, replay_state, util};

mod backends;
mod handover;
mod keys;
mod provenance;
mod refresh;
mod root;
mod sessions;
mod store_args;
mod successor;

use keys::{all_keys, token_keys, LoadedSite};
use provenance::{next_lookup, refresh_verifiers};
pub use store_args::ShortDuration;
use store_args::{replay_store, ReplayStoreArgs};
use zrtt_dns::token_keys::TokenSchedule;

#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// Address to listen on (zrtt and TLS 1.3 share it).
    #[arg(long, default_value = "0.0.0.0:443")]
    listen: SocketAddr,
    /// The backend: `ADDR:PORT`, `HOST:PORT` (resolved at each new
    /// connection), or `unix:/PATH`; HTTP/1.1, or HTTP/2 over cleartext
    /// with an `h2c://` (`h2c+unix:/PATH`) prefix; a `proxy-v2+` prefix
    /// sends a PROXY protocol v2 header first. Repeat it for several
    /// backends, chosen round robin among the healthy ones.
    /// `files:DIR` serves a directory's files (as --root).
    #[arg(
        long = "backend",
        required_unless_present = "root",
        conflicts_with = "root"
    )]
    backends: Vec<zrtt_net::gateway::Backend>,
    #[command(flatten)]
    root: root::RootArgs,
    #[command(flatten)]
    backend_opts: Box<backends::BackendArgs>,
    #[command(flatten)]
    sessions: sessions::SessionArgs,
    /// Key store (from `zrtt keys init`): semi-static keys, their records and
    /// the certificate. Re-read every --refresh, so rotations by `zrtt dns`
    /// or `zrtt keys rotate` take effect without a restart.
    #[arg(long, conflicts_with_all = ["keys", "records", "cert", "cert_key"])]
    keystore: Option<PathBuf>,
    /// Keep the replay filter across restarts in this file (default:
    /// `replay-<host>-<address>_<port>.state` in the key store): written
    /// when the gateway stops, read and removed at start, so a restart
    /// answers early at once. Restored only by the same host and address,
    /// and only if no other gateway started with the file since (counter
    /// in `<file>.gen`).
    #[arg(long)]
    replay_state: Option<PathBuf>,
    /// Restart without a blackout: a Unix socket (owner only) where this
    /// gateway hands its listening sockets and replay filter to a new
    /// gateway process started with the same flag and listen address, then
    /// drains and exits; a gateway started while none serves there binds
    /// the address itself (docs/GATEWAY.md, Restart without a blackout).
    #[arg(long, value_name = "PATH")]
    handover: Option<PathBuf>,
    /// Write this process's PID here once it serves (a successor started by
    /// SIGHUP with --handover writes its own); removed at exit.
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
    #[command(flatten)]
    store: Box<ReplayStoreArgs>,
    /// A further site on this gateway (repeatable): `backend=ADDR:PORT`
    /// and `keystore=DIR`, or `cert=FILE,cert-key=FILE` with
    /// `key=FILE,record=FILE` pairs; `alias=NAME` adds names. TLS picks the
    /// certificate by server name (SNI), zrtt by the key a flight was
    /// encrypted to, and requests go to the backend of their Host's site
    /// (421 for a host no site serves, or one of another site than the
    /// connection's). The flags above are the default site.
    #[arg(long = "site", value_name = "SPEC")]
    sites: Vec<crate::sites::SiteSpec>,
    /// With --keystore: create and retire keys on schedule in this process too.
    #[arg(long, requires = "keystore")]
    rotate: bool,
    /// How often to check the certificate files for a change (then they are
    /// reloaded without a restart; SIGHUP does it at once) and, with
    /// --keystore, to re-read (with --rotate, rotate) the store.
    #[arg(long, default_value = "10s", value_parser = util::parse_duration)]
    refresh: Duration,
    /// Semi-static key file (from `zrtt keys generate`); repeat for rotation.
    #[arg(long = "key", required_unless_present = "keystore")]
    keys: Vec<PathBuf>,
    /// Signed record file(s) for the keys (matched by public key); repeatable.
    #[arg(long = "record", required_unless_present = "keystore")]
    records: Vec<PathBuf>,
    /// TLS certificate chain (PEM), the certificate that signs the records first.
    #[arg(long, required_unless_present = "keystore")]
    cert: Option<PathBuf>,
    /// Its private key (PKCS#8 PEM).
    #[arg(long, required_unless_present = "keystore")]
    cert_key: Option<PathBuf>,
    /// Token sealing key shared by a fleet: 32 bytes, raw or 64 hex digits
    /// (e.g. `(umask 077; openssl rand -hex 32 > token.key)`). Without it,
    /// tokens are sealed with the key store's token keys (--keystore:
    /// created there on first need, rotated every --token-rotation, shared
    /// by every gateway reading the store) or, with --key, with a key made
    /// at start (tokens then do not outlive the process).
    #[arg(long, conflicts_with = "no_tokens")]
    token_key: Option<PathBuf>,
    /// Issue no address tokens (returning clients are then answered early
    /// only with another proof).
    #[arg(long)]
    no_tokens: bool,
    /// Grant no zrtt resumption tickets and refuse resumed flights (Reject
    /// 9; docs/PROTOCOL.md §12). Tickets are sealed with keys derived from
    /// the token keys, so --no-tokens turns resumption off too.
    #[arg(long)]
    no_resumption: bool,
    /// Lifetime of issued tokens.
    #[arg(long, default_value = "1h", value_parser = util::parse_duration)]
    token_lifetime: Duration,
    /// With --keystore: time between two token keys (every gateway sharing
    /// the store must use the same value).
    #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
    token_rotation: Duration,
    /// Networks whose addresses count as proven (answered before the TCP
    /// handshake completes), e.g. 10.0.0.0/8. Only for networks that cannot
    /// spoof sources.
    #[arg(long = "trust")]
    trusted: Vec<String>,
    /// A provenance verifier's public key (64 hex digits, from `zrtt verifier
    /// keygen`) whose certificates prove an address; repeatable. Each counts
    /// as one verifier toward --quorum.
    #[arg(long = "verifier")]
    verifiers: Vec<String>,
    #[command(flatten)]
    verifier_dns: Box<VerifierDnsArgs>,
    /// Valid certificates from distinct trusted verifiers needed (default: 1).
    #[arg(long, default_value_t = 1)]
    quorum: usize,
    /// Certificate signature checks per second at most; beyond it flights
    /// are answered after the handshake instead (0 = unlimited).
    #[arg(long, default_value_t = 20_000.0)]
    provenance_checks_per_sec: f64,
    /// Admin endpoint on this address, e.g. 127.0.0.1:9090: /metrics
    /// (OpenMetrics), /healthz, /readyz.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Log one line per request on stderr (target `zrtt_access`): client
    /// address, path taken (zrtt or tls), host, request line, status, body
    /// length, whether it was early data, milliseconds to the response head.
    #[arg(long)]
    access_log: bool,
    /// Concurrent connections beyond which every reply waits for the handshake.
    #[arg(long, default_value_t = 10_000)]
    max_connections: usize,
    /// Concurrent connections beyond which zrtt gets Reject Busy and TLS is closed.
    #[arg(long, default_value_t = 20_000)]
    hard_max_connections: usize,
    /// First-flight decryptions per second answered early at most (0 = unlimited).
    #[arg(long, default_value_t = 5_000.0)]
    decrypts_per_sec: f64,
    /// Decryptions per second beyond which flights get Reject Busy (0 = unlimited).
    #[arg(long, default_value_t = 20_000.0)]
    hard_decrypts_per_sec: f64,
    /// Bytes a proven client (token, trusted network, provenance quorum)
    /// may receive before its TCP handshake completes, when that is more
    /// than three times its first flight: one initial congestion window by
    /// default (what a TCP Fast Open server sends a cookie holder), at most
    /// 65518. What a stale proof can reflect at a victim is bounded by the
    /// per-destination budgets either way (docs/PROTOCOL.md §8).
    #[arg(long, default_value_t = zrtt_proto::admission::INITIAL_WINDOW)]
    proven_window: usize,
    /// The strict bound of RFC 9000 §8: at most three times the first
    /// flight before the handshake completes (answers over about 1.3 KB
    /// then wait a round trip).
    #[arg(long, conflicts_with = "proven_window")]
    strict_amplification: bool,
    /// Log level on stderr: error, warn, info, debug (debug: why each
    /// token or certificate was refused, overload fallbacks).
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
    /// TOML config file: its `[gateway]` section holds these flags by their
    /// names (docs/GATEWAY.md "Configuration file"); flags given here
    /// replace its single values and add to its lists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration (files, keys, certificates, flags) and exit:
    /// 0 and `configuration ok` when the gateway would start.
    #[arg(long)]
    check_config: bool,
    /// Longest wait for an unproven client's TCP handshake before dropping it.
    #[arg(long, default_value = "3s", value_parser = util::parse_duration)]
    gate_timeout: Duration,
    /// Backend response timeout (then 504 inside the channel).
    #[arg(long, default_value = "15s", value_parser = util::parse_duration)]
    backend_timeout: Duration,
    /// Fast Open queue length on each listening socket (0 disables Fast
    /// Open): places for connections whose SYN carried data until their
    /// handshake completes or the gate timeout resets them.
    #[arg(long, default_value_t = ListenOptions::default().fast_open_queue)]
    fast_open_queue: i32,
    /// Listen backlog of each socket (capped by net.core.somaxconn and
    /// net.ipv4.tcp_max_syn_backlog).
    #[arg(long, default_value_t = ListenOptions::default().backlog)]
    backlog: i32,
    /// DNS shortcut (docs/DNS.md §8): answer DNS on this address, UDP and
    /// TCP (repeatable), for each site S the zone `zq.S` that S's zone
    /// delegates here: a TXT query whose name is a shortcut flight runs
    /// its GET/HEAD on the backend and carries the answer back (or says
    /// FETCH when it does not fit); other names get NXDOMAIN.
    #[arg(long = "sdns", value_name = "ADDR")]
    sdns: Vec<SocketAddr>,
    /// The NS target of the shortcut zones (e.g. ns1.example.net, whose
    /// addresses the operator publishes); default `ns.zq.S` in each zone,
    /// answered with the --sdns addresses (give a concrete address, not
    /// 0.0.0.0, for that glue).
    #[arg(long, value_name = "NAME", requires = "sdns")]
    sdns_ns: Option<String>,
    /// Shortcut flights one source prefix (/24, /48) may have running at
    /// once from the SDNS; beyond it FETCH without a run (the client's TCP
    /// form runs it).
    #[arg(long, default_value_t = zrtt_net::gateway::DEFAULT_MAX_RUNNING_PER_PREFIX)]
    sdns_max_running: usize,
    /// The address the backend is told a request from the SDNS came from
    /// (X-Forwarded-For, the PROXY header's source): the querier is a
    /// resolver or a spoofed address, never the client. Never trust it.
    #[arg(long, value_name = "ADDR", default_value_t = zrtt_net::gateway::DNS_CLIENT_ADDRESS)]
    sdns_client_address: std::net::IpAddr,
    /// Turn the shortcut off for this site (a key record's name;
    /// repeatable): its zone is not served, a shortcut flight's TCP form
    /// for it is refused (the client takes the normal path).
    #[arg(long, value_name = "SITE")]
    sdns_off: Vec<String>,
    /// Worker threads, and listening sockets on the port (SO_REUSEPORT, each
    /// with its own accept loop); default: the cores this process may use.
    #[arg(long)]
    workers: Option<usize>,
}

/// Provenance verifier keys from DNS (docs/PROVENANCE.md).
#[derive(Args, Debug)]
struct VerifierDnsArgs {
    /// A provenance verifier's DNS name: trust every currently valid key it
    /// publishes (TXT `v=zrttpv1` at `_zrttpv.<name>`, from `zrtt dns
    /// --verifier-keystore`), verified like key records (signed by the
    /// name's certificate: TLSA at `_zrttpv.<name>` chained to
    /// --verifier-cacert, or pinned with --verifier-cert). Looked up before
    /// serving and every --verifier-refresh; a failed lookup keeps the keys
    /// learned before until they expire. Repeatable; each name counts as one
    /// verifier toward --quorum, however many keys it publishes.
    #[arg(long = "verifier-name", value_name = "NAME")]
    verifier_names: Vec<String>,
    /// DNS server for --verifier-name (`ADDR` or `ADDR:PORT`); default: the
    /// nameservers of /etc/resolv.conf.
    #[arg(long, value_parser = crate::dnskeys::parse_dns_server, requires = "verifier_names")]
    dns_server: Option<SocketAddr>,
    /// CA certificates (PEM) that the certificates signing --verifier-name
    /// keys (TLSA) must chain to; default the system's roots (SSL_CERT_FILE, SSL_CERT_DIR, else the distribution's bundle).
    #[arg(long, requires = "verifier_names")]
    verifier_cacert: Option<PathBuf>,
    /// Pin the certificate (PEM) that signs a --verifier-name's key records,
    /// as `NAME=FILE`; its TLSA record is then not needed. Repeatable.
    #[arg(
        long = "verifier-cert",
        value_name = "NAME=FILE",
        requires = "verifier_names"
    )]
    verifier_certs: Vec<String>,
    /// How often to look --verifier-name keys up again (after a failure:
    /// within 30 s). Keep it below the verifiers' pre-publication time minus
    /// their TTL (default 1 h - 5 min), so a new key is known before it signs.
    #[arg(long, default_value = "5m", value_parser = util::parse_duration)]
    verifier_refresh: Duration,
}

/// A network in CIDR form, or one address (`/32`, `/128`).
fn parse_net(s: &str) -> Result<IpNet> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| anyhow::anyhow!("--trust {s:?}: not an address or addr/prefix"))
}

/// Open descriptors the gateway asks for (the systemd unit's LimitNOFILE).
const OPEN_FILES: u64 = 65_536;

pub fn run(mut a: GatewayArgs) -> Result<ExitCode> {
    a.root.apply(&mut a.backends);
    root::check(
        a.backends
            .iter()
            .chain(a.sites.iter().flat_map(|s| &s.backends)),
    )?;
    // Pending connections hold two descriptors each (the socket, and one
    // duplicate for the gate and the reset guard): take what the system allows, as nginx's
    // worker_rlimit_nofile does.
    match zrtt_net::sys::raise_open_files(OPEN_FILES) {
        Ok(n) if n < OPEN_FILES => tracing::warn!(
            "open files limited to {n}: a SYN flood can exhaust them (LimitNOFILE={OPEN_FILES} in the systemd unit)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("raising the open files limit: {e}"),
    }
    // With --handover, SIGHUP starts this executable again (a successor).
    let invocation = match &a.handover {
        Some(_) => Some(successor::Invocation::current()?),
        None => None,
    };
    let mut sites = vec![LoadedSite::load(
        a.keystore.as_deref(),
        &a.keys,
        &a.records,
        a.cert.as_deref(),
        a.cert_key.as_deref(),
        a.backends.clone(),
        &[],
        a.rotate,
    )?];
    for spec in &a.sites {
        let site = LoadedSite::load(
            spec.keystore.as_deref(),
            &spec.keys,
            &spec.records,
            spec.cert.as_deref(),
            spec.cert_key.as_deref(),
            spec.backends.clone(),
            &spec.aliases,
            a.rotate,
        )?;
        for n in &site.names {
            if sites.iter().any(|s| s.names.contains(n)) {
                bail!("--site: {n} is served by two sites");
            }
        }
        sites.push(site);
    }
    let keys = all_keys(&mut sites, false)?;
    // The TLS certificates (by server name), each replaced when its files
    // change (reload.rs).
    let mut certs = Vec::new();
    for s in &sites {
        zrtt_dns::keyfile::check_private_mode(&s.cert_key)?;
        let served = ReloadableCert::new(load_certified_key(&s.cert, &s.cert_key)?);
        certs.push((s.names.clone(), served, s.cert.clone(), s.cert_key.clone()));
    }
    let tls = tls_server_config_with(SniCerts::new(
        certs
            .iter()
            .map(|(n, c, _, _)| (n.clone(), c.clone()))
            .collect(),
    )?)?;
    let names = sites[0].names.clone();
    let other_sites: Vec<zrtt_net::gateway::Site> = sites[1..]
        .iter()
        .map(|s| zrtt_net::gateway::Site {
            names: s.names.clone(),
            backends: s.backends.clone(),
            health: None,
        })
        .collect();
    let tokens = token_keys(&a, sites[0].store.as_ref())?;
    let trusted = a
        .trusted
        .iter()
        .map(|s| parse_net(s))
        .collect::<Result<Vec<_>>>()?;
    let answers_early = tokens.is_some()
        || !trusted.is_empty()
        || !a.verifiers.is_empty()
        || !a.verifier_dns.verifier_names.is_empty();
    if answers_early && a.store.replay_store.is_none() {
        // docs/PROTOCOL.md §7: a flight replayed to another gateway of a
        // fleet is accepted there once more; answered early, each replay
        // reflects up to the pre-handshake budget.
        tracing::warn!(
            "this gateway answers proven clients before the handshake with a replay filter local to this process: gateways sharing these keys must not also answer early, or must share a replay store (--replay-store, docs/FLEET.md)"
        );
    }
    let mut admission = AdmissionConfig::default();
    let token_ring = tokens.map(TokenKeyRing::new);
    admission.tokens = token_ring.clone();
    admission.limits.max_connections = a.max_connections;
    admission.limits.hard_max_connections = a.hard_max_connections;
    admission.limits.decrypts_per_sec = a.decrypts_per_sec;
    admission.limits.hard_decrypts_per_sec = a.hard_decrypts_per_sec;
    admission.limits.provenance_checks_per_sec = a.provenance_checks_per_sec;
    admission.proven_window = a.proven_window;
    if a.strict_amplification {
        admission.strict_amplification();
    }
    if !trusted.is_empty() {
        tracing::warn!(
            "--trust: addresses in these networks are answered early and their early requests forwarded without any proof; only for networks no path into the listener can spoof"
        );
    }
    admission.dangerous().set_trusted_networks(trusted);
    let shared_keys = Arc::new(RwLock::new(keys));
    let workers = a
        .workers
        .unwrap_or_else(zrtt_net::tfo::default_listeners)
        .max(1);
    let mut listen = ListenOptions::default();
    listen.fast_open_queue = a.fast_open_queue;
    listen.backlog = a.backlog;
    listen.listeners = workers;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    // Provenance: configured keys, and keys learned from DNS (looked up once
    // before serving, then in the background).
    let verifier_policy = provenance::provenance(&a, &runtime)?;
    // The replay filter's restart guard starts now, after every lookup:
    // as late as possible before the listener is bound (docs/PROTOCOL.md §7).
    let mut cfg = GatewayConfig::new(shared_keys.clone(), tls, a.backends[0].clone())?;
    cfg.backends = a.backends.clone();
    a.backend_opts.apply(&mut cfg)?;
    a.sessions.apply(&mut cfg, a.token_lifetime)?;
    let replay_path =
        replay_state::location(a.replay_state.as_deref(), a.keystore.as_deref(), a.listen);
    cfg.replay_store = replay_store(&a.store, cfg.clock)?;
    // A running gateway hands over its sockets and filter, if one serves
    // hand-overs at --handover (it stops accepting from then until this
    // process says READY: everything slow is done before).
    let mut taken = match &a.handover {
        Some(p) if !a.check_config => {
            handover::take(&runtime, p, a.listen, cfg.replay_store.as_ref())?
        }
        _ => None,
    };
    let mut replay = match &taken {
        Some(t) => replay_state::adopt(&replay_state::owner(a.listen), &t.snapshot)?,
        // --check-config runs beside a serving gateway: it must not take the
        // snapshot a stopping one leaves.
        None => replay_state::load(
            replay_path.as_deref().filter(|_| !a.check_config),
            &replay_state::owner(a.listen),
        )?,
    };
    cfg.replay = replay.filter.clone();
    cfg.admission = admission;
    cfg.resumption = !a.no_resumption;
    if cfg.resumption && a.token_key.is_some() && cfg.admission.tokens.is_some() {
        // docs/PROTOCOL.md §12.6: a --token-key never rotates, so neither
        // does the ticket key derived from it: whoever reads that file can
        // open every ticket issued under it, past or future.
        tracing::warn!(
            "resumption tickets are sealed with a key derived from --token-key, which never rotates: a copy of that file opens every ticket (and its psk) it ever sealed; prefer --keystore (rotating token keys) or --no-resumption"
        );
    }
    cfg.server_names = names;
    cfg.sites = other_sites;
    // The sites follow their --site values; their health settings go over
    // the gateway's (set above from the flags).
    for (site, spec) in cfg.sites.iter_mut().zip(&a.sites) {
        site.health = spec
            .health
            .over(&cfg.backend_health)
            .map_err(|e| anyhow::anyhow!("--site {}: {e}", site.label()))?;
    }
    cfg.provenance = verifier_policy.as_ref().map(|(policy, _)| policy.clone());
    cfg.listen = listen;
    cfg.timeouts.gate = a.gate_timeout;
    cfg.access_log = a.access_log;
    cfg.shortcut.sdns = a.sdns.clone();
    cfg.shortcut.sdns_ns = a.sdns_ns.clone();
    cfg.shortcut.max_running_per_prefix = a.sdns_max_running.max(1);
    cfg.shortcut.dns_client_address = a.sdns_client_address;
    cfg.shortcut.off_sites = a.sdns_off.clone();
    cfg.timeouts.backend_response = a.backend_timeout;
    if cfg.timeouts.backend_response >= cfg.timeouts.stream_idle {
        tracing::warn!(
            "--backend-timeout {:?} is not below --stream-idle-timeout {:?}: a connection waiting that long for a backend is closed as idle first",
            cfg.timeouts.backend_response,
            cfg.timeouts.stream_idle
        );
    }
    if a.check_config {
        // Everything but binding the address (a running gateway holds it).
        cfg.admission.check().map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("configuration ok");
        return Ok(ExitCode::SUCCESS);
    }
    let tls_sessions = cfg.tls_sessions.clone();
    runtime.block_on(async move {
        let handed_admin = taken.as_mut().and_then(|t| t.admin.take());
        let handed_tls = match taken.as_mut() {
            Some(t) => std::mem::take(&mut t.sessions),
            None => std::mem::take(&mut replay.sessions),
        };
        let gw = match taken.as_mut() {
            Some(t) => Gateway::from_listeners(std::mem::take(&mut t.listeners), cfg)?,
            None => Gateway::bind(a.listen, cfg)?,
        };
        tls_sessions.adopt(&handed_tls);
        let metrics = gw.metrics();
        if !gw.fast_open() {
            tracing::warn!("listener without TCP Fast Open");
        }
        // A missing net.ipv4.tcp_fastopen bit 0x2 is logged by the gateway itself.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Ready once the listener serves, not ready while draining; the
        // admin endpoint stays up until the drain is over.
        let render = metrics.clone();
        let mut admin = crate::admin::Admin::start_handed(
            a.admin,
            handed_admin,
            Arc::new(move || render.render()),
        )
        .await?;
        let admin_fd = admin.take_fd();
        println!("listening {}", gw.local_addr()?);
        for sdns in gw.sdns_addrs() {
            println!("sdns {sdns}");
        }
        let provenance_refresher = verifier_policy.and_then(|(policy, dns)| {
            let dns = dns?;
            let mut rx = stop_rx.clone();
            let every = a.verifier_dns.verifier_refresh;
            Some(tokio::spawn(async move {
                // Soon after start: the lookup before serving may have failed.
                let mut wait = next_lookup(every, true);
                loop {
                    tokio::select! {
                        _ = rx.changed() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    let failed = refresh_verifiers(&dns, &policy).await;
                    wait = next_lookup(every, failed);
                }
            }))
        });
        let hup = reload::sighup();
        let hup_successor = hup.clone();
        let cert_watch: Vec<_> = certs
            .into_iter()
            .map(|(_, served, cert, key)| {
                tokio::spawn(reload::watch_certificate(
                    served,
                    cert,
                    key,
                    a.refresh,
                    hup.clone(),
                    stop_rx.clone(),
                ))
            })
            .collect();
        // Token keys from the store are re-read with the keys.
        let store_tokens = token_ring.filter(|_| a.token_key.is_none());
        let refresher = sites
            .iter()
            .any(|s| s.store.is_some())
            .then(|| -> Result<_> {
                Ok(refresh::Refresher {
                    sites,
                    rotate: a.rotate,
                    every: a.refresh,
                    schedule: TokenSchedule::new(a.token_rotation, a.token_lifetime)?,
                    store_tokens,
                    keys: shared_keys,
                    hup,
                    stop: stop_rx.clone(),
                }
                .spawn())
            })
            .transpose()?;
        // What a successor takes over: dups of the sockets this process serves.
        let offer = match &a.handover {
            Some(_) => Some(handover::Offer {
                listen: a.listen,
                accept: gw.accept_control(),
                listeners: gw.dup_listening_fds()?,
                admin: admin_fd,
                filter: replay.filter.clone(),
                sessions: tls_sessions.clone(),
            }),
            None => None,
        };
        let first_start = taken.is_none();
        if let Some(t) = taken {
            let path = replay_path.clone();
            replay = tokio::task::spawn_blocking(move || {
                handover::finish(t, &mut replay, path.as_deref()).map(|()| replay)
            })
            .await?
            .context("hand-over")?;
        }
        let mut rx = stop_rx;
        let server = tokio::spawn(gw.run(async move {
            let _ = rx.changed().await;
        }));
        let handed_rx = match (&a.handover, offer) {
            (Some(p), Some(offer)) => Some(handover::offer(p, offer, first_start)?),
            _ => None,
        };
        admin.set_ready(true);
        successor::serving(a.pid_file.as_deref());
        if let Some(inv) = invocation {
            tokio::spawn(successor::on_sighup(inv, hup_successor));
        }
        let handed_over = async {
            match handed_rx {
                Some(rx) => rx.await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let handed_over = tokio::select! {
            () = util::shutdown_signal() => false,
            true = handed_over => true,
        };
        admin.set_ready(false);
        let _ = stop_tx.send(true);
        // The successor serves the admin socket now.
        if handed_over {
            admin.stop_accepting();
        }
        server.await??;
        // Every flight this process accepted is in the filter now (after a
        // hand-over the successor holds it: a sealed filter is never saved,
        // also when a SIGTERM raced the hand-over).
        if let Some(p) = replay_path.as_ref().filter(|_| !handed_over) {
            if let Err(e) = replay_state::save(p, &replay, &tls_sessions.hand_over()) {
                tracing::warn!("saving the replay filter to {}: {e:#}", p.display());
            }
        }
        admin.stop_accepting();
        for w in cert_watch {
            let _ = w.await;
        }
        if let Some(r) = refresher {
            let _ = r.await;
        }
        if let Some(r) = provenance_refresher {
            let _ = r.await;
        }
        admin.stop().await;
        successor::stopped(a.pid_file.as_deref());
        eprint!("{}", metrics.render());
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
