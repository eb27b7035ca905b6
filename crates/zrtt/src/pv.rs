//! `zrtt pv`: provenance verifiers (crate zrtt-net, module pv; certificates
//! in zrtt-proto::provenance; docs/PROTOCOL.md §11).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use pki_types::pem::PemObject;
use zrtt_net::pv::{ProvenanceStore, PvStats};
use zrtt_proto::provenance::{IssuePolicy, VerifierSigner};

use crate::util;

#[derive(Subcommand, Debug)]
pub enum PvCommand {
    /// Generate a verifier key (Ed25519, PKCS#8 PEM, mode 0600); prints the
    /// public key that gateways trust (`zrtt gateway --verifier HEX`).
    Keygen {
        /// Where to write the private key.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Serve provenance certificates over TCP: the client's address is proven
    /// by the completed handshake before anything is read or signed.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0:4480")]
        listen: SocketAddr,
        /// Verifier key (from `zrtt pv keygen`).
        #[arg(long)]
        key: PathBuf,
        /// Duration of a first certificate for an address.
        #[arg(long, default_value = "30m", value_parser = util::parse_duration)]
        initial: Duration,
        /// Cap on the doubling of refreshed certificates.
        #[arg(long, default_value = "1d", value_parser = util::parse_duration)]
        max: Duration,
        /// Connections served at once.
        #[arg(long, default_value_t = 1024)]
        max_concurrent: usize,
    },
    /// Obtain or refresh certificates for this host's address from verifiers
    /// in parallel and store them (with a static key per local address) for
    /// `zrtt get --pv-state`.
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

/// Generate a verifier key, write it as PKCS#8 PEM (mode 0600), return its public key.
pub fn write_new_key(out: &std::path::Path) -> Result<zrtt_proto::provenance::VerifierKey> {
    let (signer, pkcs8) = VerifierSigner::generate(&ring::rand::SystemRandom::new())?;
    let text = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64_lines(&pkcs8)
    );
    util::write_atomic(out, text.as_bytes(), true)?;
    Ok(signer.key())
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

pub fn run(cmd: PvCommand) -> Result<ExitCode> {
    match cmd {
        PvCommand::Keygen { out } => {
            let k = write_new_key(&out)?;
            println!("wrote {} (mode 0600)", out.display());
            println!("verifier id: {:08x}", k.id);
            println!("public key:  {}", zrtt_proto::record::hex(&k.public));
            Ok(ExitCode::SUCCESS)
        }
        PvCommand::Serve {
            listen,
            key,
            initial,
            max,
            max_concurrent,
        } => {
            let der = pki_types::PrivatePkcs8KeyDer::from_pem_file(&key)
                .with_context(|| format!("reading {}", key.display()))?;
            let signer = VerifierSigner::from_pkcs8(der.secret_pkcs8_der())?;
            let policy = IssuePolicy {
                initial_secs: secs(initial),
                max_secs: secs(max),
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind(listen)
                    .await
                    .with_context(|| format!("binding {listen}"))?;
                println!("listening {}", l.local_addr()?);
                println!(
                    "verifier {:08x} {}",
                    signer.key().id,
                    zrtt_proto::record::hex(&signer.key().public)
                );
                let stats = Arc::new(PvStats::default());
                zrtt_net::pv::serve(
                    l,
                    Arc::new(signer),
                    policy,
                    zrtt_net::client::system_clock,
                    stats.clone(),
                    max_concurrent,
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await;
                eprintln!(
                    "zrtt pv: issued {} (refreshed {}), bad requests {}",
                    stats.issued.load(std::sync::atomic::Ordering::Relaxed),
                    stats.refreshed.load(std::sync::atomic::Ordering::Relaxed),
                    stats
                        .bad_requests
                        .load(std::sync::atomic::Ordering::Relaxed)
                );
                anyhow::Ok(())
            })?;
            Ok(ExitCode::SUCCESS)
        }
        PvCommand::Fetch {
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

fn base64_lines(der: &[u8]) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    b.as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}
