//! The key-store engine under both stores: [`Store`] opens a store with
//! every file checked, rotates it under a lock, says what DNS serves and
//! prints its status. One job a module:
//!
//! - `dir`: the directory: layout, creation (mode 0700), the rotation
//!   lock, the change fingerprint, the `keys/` listing, private file modes,
//!   the certificate that signs the records;
//! - `policy`: the policy file (`name` and the policy, durations);
//! - `schedule`: the rotation schedule as pure arithmetic on times, with
//!   proptests;
//! - `status`: what a store reports ([`RotationReport`], [`StoreStatus`]);
//! - `kind`: what differs between the two stores, a [`Kind`], named by
//!   its policy type: [`crate::Policy`] ([`crate::keystore`], semi-static
//!   keys for first flights) and [`crate::VerifierPolicy`]
//!   ([`crate::verifier_store`], provenance verifier keys).
//!
//! Time is always passed in: a store never reads a clock.

use core::fmt;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use zrtt_proto::record::{self, RecordKind, RecordSigner, SignedRecord};
use zrtt_proto::{RecordError, UnixTime};

mod dir;
mod kind;
mod policy;
mod schedule;
mod status;

pub use dir::{CERT_FILE, CERT_KEY_FILE, KEYS_DIR};
pub use policy::{parse_duration, DurationSpec};
pub use status::{KeyState, KeyStatus, RotationReport, StoreStatus};

pub(crate) use dir::{check_private_mode, create_private_dir};
pub(crate) use kind::{Engine, Names, NewKey, PrivateKey};
pub(crate) use policy::{bad_policy, check_ttl, duration, optional_duration};
pub(crate) use schedule::{KeyTimes, Schedule};

use dir::{key_file, list_key_files, load_signer, read_config, with_rotation_lock, Fingerprint};
use kind::KeyBody;
use policy::read_policy_file;

