//! The key store: a directory holding the domain certificate and its key,
//! the rotation policy, and the semi-static keys with their signed records.
//! `zrtt dns`, `zrtt gateway` and `zrtt keys rotate` share it.
//!
//! ```text
//! <dir>/cert.pem                 the domain certificate (signs records; TLS fallback)
//! <dir>/cert.key                 its PKCS#8 private key, mode 0600
//! <dir>/keystore.toml            name and policy (every policy field optional)
//! <dir>/keys/<keyid>.key         X25519 private key (PEM, mode 0600)
//! <dir>/keys/<keyid>.record      the signed key record (binary, PROTOCOL.md §2)
//! ```
//!
//! Rotation (docs/DNS.md has the timeline): with lifetime `L`, TTL `T` and
//! rotation period `R <= L - 4T`, key *i* is created at `p_i` with
//! `not_before = p_i`, `not_after = p_i + L`; it is published while
//! `p_i <= now < not_after - 2T`; its private key is deleted at `not_after`.
//! Key *i+1* is created at `p_i + R`, so it is published at least `2T` before
//! key *i* stops being published, and key *i* stays usable for `2T` after
//! that (HTTPCrypt's rule).
//!
//! Time is always passed in: the store never reads a clock.

use core::fmt;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::handshake::ServerKey;
use zrtt_proto::record::{
    self, Aead, KeyRecord, RecordBody, RecordFlags, RecordSigner, MAX_RECORDS_PER_LIST,
};
use zrtt_proto::{RecordError, UnixTime};

use crate::{fmt_time, fsutil, keyfile};

/// Certificate file name in a key store.
pub const CERT_FILE: &str = "cert.pem";
/// Certificate key file name in a key store.
pub const CERT_KEY_FILE: &str = "cert.key";
/// Policy file name in a key store.
pub const CONFIG_FILE: &str = "keystore.toml";
/// Directory of semi-static keys in a key store.
pub const KEYS_DIR: &str = "keys";
pub(crate) const LOCK_FILE: &str = ".rotate.lock";

/// Errors of the key store; each names the file it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyStoreError {
    /// A file could not be read, written or removed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A file exists but its contents are wrong.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A stored key record does not decode or does not match the store.
    #[error("{path}: bad key record: {error}")]
    BadRecord {
        /// The record file.
        path: PathBuf,
        /// Why it was refused.
        error: RecordError,
    },
    /// A private file others can read or write.
    #[error("{path}: mode {mode:04o} exposes a private key; run `chmod 600 {path}`")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// keystore.toml does not parse or holds an invalid policy.
    #[error("{path}: {reason}")]
    Config {
        /// keystore.toml (or the caller's config file).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A rotation policy that breaks the rules (for example `R > L - 4T`).
    #[error("invalid rotation policy: {0}")]
    Policy(String),
    /// Two keys with the same key id.
    #[error("{path}: duplicate key id {key_id:08x}")]
    DuplicateKeyId {
        /// The second file holding the id.
        path: PathBuf,
        /// The id.
        key_id: u32,
    },
    /// `init` on a directory that already holds a key store.
    #[error("{0}: a key store already exists here")]
    AlreadyExists(PathBuf),
    /// The certificate key cannot sign records the certificate verifies, or
    /// the certificate does not cover the name.
    #[error("{path}: {reason}")]
    Certificate {
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The random number generator failed.
    #[error("random number generator failed")]
    Rng,
}

impl KeyStoreError {
    pub(crate) fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            error,
        }
    }

    pub(crate) fn bad_file(path: &Path, reason: impl Into<String>) -> Self {
        Self::BadFile {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Randomness for rotation: new X25519 keys (zrtt's [`SecureRandom`]) and
/// ECDSA signatures (ring's). `ring::rand::SystemRandom` is both.
///
/// [`SecureRandom`]: zrtt_proto::crypto::SecureRandom
pub trait KeyStoreRandom: Send + Sync {
    /// As zrtt's randomness seam.
    fn zrtt(&self) -> &dyn zrtt_proto::crypto::SecureRandom;
    /// As ring's randomness.
    fn ring(&self) -> &dyn ring::rand::SecureRandom;
}

impl<T> KeyStoreRandom for T
where
    T: zrtt_proto::crypto::SecureRandom + ring::rand::SecureRandom + Send + Sync,
{
    fn zrtt(&self) -> &dyn zrtt_proto::crypto::SecureRandom {
        self
    }
    fn ring(&self) -> &dyn ring::rand::SecureRandom {
        self
    }
}

/// The rotation policy and the fields every new record gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `L`: validity of each key (default one hour, as ZTLS advises).
    pub lifetime: Duration,
    /// `T`: the TTL of the DNS records carrying keys (default 300 s).
    pub record_ttl: Duration,
    /// `R`: time between two new keys; `None` means `L - 4T`. Must satisfy
    /// `0 < R <= L - 4T`.
    pub rotation_period: Option<Duration>,
    /// Largest first-flight request accepted, bytes.
    pub max_early_data_bytes: u32,
    /// AEADs offered, in preference order (1 or 2).
    pub aeads: Vec<Aead>,
    /// Record flags.
    pub flags: RecordFlags,
    /// Provenance certificates needed for an answer before the TCP handshake.
    pub provenance_quorum: u8,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            lifetime: Duration::from_secs(3600),
            record_ttl: Duration::from_secs(300),
            rotation_period: None,
            max_early_data_bytes: 16384,
            aeads: vec![Aead::ChaChaPoly, Aead::AesGcm],
            flags: RecordFlags::default(),
            provenance_quorum: 0,
        }
    }
}

