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
//! The engine (directory, lock, rotation, status table) is
//! [`crate::store`]; this module is what makes its keys semi-static X25519
//! keys. Time is always passed in: the store never reads a clock.

use std::path::Path;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::handshake::ServerKey;
use zrtt_proto::record::{self, Aead, RecordBody, RecordFlags};
use zrtt_proto::UnixTime;

use crate::keyfile;
use crate::store::{
    bad_policy, check_ttl, duration, optional_duration, Engine, KeyTimes, Names, NewKey,
    PrivateKey, Schedule, Store, StoreStatus,
};
pub use crate::store::{
    parse_duration, DurationSpec, KeyState, KeyStatus, KeyStoreError, KeyStoreRandom,
    RotationReport, CERT_FILE, CERT_KEY_FILE, KEYS_DIR,
};

/// The key store (see the module docs).
pub type KeyStore = Store<Policy>;

/// The schedule of a key store at an instant; `Display` prints a table.
pub type Status = StoreStatus<Policy>;

/// Policy file name in a key store.
pub const CONFIG_FILE: &str = "keystore.toml";

/// The rotation policy and the fields every new record gets. In
/// `keystore.toml` (every field optional): `lifetime`, `ttl`, `rotation`
/// (durations), `max_early_data`, `aeads`, `flags` (`client-auth`,
/// `tokens`, `h2`), `quorum`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// `L`: validity of each key (default one hour, as ZTLS advises).
    #[serde(deserialize_with = "duration")]
    pub lifetime: Duration,
    /// `T`: the TTL of the DNS records carrying keys (default 300 s).
    #[serde(rename = "ttl", deserialize_with = "duration")]
    pub record_ttl: Duration,
    /// `R`: time between two new keys; `None` means `L - 4T`. Must satisfy
    /// `0 < R <= L - 4T`.
    #[serde(rename = "rotation", deserialize_with = "optional_duration")]
    pub rotation_period: Option<Duration>,
    /// Largest first-flight request accepted, bytes.
    #[serde(rename = "max_early_data")]
    pub max_early_data_bytes: u32,
    /// AEADs offered, in preference order (1 or 2).
    #[serde(deserialize_with = "aeads")]
    pub aeads: Vec<Aead>,
    /// Record flags.
    #[serde(deserialize_with = "flags")]
    pub flags: RecordFlags,
    /// Provenance certificates needed for an answer before the TCP handshake.
    #[serde(rename = "quorum")]
    pub provenance_quorum: u8,
    /// Provenance verifiers (DNS names) the records name, so clients can
    /// fetch certificates from them (only with a quorum).
    #[serde(default)]
    pub verifiers: Vec<String>,
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
            verifiers: Vec::new(),
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
        let t = check_ttl(self.record_ttl)?;
        let bad = bad_policy;
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
        if self.verifiers.len() > record::MAX_ADVERTISED_VERIFIERS {
            return bad(format!(
                "verifiers names {} verifiers; records name at most {}",
                self.verifiers.len(),
                record::MAX_ADVERTISED_VERIFIERS
            ));
        }
        if !self.verifiers.is_empty() && self.provenance_quorum == 0 {
            return bad(
                "verifiers named with quorum = 0 (the records would accept no certificates)".into(),
            );
        }
        for (i, v) in self.verifiers.iter().enumerate() {
            if record::validate_name(v).is_err() {
                return bad(format!(
                    "verifier {v:?} is not a lowercase DNS name without a trailing dot"
                ));
            }
            if self.verifiers[..i].contains(v) {
                return bad(format!("verifier {v} named twice"));
            }
        }
        Ok(())
    }
}

/// `aeads = [...]` in `keystore.toml`.
fn aeads<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Aead>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|a| parse_aead(a).ok_or_else(|| D::Error::custom(format!("aeads: unknown {a:?}"))))
        .collect()
}

/// `flags = [...]` in `keystore.toml`.
fn flags<'de, D: Deserializer<'de>>(d: D) -> Result<RecordFlags, D::Error> {
    let mut bits = 0;
    for f in Vec::<String>::deserialize(d)? {
        bits |= match f.as_str() {
            "client-auth" => RecordFlags::CLIENT_AUTH_REQUIRED,
            "tokens" => RecordFlags::ISSUES_TOKENS,
            "h2" => RecordFlags::HTTP2,
            _ => {
                let e = format!("flags: unknown {f:?} (client-auth, tokens, h2)");
                return Err(D::Error::custom(e));
            }
        };
    }
    Ok(RecordFlags::from_bits(bits).unwrap_or_default())
}

/// An AEAD by its name in configs and the CLI.
pub fn parse_aead(s: &str) -> Option<Aead> {
    match s.to_ascii_lowercase().as_str() {
        "chacha20poly1305" | "chacha20-poly1305" | "chachapoly" => Some(Aead::ChaChaPoly),
        "aes256gcm" | "aes-256-gcm" | "aesgcm" => Some(Aead::AesGcm),
        _ => None,
    }
}

