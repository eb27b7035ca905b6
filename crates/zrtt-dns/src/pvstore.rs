//! The verifier key store: a provenance verifier's Ed25519 keys with their
//! signed verifier key records (docs/PROTOCOL.md §11.1), the certificate of
//! the verifier's DNS name that signs them, and the rotation policy.
//! `zrtt pv serve --keystore` signs certificates from it and `zrtt dns
//! --verifier-keystore` publishes it; both can rotate it.
//!
//! ```text
//! <dir>/cert.pem               certificate of the verifier's name (signs the records)
//! <dir>/cert.key               its PKCS#8 private key, mode 0600
//! <dir>/verifier.toml          name and policy (every policy field optional)
//! <dir>/keys/<id>.key          Ed25519 verifier key (PKCS#8 PEM, as `zrtt pv keygen`), mode 0600
//! <dir>/keys/<id>.record       the signed verifier key record (binary)
//! ```
//!
//! Rotation (docs/PROVENANCE.md has the timeline): with rotation period
//! `S`, pre-publication `P`, certificate cap `C` and the clock margin `M`
//! ([`CLOCK_MARGIN_SECS`]), key *i* is created at `c_i` with `not_before =
//! c_i` and `not_after = c_i + P + S + C + M`, so it is published from its
//! creation. It becomes the *current* key (the one that signs) at `c_i + P`,
//! once gateways have had `P` to learn it, and stays current until key
//! *i+1*, created at `c_i + S`, takes over at `c_i + S + P`. Its last
//! certificates end by `c_i + S + P + C`, and it stays published (trusted)
//! until `M` after that. No certificate ever outlives its key's record: the
//! signer cuts durations at `not_after - M`. The first key of a store (or
//! any key when no other can sign) signs at once: there is nothing to
//! overlap with.
//!
//! Time is always passed in: the store never reads a clock.

use core::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use zrtt_proto::provenance::{VerifierKey, VerifierKeys, VerifierSigner};
use zrtt_proto::record::{
    self, RecordSigner, VerifierKeyBody, VerifierKeyRecord, MAX_RECORDS_PER_LIST,
    MAX_VERIFIER_RECORD_LIFETIME_SECS,
};
use zrtt_proto::{RecordError, UnixTime};

use crate::keystore::{
    check_private_mode, init_store_dir, key_file, list_key_files, load_signer, with_rotation_lock,
    DurationSpec, Fingerprint, KeyStoreError, KeyStoreRandom, RotationReport, CERT_FILE,
    CERT_KEY_FILE,
};
use crate::{fmt_time, fsutil, keyfile};

/// Policy file name in a verifier key store.
pub const VERIFIER_CONFIG_FILE: &str = "verifier.toml";
/// `M`: a key stays published this long after its last certificate can
/// end, and certificates end this long before their key's `not_after`, for
/// clock differences between verifier and gateways (gateways tolerate 5 s).
pub const CLOCK_MARGIN_SECS: u64 = 300;
/// PEM label of a verifier key file (PKCS#8, as `zrtt pv keygen` writes).
pub const VERIFIER_KEY_PEM_LABEL: &str = "PRIVATE KEY";

/// The rotation policy of a verifier key store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierPolicy {
    /// `S`: how long each key is the current one (default one day).
    pub rotation: Duration,
    /// `P`: how long a new key is published before it signs (default one
    /// hour). Gateways must learn it within `P`: `P >= 2T`, and gateways
    /// refresh at most every `P - T`.
    pub prepublish: Duration,
    /// `C`: the longest certificate (default one day, the adaptive cap of
    /// `zrtt pv serve --max`); keys stay published `C + M` after they stop signing.
    pub max_certificate: Duration,
    /// `T`: the TTL of the DNS records carrying the keys (default 300 s).
    pub record_ttl: Duration,
}

impl Default for VerifierPolicy {
    fn default() -> Self {
        Self {
            rotation: Duration::from_secs(86400),
            prepublish: Duration::from_secs(3600),
            max_certificate: Duration::from_secs(86400),
            record_ttl: Duration::from_secs(300),
        }
    }
}

impl VerifierPolicy {
    /// Validity of each key record: `P + S + C + M`.
    pub fn lifetime(&self) -> u64 {
        self.prepublish
            .as_secs()
            .saturating_add(self.rotation.as_secs())
            .saturating_add(self.max_certificate.as_secs())
            .saturating_add(CLOCK_MARGIN_SECS)
    }

