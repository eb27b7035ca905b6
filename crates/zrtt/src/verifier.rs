//! `zrtt verifier`: provenance verifiers (crate zrtt-net, module verifier; certificates
//! in zrtt-proto::provenance; docs/PROTOCOL.md §11), and verifier key stores
//! (zrtt-dns::verifier_store; docs/PROVENANCE.md): keys rotated with overlap and
//! published in DNS by `zrtt dns --verifier-keystore`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use pki_types::pem::PemObject;
use zrtt_dns::{VerifierPolicy, VerifierStore};
use zrtt_net::verifier::{Issuer, ProvenanceStore, SharedIssuer, VerifierMetrics};
use zrtt_proto::provenance::{IssuePolicy, VerifierSigner};

use crate::util;

#[derive(Subcommand, Debug)]
pub enum VerifierCommand {
    /// Generate a verifier key (Ed25519, PKCS#8 PEM, mode 0600); prints the
    /// public key that gateways trust (`zrtt gateway --verifier HEX`).
    Keygen {
        /// Where to write the private key.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Create a verifier key store: the verifier's keys, rotated with
    /// overlap and published in DNS (`zrtt dns --verifier-keystore`) as
    /// records signed by the certificate key of the verifier's name. Creates
    /// no key yet (`zrtt verifier rotate`, or `zrtt verifier serve --rotate`).
    Init(VerifierInitArgs),
    /// Rotate verifier key stores now: create due keys, delete expired
    /// private keys. Idempotent; run from a timer if no server rotates.
    Rotate {
        /// Verifier key store directories.
        #[arg(long = "keystore", value_name = "DIR", required = true)]
        keystores: Vec<PathBuf>,
        /// Rotate as of this time instead of now (unix seconds or RFC 3339).
        #[arg(long, value_parser = util::parse_time)]
        at: Option<u64>,
    },
    /// Show a verifier key store's schedule: which key signs, which are
    /// published, when the next is due.
    Status {
        /// Verifier key store directory.
        #[arg(long, value_name = "DIR")]
        keystore: PathBuf,
        /// As of this time instead of now (unix seconds or RFC 3339).
        #[arg(long, value_parser = util::parse_time)]
        at: Option<u64>,
    },
    /// Print zone-file lines for a verifier key store's published records
    /// (TXT and TLSA at `_zrttpv.<name>`), for DNS servers other than `zrtt dns`.
    Records {
        /// Verifier key store directory.
        #[arg(long, value_name = "DIR")]
        keystore: PathBuf,
    },
    /// Serve provenance certificates over TCP: the client's address is proven
    /// by the completed handshake before anything is read or signed.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], zrtt_net::verifier::VERIFIER_PORT)))]
        listen: SocketAddr,
        /// Verifier key (from `zrtt verifier keygen`); gateways trust it with
        /// `--verifier HEX`.
        #[arg(
            long,
            required_unless_present = "keystore",
            conflicts_with = "keystore"
        )]
        key: Option<PathBuf>,
        /// Verifier key store (from `zrtt verifier init`): sign with its current
        /// key, accept its other keys' certificates for refresh, and re-read
        /// it every --refresh, so rotations (by `zrtt dns`, `zrtt verifier rotate`
        /// or --rotate) take effect without a restart.
        #[arg(long, value_name = "DIR")]
        keystore: Option<PathBuf>,
        /// With --keystore: create and retire keys on schedule in this process too.
        #[arg(long, requires = "keystore")]
        rotate: bool,
        /// With --keystore: how often to re-read (and with --rotate, rotate) it.
        #[arg(long, default_value = "10s", value_parser = util::parse_duration)]
        refresh: Duration,
        /// Duration of a first certificate for an address.
        #[arg(long, default_value = "30m", value_parser = util::parse_duration)]
        initial: Duration,
        /// Cap on the doubling of refreshed certificates (with --keystore, at
        /// most the store's max_certificate).
        #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
        max: Duration,
        /// Connections served at once.
        #[arg(long, default_value_t = 1024)]
        max_concurrent: usize,
        /// Admin endpoint on this address, e.g. 127.0.0.1:9154: /metrics
        /// (OpenMetrics: requests, issued, refused by reason, signing
        /// latency), /healthz, /readyz (200 while a key can sign). Prints
        /// `admin ADDR`.
        #[arg(long)]
        admin: Option<SocketAddr>,
        /// TOML config file: its `[verifier]` section holds these flags by their
        /// names (docs/GATEWAY.md "Configuration file"); flags given here
        /// replace its single values and add to its lists.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Obtain or refresh certificates for this host's address from verifiers
    /// in parallel and store them (with a static key per local address) for
    /// `zrtt get --provenance-state`.
    Fetch {
        /// Verifier addresses; repeat for a quorum.
        #[arg(long = "verifier", required = true)]
        verifiers: Vec<SocketAddr>,
        /// State file (created if missing; mode 0600).
        #[arg(long)]
        state: PathBuf,
        /// The local address the certificates are for; default: the one used towards the first verifier.
        #[arg(long)]
        local: Option<std::net::IpAddr>,
        /// Requested duration.
        #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
        duration: Duration,
        /// Per-verifier timeout.
        #[arg(long, default_value = "5s", value_parser = util::parse_duration)]
        timeout: Duration,
    },
}

