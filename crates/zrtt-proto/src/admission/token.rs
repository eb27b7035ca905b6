//! Self-issued address tokens: the TCP Fast Open cookie done right.
//!
//! After a connection's TCP handshake completes (so its address is proven),
//! the gateway sends the client a token in a channel record of kind
//! `Token`. The token is sealed with a key shared by a fleet of gateways and
//! binds the client's IP address, its Noise static key (IK) and an expiry.
//! A later first flight from the same address, using IK with the same static
//! key and carrying the token in `ext::ADDRESS_TOKEN`, is answered before the
//! handshake completes. Because the first-flight key includes `ss`, only the
//! holder of the static private key can use a token: copying it gains nothing.
//!
//! Wire form: `0x02 || key_id (4) || nonce (12) || ChaCha20-Poly1305(expiry_ms u64 || static (32) || ip (4|16))`,
//! associated data `"zrtt token v2" || key_id`. The key id (the first four
//! bytes of SHA-256(`"zrtt token key id"` || secret)) lets a fleet rotate
//! the key: tokens sealed under an older key of the [`TokenKeys`] in force
//! stay valid until they expire.

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::crypto::SecureRandom;
use crate::time::UnixTime;
use ring::aead::{self, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

use super::canonical_ip as canonical;

const VERSION: u8 = 2;
const AAD: &[u8] = b"zrtt token v2";
const ID_LABEL: &[u8] = b"zrtt token key id";
const DERIVE_SALT: &[u8] = b"zrtt token key derive";
/// version, key id, nonce, expiry, static key, IPv4 address, tag.
const MIN_LEN: usize = 1 + 4 + NONCE_LEN + 8 + 32 + 4 + 16;

/// Why a token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a token this key sealed (or altered).
    #[error("token does not open")]
    Invalid,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Issued to another address.
    #[error("token issued to another address")]
    WrongAddress,
    /// Issued to another client static key (or the flight used NK).
    #[error("token issued to another client key")]
    WrongKey,
    /// Sealed under a key this gateway does not hold (retired, or another site's).
    #[error("token sealed under an unknown key")]
    UnknownKey,
    /// The random number generator failed.
    #[error("random number generator failed")]
    Rng,
}

/// One sealing key a fleet of gateways shares.
pub struct TokenKey {
    id: u32,
    key: LessSafeKey,
    lifetime: Duration,
    /// HKDF-Extract of the secret, for keys derived under other labels.
    derive: ring::hkdf::Prk,
    /// The resumption ticket key derived from the same secret
    /// (docs/PROTOCOL.md §12.2).
    ticket: crate::handshake::TicketKey,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("id", &format_args!("{:08x}", self.id))
            .field("key", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// The id of the token key `secret` (public: it names the key in tokens).
pub fn token_key_id(secret: &[u8; 32]) -> u32 {
    let mut input = ID_LABEL.to_vec();
    input.extend_from_slice(secret);
    let h = crate::record::sha256(&input);
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

impl TokenKey {
    /// A key from 32 secret bytes; tokens live for `lifetime`.
    pub fn new(secret: &[u8; 32], lifetime: Duration) -> Self {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, secret)
            .unwrap_or_else(|_| unreachable!("32 bytes is the ChaCha20-Poly1305 key length"));
        let id = token_key_id(secret);
        Self {
            id,
            key: LessSafeKey::new(unbound),
            lifetime,
            derive: ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, DERIVE_SALT).extract(secret),
            ticket: crate::handshake::TicketKey::derive(secret, id),
        }
    }

    /// A ChaCha20-Poly1305 key derived from this key's secret for another
    /// use, named by `label` (HKDF-SHA256, salt `"zrtt token key derive"`,
    /// info `label`): it rotates and is shared with this key. Each use
    /// takes its own label.
    pub fn derive_aead_key(&self, label: &[u8]) -> LessSafeKey {
        let info = [label];
        let okm = self
            .derive
            .expand(&info, &CHACHA20_POLY1305)
            .unwrap_or_else(|_| unreachable!("32 bytes is within HKDF-SHA256's output"));
        LessSafeKey::new(UnboundKey::from(okm))
    }

    /// The resumption ticket key of this token key (same id, HKDF of the
    /// same secret under its own label: docs/PROTOCOL.md §12.2).
    pub fn ticket_key(&self) -> &crate::handshake::TicketKey {
        &self.ticket
    }

    /// The key's id, carried in its tokens.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// How long issued tokens live.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Seal a token for `ip` and `client_static`, valid from `now` for the lifetime.
    pub fn issue(
        &self,
        ip: IpAddr,
        client_static: &[u8; 32],
        now: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<Vec<u8>, TokenError> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill(&mut nonce).map_err(|_| TokenError::Rng)?;
        let mut body = Vec::with_capacity(8 + 32 + 16 + 16);
        body.extend_from_slice(&now.saturating_add(self.lifetime).as_millis().to_be_bytes());
        body.extend_from_slice(client_static);
        match canonical(ip) {
            IpAddr::V4(a) => body.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => body.extend_from_slice(&a.octets()),
        }
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(self.aad()),
                &mut body,
            )
            .map_err(|_| TokenError::Invalid)?;
        let mut out = Vec::with_capacity(5 + NONCE_LEN + body.len());
        out.push(VERSION);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    fn aad(&self) -> [u8; 17] {
        let mut aad = [0u8; 17];
        aad[..13].copy_from_slice(AAD);
        aad[13..].copy_from_slice(&self.id.to_be_bytes());
        aad
    }

    /// Check a token presented from `ip` by a client whose static key is
    /// `client_static` (`None` for NK, which never matches).
    pub fn verify(
        &self,
        token: &[u8],
        ip: IpAddr,
        client_static: Option<&[u8; 32]>,
        now: UnixTime,
    ) -> Result<(), TokenError> {
        match token_id(token) {
            Some(id) if id == self.id => {}
            Some(_) => return Err(TokenError::UnknownKey),
            None => return Err(TokenError::Invalid),
        }
        let (nonce, sealed) = token[5..].split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| TokenError::Invalid)?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(self.aad()), &mut buf)
            .map_err(|_| TokenError::Invalid)?;
        let (expiry, rest) = plain.split_at(8);
        let (stat, addr) = rest.split_at(32);
        let mut e = [0u8; 8];
        e.copy_from_slice(expiry);
        if now.as_millis() >= u64::from_be_bytes(e) {
            return Err(TokenError::Expired);
        }
        let bound: IpAddr = match addr.len() {
            4 => <[u8; 4]>::try_from(addr)
                .map(IpAddr::from)
                .map_err(|_| TokenError::Invalid)?,
            16 => <[u8; 16]>::try_from(addr)
                .map(IpAddr::from)
                .map_err(|_| TokenError::Invalid)?,
            _ => return Err(TokenError::Invalid),
        };
        if bound != canonical(ip) {
            return Err(TokenError::WrongAddress);
        }
        match client_static {
            Some(s) if s.as_slice() == stat => Ok(()),
            _ => Err(TokenError::WrongKey),
        }
    }
}