impl Policy {
    /// `R`, the effective rotation period.
    pub fn rotation(&self) -> Duration {
        self.rotation_period.unwrap_or_else(|| {
            self.lifetime
                .saturating_sub(self.record_ttl.saturating_mul(4))
        })
    }

    /// Check the rules: `T >= 1 s`, `L > 4T`, `0 < R <= L - 4T`, `L <= 7 days`,
    /// 1 or 2 distinct AEADs.
    pub fn validate(&self) -> Result<(), KeyStoreError> {
        let l = self.lifetime.as_secs();
        let t = self.record_ttl.as_secs();
        let bad = |s: String| Err(KeyStoreError::Policy(s));
        if t == 0 {
            return bad("ttl must be at least 1 s".into());
        }
        if l > record::MAX_RECORD_LIFETIME_SECS {
            return bad(format!(
                "lifetime {l} s is over the {} s records may have",
                record::MAX_RECORD_LIFETIME_SECS
            ));
        }
        if l <= 4 * t {
            return bad(format!(
                "lifetime {l} s must exceed 4 x ttl = {} s (publish 2 TTLs ahead, keep 2 TTLs after)",
                4 * t
            ));
        }
        let r = self.rotation().as_secs();
        if r == 0 || r > l - 4 * t {
            return bad(format!(
                "rotation period {r} s must be in 1..={} s (lifetime - 4 x ttl)",
                l - 4 * t
            ));
        }
        if self.aeads.is_empty() || self.aeads.len() > 2 {
            return bad("aeads must list 1 or 2 algorithms".into());
        }
        if self.aeads.len() == 2 && self.aeads[0] == self.aeads[1] {
            return bad("aeads lists the same algorithm twice".into());
        }
        Ok(())
    }

    fn to_toml(&self, name: &str) -> String {
        let aeads: Vec<String> = self
            .aeads
            .iter()
            .map(|a| format!("\"{}\"", a.name()))
            .collect();
        let mut flags = Vec::new();
        if self.flags.client_auth_required() {
            flags.push("\"client-auth\"");
        }
        if self.flags.issues_tokens() {
            flags.push("\"tokens\"");
        }
        let rotation = match self.rotation_period {
            Some(r) => format!("rotation = {}\n", r.as_secs()),
            None => format!(
                "# rotation = {}   # default: lifetime - 4 x ttl\n",
                self.rotation().as_secs()
            ),
        };
        format!(
            "# zrtt key store (docs/DNS.md). Durations: seconds or \"90s\", \"30m\", \"1h\".\n\
             name = \"{name}\"\n\
             lifetime = {}\n\
             ttl = {}\n\
             {rotation}\
             max_early_data = {}\n\
             aeads = [{}]\n\
             flags = [{}]\n\
             quorum = {}\n",
            self.lifetime.as_secs(),
            self.record_ttl.as_secs(),
            self.max_early_data_bytes,
            aeads.join(", "),
            flags.join(", "),
            self.provenance_quorum,
        )
    }
}

/// A duration in a config file: seconds, or text like `90s`, `30m`, `1h`, `2d`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DurationSpec {
    /// Whole seconds.
    Secs(u64),
    /// With a unit suffix.
    Text(String),
}

impl DurationSpec {
    /// The duration, or why it does not parse.
    pub fn to_duration(&self) -> Result<Duration, String> {
        match self {
            Self::Secs(s) => Ok(Duration::from_secs(*s)),
            Self::Text(s) => parse_duration(s),
        }
    }
}