    /// Check the rules: `T >= 1 s`, `S >= 1 s`, `C >= 1 s`, `P >= 2T`,
    /// `P + S + C + M <= 14 days` (the verifier key record bound).
    pub fn validate(&self) -> Result<(), KeyStoreError> {
        let t = self.record_ttl.as_secs();
        let bad = |s: String| Err(KeyStoreError::Policy(s));
        if t == 0 {
            return bad("ttl must be at least 1 s".into());
        }
        if self.rotation.as_secs() == 0 {
            return bad("rotation must be at least 1 s".into());
        }
        if self.max_certificate.as_secs() == 0 {
            return bad("max_certificate must be at least 1 s".into());
        }
        if self.prepublish.as_secs() < 2 * t {
            return bad(format!(
                "prepublish {} s must be at least 2 x ttl = {} s (gateways must see a key before it signs)",
                self.prepublish.as_secs(),
                2 * t
            ));
        }
        if self.lifetime() > MAX_VERIFIER_RECORD_LIFETIME_SECS {
            return bad(format!(
                "prepublish + rotation + max_certificate + {CLOCK_MARGIN_SECS} s = {} s is over the {} s verifier key records may have",
                self.lifetime(),
                MAX_VERIFIER_RECORD_LIFETIME_SECS
            ));
        }
        Ok(())
    }

    fn to_toml(&self, name: &str) -> String {
        format!(
            "# zrtt verifier key store (docs/PROVENANCE.md). Durations: seconds or \"90s\", \"30m\", \"1h\", \"1d\".\n\
             name = \"{name}\"\n\
             rotation = {}\n\
             prepublish = {}\n\
             max_certificate = {}\n\
             ttl = {}\n",
            self.rotation.as_secs(),
            self.prepublish.as_secs(),
            self.max_certificate.as_secs(),
            self.record_ttl.as_secs(),
        )
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: Option<String>,
    rotation: Option<DurationSpec>,
    prepublish: Option<DurationSpec>,
    max_certificate: Option<DurationSpec>,
    ttl: Option<DurationSpec>,
}

fn parse_config(path: &Path, text: &str) -> Result<(String, VerifierPolicy), KeyStoreError> {
    let cfg = |reason: String| KeyStoreError::Config {
        path: path.to_owned(),
        reason,
    };
    let c: ConfigFile = toml::from_str(text).map_err(|e| cfg(e.to_string()))?;
    let name = c
        .name
        .ok_or_else(|| cfg("`name` (the verifier's DNS name) is missing".into()))?;
    let name = record::normalize_name(&name);
    record::validate_name(&name).map_err(|e| cfg(format!("name {name:?}: {e}")))?;
    let mut p = VerifierPolicy::default();
    let dur =
        |d: &DurationSpec, field: &str| d.to_duration().map_err(|e| cfg(format!("{field}: {e}")));
    if let Some(d) = &c.rotation {
        p.rotation = dur(d, "rotation")?;
    }
    if let Some(d) = &c.prepublish {
        p.prepublish = dur(d, "prepublish")?;
    }
    if let Some(d) = &c.max_certificate {
        p.max_certificate = dur(d, "max_certificate")?;
    }
    if let Some(d) = &c.ttl {
        p.record_ttl = dur(d, "ttl")?;
    }
    p.validate().map_err(|e| cfg(e.to_string()))?;
    Ok((name, p))
}

struct StoredKey {
    record: VerifierKeyRecord,
    /// PKCS#8 of the Ed25519 key; `None` once deleted.
    pkcs8: Option<Vec<u8>>,
}

impl StoredKey {
    fn id(&self) -> u32 {
        self.record.body.verifier_id
    }
    fn not_before(&self) -> u64 {
        self.record.body.not_before
    }
    fn not_after(&self) -> u64 {
        self.record.body.not_after
    }
    /// Certificates this key signs end by here.
    fn sign_until(&self) -> u64 {
        self.not_after().saturating_sub(CLOCK_MARGIN_SECS)
    }
    fn can_sign(&self, now: u64) -> bool {
        self.pkcs8.is_some() && self.not_before() <= now && now < self.sign_until()
    }
}

/// The verifier key store (see the module docs).
pub struct VerifierStore {
    dir: PathBuf,
    name: String,
    policy: VerifierPolicy,
    cert_der: Vec<u8>,
    signer: RecordSigner,
    /// Sorted by not_before, then id.
    keys: Vec<StoredKey>,
    fingerprint: Fingerprint,
}

impl fmt::Debug for VerifierStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierStore")
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

/// The state of a verifier key at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifierKeyState {
    /// Published, not signing yet: gateways are learning it.
    Next,
    /// Published and signing certificates.
    Current,
    /// Published, no longer signing: certificates it signed are still valid.
    Retired,
    /// Past `not_after`: no longer published; its private key is (or is about to be) deleted.
    Expired,
}

