//! The address-token keys of a key store: generated without configuration,
//! rotated on a fixed schedule, shared by every gateway reading the store.
//!
//! ```text
//! <dir>/tokens/<epoch>.key   32 random bytes as 64 hex digits, mode 0600
//! ```
//!
//! Time is cut into epochs of `rotation` (default one day) counted from the
//! Unix epoch, so every gateway of a fleet names the same key the same way
//! without talking to the others. The key of epoch `e` seals the tokens
//! issued during `e`; it opens tokens until `(e + 1) * rotation + lifetime`
//! (the last token it sealed has expired). The key of the *next* epoch is
//! created a whole epoch ahead, so every gateway that re-reads the store
//! once per epoch holds it before any gateway seals with it. Keys are
//! created by whichever gateway first needs them, exclusively (a temporary
//! file hard-linked to its name: two gateways racing keep the same key),
//! and deleted (overwritten, then unlinked) once they open nothing.
//!
//! The token format and its key ids are [`zrtt_proto::admission::TokenKey`]'s;
//! docs/PROTOCOL.md §8 says what a token proves.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use zeroize::{Zeroize, Zeroizing};
use zrtt_proto::admission::{TokenKey, TokenKeys};
use zrtt_proto::record::{hex, unhex};
use zrtt_proto::UnixTime;

use crate::fsutil;
use crate::store::KeyStoreError;

/// The directory of token keys inside a key store.
pub const TOKENS_DIR: &str = "tokens";

/// Default time between two token keys.
pub const DEFAULT_TOKEN_ROTATION: Duration = Duration::from_secs(24 * 3600);

/// When token keys seal and open (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenSchedule {
    rotation: u64,
    lifetime: Duration,
}

impl TokenSchedule {
    /// Keys rotate every `rotation` (at least one second, whole seconds);
    /// tokens live `lifetime`.
    pub fn new(rotation: Duration, lifetime: Duration) -> Result<Self, KeyStoreError> {
        if rotation.as_secs() == 0 {
            return Err(KeyStoreError::Policy(
                "token key rotation must be at least 1 s".to_owned(),
            ));
        }
        Ok(Self {
            rotation: rotation.as_secs(),
            lifetime,
        })
    }

    /// How long tokens live.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The epoch whose key seals tokens at `now`.
    pub fn sealing(&self, now: UnixTime) -> u64 {
        now.as_secs() / self.rotation
    }

    /// The epochs whose keys must exist at `now`: the sealing one and the next.
    pub fn wanted(&self, now: UnixTime) -> [u64; 2] {
        let e = self.sealing(now);
        [e, e.saturating_add(1)]
    }

    /// Whether epoch `e`'s key opens tokens at `now`: not beyond the next
    /// epoch, and its last token not yet expired.
    pub fn opens(&self, e: u64, now: UnixTime) -> bool {
        let end_ms = u128::from(e.saturating_add(1)) * u128::from(self.rotation) * 1000
            + self.lifetime.as_millis();
        e <= self.sealing(now).saturating_add(1) && end_ms > u128::from(now.as_millis())
    }
}

fn key_path(dir: &Path, epoch: u64) -> PathBuf {
    dir.join(format!("{epoch}.key"))
}