/// Parse `90s`, `30m`, `1h`, `2d` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1),
        Some(b'm') => (&s[..s.len() - 1], 60),
        Some(b'h') => (&s[..s.len() - 1], 3600),
        Some(b'd') => (&s[..s.len() - 1], 86400),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: use e.g. 90s, 30m, 1h, 2d"))?;
    Ok(Duration::from_secs(n.saturating_mul(mul)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: Option<String>,
    lifetime: Option<DurationSpec>,
    ttl: Option<DurationSpec>,
    rotation: Option<DurationSpec>,
    max_early_data: Option<u32>,
    aeads: Option<Vec<String>>,
    flags: Option<Vec<String>>,
    quorum: Option<u8>,
}

fn parse_config(path: &Path, text: &str) -> Result<(String, Policy), KeyStoreError> {
    let cfg = |reason: String| KeyStoreError::Config {
        path: path.to_owned(),
        reason,
    };
    let c: ConfigFile = toml::from_str(text).map_err(|e| cfg(e.to_string()))?;
    let name = c
        .name
        .ok_or_else(|| cfg("`name` (the host name the keys are for) is missing".into()))?;
    let name = record::normalize_name(&name);
    record::validate_name(&name).map_err(|e| cfg(format!("name {name:?}: {e}")))?;
    let mut p = Policy::default();
    let dur =
        |d: &DurationSpec, field: &str| d.to_duration().map_err(|e| cfg(format!("{field}: {e}")));
    if let Some(d) = &c.lifetime {
        p.lifetime = dur(d, "lifetime")?;
    }
    if let Some(d) = &c.ttl {
        p.record_ttl = dur(d, "ttl")?;
    }
    if let Some(d) = &c.rotation {
        p.rotation_period = Some(dur(d, "rotation")?);
    }
    if let Some(v) = c.max_early_data {
        p.max_early_data_bytes = v;
    }
    if let Some(list) = c.aeads {
        p.aeads = list
            .iter()
            .map(|a| parse_aead(a).ok_or_else(|| cfg(format!("aeads: unknown {a:?}"))))
            .collect::<Result<_, _>>()?;
    }
    if let Some(list) = c.flags {
        let mut bits = 0;
        for f in &list {
            bits |= match f.as_str() {
                "client-auth" => RecordFlags::CLIENT_AUTH_REQUIRED,
                "tokens" => RecordFlags::ISSUES_TOKENS,
                _ => return Err(cfg(format!("flags: unknown {f:?} (client-auth, tokens)"))),
            };
        }
        p.flags = RecordFlags::from_bits(bits).unwrap_or_default();
    }
    if let Some(q) = c.quorum {
        p.provenance_quorum = q;
    }
    p.validate().map_err(|e| cfg(e.to_string()))?;
    Ok((name, p))
}

/// An AEAD by its name in configs and the CLI.
pub fn parse_aead(s: &str) -> Option<Aead> {
    match s.to_ascii_lowercase().as_str() {
        "chacha20poly1305" | "chacha20-poly1305" | "chachapoly" => Some(Aead::ChaChaPoly),
        "aes256gcm" | "aes-256-gcm" | "aesgcm" => Some(Aead::AesGcm),
        _ => None,
    }
}

struct StoredKey {
    record: KeyRecord,
    /// `None` once the private key is deleted (or was never there).
    keypair: Option<X25519KeyPair>,
}

impl StoredKey {
    fn id(&self) -> u32 {
        self.record.body.key_id
    }
    fn not_before(&self) -> u64 {
        self.record.body.not_before
    }
    fn not_after(&self) -> u64 {
        self.record.body.not_after
    }
}

/// What changed the files a store is read from (for `reload_if_changed`).
/// Modification times and sizes of a store's files, to notice changes made
/// by another process cheaply (four `stat` calls).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Fingerprint(Vec<(Option<SystemTime>, u64)>);

impl Fingerprint {
    /// `keys/`, the policy file `config_file`, the certificate and its key.
    pub(crate) fn of(dir: &Path, config_file: &str) -> Self {
        let stat = |p: PathBuf| {
            fs::metadata(p)
                .map(|m| (m.modified().ok(), m.len()))
                .unwrap_or((None, 0))
        };
        Fingerprint(vec![
            stat(dir.join(KEYS_DIR)),
            stat(dir.join(config_file)),
            stat(dir.join(CERT_FILE)),
            stat(dir.join(CERT_KEY_FILE)),
        ])
    }
}

/// Creates a store directory (mode 0700, with `keys/`) for `name`: checks
/// that `cert_pem` and `cert_key_pem` sign records for it, copies them, and
/// writes the policy `config` to `config_file`. Refuses a directory that
/// already holds a store. Returns the normalised name.
pub(crate) fn init_store_dir(
    dir: &Path,
    config_file: &str,
    name: &str,
    cert_pem: &Path,
    cert_key_pem: &Path,
    config: impl FnOnce(&str) -> String,
) -> Result<String, KeyStoreError> {
    let config_path = dir.join(config_file);
    if config_path.exists() {
        return Err(KeyStoreError::AlreadyExists(dir.to_owned()));
    }
    let name = record::normalize_name(name);
    record::validate_name(&name).map_err(|e| KeyStoreError::Config {
        path: config_path.clone(),
        reason: format!("name {name:?}: {e}"),
    })?;
    // Check the pair before copying anything (the copy gets mode 0600
    // whatever the source's mode).
    load_signer(cert_pem, cert_key_pem, &name, false)?;
    let cert = fs::read(cert_pem).map_err(|e| KeyStoreError::io(cert_pem, e))?;
    let key = fs::read(cert_key_pem).map_err(|e| KeyStoreError::io(cert_key_pem, e))?;
    create_private_dir(dir)?;
    create_private_dir(&dir.join(KEYS_DIR))?;
    let write = |p: PathBuf, data: &[u8], private: bool| {
        fsutil::write_atomic(&p, data, private).map_err(|e| KeyStoreError::io(&p, e))
    };
    write(dir.join(CERT_FILE), &cert, false)?;
    write(dir.join(CERT_KEY_FILE), &key, true)?;
    write(config_path, config(&name).as_bytes(), false)?;
    Ok(name)
}

/// Runs `f` holding the exclusive rotation lock of the store in `dir`, so
/// that several rotators (the DNS server, a gateway or verifier, a timer)
/// can share one store.
pub(crate) fn with_rotation_lock<T>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, KeyStoreError>,
) -> Result<T, KeyStoreError> {
    let lock_path = dir.join(KEYS_DIR).join(LOCK_FILE);
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| KeyStoreError::io(&lock_path, e))?;
    lock.lock().map_err(|e| KeyStoreError::io(&lock_path, e))?;
    let result = f();
    drop(lock);
    result
}

