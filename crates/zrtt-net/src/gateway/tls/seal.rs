//! [`SessionSeal`]: TLS session state sealed for storage outside this
//! process (the fleet's Redis, the file a restart hands over), under a key
//! every gateway of the fleet derives from the token key it already shares
//! and rotates (crates/zrtt-dns/src/token_keys.rs).
//!
//! ```text
//! sealed = 0x02 || key_id (4) || salt (16, random)
//!          || ChaCha20-Poly1305(issued_ms u64 || expires_ms u64 || state)
//! aad    = "zrtt tls session v2" || key_id || context
//! key    = HKDF-SHA256(salt "zrtt token key derive", IKM token key,
//!                      info "zrtt tls session seal" || salt)
//! nonce  = 0 (96 bits)
//! ```
//!
//! Each message has its own key (a random 128-bit salt in the HKDF info):
//! no nonce is ever used twice under a key, however many sessions the
//! fleet seals under one token key (random 96-bit nonces under one key
//! would collide after about 2^32 of them, and the whole fleet seals
//! under the same key).
//!
//! `key_id` is the token key's id; `context` binds the sealed state to
//! where it is stored (a ticket id: a value moved to another ticket's key
//! does not open). A session sealed under a token key that retired (past
//! its last token's lifetime) no longer opens: the client gets a full
//! handshake, as with any session the gateway lost.

use ring::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use zeroize::Zeroizing;
use zrtt_proto::admission::{TokenKey, TokenKeyRing};
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::UnixTime;

const VERSION: u8 = 2;
const AAD_LABEL: &[u8] = b"zrtt tls session v2";
/// The HKDF label of the session keys (helpers deriving other keys from
/// the token key use other labels), followed by each message's salt.
pub(crate) const KEY_LABEL: &[u8] = b"zrtt tls session seal";
const SALT: usize = 16;
const HEADER: usize = 1 + 4 + SALT;
const TAG: usize = 16;

/// Why sealed session state did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SealError {
    /// Not sealed by a key of this fleet for this context (or altered).
    #[error("sealed session does not open")]
    Invalid,
    /// Sealed under a key this gateway no longer (or never) held.
    #[error("sealed under an unknown key")]
    UnknownKey,
    /// Past its expiry.
    #[error("session expired")]
    Expired,
    /// The random number generator failed.
    #[error("random number generator failed")]
    Rng,
}

/// Session state that opened.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Opened {
    /// When it was sealed.
    pub issued: UnixTime,
    /// The state.
    pub state: Zeroizing<Vec<u8>>,
}

/// Seals and opens session state under keys derived from a token key ring
/// (the current key seals; every key of the ring opens).
pub(crate) struct SessionSeal {
    ring: TokenKeyRing,
}

/// The key of one message: `salt` under `token`.
fn message_key(token: &TokenKey, salt: &[u8]) -> LessSafeKey {
    let mut info = KEY_LABEL.to_vec();
    info.extend_from_slice(salt);
    token.derive_aead_key(&info)
}

const ZERO_NONCE: [u8; NONCE_LEN] = [0; NONCE_LEN];

impl std::fmt::Debug for SessionSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSeal")
            .field("key_ids", &self.ring.keys().ids())
            .finish_non_exhaustive()
    }
}

impl SessionSeal {
    /// Seal with keys derived from `ring`'s, following its rotations.
    pub(crate) fn new(ring: TokenKeyRing) -> Self {
        Self { ring }
    }

    /// Seal `state` for `context`, issued `issued`, good until `expires`.
    pub(crate) fn seal(
        &self,
        context: &[u8],
        state: &[u8],
        issued: UnixTime,
        expires: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<Vec<u8>, SealError> {
        let keys = self.ring.keys();
        let Some(token) = keys.all().next() else {
            return Err(SealError::UnknownKey);
        };
        let id = token.id();
        let mut salt = [0u8; SALT];
        rng.fill(&mut salt).map_err(|_| SealError::Rng)?;
        let key = message_key(token, &salt);
        let mut out = Vec::with_capacity(HEADER + 16 + state.len() + TAG);
        out.push(VERSION);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&salt);
        let mut body = Zeroizing::new(Vec::with_capacity(16 + state.len() + TAG));
        body.extend_from_slice(&issued.as_millis().to_be_bytes());
        body.extend_from_slice(&expires.as_millis().to_be_bytes());
        body.extend_from_slice(state);
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(ZERO_NONCE),
            Aad::from(aad(id, context)),
            &mut *body,
        )
        .map_err(|_| SealError::Invalid)?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Open what [`Self::seal`] sealed for `context`, if still valid at `now`.
    pub(crate) fn open(
        &self,
        context: &[u8],
        sealed: &[u8],
        now: UnixTime,
    ) -> Result<Opened, SealError> {
        if sealed.len() < HEADER + 16 + TAG || sealed[0] != VERSION {
            return Err(SealError::Invalid);
        }
        let id = u32::from_be_bytes([sealed[1], sealed[2], sealed[3], sealed[4]]);
        let keys = self.ring.keys();
        let token = keys
            .all()
            .find(|k| k.id() == id)
            .ok_or(SealError::UnknownKey)?;
        let key = message_key(token, &sealed[5..HEADER]);
        let mut body = Zeroizing::new(sealed[HEADER..].to_vec());
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(ZERO_NONCE),
                Aad::from(aad(id, context)),
                &mut body,
            )
            .map_err(|_| SealError::Invalid)?;
        let ms = |b: &[u8]| {
            UnixTime::from_millis(u64::from_be_bytes(
                b.try_into().unwrap_or_else(|_| unreachable!("8 bytes")),
            ))
        };
        let issued = ms(&plain[..8]);
        let expires = ms(&plain[8..16]);
        if now >= expires {
            return Err(SealError::Expired);
        }
        Ok(Opened {
            issued,
            state: Zeroizing::new(plain[16..].to_vec()),
        })
    }
}