impl fmt::Display for VerifierKeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Next => "next",
            Self::Current => "current",
            Self::Retired => "retired",
            Self::Expired => "expired",
        })
    }
}

/// One key's line in a [`VerifierStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifierKeyStatus {
    /// Verifier id (as certificates carry it).
    pub verifier_id: u32,
    /// State at the status instant.
    pub state: VerifierKeyState,
    /// Published (trusted) from.
    pub not_before: u64,
    /// Published (trusted) until; certificates it signs end `M` before.
    pub not_after: u64,
    /// Whether the private key is on disk.
    pub private_key_held: bool,
}

/// The schedule of a verifier store at an instant; `Display` prints a table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifierStatus {
    /// The verifier's name.
    pub name: String,
    /// The instant.
    pub now: u64,
    /// Policy in force.
    pub policy: VerifierPolicy,
    /// Every stored key, oldest first.
    pub keys: Vec<VerifierKeyStatus>,
    /// TTL DNS gives the records now.
    pub record_ttl: u32,
    /// When the next key is due.
    pub next_rotation: u64,
    /// Problems worth an operator's attention.
    pub warnings: Vec<String>,
}

impl fmt::Display for VerifierStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.policy;
        writeln!(
            f,
            "verifier key store for {} at {}",
            self.name,
            fmt_time(self.now)
        )?;
        writeln!(
            f,
            "policy: rotation every {} s, published {} s before signing, certificates up to {} s; records served with ttl {} s at {}",
            p.rotation.as_secs(),
            p.prepublish.as_secs(),
            p.max_certificate.as_secs(),
            self.record_ttl,
            crate::records::fqdn(&record::encodings::verifier_owner(&self.name))
                .map(|n| n.to_string())
                .unwrap_or_default()
        )?;
        writeln!(
            f,
            "{:<8}  {:<8}  {:<20}  {:<20}  private key",
            "id", "state", "not before", "not after"
        )?;
        for k in &self.keys {
            writeln!(
                f,
                "{:08x}  {:<8}  {:<20}  {:<20}  {}",
                k.verifier_id,
                k.state.to_string(),
                fmt_time(k.not_before),
                fmt_time(k.not_after),
                if k.private_key_held {
                    "held"
                } else {
                    "deleted"
                }
            )?;
        }
        if self.keys.is_empty() {
            writeln!(f, "(no keys: run `zrtt pv rotate`)")?;
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

impl VerifierStore {
    /// Open an existing store, checking every file: the policy, the
    /// certificate and its key (mode 0600, must sign records the certificate
    /// verifies for the name), every key (mode 0600, Ed25519, matches its
    /// record) and record (decodes, matches its file name and the store's
    /// name). Errors name the file.
    pub fn open(dir: &Path) -> Result<Self, KeyStoreError> {
        let config_path = dir.join(VERIFIER_CONFIG_FILE);
        let text =
            fs::read_to_string(&config_path).map_err(|e| KeyStoreError::io(&config_path, e))?;
        let (name, policy) = parse_config(&config_path, &text)?;
        let (cert_der, signer) =
            load_signer(&dir.join(CERT_FILE), &dir.join(CERT_KEY_FILE), &name, true)?;
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

    /// Create a store in `dir` (created if missing, mode 0700) for the
    /// verifier `name`, copying the certificate of that name and its key and
    /// writing the policy. Creates no key yet: call [`Self::rotate`].
    pub fn init(
        dir: &Path,
        name: &str,
        cert_pem: &Path,
        cert_key_pem: &Path,
        policy: VerifierPolicy,
    ) -> Result<Self, KeyStoreError> {
        policy.validate()?;
        init_store_dir(
            dir,
            VERIFIER_CONFIG_FILE,
            name,
            cert_pem,
            cert_key_pem,
            |n| policy.to_toml(n),
        )?;
        Self::open(dir)
    }

    /// Bring the store up to date at `now`, idempotently: delete the private
    /// keys of expired keys (their records one lifetime later), re-sign
    /// records if the certificate changed, and create a key when the newest
    /// one is `S` old or when no key can sign. Takes an exclusive lock on the
    /// directory and re-reads it first, so `zrtt pv serve`, `zrtt dns` and a
    /// timer can share one store.
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
        let config_path = self.dir.join(VERIFIER_CONFIG_FILE);
        let text =
            fs::read_to_string(&config_path).map_err(|e| KeyStoreError::io(&config_path, e))?;
        (self.name, self.policy) = parse_config(&config_path, &text)?;
        (self.cert_der, self.signer) = load_signer(
            &self.dir.join(CERT_FILE),
            &self.dir.join(CERT_KEY_FILE),
            &self.name,
            true,
        )?;
        let (keys, orphans) = self.scan_keys()?;
        self.keys = keys;
        let secs = now.as_secs();
        let lifetime = self.policy.lifetime();
        let mut report = RotationReport::default();
        for path in orphans {
            fsutil::shred(&path).map_err(|e| KeyStoreError::io(&path, e))?;
            report.removed_orphans.push(path);
        }

        // 1. Expired keys lose their private key; their record goes later.
        let mut kept = Vec::with_capacity(self.keys.len());
        for mut k in std::mem::take(&mut self.keys) {
            let id = k.id();
            if secs >= k.not_after() && k.pkcs8.is_some() {
                let p = self.key_path(id);
                fsutil::shred(&p).map_err(|e| KeyStoreError::io(&p, e))?;
                k.pkcs8 = None;
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
            if k.record.body.cert_sha256 != cert_hash && secs < k.not_after() {
                let mut body = k.record.body.clone();
                body.cert_sha256 = cert_hash;
                let rec = self.sign_checked(body, rng)?;
                let p = self.record_path(rec.body.verifier_id);
                fsutil::write_atomic(&p, &rec.encode(), false)
                    .map_err(|e| KeyStoreError::io(&p, e))?;
                report.resigned.push(rec.body.verifier_id);
                self.keys[i].record = rec;
            }
        }

        // 3. A new key when the newest is S old, or when none can sign.
        let can_sign = self.keys.iter().any(|k| k.can_sign(secs));
        if !can_sign || secs >= self.next_rotation() {
            let id = self.create_key(secs, rng)?;
            report.created.push(id);
        }
        self.fingerprint = self.fingerprint();
        report.next_rotation = self.next_rotation();
        Ok(report)
    }

    fn sign_checked(
        &self,
        body: VerifierKeyBody,
        rng: &dyn KeyStoreRandom,
    ) -> Result<VerifierKeyRecord, KeyStoreError> {
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
            path: self.dir.join(CERT_FILE),
            reason: format!("a freshly signed verifier key record does not verify: {e}"),
        })?;
        Ok(rec)
    }

    fn create_key(&mut self, now: u64, rng: &dyn KeyStoreRandom) -> Result<u32, KeyStoreError> {
        // Ids are the first 4 bytes of SHA-256(public key); a collision with
        // a stored key just draws another key.
        let mut made = None;
        for _ in 0..8 {
            let (signer, pkcs8) =
                VerifierSigner::generate(rng.ring()).map_err(|_| KeyStoreError::Rng)?;
            if !self.keys.iter().any(|s| s.id() == signer.key().id) {
                made = Some((signer, pkcs8));
                break;
            }
        }
        let (signer, pkcs8) = made.ok_or(KeyStoreError::Rng)?;
        let cert_path = self.dir.join(CERT_FILE);
        let (cert_nb, cert_na) =
            record::cert::validity(&self.cert_der).map_err(|e| KeyStoreError::Certificate {
                path: cert_path.clone(),
                reason: format!("validity: {e}"),
            })?;
        // A record may not outlive its certificate: near its end keys get
        // shorter lives (and shorter certificates); too near, none is made.
        let not_after = now.saturating_add(self.policy.lifetime()).min(cert_na);
        if now < cert_nb || not_after <= now.saturating_add(CLOCK_MARGIN_SECS + 60) {
            return Err(KeyStoreError::Certificate {
                path: cert_path,
                reason: format!(
                    "valid {} .. {}: too little validity left for a new verifier key at {}; renew the certificate",
                    fmt_time(cert_nb),
                    fmt_time(cert_na),
                    fmt_time(now)
                ),
            });
        }
        let body = VerifierKeyBody::new(
            signer.key().public,
            now,
            not_after,
            &self.name,
            &self.cert_der,
        );
        let rec = self.sign_checked(body, rng)?;
        let id = rec.body.verifier_id;
        // The private key first: a record is never on disk without its key.
        let kp = self.key_path(id);
        let pem = keyfile::pem_encode(VERIFIER_KEY_PEM_LABEL, &pkcs8);
        fsutil::write_atomic(&kp, pem.as_bytes(), true).map_err(|e| KeyStoreError::io(&kp, e))?;
        let rp = self.record_path(id);
        fsutil::write_atomic(&rp, &rec.encode(), false).map_err(|e| KeyStoreError::io(&rp, e))?;
        self.keys.push(StoredKey {
            record: rec,
            pkcs8: Some(pkcs8),
        });
        self.keys.sort_by_key(|k| (k.not_before(), k.id()));
        Ok(id)
    }

    /// When the next key is due: newest `not_before + S` (0 with no keys).
    pub fn next_rotation(&self) -> u64 {
        self.keys
            .iter()
            .map(StoredKey::not_before)
            .max()
            .map_or(0, |nb| nb.saturating_add(self.policy.rotation.as_secs()))
    }

    /// The key that signs at `secs`: the newest that can sign and has been
    /// published for `P`; if none has, the newest that can sign.
    fn current(&self, secs: u64) -> Option<&StoredKey> {
        let p = self.policy.prepublish.as_secs();
        let signable = || self.keys.iter().filter(|k| k.can_sign(secs));
        signable()
            .filter(|k| k.not_before().saturating_add(p) <= secs)
            .max_by_key(|k| (k.not_before(), k.id()))
            .or_else(|| signable().max_by_key(|k| (k.not_before(), k.id())))
    }

    /// The current key's public key at `now`, if any can sign.
    pub fn current_key(&self, now: UnixTime) -> Option<VerifierKey> {
        self.current(now.as_secs())
            .map(|k| k.record.body.verifier_key())
    }

    /// What `zrtt pv serve` signs with at `now`: the current key, its
    /// signing bound (`not_after - M`), and the store's other unexpired keys
    /// (accepted as the previous certificate of a refresh). `None` when no
    /// key can sign (run [`Self::rotate`]).
    pub fn signing_keys(&self, now: UnixTime) -> Option<VerifierKeys> {
        let secs = now.as_secs();
        let cur = self.current(secs)?;
        let signer = VerifierSigner::from_pkcs8(cur.pkcs8.as_deref()?).ok()?;
        let others = self
            .keys
            .iter()
            .filter(|k| k.id() != cur.id() && secs < k.not_after())
            .map(|k| k.record.body.verifier_key())
            .collect();
        Some(VerifierKeys::new(signer, Some(cur.sign_until()), others))
    }

    fn published(&self, secs: u64) -> Vec<&StoredKey> {
        let mut v: Vec<&StoredKey> = self
            .keys
            .iter()
            .filter(|k| k.not_before() <= secs && secs < k.not_after())
            .collect();
        let skip = v.len().saturating_sub(MAX_RECORDS_PER_LIST);
        v.drain(..skip);
        v
    }

    /// The records DNS serves at `now`, oldest first: every key inside its
    /// validity (next, current and retired keys; at most 8).
    pub fn published_records(&self, now: UnixTime) -> Vec<VerifierKeyRecord> {
        self.published(now.as_secs())
            .into_iter()
            .map(|k| k.record.clone())
            .collect()
    }

    /// The TTL for the records at `now`: `T`, lowered so that it stays below
    /// half the remaining validity of every published record, at least 1.
    pub fn record_ttl(&self, now: UnixTime) -> u32 {
        let secs = now.as_secs();
        let t = self.policy.record_ttl.as_secs();
        let ttl = match self
            .published(secs)
            .iter()
            .map(|k| k.not_after().saturating_sub(secs))
            .min()
        {
            Some(left) => t.min(left.saturating_sub(1) / 2),
            None => t,
        };
        u32::try_from(ttl.max(1)).unwrap_or(u32::MAX)
    }

    /// The schedule at `now`.
    pub fn status(&self, now: UnixTime) -> VerifierStatus {
        let secs = now.as_secs();
        let current = self.current(secs).map(|k| (k.not_before(), k.id()));
        let keys: Vec<VerifierKeyStatus> = self
            .keys
            .iter()
            .map(|k| VerifierKeyStatus {
                verifier_id: k.id(),
                state: match current {
                    _ if secs >= k.not_after() => VerifierKeyState::Expired,
                    Some(c) if c == (k.not_before(), k.id()) => VerifierKeyState::Current,
                    Some(c) if (k.not_before(), k.id()) > c => VerifierKeyState::Next,
                    _ => VerifierKeyState::Retired,
                },
                not_before: k.not_before(),
                not_after: k.not_after(),
                private_key_held: k.pkcs8.is_some(),
            })
            .collect();
        let mut warnings = Vec::new();
        let next = self.next_rotation();
        if current.is_none() {
            warnings.push("no key can sign: run `zrtt pv rotate`".into());
        } else if !self.keys.is_empty()
            && secs >= next.saturating_add(self.policy.prepublish.as_secs())
        {
            warnings.push(
                "rotation is late: the current key signs past its period (shorter certificates)"
                    .into(),
            );
        }
        if keys
            .iter()
            .any(|k| k.state == VerifierKeyState::Expired && k.private_key_held)
        {
            warnings
                .push("an expired key's private key is still on disk: run `zrtt pv rotate`".into());
        }
        let h = record::sha256(&self.cert_der);
        if self
            .keys
            .iter()
            .any(|k| secs < k.not_after() && k.record.body.cert_sha256 != h)
        {
            warnings.push(
                "some records are signed for another certificate: `zrtt pv rotate` re-signs them"
                    .into(),
            );
        }
        if let Ok((_, cert_na)) = record::cert::validity(&self.cert_der) {
            if cert_na < secs.saturating_add(self.policy.lifetime()) {
                warnings.push(format!(
                    "the certificate expires {}: new keys get shorter lives; renew it",
                    fmt_time(cert_na)
                ));
            }
        }
        VerifierStatus {
            name: self.name.clone(),
            now: secs,
            policy: self.policy.clone(),
            keys,
            record_ttl: self.record_ttl(now),
            next_rotation: next,
            warnings,
        }
    }

    /// The verifier's DNS name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy.
    pub fn policy(&self) -> &VerifierPolicy {
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

    /// Re-read the store if another process changed it (modification times
    /// of `keys/`, the policy, the certificate and its key). Returns whether
    /// it re-read.
    pub fn reload_if_changed(&mut self) -> Result<bool, KeyStoreError> {
        if self.fingerprint() == self.fingerprint {
            return Ok(false);
        }
        *self = Self::open(&self.dir)?;
        Ok(true)
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.dir, VERIFIER_CONFIG_FILE)
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
        for (id, path) in &records {
            let data = fs::read(path).map_err(|e| KeyStoreError::io(path, e))?;
            let rec =
                VerifierKeyRecord::decode(&data).map_err(|error| KeyStoreError::BadRecord {
                    path: path.clone(),
                    error,
                })?;
            if rec.body.verifier_id != *id {
                return Err(KeyStoreError::bad_file(
                    path,
                    format!(
                        "holds verifier id {:08x}, not the one in its file name",
                        rec.body.verifier_id
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
            let pkcs8 = match privs.remove(id) {
                Some(kp) => {
                    check_private_mode(&kp)?;
                    let der = keyfile::load_pkcs8(&kp)?;
                    let signer = VerifierSigner::from_pkcs8(&der)
                        .map_err(|e| KeyStoreError::bad_file(&kp, e.to_string()))?;
                    if signer.key().public != rec.body.public_key {
                        return Err(KeyStoreError::bad_file(
                            &kp,
                            "private key does not match the public key in its record",
                        ));
                    }
                    Some(der)
                }
                None => None,
            };
            keys.push(StoredKey { record: rec, pkcs8 });
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
