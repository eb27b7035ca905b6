//! The verifier key store: a provenance verifier's Ed25519 keys with their
//! signed verifier key records (docs/PROTOCOL.md §11.1), the certificate of
//! the verifier's DNS name that signs them, and the rotation policy.
//! `zrtt verifier serve --keystore` signs certificates from it and `zrtt dns
//! --verifier-keystore` publishes it; both can rotate it.
//!
//! ```text
//! <dir>/cert.pem               certificate of the verifier's name (signs the records)
//! <dir>/cert.key               its PKCS#8 private key, mode 0600
//! <dir>/verifier.toml          name and policy (every policy field optional)
//! <dir>/keys/<id>.key          Ed25519 verifier key (PKCS#8 PEM, as `zrtt verifier keygen`), mode 0600
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
//! The engine (directory, lock, rotation, status table) is
//! [`crate::store`]; this module is what makes its keys Ed25519 verifier
//! keys. Time is always passed in: the store never reads a clock.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use zrtt_proto::provenance::{VerifierKey, VerifierKeys, VerifierSigner};
use zrtt_proto::record::{self, VerifierKeyBody, MAX_VERIFIER_RECORD_LIFETIME_SECS};
use zrtt_proto::UnixTime;

use crate::keystore::{KeyState, KeyStatus, KeyStoreError, KeyStoreRandom};
use crate::store::{
    bad_policy, check_ttl, duration, Engine, KeyTimes, Names, NewKey, PrivateKey, Schedule, Store,
    StoreStatus, Stored,
};
use crate::{fsutil, keyfile};

/// Policy file name in a verifier key store.
pub const VERIFIER_CONFIG_FILE: &str = "verifier.toml";
/// `M`: a key stays published this long after its last certificate can
/// end, and certificates end this long before their key's `not_after`, for
/// clock differences between verifier and gateways (gateways tolerate 5 s).
pub const CLOCK_MARGIN_SECS: u64 = 300;
/// PEM label of a verifier key file (PKCS#8, as `zrtt verifier keygen` writes).
pub const VERIFIER_KEY_PEM_LABEL: &str = "PRIVATE KEY";

/// The verifier key store (see the module docs).
pub type VerifierStore = Store<VerifierPolicy>;

/// The schedule of a verifier store at an instant; `Display` prints a table.
pub type VerifierStatus = StoreStatus<VerifierPolicy>;

/// One key's line in a [`VerifierStatus`] (the key store's [`KeyStatus`]).
pub type VerifierKeyStatus = KeyStatus;

/// A verifier key's state: [`KeyState`], of which verifier keys are
/// `Next`, `Current`, `Retired` or `Expired`.
pub type VerifierKeyState = KeyState;

/// The rotation policy of a verifier key store. In `verifier.toml` (every
/// field optional, durations): `rotation`, `prepublish`,
/// `max_certificate`, `ttl`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifierPolicy {
    /// `S`: how long each key is the current one (default one day).
    #[serde(deserialize_with = "duration")]
    pub rotation: Duration,
    /// `P`: how long a new key is published before it signs (default one
    /// hour). Gateways must learn it within `P`: `P >= 2T`, and gateways
    /// refresh at most every `P - T`.
    #[serde(deserialize_with = "duration")]
    pub prepublish: Duration,
    /// `C`: the longest certificate (default one day, the adaptive cap of
    /// `zrtt verifier serve --max`); keys stay published `C + M` after they stop signing.
    #[serde(deserialize_with = "duration")]
    pub max_certificate: Duration,
    /// `T`: the TTL of the DNS records carrying the keys (default 300 s).
    #[serde(rename = "ttl", deserialize_with = "duration")]
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
        let t = check_ttl(self.record_ttl)?;
        let bad = bad_policy;
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
}

/// A verifier store's policy is its [`crate::store::Kind`]: Ed25519
/// provenance verifier keys, with their signed verifier key records.
impl Engine for VerifierPolicy {
    type Body = VerifierKeyBody;

    fn new_body(&self, k: NewKey<'_>) -> VerifierKeyBody {
        VerifierKeyBody::new(k.public_key, k.not_before, k.not_after, k.name, k.cert_der)
    }

    /// The current key, those newer (next) and older (retired) than it;
    /// expired at `not_after`.
    fn states(store: &VerifierStore, secs: u64) -> Vec<VerifierKeyState> {
        let current = store
            .current(secs)
            .map(|k| k.times())
            .map(|t| (t.not_before, t.id));
        let state = |t: KeyTimes| match current {
            _ if secs >= t.not_after => VerifierKeyState::Expired,
            Some(c) if c == (t.not_before, t.id) => VerifierKeyState::Current,
            Some(c) if (t.not_before, t.id) > c => VerifierKeyState::Next,
            _ => VerifierKeyState::Retired,
        };
        store.keys().iter().map(|k| state(k.times())).collect()
    }