/// The key id a token names, if it is a token of this version at all.
fn token_id(token: &[u8]) -> Option<u32> {
    if token.len() < MIN_LEN || token[0] != VERSION {
        return None;
    }
    Some(u32::from_be_bytes([token[1], token[2], token[3], token[4]]))
}

/// The token keys in force: the current one seals new tokens, every one
/// opens the tokens it sealed (so tokens issued before a rotation stay
/// valid until they expire).
#[derive(Debug)]
pub struct TokenKeys {
    current: Arc<TokenKey>,
    older: Vec<Arc<TokenKey>>,
}

impl TokenKeys {
    /// `current` seals; `older` keys only open.
    pub fn new(current: Arc<TokenKey>, older: Vec<Arc<TokenKey>>) -> Self {
        Self { current, older }
    }

    /// A single key.
    pub fn single(key: TokenKey) -> Self {
        Self::new(Arc::new(key), Vec::new())
    }

    /// The key that seals new tokens.
    pub fn current(&self) -> &Arc<TokenKey> {
        &self.current
    }

    /// Ids of every key held, the current one first.
    pub fn ids(&self) -> Vec<u32> {
        std::iter::once(&self.current)
            .chain(&self.older)
            .map(|k| k.id)
            .collect()
    }

    /// Every key held, the current one first.
    pub fn all(&self) -> impl Iterator<Item = &Arc<TokenKey>> {
        std::iter::once(&self.current).chain(&self.older)
    }

    /// The ticket key with id `id`, if its token key is in force.
    pub fn ticket_key(&self, id: u32) -> Option<&crate::handshake::TicketKey> {
        std::iter::once(&self.current)
            .chain(&self.older)
            .find(|k| k.id == id)
            .map(|k| &k.ticket)
    }

    /// Check a token with the key that sealed it ([`TokenKey::verify`]).
    pub fn verify(
        &self,
        token: &[u8],
        ip: IpAddr,
        client_static: Option<&[u8; 32]>,
        now: UnixTime,
    ) -> Result<(), TokenError> {
        let id = token_id(token).ok_or(TokenError::Invalid)?;
        std::iter::once(&self.current)
            .chain(&self.older)
            .find(|k| k.id == id)
            .ok_or(TokenError::UnknownKey)?
            .verify(token, ip, client_static, now)
    }
}

/// The [`TokenKeys`] in force, replaceable while a gateway serves (a key
/// rotation): readers take the keys in force without holding the lock.
#[derive(Clone, Debug)]
pub struct TokenKeyRing(Arc<RwLock<Arc<TokenKeys>>>);