/// `keys/<id>.<ext>` in the store `dir`.
pub(crate) fn key_file(dir: &Path, id: u32, ext: &str) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{id:08x}.{ext}"))
}

/// Files of one kind in a store's `keys/`, by id.
pub(crate) type KeyFiles = BTreeMap<u32, PathBuf>;

/// The files in a store's `keys/`: records and private keys by id (temporary
/// files and the lock skipped, anything else ignored with a warning).
pub(crate) fn list_key_files(dir: &Path) -> Result<(KeyFiles, KeyFiles), KeyStoreError> {
    let kdir = dir.join(KEYS_DIR);
    let entries = fs::read_dir(&kdir).map_err(|e| KeyStoreError::io(&kdir, e))?;
    let mut records: BTreeMap<u32, PathBuf> = BTreeMap::new();
    let mut privs: BTreeMap<u32, PathBuf> = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|e| KeyStoreError::io(&kdir, e))?;
        let path = entry.path();
        let Some(fname) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if fname.starts_with('.') {
            continue; // temporary files and the lock
        }
        let parsed = fname.split_once('.').and_then(|(stem, ext)| {
            let hex_ok = stem.len() == 8
                && stem
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            let id = u32::from_str_radix(stem, 16).ok().filter(|_| hex_ok)?;
            matches!(ext, "key" | "record").then_some((id, ext == "key"))
        });
        let Some((id, is_key)) = parsed else {
            tracing::warn!(
                "{}: ignored (not <keyid>.key or <keyid>.record)",
                path.display()
            );
            continue;
        };
        let map = if is_key { &mut privs } else { &mut records };
        if map.insert(id, path.clone()).is_some() {
            return Err(KeyStoreError::DuplicateKeyId { path, key_id: id });
        }
    }
    Ok((records, privs))
}

/// The key store (see the module docs).
pub struct KeyStore {
    dir: PathBuf,
    name: String,
    policy: Policy,
    cert_der: Vec<u8>,
    signer: RecordSigner,
    /// Sorted by not_before, then key id.
    keys: Vec<StoredKey>,
    fingerprint: Fingerprint,
}

impl fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyStore")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field(
                "keys",
                &self.keys.iter().map(StoredKey::id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// What one [`KeyStore::rotate`] call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationReport {
    /// Keys created (key ids).
    pub created: Vec<u32>,
    /// Keys whose private key was deleted because they expired.
    pub deleted_private_keys: Vec<u32>,
    /// Expired records removed (one lifetime after expiry).
    pub removed_records: Vec<u32>,
    /// Records re-signed because the certificate changed.
    pub resigned: Vec<u32>,
    /// Orphaned private keys (no record, left by an interrupted rotation) removed.
    pub removed_orphans: Vec<PathBuf>,
    /// When the next key is due, seconds since the epoch.
    pub next_rotation: u64,
}

impl RotationReport {
    /// Whether the call changed anything on disk.
    pub fn changed(&self) -> bool {
        !(self.created.is_empty()
            && self.deleted_private_keys.is_empty()
            && self.removed_records.is_empty()
            && self.resigned.is_empty()
            && self.removed_orphans.is_empty())
    }
}

impl fmt::Display for RotationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |v: &[u32]| {
            v.iter()
                .map(|k| format!("{k:08x}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.changed() {
            write!(f, "nothing to do")?;
        }
        let mut parts = Vec::new();
        if !self.created.is_empty() {
            parts.push(format!("created {}", ids(&self.created)));
        }
        if !self.deleted_private_keys.is_empty() {
            parts.push(format!(
                "deleted expired private key(s) {}",
                ids(&self.deleted_private_keys)
            ));
        }
        if !self.removed_records.is_empty() {
            parts.push(format!(
                "removed old record(s) {}",
                ids(&self.removed_records)
            ));
        }
        if !self.resigned.is_empty() {
            parts.push(format!(
                "re-signed {} for the new certificate",
                ids(&self.resigned)
            ));
        }
        if !self.removed_orphans.is_empty() {
            parts.push(format!(
                "removed {} orphaned private key(s)",
                self.removed_orphans.len()
            ));
        }
        write!(f, "{}", parts.join("; "))?;
        write!(f, "; next key due {}", fmt_time(self.next_rotation))
    }
}

/// The state of a key at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// Not valid yet (`now < not_before`).
    Pending,
    /// In DNS now.
    Published,
    /// Valid and its private key held, but no longer published: first
    /// flights from clients with cached records are still accepted.
    Retired,
    /// Past `not_after`: its private key is (or is about to be) deleted.
    Expired,
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::Published => "published",
            Self::Retired => "retired",
            Self::Expired => "expired",
        })
    }
}

/// One key's line in a [`Status`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStatus {
    /// Key id.
    pub key_id: u32,
    /// State at the status instant.
    pub state: KeyState,
    /// Start of validity.
    pub not_before: u64,
    /// End of publication (`not_after - 2T`).
    pub publish_until: u64,
    /// End of validity; the private key is deleted then.
    pub not_after: u64,
    /// Whether the private key is on disk.
    pub private_key_held: bool,
}