#[derive(clap::Args, Debug)]
pub struct VerifierInitArgs {
    /// Directory to create (mode 0700).
    #[arg(long, value_name = "DIR")]
    keystore: PathBuf,
    /// The verifier's DNS name: its records are published at
    /// `_zrttpv.<name>`, and gateways name it with `--verifier-name`.
    #[arg(long)]
    name: String,
    /// Certificate (PEM) covering the name; its key signs the records.
    #[arg(long)]
    cert: PathBuf,
    /// The certificate's PKCS#8 private key (Ed25519, ECDSA P-256 or P-384, or RSA 2048-4096).
    #[arg(long)]
    cert_key: PathBuf,
    /// S: how long each key signs before the next takes over.
    #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
    rotation: Duration,
    /// P: how long a new key is published before it signs (at least 2 x
    /// --ttl; gateways must refresh within P - TTL).
    #[arg(long, default_value = "1h", value_parser = util::parse_duration)]
    prepublish: Duration,
    /// C: the longest certificate the verifier issues (`zrtt verifier serve --max`);
    /// a key stays published C (+ 5 min) after it stops signing.
    #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
    max_certificate: Duration,
    /// T: TTL of the DNS records carrying the keys.
    #[arg(long, default_value = "300s", value_parser = util::parse_duration)]
    ttl: Duration,
}

/// Generate a verifier key, write it as PKCS#8 PEM (mode 0600), return its public key.
pub fn write_new_key(out: &std::path::Path) -> Result<zrtt_proto::provenance::VerifierKey> {
    let (signer, pkcs8) = VerifierSigner::generate(&ring::rand::SystemRandom::new())?;
    let text = zeroize::Zeroizing::new(format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64_lines(&pkcs8)
    ));
    util::write_atomic(out, text.as_bytes(), true)?;
    Ok(signer.key())
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