fn aad(id: u32, context: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(AAD_LABEL.len() + 4 + context.len());
    a.extend_from_slice(AAD_LABEL);
    a.extend_from_slice(&id.to_be_bytes());
    a.extend_from_slice(context);
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use zrtt_proto::admission::TokenKeys;

    fn key(b: u8) -> Arc<TokenKey> {
        Arc::new(TokenKey::new(&[b; 32], Duration::from_secs(60)))
    }

    const T0: UnixTime = UnixTime::from_secs(1_800_000_000);

    fn later(s: u64) -> UnixTime {
        T0.saturating_add(Duration::from_secs(s))
    }

    #[test]
    fn sealed_state_opens_on_every_gateway_of_the_fleet_and_nowhere_else() {
        let a = SessionSeal::new(TokenKeyRing::new(TokenKeys::single(TokenKey::new(
            &[1; 32],
            Duration::from_secs(60),
        ))));
        // Another gateway with the same token key.
        let b = SessionSeal::new(TokenKeyRing::new(TokenKeys::new(key(1), Vec::new())));
        let sealed = a
            .seal(
                b"ticket-1",
                b"state",
                T0,
                later(3600),
                &ring::rand::SystemRandom::new(),
            )
            .unwrap();
        assert!(!sealed.windows(5).any(|w| w == b"state"), "encrypted");
        let opened = b.open(b"ticket-1", &sealed, later(10)).unwrap();
        assert_eq!(*opened.state, b"state");
        assert_eq!(opened.issued, T0);
        // Stored under another ticket's key: refused.
        assert_eq!(
            b.open(b"ticket-2", &sealed, later(10)),
            Err(SealError::Invalid)
        );
        // Another site (another token key): unknown key.
        let other = SessionSeal::new(TokenKeyRing::new(TokenKeys::new(key(2), Vec::new())));
        assert_eq!(
            other.open(b"ticket-1", &sealed, later(10)),
            Err(SealError::UnknownKey)
        );
        // The same token key under another label (another use of it)
        // does not open it.
        let mut info = b"zrtt another use".to_vec();
        info.extend_from_slice(&sealed[5..HEADER]);
        let other_label = key(1).derive_aead_key(&info);
        let mut body = sealed[HEADER..].to_vec();
        let nonce = Nonce::assume_unique_for_key(ZERO_NONCE);
        let id = u32::from_be_bytes(sealed[1..5].try_into().unwrap());
        assert!(other_label
            .open_in_place(nonce, Aad::from(aad(id, b"ticket-1")), &mut body)
            .is_err());
        // Each message under its own key: the same state sealed twice
        // differs, and one message's salt does not open the other.
        let again = a
            .seal(
                b"ticket-1",
                b"state",
                T0,
                later(3600),
                &ring::rand::SystemRandom::new(),
            )
            .unwrap();
        assert_ne!(again[5..HEADER], sealed[5..HEADER], "a salt per message");
        let mut swapped = again.clone();
        swapped[5..HEADER].copy_from_slice(&sealed[5..HEADER]);
        assert_eq!(
            b.open(b"ticket-1", &swapped, later(10)),
            Err(SealError::Invalid)
        );
    }

    #[test]
    fn tampering_expiry_and_rotation() {
        let ring = TokenKeyRing::new(TokenKeys::new(key(1), Vec::new()));
        let s = SessionSeal::new(ring.clone());
        let sealed = s
            .seal(
                b"t",
                b"state",
                T0,
                later(100),
                &ring::rand::SystemRandom::new(),
            )
            .unwrap();
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(s.open(b"t", &bad, later(1)).is_err(), "byte {i}");
        }
        assert_eq!(
            s.open(b"t", &sealed[..sealed.len() - 1], later(1)),
            Err(SealError::Invalid)
        );
        assert_eq!(s.open(b"t", &[], later(1)), Err(SealError::Invalid));
        assert_eq!(s.open(b"t", &sealed, later(100)), Err(SealError::Expired));
        // Rotation: the new key seals, the old one still opens ...
        ring.replace(TokenKeys::new(key(3), vec![key(1)]));
        assert!(s.open(b"t", &sealed, later(1)).is_ok());
        let newer = s
            .seal(
                b"t",
                b"state",
                T0,
                later(100),
                &ring::rand::SystemRandom::new(),
            )
            .unwrap();
        assert_ne!(newer[1..5], sealed[1..5], "sealed under the new key id");
        // ... until it retires.
        ring.replace(TokenKeys::new(key(3), Vec::new()));
        assert_eq!(s.open(b"t", &sealed, later(1)), Err(SealError::UnknownKey));
        assert!(s.open(b"t", &newer, later(1)).is_ok());
    }
}