/// The schedule of a store at an instant; `Display` prints a table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// Host name.
    pub name: String,
    /// The instant.
    pub now: u64,
    /// Policy in force.
    pub policy: Policy,
    /// Every stored key, oldest first.
    pub keys: Vec<KeyStatus>,
    /// TTL DNS gives the key records now.
    pub record_ttl: u32,
    /// When the next key is due.
    pub next_rotation: u64,
    /// Problems worth an operator's attention.
    pub warnings: Vec<String>,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.policy;
        writeln!(f, "key store for {} at {}", self.name, fmt_time(self.now))?;
        writeln!(
            f,
            "policy: lifetime {} s, ttl {} s, rotation every {} s; records served with ttl {} s",
            p.lifetime.as_secs(),
            p.record_ttl.as_secs(),
            p.rotation().as_secs(),
            self.record_ttl
        )?;
        writeln!(
            f,
            "{:<8}  {:<9}  {:<20}  {:<20}  {:<20}  private key",
            "key id", "state", "not before", "published until", "not after"
        )?;
        for k in &self.keys {
            writeln!(
                f,
                "{:08x}  {:<9}  {:<20}  {:<20}  {:<20}  {}",
                k.key_id,
                k.state.to_string(),
                fmt_time(k.not_before),
                fmt_time(k.publish_until),
                fmt_time(k.not_after),
                if k.private_key_held {
                    "held"
                } else {
                    "deleted"
                }
            )?;
        }
        if self.keys.is_empty() {
            writeln!(f, "(no keys: run `zrtt keys rotate`)")?;
        }
        let due = if self.next_rotation <= self.now {
            "now (overdue)".to_owned()
        } else {
            format!(
                "{} (in {} s)",
                fmt_time(self.next_rotation),
                self.next_rotation - self.now
            )
        };
        writeln!(f, "next key due: {due}")?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

impl KeyStore {
    /// Open an existing store, checking every file: the policy, the
    /// certificate and its key (mode 0600, must sign records the certificate
    /// verifies), every key (mode 0600) and record (decodes, matches its file
    /// name, the store's name and its private key). Errors name the file.
    ///
    /// A private key without its record (left by an interrupted rotation) is
    /// ignored here and removed by the next [`Self::rotate`].
    pub fn open(dir: &Path) -> Result<Self, KeyStoreError> {
        let config_path = dir.join(CONFIG_FILE);
        let text =
            fs::read_to_string(&config_path).map_err(|e| KeyStoreError::io(&config_path, e))?;
        let (name, policy) = parse_config(&config_path, &text)?;
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(CERT_KEY_FILE);
        let (cert_der, signer) = load_signer(&cert_path, &key_path, &name, true)?;
        let mut store = Self {
            dir: dir.to_owned(),
            name,
            policy,
            cert_der,
            signer,
            keys: Vec::new(),
            fingerprint: Fingerprint::default(),
        };
        store.keys = store.scan_keys()?.0;
        store.fingerprint = store.fingerprint();
        Ok(store)
    }

    /// Create a store in `dir` (created if missing, mode 0700) for `name`,
    /// copying the certificate and its key and writing the policy. Creates no
    /// key yet: call [`Self::rotate`]. Refuses a directory that already holds
    /// a store.
    pub fn init(
        dir: &Path,
        name: &str,
        cert_pem: &Path,
        cert_key_pem: &Path,
        policy: Policy,
    ) -> Result<Self, KeyStoreError> {
        policy.validate()?;
        init_store_dir(dir, CONFIG_FILE, name, cert_pem, cert_key_pem, |n| {
            policy.to_toml(n)
        })?;
        Self::open(dir)
    }

    /// Bring the store up to date at `now`, idempotently: delete the private
    /// keys of expired keys (and their records one lifetime later), re-sign
    /// records if the certificate changed, and create a key when the newest
    /// one is `R` old (or when no valid key is held). Takes an exclusive lock
    /// on the directory and re-reads it first, so several rotators (the DNS
    /// server, the gateway, a timer) can share one store.
    pub fn rotate(
        &mut self,
        now: UnixTime,
        rng: &dyn KeyStoreRandom,
    ) -> Result<RotationReport, KeyStoreError> {
        let dir = self.dir.clone();
        with_rotation_lock(&dir, || self.rotate_locked(now, rng))
    }