pub fn run(cmd: VerifierCommand) -> Result<ExitCode> {
    match cmd {
        VerifierCommand::Keygen { out } => {
            let k = write_new_key(&out)?;
            println!("wrote {} (mode 0600)", out.display());
            println!("verifier id: {:08x}", k.id);
            println!("public key:  {}", zrtt_proto::record::hex(&k.public));
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Init(a) => {
            let policy = VerifierPolicy {
                rotation: a.rotation,
                prepublish: a.prepublish,
                max_certificate: a.max_certificate,
                record_ttl: a.ttl,
            };
            let st = VerifierStore::init(&a.keystore, &a.name, &a.cert, &a.cert_key, policy)?;
            println!(
                "created verifier key store for {} at {} (no key yet: zrtt verifier rotate --keystore {})",
                st.name(),
                a.keystore.display(),
                a.keystore.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Rotate { keystores, at } => {
            let now = at.map_or_else(util::now, zrtt_proto::UnixTime::from_secs);
            let rng = ring::rand::SystemRandom::new();
            for dir in &keystores {
                let mut st = VerifierStore::open(dir)?;
                let r = st.rotate(now, &rng)?;
                println!("{} ({}): {r}", st.name(), dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Status { keystore, at } => {
            let now = at.map_or_else(util::now, zrtt_proto::UnixTime::from_secs);
            let st = VerifierStore::open(&keystore)?;
            print!("{}", st.status(now));
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Records { keystore } => {
            let now = util::now();
            let st = VerifierStore::open(&keystore)?;
            let recs = st.published_records(now);
            if recs.is_empty() {
                bail!(
                    "{}: no published key (zrtt verifier rotate --keystore {})",
                    keystore.display(),
                    keystore.display()
                );
            }
            print!(
                "{}",
                zrtt_dns::records::verifier_zone_fragment(
                    st.name(),
                    &recs,
                    st.cert_der(),
                    st.record_ttl(now)
                )
            );
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Serve {
            listen,
            key,
            keystore,
            rotate,
            refresh,
            initial,
            max,
            max_concurrent,
            admin,
            config: _,
        } => {
            let mut policy = IssuePolicy {
                initial_secs: secs(initial),
                max_secs: secs(max),
            };
            let mut banner = None;
            let (issuer, store): (Arc<dyn Issuer>, _) = match (&key, &keystore) {
                (Some(key), _) => {
                    let pem = zrtt_dns::keyfile::read_private(key)?;
                    let der = pki_types::PrivatePkcs8KeyDer::from_pem_slice(&pem)
                        .with_context(|| format!("reading {}", key.display()))?;
                    let signer = VerifierSigner::from_pkcs8(der.secret_pkcs8_der())?;
                    banner = Some(format!(
                        "verifier {:08x} {}",
                        signer.key().id,
                        zrtt_proto::record::hex(&signer.key().public)
                    ));
                    (Arc::new(signer), None)
                }
                (None, Some(dir)) => {
                    let mut st = VerifierStore::open(dir)?;
                    policy.max_secs = policy.max_secs.min(secs(st.policy().max_certificate));
                    let shared = Arc::new(SharedIssuer::new(None));
                    store_tick(&mut st, rotate, &shared)?;
                    match shared.get() {
                        Some(k) => {
                            banner = Some(format!(
                                "verifier {:08x} {} ({})",
                                k.current().id,
                                zrtt_proto::record::hex(&k.current().public),
                                st.name()
                            ))
                        }
                        None => tracing::warn!(
                            "{} has no key that can sign (zrtt verifier rotate); refusing until it has",
                            dir.display()
                        ),
                    }
                    (shared.clone(), Some((st, shared)))
                }
                (None, None) => bail!("give --key FILE or --keystore DIR"),
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let metrics = Arc::new(VerifierMetrics::default());
                let render = metrics.clone();
                let admin = crate::admin::Admin::start(
                    admin,
                    Arc::new(move || zrtt_net::admin::encode(&render.registry())),
                )
                .await?;
                let l = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding {listen}"))?;
                println!("listening {}", l.local_addr()?);
                if let Some(b) = banner {
                    println!("{b}");
                }
                // A verifier key store is re-read (and rotated) in the
                // background; the signing keys in force are replaced each time.
                // Ready while a key can sign: at once with --key, with a key
                // store while it has a current key.
                admin.set_ready(store.as_ref().is_none_or(|(_, s)| s.get().is_some()));
                if let Some((st, shared)) = store {
                    let st = Arc::new(std::sync::Mutex::new(st));
                    let ready = admin.readiness();
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(refresh);
                        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            let (st, keys) = (st.clone(), shared.clone());
                            let r = tokio::task::spawn_blocking(move || {
                                let mut st = st.lock().unwrap_or_else(|p| p.into_inner());
                                store_tick(&mut st, rotate, &keys)
                            })
                            .await;
                            match r {
                                Ok(Ok(())) => {}
                                Ok(Err(e)) => tracing::error!("verifier key store: {e:#}"),
                                Err(e) => tracing::error!("verifier key store task: {e}"),
                            }
                            ready.send_replace(shared.get().is_some());
                        }
                    });
                }
                zrtt_net::verifier::serve(
                    l,
                    issuer,
                    policy,
                    zrtt_net::client::system_clock,
                    metrics.clone(),
                    max_concurrent,
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await;
                admin.stop().await;
                tracing::info!(
                    "issued {} (refreshed {}), refused {}",
                    metrics.issued_total(),
                    metrics.refreshed_total(),
                    metrics.refused_total()
                );
                anyhow::Ok(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        VerifierCommand::Fetch {
            verifiers,
            state,
            local,
            duration,
            timeout,
        } => {
            let local = match local {
                Some(ip) => ip,
                None => {
                    let s = std::net::UdpSocket::bind(("0.0.0.0", 0))?;
                    s.connect(verifiers[0])?;
                    s.local_addr()?.ip()
                }
            };
            let store = ProvenanceStore::load(&state)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let report = rt.block_on(store.refresh(
                local,
                &verifiers,
                secs(duration),
                timeout,
                &ring::rand::SystemRandom::new(),
            ))?;
            let mut ok = 0;
            for (v, r) in &report {
                match r {
                    Ok(d) => {
                        ok += 1;
                        println!("{v}: certificate for {local}, valid {d} s");
                    }
                    Err(e) => println!("{v}: failed: {e}"),
                }
            }
            store.save(&state)?;
            if ok == 0 {
                bail!("no verifier issued a certificate");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Re-read the store (rotating it first when asked) and put its signing
/// keys at `now` in force; says so when the current key changes. On error
/// the keys in force stay (until they can sign no more).
fn store_tick(st: &mut VerifierStore, rotate: bool, shared: &SharedIssuer) -> Result<()> {
    let now = util::now();
    st.reload_if_changed()?;
    if rotate {
        let r = st.rotate(now, &ring::rand::SystemRandom::new())?;
        if r.changed() {
            tracing::info!("{}: {r}", st.name());
        }
    }
    let before = shared.get().map(|k| k.current());
    let keys = st.signing_keys(now);
    let after = keys.as_ref().map(|k| k.current());
    if before.is_some() && before != after {
        match after {
            Some(k) => tracing::info!("{}: now signing with {:08x}", st.name(), k.id),
            None => tracing::warn!(
                "{}: no key can sign; refusing certificates (zrtt verifier rotate)",
                st.name()
            ),
        }
    }
    shared.set(keys);
    Ok(())
}

fn base64_lines(der: &[u8]) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    b.as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}
