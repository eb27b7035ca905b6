//! Where the gateway's keys come from: key files or key stores, per site,
//! merged into one zrtt configuration; and the address-token keys.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zeroize::Zeroizing;
use zrtt_dns::token_keys::TokenSchedule;
use zrtt_dns::KeyStore;
use zrtt_proto::admission::{TokenKey, TokenKeys};
use zrtt_proto::handshake::{ServerConfig, ServerKey};

use super::GatewayArgs;
use crate::{keys, util};

/// A `--token-key` file: 32 bytes, raw or as 64 hex digits, readable by
/// its owner only (else refused, as the key store refuses its files).
pub(super) fn read_token_key(path: &Path, lifetime: Duration) -> Result<TokenKey> {
    let data = zrtt_dns::keyfile::read_private(path)?;
    let text = std::str::from_utf8(&data).ok().map(str::trim);
    let bytes = match text.and_then(zrtt_proto::record::unhex) {
        Some(b) => Zeroizing::new(b),
        None => Zeroizing::new(data.to_vec()),
    };
    let secret: Zeroizing<[u8; 32]> = Zeroizing::new(
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| anyhow::anyhow!("{}: need 32 bytes (raw or hex)", path.display()))?,
    );
    Ok(TokenKey::new(&secret, lifetime))
}

/// Where the token keys come from: --token-key, the key store, or a key
/// made now; `None` with --no-tokens.
pub(super) fn token_keys(a: &GatewayArgs, store: Option<&KeyStore>) -> Result<Option<TokenKeys>> {
    if a.no_tokens {
        return Ok(None);
    }
    if let Some(p) = &a.token_key {
        return Ok(Some(TokenKeys::single(read_token_key(
            p,
            a.token_lifetime,
        )?)));
    }
    let rng = ring::rand::SystemRandom::new();
    if let Some(ks) = store {
        let schedule = TokenSchedule::new(a.token_rotation, a.token_lifetime)?;
        return Ok(Some(store_token_keys(ks.dir(), schedule)?));
    }
    let mut secret = Zeroizing::new([0u8; 32]);
    ring::rand::SecureRandom::fill(&rng, &mut *secret)
        .map_err(|_| anyhow::anyhow!("random number generator failed"))?;
    if a.store.replay_store.is_some() {
        // The fleet's TLS sessions are sealed under a key derived from the
        // token key: one made here opens none of the other gateways'.
        tracing::warn!(
            "token key made at start with --replay-store: TLS sessions sealed by the other gateways (and by this one after a restart) do not open here (full handshakes); give every gateway the same --token-key or --keystore"
        );
    } else {
        tracing::info!(
            "address tokens sealed with a key made at start: they do not outlive this process (--token-key or --keystore to keep them)"
        );
    }
    Ok(Some(TokenKeys::single(TokenKey::new(
        &secret,
        a.token_lifetime,
    ))))
}

/// The key store's token keys in force now (creating the ones due).
pub(super) fn store_token_keys(dir: &Path, schedule: TokenSchedule) -> Result<TokenKeys> {
    Ok(zrtt_dns::token_keys::token_keys(
        dir,
        schedule,
        util::now(),
        &ring::rand::SystemRandom::new(),
    )?)
}

pub(super) fn server_keys(
    key_files: &[PathBuf],
    record_files: &[PathBuf],
) -> Result<Vec<ServerKey>> {
    let mut records = Vec::new();
    for p in record_files {
        records.extend(keys::load_records(p)?);
    }
    let mut out = Vec::new();
    for p in key_files {
        let key = keys::read_key(p)?;
        let Some(rec) = records.iter().find(|r| &r.body.public_key == key.public()) else {
            bail!("{}: no --record file holds this key's record", p.display());
        };
        out.push(ServerKey::new(rec.clone(), key)?);
    }
    Ok(out)
}

/// Keys from a key store at `now`, rotating first when asked.
pub(super) fn keystore_keys(ks: &mut KeyStore, rotate: bool) -> Result<Vec<ServerKey>> {
    ks.reload_if_changed()?;
    if rotate {
        let report = ks.rotate(util::now(), &ring::rand::SystemRandom::new())?;
        if report.changed() {
            tracing::info!("{report}");
        }
    }
    let keys = ks.server_keys(util::now());
    if keys.is_empty() {
        tracing::warn!(
            "{} holds no live key (zrtt keys rotate); only TLS is served",
            ks.dir().display()
        );
    }
    Ok(keys)
}

/// One site as served: its names, backend, keys (from files, fixed, or
/// from its key store, re-read) and certificate files.
pub(super) struct LoadedSite {
    pub(super) names: Vec<String>,
    pub(super) backends: Vec<zrtt_net::gateway::Backend>,
    pub(super) store: Option<KeyStore>,
    file_keys: Vec<ServerKey>,
    pub(super) cert: PathBuf,
    pub(super) cert_key: PathBuf,
}

impl LoadedSite {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load(
        keystore: Option<&Path>,
        key_files: &[PathBuf],
        record_files: &[PathBuf],
        cert: Option<&Path>,
        cert_key: Option<&Path>,
        backends: Vec<zrtt_net::gateway::Backend>,
        aliases: &[String],
        rotate: bool,
    ) -> Result<Self> {
        let mut site = match keystore {
            Some(dir) => {
                let mut ks = KeyStore::open(dir)?;
                keystore_keys(&mut ks, rotate)?;
                Self {
                    names: vec![ks.name().to_owned()],
                    backends,
                    cert: ks.cert_pem_path(),
                    cert_key: ks.cert_key_path(),
                    store: Some(ks),
                    file_keys: Vec::new(),
                }
            }
            None => {
                let file_keys = server_keys(key_files, record_files)?;
                let mut names: Vec<String> = Vec::new();
                for k in &file_keys {
                    if !names.contains(&k.record.body.name) {
                        names.push(k.record.body.name.clone());
                    }
                }
                Self {
                    names,
                    backends,
                    store: None,
                    file_keys,
                    cert: cert.map(Path::to_path_buf).unwrap_or_default(),
                    cert_key: cert_key.map(Path::to_path_buf).unwrap_or_default(),
                }
            }
        };
        for a in aliases {
            if !site.names.contains(a) {
                site.names.push(a.clone());
            }
        }
        if site.names.is_empty() {
            bail!("a site without keys needs alias=NAME (the names it serves)");
        }
        Ok(site)
    }

    /// The site's keys now (its key store re-read, rotated when asked).
    fn keys(&mut self, rotate: bool) -> Result<Vec<ServerKey>> {
        match &mut self.store {
            Some(ks) => keystore_keys(ks, rotate),
            None => Ok(self.file_keys.clone()),
        }
    }
}

/// Every site's keys in one zrtt configuration (key ids must differ
/// across sites: a flight's key id selects its site).
pub(super) fn all_keys(sites: &mut [LoadedSite], rotate: bool) -> Result<ServerConfig> {
    let mut keys = Vec::new();
    for s in sites.iter_mut() {
        keys.extend(s.keys(rotate)?);
    }
    ServerConfig::new(keys).context("the sites' keys")
}