    fn rotate_locked(
        &mut self,
        now: UnixTime,
        rng: &dyn KeyStoreRandom,
    ) -> Result<RotationReport, KeyStoreError> {
        // Another process may have rotated: start from what is on disk.
        let config_path = self.dir.join(CONFIG_FILE);
        let text =
            fs::read_to_string(&config_path).map_err(|e| KeyStoreError::io(&config_path, e))?;
        (self.name, self.policy) = parse_config(&config_path, &text)?;
        let (cert_der, signer) = load_signer(
            &self.dir.join(CERT_FILE),
            &self.dir.join(CERT_KEY_FILE),
            &self.name,
            true,
        )?;
        self.cert_der = cert_der;
        self.signer = signer;
        let (keys, orphans) = self.scan_keys()?;
        self.keys = keys;

        let secs = now.as_secs();
        let lifetime = self.policy.lifetime.as_secs();
        let mut report = RotationReport::default();
        for path in orphans {
            fsutil::shred(&path).map_err(|e| KeyStoreError::io(&path, e))?;
            report.removed_orphans.push(path);
        }

        // 1. Expired keys lose their private key; their record goes later.
        let mut kept = Vec::with_capacity(self.keys.len());
        for mut k in std::mem::take(&mut self.keys) {
            let id = k.id();
            if secs >= k.not_after() && k.keypair.is_some() {
                let p = self.key_path(id);
                fsutil::shred(&p).map_err(|e| KeyStoreError::io(&p, e))?;
                k.keypair = None;
                report.deleted_private_keys.push(id);
            }
            if secs >= k.not_after().saturating_add(lifetime) {
                let p = self.record_path(id);
                fs::remove_file(&p).map_err(|e| KeyStoreError::io(&p, e))?;
                report.removed_records.push(id);
                continue;
            }
            kept.push(k);
        }
        self.keys = kept;

        // 2. Records signed for an older certificate are re-signed.
        let cert_hash = record::sha256(&self.cert_der);
        for i in 0..self.keys.len() {
            let k = &self.keys[i];
            if k.record.body.cert_sha256 != cert_hash && k.keypair.is_some() && secs < k.not_after()
            {
                let mut body = k.record.body.clone();
                body.cert_sha256 = cert_hash;
                let rec = self.sign_checked(body, rng)?;
                let p = self.record_path(rec.body.key_id);
                fsutil::write_atomic(&p, &rec.encode(), false)
                    .map_err(|e| KeyStoreError::io(&p, e))?;
                report.resigned.push(rec.body.key_id);
                self.keys[i].record = rec;
            }
        }

        // 3. A new key when the newest is R old, or when none is usable.
        let usable = self
            .keys
            .iter()
            .any(|k| k.keypair.is_some() && secs < k.not_after());
        let due = self.next_rotation();
        if !usable || secs >= due {
            let id = self.create_key(secs, rng)?;
            report.created.push(id);
        }
        self.fingerprint = self.fingerprint();
        report.next_rotation = self.next_rotation();
        Ok(report)
    }

    fn sign_checked(
        &self,
        body: RecordBody,
        rng: &dyn KeyStoreRandom,
    ) -> Result<KeyRecord, KeyStoreError> {
        let cert_path = self.dir.join(CERT_FILE);
        let rec = body
            .sign(&self.signer, rng.ring())
            .map_err(|e| KeyStoreError::Certificate {
                path: self.dir.join(CERT_KEY_FILE),
                reason: format!("cannot sign: {e}"),
            })?;
        rec.verify(
            &self.cert_der,
            &self.name,
            UnixTime::from_secs(rec.body.not_before),
        )
        .map_err(|e| KeyStoreError::Certificate {
            path: cert_path,
            reason: format!("a freshly signed record does not verify: {e}"),
        })?;
        Ok(rec)
    }

    fn create_key(&mut self, now: u64, rng: &dyn KeyStoreRandom) -> Result<u32, KeyStoreError> {
        // Key ids are the first 4 bytes of SHA-256(public key); a collision
        // with a stored key (1 in 2^32 per pair) just draws another key.
        let mut keypair = None;
        for _ in 0..8 {
            let k = X25519KeyPair::generate(rng.zrtt()).map_err(|_| KeyStoreError::Rng)?;
            let id = record::key_id_for(k.public());
            if !self.keys.iter().any(|s| s.id() == id) {
                keypair = Some(k);
                break;
            }
        }
        let keypair = keypair.ok_or(KeyStoreError::Rng)?;
        let p = &self.policy;
        // A record may not outlive its certificate: near the certificate's
        // end, keys get shorter lives; too near, none can be made.
        let cert_path = self.dir.join(CERT_FILE);
        let (cert_nb, cert_na) =
            record::cert::validity(&self.cert_der).map_err(|e| KeyStoreError::Certificate {
                path: cert_path.clone(),
                reason: format!("validity: {e}"),
            })?;
        let not_after = now.saturating_add(p.lifetime.as_secs()).min(cert_na);
        if now < cert_nb || not_after <= now.saturating_add(4 * p.record_ttl.as_secs()) {
            return Err(KeyStoreError::Certificate {
                path: cert_path,
                reason: format!(
                    "valid {} .. {}: too little validity left for a new key at {}; renew the certificate",
                    fmt_time(cert_nb),
                    fmt_time(cert_na),
                    fmt_time(now)
                ),
            });
        }
        let body = RecordBody {
            key_id: record::key_id_for(keypair.public()),
            public_key: *keypair.public(),
            not_before: now,
            not_after,
            max_early_data_bytes: p.max_early_data_bytes,
            aeads: p.aeads.clone(),
            flags: p.flags,
            provenance_quorum: p.provenance_quorum,
            name: self.name.clone(),
            cert_sha256: record::sha256(&self.cert_der),
        };
        let rec = self.sign_checked(body, rng)?;
        let id = rec.body.key_id;
        // The private key first: a record is never on disk without its key.
        keyfile::write_key(&self.key_path(id), &keypair)?;
        let rp = self.record_path(id);
        fsutil::write_atomic(&rp, &rec.encode(), false).map_err(|e| KeyStoreError::io(&rp, e))?;
        self.keys.push(StoredKey {
            record: rec,
            keypair: Some(keypair),
        });
        self.keys.sort_by_key(|k| (k.not_before(), k.id()));
        Ok(id)
    }

    /// When the next key is due: newest `not_before + R` (0 with no keys).
    fn next_rotation(&self) -> u64 {
        self.keys
            .iter()
            .map(StoredKey::not_before)
            .max()
            .map_or(0, |nb| nb.saturating_add(self.policy.rotation().as_secs()))
    }