/// A key store's policy is its [`crate::store::Kind`]: semi-static X25519
/// keys for first flights, with their signed key records.
impl Engine for Policy {
    type Body = RecordBody;

    fn new_body(&self, k: NewKey<'_>) -> RecordBody {
        RecordBody {
            key_id: record::key_id_for(&k.public_key),
            public_key: k.public_key,
            not_before: k.not_before,
            not_after: k.not_after,
            max_early_data_bytes: self.max_early_data_bytes,
            aeads: self.aeads.clone(),
            flags: self.flags,
            provenance_quorum: self.provenance_quorum,
            verifiers: self.verifiers.clone(),
            name: k.name.to_owned(),
            cert_sha256: record::sha256(k.cert_der),
        }
    }

    /// Pending before `not_before`, published while DNS serves it, retired
    /// while it still serves first flights, expired at `not_after`.
    fn states(store: &KeyStore, secs: u64) -> Vec<KeyState> {
        let published: Vec<u32> = store.published(secs).iter().map(|k| k.id()).collect();
        let state = |t: KeyTimes| {
            if secs >= t.not_after {
                KeyState::Expired
            } else if secs < t.not_before {
                KeyState::Pending
            } else if published.contains(&t.id) {
                KeyState::Published
            } else {
                KeyState::Retired
            }
        };
        store.keys().iter().map(|k| state(k.times())).collect()
    }

    fn warnings(store: &KeyStore, _: &[KeyState], secs: u64) -> Vec<String> {
        let schedule = store.policy().schedule();
        let published = store.published(secs);
        if published.is_empty() {
            vec!["no key is published: run `zrtt keys rotate`".into()]
        } else if !published
            .iter()
            .any(|k| secs < schedule.publish_until(&k.times()))
        {
            vec!["rotation is late: serving a key past its publication window".into()]
        } else {
            Vec::new()
        }
    }

    fn to_file(&self, name: &str) -> String {
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
        if self.flags.http2() {
            flags.push("\"h2\"");
        }
        let verifiers = if self.verifiers.is_empty() {
            "# verifiers = [\"pv1.example.net\"]   # provenance verifiers the records name\n"
                .to_owned()
        } else {
            let names: Vec<String> = self.verifiers.iter().map(|v| format!("\"{v}\"")).collect();
            format!("verifiers = [{}]\n", names.join(", "))
        };
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
             quorum = {}\n\
             {verifiers}",
            self.lifetime.as_secs(),
            self.record_ttl.as_secs(),
            self.max_early_data_bytes,
            aeads.join(", "),
            flags.join(", "),
            self.provenance_quorum,
        )
    }

    fn check(&self) -> Result<(), KeyStoreError> {
        self.validate()
    }

    /// `G = 2T`; a key serves first flights until `not_after`, from
    /// creation (pending keys too); a new key needs more than `4T`.
    fn schedule(&self) -> Schedule {
        let t = self.record_ttl.as_secs();
        Schedule {
            lifetime: self.lifetime.as_secs(),
            period: self.rotation().as_secs(),
            record_ttl: t,
            publish_margin: 2 * t,
            min_new_life: 4 * t,
            publish_without_private: false,
            use_margin: 0,
            use_from_start: false,
        }
    }

    fn summary(&self, record_ttl: u32, _: &str) -> String {
        format!(
            "lifetime {} s, ttl {} s, rotation every {} s; records served with ttl {record_ttl} s",
            self.lifetime.as_secs(),
            self.record_ttl.as_secs(),
            self.rotation().as_secs(),
        )
    }

    /// Files, messages and status headings.
    #[rustfmt::skip]
    const NAMES: Names = Names::new(CONFIG_FILE, "the host name the keys are for", "KeyStore", "key", "key id", 9, "zrtt keys rotate");
}

impl PrivateKey for X25519KeyPair {
    fn generate(rng: &dyn KeyStoreRandom) -> Result<Self, KeyStoreError> {
        X25519KeyPair::generate(rng.zrtt()).map_err(|_| KeyStoreError::Rng)
    }

    fn public_key(&self) -> [u8; 32] {
        *self.public()
    }

    fn read(path: &Path) -> Result<Self, KeyStoreError> {
        keyfile::read_key(path)
    }

    fn write(&self, path: &Path) -> Result<(), KeyStoreError> {
        keyfile::write_key(path, self)
    }
}

impl KeyStore {
    /// Keys for the server side of the handshake: every key whose private
    /// key is held and that has not expired (pending, published and retired).
    pub fn server_keys(&self, now: UnixTime) -> Vec<ServerKey> {
        let secs = now.as_secs();
        self.keys()
            .iter()
            .filter(|k| secs < k.times().not_after)
            .filter_map(|k| {
                let kp = k.private.clone()?;
                ServerKey::new(k.record.clone(), kp).ok()
            })
            .collect()
    }
}