    fn warnings(store: &VerifierStore, states: &[VerifierKeyState], secs: u64) -> Vec<String> {
        let late = store
            .next_rotation()
            .saturating_add(store.policy().prepublish.as_secs());
        if store.current(secs).is_none() {
            vec!["no key can sign: run `zrtt verifier rotate`".into()]
        } else if !states.is_empty() && secs >= late {
            vec![
                "rotation is late: the current key signs past its period (shorter certificates)"
                    .into(),
            ]
        } else {
            Vec::new()
        }
    }

    fn to_file(&self, name: &str) -> String {
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

    fn check(&self) -> Result<(), KeyStoreError> {
        self.validate()
    }

    /// `G = 0`: published from creation until `not_after`, with or without
    /// the private key; signs from `not_before` until `not_after - M`; a
    /// new key needs more than `M` + 1 min.
    fn schedule(&self) -> Schedule {
        Schedule {
            lifetime: self.lifetime(),
            period: self.rotation.as_secs(),
            record_ttl: self.record_ttl.as_secs(),
            publish_margin: 0,
            min_new_life: CLOCK_MARGIN_SECS + 60,
            publish_without_private: true,
            use_margin: CLOCK_MARGIN_SECS,
            use_from_start: true,
        }
    }

    fn summary(&self, record_ttl: u32, name: &str) -> String {
        let owner = crate::records::fqdn(&record::encodings::verifier_owner(name))
            .map(|n| n.to_string())
            .unwrap_or_default();
        format!(
            "rotation every {} s, published {} s before signing, certificates up to {} s; records served with ttl {record_ttl} s at {owner}",
            self.rotation.as_secs(),
            self.prepublish.as_secs(),
            self.max_certificate.as_secs(),
        )
    }

    /// Files, messages and status headings.
    #[rustfmt::skip]
    const NAMES: Names = Names::new(VERIFIER_CONFIG_FILE, "the verifier's DNS name", "VerifierStore", "verifier key", "id", 8, "zrtt verifier rotate");
}

/// A verifier's Ed25519 key as its store keeps it: PKCS#8 (as `zrtt verifier
/// keygen` writes it), with its public key.
pub struct VerifierPrivateKey {
    pkcs8: Vec<u8>,
    public: [u8; 32],
}

impl PrivateKey for VerifierPrivateKey {
    fn generate(rng: &dyn KeyStoreRandom) -> Result<Self, KeyStoreError> {
        let (signer, pkcs8) =
            VerifierSigner::generate(rng.ring()).map_err(|_| KeyStoreError::Rng)?;
        let public = signer.key().public;
        Ok(Self { pkcs8, public })
    }

    fn public_key(&self) -> [u8; 32] {
        self.public
    }

    fn read(path: &Path) -> Result<Self, KeyStoreError> {
        let pkcs8 = keyfile::load_pkcs8(path)?;
        let signer = VerifierSigner::from_pkcs8(&pkcs8)
            .map_err(|e| KeyStoreError::bad_file(path, e.to_string()))?;
        let public = signer.key().public;
        Ok(Self { pkcs8, public })
    }

    fn write(&self, path: &Path) -> Result<(), KeyStoreError> {
        let pem = zeroize::Zeroizing::new(keyfile::pem_encode(VERIFIER_KEY_PEM_LABEL, &self.pkcs8));
        fsutil::write_atomic(path, pem.as_bytes(), true).map_err(|e| KeyStoreError::io(path, e))
    }
}

impl VerifierStore {
    /// The key that signs at `secs`: the newest that can sign and has been
    /// published for `P`; if none has, the newest that can sign.
    fn current(&self, secs: u64) -> Option<&Stored<VerifierPolicy>> {
        let p = self.policy().prepublish.as_secs();
        let schedule = self.policy().schedule();
        let signable = || {
            self.keys()
                .iter()
                .filter(move |k| schedule.usable(&k.times(), secs))
        };
        let newest = |k: &&Stored<VerifierPolicy>| (k.times().not_before, k.id());
        signable()
            .filter(|k| k.times().not_before.saturating_add(p) <= secs)
            .max_by_key(newest)
            .or_else(|| signable().max_by_key(newest))
    }

    /// The current key's public key at `now`, if any can sign.
    pub fn current_key(&self, now: UnixTime) -> Option<VerifierKey> {
        self.current(now.as_secs())
            .map(|k| k.record.body.verifier_key())
    }

    /// What `zrtt verifier serve` signs with at `now`: the current key, its
    /// signing bound (`not_after - M`), and the store's other unexpired keys
    /// (accepted as the previous certificate of a refresh). `None` when no
    /// key can sign (run [`Self::rotate`]).
    pub fn signing_keys(&self, now: UnixTime) -> Option<VerifierKeys> {
        let secs = now.as_secs();
        let cur = self.current(secs)?;
        let signer = VerifierSigner::from_pkcs8(&cur.private.as_ref()?.pkcs8).ok()?;
        let others = self
            .keys()
            .iter()
            .filter(|k| k.id() != cur.id() && secs < k.times().not_after)
            .map(|k| k.record.body.verifier_key())
            .collect();
        Some(VerifierKeys::new(
            signer,
            Some(cur.times().not_after.saturating_sub(CLOCK_MARGIN_SECS)),
            others,
        ))
    }
}