    fn publish_until(&self, k: &StoredKey) -> u64 {
        k.not_after()
            .saturating_sub(2 * self.policy.record_ttl.as_secs())
    }

    /// Keys for the server side of the handshake: every key whose private
    /// key is held and that has not expired (pending, published and retired).
    pub fn server_keys(&self, now: UnixTime) -> Vec<ServerKey> {
        let secs = now.as_secs();
        self.keys
            .iter()
            .filter(|k| secs < k.not_after())
            .filter_map(|k| {
                let kp = k.keypair.clone()?;
                ServerKey::new(k.record.clone(), kp).ok()
            })
            .collect()
    }

    fn published(&self, secs: u64) -> Vec<&StoredKey> {
        let mut v: Vec<&StoredKey> = self
            .keys
            .iter()
            .filter(|k| {
                k.keypair.is_some() && k.not_before() <= secs && secs < self.publish_until(k)
            })
            .collect();
        if v.is_empty() {
            // Degraded: rotation is late. Serve the newest key still valid
            // (with a TTL below its remaining validity) rather than nothing.
            v.extend(
                self.keys
                    .iter()
                    .filter(|k| {
                        k.keypair.is_some()
                            && k.not_before() <= secs
                            && secs.saturating_add(2) <= k.not_after()
                    })
                    .max_by_key(|k| k.not_after()),
            );
        }
        let skip = v.len().saturating_sub(MAX_RECORDS_PER_LIST);
        v.drain(..skip);
        v
    }

    /// The records DNS serves at `now`, oldest first: keys inside their
    /// publication window whose private key is held (at most 8). If rotation
    /// fell behind and none is, the newest key still valid.
    pub fn published_records(&self, now: UnixTime) -> Vec<KeyRecord> {
        self.published(now.as_secs())
            .into_iter()
            .map(|k| k.record.clone())
            .collect()
    }

    /// The TTL for the key records at `now`: the policy's `T`, lowered so
    /// that it stays below half the remaining validity of every published
    /// record (always strictly below it), at least 1.
    pub fn record_ttl(&self, now: UnixTime) -> u32 {
        let secs = now.as_secs();
        let t = self.policy.record_ttl.as_secs();
        let min_left = self
            .published(secs)
            .iter()
            .map(|k| k.not_after().saturating_sub(secs))
            .min();
        let ttl = match min_left {
            Some(left) => t.min(left.saturating_sub(1) / 2),
            None => t,
        };
        u32::try_from(ttl.max(1)).unwrap_or(u32::MAX)
    }

    /// The schedule at `now`.
    pub fn status(&self, now: UnixTime) -> Status {
        let secs = now.as_secs();
        let published: Vec<u32> = self.published(secs).iter().map(|k| k.id()).collect();
        let keys: Vec<KeyStatus> = self
            .keys
            .iter()
            .map(|k| KeyStatus {
                key_id: k.id(),
                state: if secs >= k.not_after() {
                    KeyState::Expired
                } else if secs < k.not_before() {
                    KeyState::Pending
                } else if published.contains(&k.id()) {
                    KeyState::Published
                } else {
                    KeyState::Retired
                },
                not_before: k.not_before(),
                publish_until: self.publish_until(k),
                not_after: k.not_after(),
                private_key_held: k.keypair.is_some(),
            })
            .collect();
        let mut warnings = Vec::new();
        let next = self.next_rotation();
        if keys
            .iter()
            .any(|k| k.state == KeyState::Expired && k.private_key_held)
        {
            warnings.push(
                "an expired key's private key is still on disk: run `zrtt keys rotate`".into(),
            );
        }
        if published.is_empty() {
            warnings.push("no key is published: run `zrtt keys rotate`".into());
        } else if !keys.iter().any(|k| {
            k.state == KeyState::Published && k.not_before <= secs && secs < k.publish_until
        }) {
            warnings.push("rotation is late: serving a key past its publication window".into());
        }
        if keys
            .iter()
            .any(|k| k.state != KeyState::Expired && !self.record_matches_cert(k.key_id))
        {
            warnings.push(
                "some records are signed for another certificate: `zrtt keys rotate` re-signs them"
                    .into(),
            );
        }
        if let Ok((_, cert_na)) = record::cert::validity(&self.cert_der) {
            if cert_na < secs.saturating_add(self.policy.lifetime.as_secs()) {
                warnings.push(format!(
                    "the certificate expires {}: new keys get shorter lives; renew it",
                    fmt_time(cert_na)
                ));
            }
        }
        Status {
            name: self.name.clone(),
            now: secs,
            policy: self.policy.clone(),
            keys,
            record_ttl: self.record_ttl(now),
            next_rotation: next,
            warnings,
        }
    }

    fn record_matches_cert(&self, id: u32) -> bool {
        let h = record::sha256(&self.cert_der);
        self.keys
            .iter()
            .find(|k| k.id() == id)
            .is_none_or(|k| k.record.body.cert_sha256 == h)
    }

    /// The host name the keys are for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The certificate (DER).
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// Path of the certificate (PEM).
    pub fn cert_pem_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// Path of the certificate's private key (PKCS#8 PEM).
    pub fn cert_key_path(&self) -> PathBuf {
        self.dir.join(CERT_KEY_FILE)
    }

