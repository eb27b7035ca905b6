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
//! Wire form: `0x01 || nonce (12) || ChaCha20-Poly1305(expiry_ms u64 || static (32) || ip (4|16))`,
//! associated data `"zrtt token v1"`.

use std::net::IpAddr;
use std::time::Duration;

use ring::aead::{self, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::UnixTime;

/// The client's side (tokens and the static keys they are bound to).
pub use crate::client::TokenStore;

const VERSION: u8 = 1;
const AAD: &[u8] = b"zrtt token v1";

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
    /// The random number generator failed.
    #[error("random number generator failed")]
    Rng,
}

/// The sealing key a fleet of gateways shares.
pub struct TokenKey {
    key: LessSafeKey,
    lifetime: Duration,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("key", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

impl TokenKey {
    /// A key from 32 secret bytes; tokens live for `lifetime`.
    pub fn new(secret: &[u8; 32], lifetime: Duration) -> Self {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, secret)
            .unwrap_or_else(|_| unreachable!("32 bytes is the ChaCha20-Poly1305 key length"));
        Self {
            key: LessSafeKey::new(unbound),
            lifetime,
        }
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
                aead::Aad::from(AAD),
                &mut body,
            )
            .map_err(|_| TokenError::Invalid)?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + body.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
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
        let (&version, rest) = token.split_first().ok_or(TokenError::Invalid)?;
        if version != VERSION || rest.len() < NONCE_LEN + 8 + 32 + 4 + 16 {
            return Err(TokenError::Invalid);
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| TokenError::Invalid)?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, aead::Aad::from(AAD), &mut buf)
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

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
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
        let rng = ring::rand::SystemRandom::new();
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
            Err(TokenError::Invalid)
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