/// Errors of the key stores; each names the file it is about.
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
    /// The policy file does not parse or holds an invalid policy.
    #[error("{path}: {reason}")]
    Config {
        /// keystore.toml, verifier.toml (or the caller's config file).
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
    /// `init` on a directory that already holds a store.
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
/// signatures and Ed25519 keys (ring's). `ring::rand::SystemRandom` is both.
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

/// A kind of store, named by its policy type: what the store's records,
/// private keys and key states are and how they rotate. Sealed:
/// [`crate::Policy`] (the key store) and [`crate::VerifierPolicy`] (the
/// verifier key store) are the two.
pub trait Kind: Engine {}

impl<K: Engine> Kind for K {}

/// A stored key: its signed record and, until it is deleted, its private
/// key.
pub(crate) struct Stored<K: Kind> {
    pub(crate) record: SignedRecord<K::Body>,
    /// `None` once the private key is deleted (or was never there).
    pub(crate) private: Option<<K::Body as KeyBody>::Private>,
}

impl<K: Kind> Stored<K> {
    pub(crate) fn id(&self) -> u32 {
        self.record.body.id()
    }

    pub(crate) fn times(&self) -> KeyTimes {
        let (not_before, not_after) = self.record.body.window();
        KeyTimes {
            id: self.id(),
            not_before,
            not_after,
            held: self.private.is_some(),
        }
    }
}

/// A store of keys of kind `K` in a directory (see the module docs):
/// [`crate::KeyStore`] or [`crate::VerifierStore`].
pub struct Store<K: Kind> {
    dir: PathBuf,
    name: String,
    policy: K,
    cert_der: Vec<u8>,
    signer: RecordSigner,
    /// Sorted by not_before, then id.
    keys: Vec<Stored<K>>,
    fingerprint: Fingerprint,
}

impl<K: Kind> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::NAMES.debug_name)
            .field("dir", &self.dir)
            .field("name", &self.name)
            .field("policy", &self.policy)
            .field(
                "keys",
                &self.keys.iter().map(Stored::id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<K: Kind> Store<K> {
    /// Open an existing store, checking every file: the policy, the
    /// certificate and its key (mode 0600, must sign records the certificate
    /// verifies for the name), every private key (mode 0600, matches the
    /// public key of its record) and record (decodes, matches its file name
    /// and the store's name). Errors name the file.
    ///
    /// A private key without its record (left by an interrupted rotation) is
    /// ignored here and removed by the next [`Self::rotate`].
    pub fn open(dir: &Path) -> Result<Self, KeyStoreError> {
        let (name, policy, cert_der, signer) = Self::read_head(dir)?;
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
        store.fingerprint = Fingerprint::of(dir, K::NAMES.config_file);
        Ok(store)
    }

    /// Create a store in `dir` (created if missing, mode 0700) for `name`,
    /// copying the certificate of that name and its key and writing the
    /// policy. Creates no key yet: call [`Self::rotate`]. Refuses a
    /// directory that already holds a store.
    pub fn init(
        dir: &Path,
        name: &str,
        cert_pem: &Path,
        cert_key_pem: &Path,
        policy: K,
    ) -> Result<Self, KeyStoreError> {
        policy.check()?;
        dir::init_store_dir(
            dir,
            K::NAMES.config_file,
            name,
            cert_pem,
            cert_key_pem,
            |n| policy.to_file(n),
        )?;
        Self::open(dir)
    }

    /// The policy file, the certificate and its signer.
    #[allow(clippy::type_complexity)]
    fn read_head(dir: &Path) -> Result<(String, K, Vec<u8>, RecordSigner), KeyStoreError> {
        let config_path = dir.join(K::NAMES.config_file);
        let (name, policy) = read_policy_file::<K>(&config_path, &read_config(&config_path)?)?;
        let (cert_der, signer) =
            load_signer(&dir.join(CERT_FILE), &dir.join(CERT_KEY_FILE), &name, true)?;
        Ok((name, policy, cert_der, signer))
    }

    /// Bring the store up to date at `now`, idempotently: delete the private
    /// keys of expired keys (and their records one lifetime later), re-sign
    /// records if the certificate changed, and create a key when the newest
    /// one is a rotation period old (or when no usable key is held). Takes
    /// an exclusive lock on the directory and re-reads it first, so several
    /// rotators (the DNS server, a gateway or verifier, a timer) can share
    /// one store.
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
        (self.name, self.policy, self.cert_der, self.signer) = Self::read_head(&self.dir)?;
        let (keys, orphans) = self.scan_keys()?;
        self.keys = keys;
        let secs = now.as_secs();
        let mut report = RotationReport::default();
        for path in orphans {
            crate::fsutil::shred(&path).map_err(|e| KeyStoreError::io(&path, e))?;
            report.removed_orphans.push(path);
        }

        // 1. Expired keys lose their private key; their record goes later.
        let times: Vec<KeyTimes> = self.keys.iter().map(Stored::times).collect();
        let plan = self.policy.schedule().plan(&times, secs);
        for k in &mut self.keys {
            let id = k.id();
            if plan.delete_private.contains(&id) {
                let p = key_file(&self.dir, id, "key");
                crate::fsutil::shred(&p).map_err(|e| KeyStoreError::io(&p, e))?;
                k.private = None;
            }
            if plan.remove_record.contains(&id) {
                let p = key_file(&self.dir, id, "record");
                fs::remove_file(&p).map_err(|e| KeyStoreError::io(&p, e))?;
            }
        }
        self.keys.retain(|k| !plan.remove_record.contains(&k.id()));
        report.deleted_private_keys = plan.delete_private;
        report.removed_records = plan.remove_record;

        // 2. Records signed for an older certificate are re-signed while
        //    they are valid (and, unless the kind publishes records without
        //    their key, while the private key is held).
        let cert_hash = record::sha256(&self.cert_der);
        let publish_without_private = self.policy.schedule().publish_without_private;
        for i in 0..self.keys.len() {
            let k = &self.keys[i];
            let (_, not_after) = k.record.body.window();
            if k.record.body.cert_sha256() != &cert_hash
                && (k.private.is_some() || publish_without_private)
                && secs < not_after
            {
                let mut body = k.record.body.clone();
                body.set_cert_sha256(cert_hash);
                let rec = self.sign_checked(body, rng)?;
                let p = key_file(&self.dir, rec.body.id(), "record");
                crate::fsutil::write_atomic(&p, &rec.encode(), false)
                    .map_err(|e| KeyStoreError::io(&p, e))?;
                report.resigned.push(rec.body.id());
                self.keys[i].record = rec;
            }
        }

        // 3. A new key when the newest is a period old, or none is usable.
        if plan.create {
            let id = self.create_key(secs, rng)?;
            report.created.push(id);
        }
        self.fingerprint = Fingerprint::of(&self.dir, K::NAMES.config_file);
        report.next_rotation = self.next_rotation();
        Ok(report)
    }

    /// Sign `body` with the certificate key and check that the record
    /// verifies against the certificate.
    fn sign_checked(
        &self,
        body: K::Body,
        rng: &dyn KeyStoreRandom,
    ) -> Result<SignedRecord<K::Body>, KeyStoreError> {
        let rec =
            body.sign_with(&self.signer, rng.ring())
                .map_err(|e| KeyStoreError::Certificate {
                    path: self.dir.join(CERT_KEY_FILE),
                    reason: format!("cannot sign: {e}"),
                })?;
        let (not_before, _) = rec.body.window();
        rec.verify(&self.cert_der, &self.name, UnixTime::from_secs(not_before))
            .map_err(|e| KeyStoreError::Certificate {
                path: self.dir.join(CERT_FILE),
                reason: format!(
                    "a freshly signed {} record does not verify: {e}",
                    K::NAMES.key
                ),
            })?;
        Ok(rec)
    }

    fn create_key(&mut self, now: u64, rng: &dyn KeyStoreRandom) -> Result<u32, KeyStoreError> {
        // Ids are the first 4 bytes of SHA-256(public key); a collision
        // with a stored key (1 in 2^32 per pair) just draws another key.
        let mut made = None;
        for _ in 0..8 {
            let private = <K::Body as KeyBody>::Private::generate(rng)?;
            let id = K::Body::id_for(&private.public_key());
            if !self.keys.iter().any(|s| s.id() == id) {
                made = Some(private);
                break;
            }
        }
        let private = made.ok_or(KeyStoreError::Rng)?;
        // A record may not outlive its certificate: near the certificate's
        // end, keys get shorter lives; too near, none can be made.
        let cert_path = self.dir.join(CERT_FILE);
        let cert =
            record::cert::validity(&self.cert_der).map_err(|e| KeyStoreError::Certificate {
                path: cert_path.clone(),
                reason: format!("validity: {e}"),
            })?;
        let Some(window) = self.policy.schedule().new_key(now, cert) else {
            return Err(KeyStoreError::Certificate {
                path: cert_path,
                reason: format!(
                    "valid {} .. {}: too little validity left for a new {} at {}; renew the certificate",
                    crate::fmt_time(cert.0),
                    crate::fmt_time(cert.1),
                    K::NAMES.key,
                    crate::fmt_time(now)
                ),
            });
        };
        let (not_before, not_after) = window;
        let body = self.policy.new_body(NewKey {
            public_key: private.public_key(),
            not_before,
            not_after,
            name: &self.name,
            cert_der: &self.cert_der,
        });
        let rec = self.sign_checked(body, rng)?;
        let id = rec.body.id();
        // The private key first: a record is never on disk without its key.
        private.write(&key_file(&self.dir, id, "key"))?;
        let rp = key_file(&self.dir, id, "record");
        crate::fsutil::write_atomic(&rp, &rec.encode(), false)
            .map_err(|e| KeyStoreError::io(&rp, e))?;
        self.keys.push(Stored {
            record: rec,
            private: Some(private),
        });
        self.keys.sort_by_key(|k| (k.times().not_before, k.id()));
        Ok(id)
    }

    /// When the next key is due, seconds since the epoch: the newest key's
    /// `not_before` plus the rotation period (0 with no keys).
    pub fn next_rotation(&self) -> u64 {
        self.policy.schedule().next_rotation(&self.times())
    }

    fn times(&self) -> Vec<KeyTimes> {
        self.keys.iter().map(Stored::times).collect()
    }

    /// The stored keys DNS serves at `secs`, oldest first.
    pub(crate) fn published(&self, secs: u64) -> Vec<&Stored<K>> {
        self.policy
            .schedule()
            .published(&self.times(), secs)
            .iter()
            .filter_map(|t| self.keys.iter().find(|k| k.id() == t.id))
            .collect()
    }

    /// The records DNS serves at `now`, oldest first (at most 8): each kind
    /// says which (docs/DNS.md, docs/PROVENANCE.md). If rotation fell behind
    /// and none is in its publication window, the newest key still valid.
    pub fn published_records(&self, now: UnixTime) -> Vec<SignedRecord<K::Body>> {
        self.published(now.as_secs())
            .into_iter()
            .map(|k| k.record.clone())
            .collect()
    }

    /// The TTL for the records at `now`: the policy's `T`, lowered so that
    /// it stays below half the remaining validity of every published record
    /// (always strictly below it), at least 1.
    pub fn record_ttl(&self, now: UnixTime) -> u32 {
        let secs = now.as_secs();
        let published: Vec<KeyTimes> = self.published(secs).iter().map(|k| k.times()).collect();
        self.policy.schedule().ttl(&published, secs)
    }

    /// The schedule at `now`.
    pub fn status(&self, now: UnixTime) -> StoreStatus<K> {
        let secs = now.as_secs();
        let times = self.times();
        let schedule = self.policy.schedule();
        let states = K::states(self, secs);
        let mut warnings = K::warnings(self, &states, secs);
        let cmd = K::NAMES.rotate_command;
        if times.iter().any(|t| t.held && secs >= t.not_after) {
            warnings.push(format!(
                "an expired key's private key is still on disk: run `{cmd}`"
            ));
        }
        let h = record::sha256(&self.cert_der);
        if self
            .keys
            .iter()
            .any(|k| secs < k.times().not_after && k.record.body.cert_sha256() != &h)
        {
            warnings.push(format!(
                "some records are signed for another certificate: `{cmd}` re-signs them"
            ));
        }
        if let Ok((_, cert_na)) = record::cert::validity(&self.cert_der) {
            if cert_na < secs.saturating_add(schedule.lifetime) {
                warnings.push(format!(
                    "the certificate expires {}: new keys get shorter lives; renew it",
                    crate::fmt_time(cert_na)
                ));
            }
        }
        let keys = times
            .iter()
            .zip(states)
            .map(|(t, state)| KeyStatus {
                key_id: t.id,
                state,
                not_before: t.not_before,
                publish_until: schedule.publish_until(t),
                not_after: t.not_after,
                private_key_held: t.held,
            })
            .collect();
        StoreStatus {
            name: self.name.clone(),
            now: secs,
            policy: self.policy.clone(),
            keys,
            record_ttl: self.record_ttl(now),
            next_rotation: self.next_rotation(),
            warnings,
        }
    }

    /// The stored keys, oldest first.
    pub(crate) fn keys(&self) -> &[Stored<K>] {
        &self.keys
    }

    /// The name the keys are for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy.
    pub fn policy(&self) -> &K {
        &self.policy
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The certificate (DER) that signs the records.
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
        if Fingerprint::of(&self.dir, K::NAMES.config_file) == self.fingerprint {
            return Ok(false);
        }
        *self = Self::open(&self.dir)?;
        Ok(true)
    }

    /// Read `keys/`: the stored keys, and private keys without a record.
    fn scan_keys(&self) -> Result<(Vec<Stored<K>>, Vec<PathBuf>), KeyStoreError> {
        let (records, mut privs) = list_key_files(&self.dir)?;
        let mut keys = Vec::with_capacity(records.len());
        let mut seen_public: BTreeMap<[u8; 32], u32> = BTreeMap::new();
        for (id, path) in &records {
            let data = fs::read(path).map_err(|e| KeyStoreError::io(path, e))?;
            let rec = SignedRecord::<K::Body>::decode(&data).map_err(|error| {
                KeyStoreError::BadRecord {
                    path: path.clone(),
                    error,
                }
            })?;
            let rec_id = rec.body.id();
            if rec_id != *id {
                return Err(KeyStoreError::bad_file(
                    path,
                    format!(
                        "holds {} id {rec_id:08x}, not the one in its file name",
                        K::NAMES.key
                    ),
                ));
            }
            if rec.body.name() != self.name {
                return Err(KeyStoreError::BadRecord {
                    path: path.clone(),
                    error: RecordError::WrongName {
                        expected: self.name.clone(),
                        found: rec.body.name().to_owned(),
                    },
                });
            }
            let public = *rec.body.public_key();
            if let Some(other) = seen_public.insert(public, *id) {
                return Err(KeyStoreError::bad_file(
                    path,
                    format!("same public key as key {other:08x}"),
                ));
            }
            let private = match privs.remove(id) {
                Some(kp) => {
                    check_private_mode(&kp)?;
                    let private = <K::Body as KeyBody>::Private::read(&kp)?;
                    if private.public_key() != public {
                        return Err(KeyStoreError::bad_file(
                            &kp,
                            "private key does not match the public key in its record",
                        ));
                    }
                    Some(private)
                }
                None => None,
            };
            keys.push(Stored {
                record: rec,
                private,
            });
        }
        for p in privs.values() {
            tracing::warn!(
                "{}: private key without a record (ignored; rotate removes it)",
                p.display()
            );
        }
        keys.sort_by_key(|k| (k.times().not_before, k.id()));
        Ok((keys, privs.into_values().collect()))
    }
}