    /// Re-read the store if another process changed it (modification times
    /// of `keys/`, the policy, the certificate and its key). Cheap when
    /// nothing changed: four `stat` calls. Returns whether it re-read.
    pub fn reload_if_changed(&mut self) -> Result<bool, KeyStoreError> {
        let fp = self.fingerprint();
        if fp == self.fingerprint {
            return Ok(false);
        }
        *self = Self::open(&self.dir)?;
        Ok(true)
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.dir, CONFIG_FILE)
    }

    fn key_path(&self, id: u32) -> PathBuf {
        key_file(&self.dir, id, "key")
    }

    fn record_path(&self, id: u32) -> PathBuf {
        key_file(&self.dir, id, "record")
    }

    /// Read `keys/`: the stored keys, and private keys without a record.
    fn scan_keys(&self) -> Result<(Vec<StoredKey>, Vec<PathBuf>), KeyStoreError> {
        let (records, mut privs) = list_key_files(&self.dir)?;
        let mut keys = Vec::with_capacity(records.len());
        let mut seen_public: BTreeMap<[u8; 32], u32> = BTreeMap::new();
        for (id, path) in &records {
            let data = fs::read(path).map_err(|e| KeyStoreError::io(path, e))?;
            let rec = KeyRecord::decode(&data).map_err(|error| KeyStoreError::BadRecord {
                path: path.clone(),
                error,
            })?;
            if rec.body.key_id != *id {
                return Err(KeyStoreError::bad_file(
                    path,
                    format!(
                        "holds key id {:08x}, not the one in its file name",
                        rec.body.key_id
                    ),
                ));
            }
            if rec.body.name != self.name {
                return Err(KeyStoreError::BadRecord {
                    path: path.clone(),
                    error: RecordError::WrongName {
                        expected: self.name.clone(),
                        found: rec.body.name.clone(),
                    },
                });
            }
            if let Some(other) = seen_public.insert(rec.body.public_key, *id) {
                return Err(KeyStoreError::bad_file(
                    path,
                    format!("same public key as key {other:08x}"),
                ));
            }
            let keypair = match privs.remove(id) {
                Some(kp) => {
                    check_private_mode(&kp)?;
                    let pair = keyfile::read_key(&kp)?;
                    if pair.public() != &rec.body.public_key {
                        return Err(KeyStoreError::bad_file(
                            &kp,
                            "private key does not match the public key in its record",
                        ));
                    }
                    Some(pair)
                }
                None => None,
            };
            keys.push(StoredKey {
                record: rec,
                keypair,
            });
        }
        for p in privs.values() {
            tracing::warn!(
                "{}: private key without a record (ignored; rotate removes it)",
                p.display()
            );
        }
        keys.sort_by_key(|k| (k.not_before(), k.id()));
        Ok((keys, privs.into_values().collect()))
    }
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), KeyStoreError> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(|e| KeyStoreError::io(dir, e))
}

pub(crate) fn check_private_mode(path: &Path) -> Result<(), KeyStoreError> {
    let mode = fsutil::mode(path).map_err(|e| KeyStoreError::io(path, e))?;
    if fsutil::is_exposed(mode) {
        return Err(KeyStoreError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Load a certificate and its key, and check that the key signs records
/// the certificate verifies for `name` (which also checks the name is
/// covered).
pub(crate) fn load_signer(
    cert_path: &Path,
    key_path: &Path,
    name: &str,
    check_mode: bool,
) -> Result<(Vec<u8>, RecordSigner), KeyStoreError> {
    let cert_der = keyfile::load_cert(cert_path)?;
    if check_mode {
        check_private_mode(key_path)?;
    }
    let pkcs8 = keyfile::load_pkcs8(key_path)?;
    // Only ECDSA key parsing uses randomness here (ring checks the key).
    let rng = ring::rand::SystemRandom::new();
    let signer =
        RecordSigner::from_pkcs8(&pkcs8, &rng).map_err(|e| KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: e.to_string(),
        })?;
    let (cert_nb, _) =
        record::cert::validity(&cert_der).map_err(|e| KeyStoreError::Certificate {
            path: cert_path.to_owned(),
            reason: format!("validity: {e}"),
        })?;
    let probe = RecordBody {
        key_id: 0,
        // The X25519 base point: any strong key would do for the probe.
        public_key: {
            let mut base = [0u8; 32];
            base[0] = 9;
            base
        },
        not_before: cert_nb,
        not_after: cert_nb + 1,
        max_early_data_bytes: 0,
        aeads: vec![Aead::ChaChaPoly],
        flags: RecordFlags::default(),
        provenance_quorum: 0,
        name: name.to_owned(),
        cert_sha256: record::sha256(&cert_der),
    };
    let rec = probe
        .sign(&signer, &rng)
        .map_err(|e| KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: format!("cannot sign: {e}"),
        })?;
    match rec.verify(&cert_der, name, UnixTime::from_secs(cert_nb)) {
        Ok(_) => Ok((cert_der, signer)),
        Err(RecordError::BadSignature) => Err(KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: format!("is not the key of {}", cert_path.display()),
        }),
        Err(e) => Err(KeyStoreError::Certificate {
            path: cert_path.to_owned(),
            reason: e.to_string(),
        }),
    }
}