/// Create the key of `epoch` unless it exists; never replaces one.
fn create_key(
    dir: &Path,
    epoch: u64,
    rng: &dyn ring::rand::SecureRandom,
) -> Result<(), KeyStoreError> {
    let path = key_path(dir, epoch);
    if path.exists() {
        return Ok(());
    }
    let mut secret = [0u8; 32];
    rng.fill(&mut secret).map_err(|_| KeyStoreError::Rng)?;
    let mut text = hex(&secret);
    secret.zeroize();
    text.push('\n');
    let result = fsutil::write_new_temp(&path, text.as_bytes(), true).and_then(|tmp| {
        let linked = match fs::hard_link(&tmp, &path) {
            // Another gateway created it first: keep theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        };
        let _ = fs::remove_file(&tmp);
        linked
    });
    text.zeroize();
    fsutil::sync_dir(dir);
    result.map_err(|e| KeyStoreError::io(&path, e))
}

fn read_key(path: &Path, lifetime: Duration) -> Result<TokenKey, KeyStoreError> {
    let data = crate::keyfile::read_private(path)?;
    let text = std::str::from_utf8(&data).unwrap_or_default();
    let bytes = Zeroizing::new(unhex(text.trim()).unwrap_or_default());
    let secret: Zeroizing<[u8; 32]> = Zeroizing::new(bytes.as_slice().try_into().map_err(
        |_| KeyStoreError::BadFile {
            path: path.to_owned(),
            reason: "a token key is 64 hex digits".to_owned(),
        },
    )?);
    Ok(TokenKey::new(&secret, lifetime))
}

/// The token keys of the key store at `store_dir` in force at `now`:
/// creates the sealing and the next epoch's keys when missing, deletes the
/// keys that open nothing any more, and returns the sealing key with every
/// other key that still opens tokens.
pub fn token_keys(
    store_dir: &Path,
    schedule: TokenSchedule,
    now: UnixTime,
    rng: &dyn ring::rand::SecureRandom,
) -> Result<TokenKeys, KeyStoreError> {
    let dir = store_dir.join(TOKENS_DIR);
    crate::store::create_private_dir(&dir)?;
    for e in schedule.wanted(now) {
        create_key(&dir, e, rng)?;
    }
    let sealing = schedule.sealing(now);
    let mut current = None;
    let mut older = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|e| KeyStoreError::io(&dir, e))? {
        let entry = entry.map_err(|e| KeyStoreError::io(&dir, e))?;
        let name = entry.file_name();
        let Some(epoch) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".key"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue; // temporary files of a concurrent creation, strangers
        };
        let path = entry.path();
        if !schedule.opens(epoch, now) {
            if epoch < sealing {
                fsutil::shred(&path).map_err(|e| KeyStoreError::io(&path, e))?;
            }
            continue;
        }
        let key = Arc::new(read_key(&path, schedule.lifetime())?);
        if epoch == sealing {
            current = Some(key);
        } else {
            older.push(key);
        }
    }
    let current = current.ok_or_else(|| KeyStoreError::BadFile {
        path: key_path(&dir, sealing),
        reason: "the sealing token key disappeared while reading".to_owned(),
    })?;
    Ok(TokenKeys::new(current, older))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const DAY: u64 = 86_400;

    fn sched() -> TokenSchedule {
        TokenSchedule::new(Duration::from_secs(DAY), Duration::from_secs(3600)).unwrap()
    }

    fn at(secs: u64) -> UnixTime {
        UnixTime::from_secs(secs)
    }

    #[test]
    fn schedule_arithmetic() {
        let s = sched();
        let now = at(10 * DAY + 5);
        assert_eq!(s.sealing(now), 10);
        assert_eq!(s.wanted(now), [10, 11]);
        assert!(s.opens(10, now) && s.opens(11, now));
        assert!(!s.opens(12, now), "two epochs ahead is never in force");
        // Epoch 9's tokens live one hour into epoch 10.
        assert!(s.opens(9, now));
        assert!(s.opens(9, at(10 * DAY + 3599)));
        assert!(!s.opens(9, at(10 * DAY + 3600)));
        assert!(!s.opens(8, now));
        assert!(TokenSchedule::new(Duration::from_millis(500), Duration::ZERO).is_err());
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir.join(TOKENS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn keys_are_created_shared_rotated_and_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let rng = ring::rand::SystemRandom::new();
        let s = sched();
        let t0 = at(10 * DAY + 5);
        let a = token_keys(tmp.path(), s, t0, &rng).unwrap();
        assert_eq!(files(tmp.path()), ["10.key", "11.key"]);
        assert_eq!(
            fsutil::mode(&tmp.path().join(TOKENS_DIR).join("10.key")).unwrap(),
            0o600
        );
        // A second gateway reading the same store seals with the same key.
        let b = token_keys(tmp.path(), s, t0, &rng).unwrap();
        assert_eq!(a.current().id(), b.current().id());
        assert_eq!(a.ids().len(), 2);

        // A token sealed in epoch 10 opens in epoch 11 until it expires.
        let ip: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let token = a.current().issue(ip, &[7; 32], t0, &rng).unwrap();
        let t1 = at(11 * DAY + 10);
        let c = token_keys(tmp.path(), s, t1, &rng).unwrap();
        assert_ne!(c.current().id(), a.current().id(), "epoch 11 seals");
        assert!(a.ids().contains(&c.current().id()), "known one epoch ahead");
        assert_eq!(files(tmp.path()), ["10.key", "11.key", "12.key"]);
        // Within the token's own lifetime it still opens (issued at t0, 1 h).
        let just_issued = a
            .current()
            .issue(ip, &[7; 32], at(11 * DAY - 60), &rng)
            .unwrap();
        assert!(c
            .verify(&just_issued, ip, Some(&[7; 32]), at(11 * DAY + 10))
            .is_ok());
        assert!(c.verify(&token, ip, Some(&[7; 32]), t1).is_err(), "expired");

        // Past epoch 10's last token, its key is deleted.
        let t2 = at(11 * DAY + 3600);
        token_keys(tmp.path(), s, t2, &rng).unwrap();
        assert_eq!(files(tmp.path()), ["11.key", "12.key"]);
    }

    #[test]
    fn exposed_or_corrupt_key_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let rng = ring::rand::SystemRandom::new();
        let t0 = at(10 * DAY);
        token_keys(tmp.path(), sched(), t0, &rng).unwrap();
        let p = tmp.path().join(TOKENS_DIR).join("10.key");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        let e = token_keys(tmp.path(), sched(), t0, &rng).unwrap_err();
        assert!(e.to_string().contains("10.key"), "{e}");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&p, "nothex\n").unwrap();
        let e = token_keys(tmp.path(), sched(), t0, &rng).unwrap_err();
        assert!(e.to_string().contains("hex"), "{e}");
    }
}