impl TokenKeyRing {
    /// A ring holding `keys`.
    pub fn new(keys: TokenKeys) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(keys))))
    }

    /// The keys in force.
    pub fn keys(&self) -> Arc<TokenKeys> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Put `keys` in force.
    pub fn replace(&self, keys: TokenKeys) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn setup() -> (TokenKey, Vec<u8>, IpAddr, [u8; 32], UnixTime) {
        let key = TokenKey::new(&[9; 32], Duration::from_secs(60));
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let stat = [5u8; 32];
        let now = UnixTime::from_secs(1_800_000_000);
        let rng = crate::crypto::SeededRandomForTestingOnly::new([7; 32]);
        let t = key.issue(ip, &stat, now, &rng).unwrap();
        (key, t, ip, stat, now)
    }

    #[test]
    fn valid_token_accepted_also_as_mapped_v6() {
        let (key, t, ip, stat, now) = setup();
        assert_eq!(key.verify(&t, ip, Some(&stat), now), Ok(()));
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
        assert_eq!(key.verify(&t, mapped, Some(&stat), now), Ok(()));
    }

    #[test]
    fn token_for_another_address_refused() {
        let (key, t, _, stat, now) = setup();
        let other: IpAddr = "198.18.0.9".parse().unwrap();
        assert_eq!(
            key.verify(&t, other, Some(&stat), now),
            Err(TokenError::WrongAddress)
        );
    }

    #[test]
    fn other_key_nk_expired_forged_refused() {
        let (key, mut t, ip, stat, now) = setup();
        assert_eq!(
            key.verify(&t, ip, Some(&[6; 32]), now),
            Err(TokenError::WrongKey)
        );
        assert_eq!(key.verify(&t, ip, None, now), Err(TokenError::WrongKey));
        assert_eq!(
            key.verify(
                &t,
                ip,
                Some(&stat),
                now.saturating_add(Duration::from_secs(61))
            ),
            Err(TokenError::Expired)
        );
        let other_fleet = TokenKey::new(&[8; 32], Duration::from_secs(60));
        assert_eq!(
            other_fleet.verify(&t, ip, Some(&stat), now),
            Err(TokenError::UnknownKey)
        );
        let last = t.len() - 1;
        t[last] ^= 1;
        assert_eq!(
            key.verify(&t, ip, Some(&stat), now),
            Err(TokenError::Invalid)
        );
        assert_eq!(
            key.verify(&[], ip, Some(&stat), now),
            Err(TokenError::Invalid)
        );
    }
}

#[cfg(test)]
mod rotation {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crypto::SeededRandomForTestingOnly;

    #[test]
    fn tokens_from_before_a_rotation_stay_valid_until_retired() {
        let rng = SeededRandomForTestingOnly::new([1; 32]);
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let now = UnixTime::from_secs(1_800_000_000);
        let hour = Duration::from_secs(3600);
        let (k1, k2) = (
            Arc::new(TokenKey::new(&[1; 32], hour)),
            Arc::new(TokenKey::new(&[2; 32], hour)),
        );
        assert_ne!(k1.id(), k2.id());
        let ring = TokenKeyRing::new(TokenKeys::new(k1.clone(), Vec::new()));
        let old = ring
            .keys()
            .current()
            .issue(ip, &[5; 32], now, &rng)
            .unwrap();
        assert_eq!(&old[1..5], &k1.id().to_be_bytes());
        // Rotate: k2 seals, k1 still opens.
        ring.replace(TokenKeys::new(k2.clone(), vec![k1.clone()]));
        assert_eq!(ring.keys().ids(), vec![k2.id(), k1.id()]);
        let new = ring
            .keys()
            .current()
            .issue(ip, &[5; 32], now, &rng)
            .unwrap();
        assert_eq!(ring.keys().verify(&old, ip, Some(&[5; 32]), now), Ok(()));
        assert_eq!(ring.keys().verify(&new, ip, Some(&[5; 32]), now), Ok(()));
        // Retire k1: its tokens name an unknown key.
        ring.replace(TokenKeys::single(TokenKey::new(&[2; 32], hour)));
        assert_eq!(
            ring.keys().verify(&old, ip, Some(&[5; 32]), now),
            Err(TokenError::UnknownKey)
        );
        // A token whose id was changed does not open under the named key.
        let mut forged = new.clone();
        forged[1..5].copy_from_slice(&k1.id().to_be_bytes());
        let both = TokenKeys::new(k2, vec![k1]);
        assert_eq!(
            both.verify(&forged, ip, Some(&[5; 32]), now),
            Err(TokenError::Invalid)
        );
        assert_eq!(
            both.verify(&[2, 0], ip, Some(&[5; 32]), now),
            Err(TokenError::Invalid)
        );
    }
}
