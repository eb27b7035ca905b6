//! The randomness seam and X25519 key pairs. The core never reads the OS
//! RNG: the shell passes a [`SecureRandom`] (usually `ring::rand::SystemRandom`),
//! tests pass a seeded one.

use core::fmt;

use snow::params::NoiseParams;
use snow::resolvers::{CryptoResolver, DefaultResolver, RingResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use zeroize::Zeroize;

use crate::error::Error;

/// A source of cryptographically secure random bytes.
pub trait SecureRandom: Send + Sync {
    /// Fill `dest` entirely.
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error>;
}

impl SecureRandom for ring::rand::SystemRandom {
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error> {
        ring::rand::SecureRandom::fill(self, dest).map_err(|_| Error::Rng)
    }
}

/// A deterministic generator (SHA-256 in counter mode over a seed) for test
/// vectors and reproducible tests. Never use it for real keys.
pub struct SeededRandomForTestingOnly {
    seed: [u8; 32],
    counter: std::sync::atomic::AtomicU64,
}

impl SeededRandomForTestingOnly {
    /// A generator whose output depends only on `seed`.
    pub fn new(seed: [u8; 32]) -> Self {
        Self {
            seed,
            counter: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl SecureRandom for SeededRandomForTestingOnly {
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error> {
        for chunk in dest.chunks_mut(32) {
            let n = self
                .counter
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut input = self.seed.to_vec();
            input.extend_from_slice(&n.to_be_bytes());
            let block = crate::record::sha256(&input);
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

/// An X25519 key pair (a semi-static server key or a client static key).
#[derive(Clone)]
pub struct X25519KeyPair {
    private: [u8; 32],
    public: [u8; 32],
}

impl Drop for X25519KeyPair {
    fn drop(&mut self) {
        self.private.zeroize();
    }
}

impl fmt::Debug for X25519KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "X25519KeyPair {{ public: {}, private: <redacted> }}",
            crate::record::hex(&self.public)
        )
    }
}

impl X25519KeyPair {
    /// A fresh key pair from `rng`.
    pub fn generate(rng: &dyn SecureRandom) -> Result<Self, Error> {
        let mut private = [0u8; 32];
        rng.fill(&mut private)?;
        Ok(Self::from_private(private))
    }

    /// The key pair of a stored private key (clamped by X25519 itself).
    pub fn from_private(private: [u8; 32]) -> Self {
        let mut dh = DefaultResolver
            .resolve_dh(&snow::params::DHChoice::Curve25519)
            .unwrap_or_else(|| unreachable_resolver());
        dh.set(&private);
        let mut public = [0u8; 32];
        public.copy_from_slice(dh.pubkey());
        Self { private, public }
    }

    /// The public key.
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }

    /// The private key (for storage; handle with care).
    pub fn private(&self) -> &[u8; 32] {
        &self.private
    }
}

// snow's default resolver always provides Curve25519 when the
// `use-curve25519` feature is on, which this crate's manifest requires.
#[allow(clippy::panic)]
fn unreachable_resolver() -> Box<dyn Dh> {
    panic!("snow built without Curve25519")
}

/// Resolver for snow: ring for AEADs and hashes, curve25519-dalek for X25519,
/// and for randomness exactly the 32 bytes of ephemeral secret we drew from
/// the injected [`SecureRandom`].
pub(crate) struct ZrttResolver {
    ephemeral: Option<[u8; 32]>,
}

impl ZrttResolver {
    pub(crate) fn new(rng: &dyn SecureRandom) -> Result<Self, Error> {
        let mut e = [0u8; 32];
        rng.fill(&mut e)?;
        Ok(Self { ephemeral: Some(e) })
    }
}

struct OneShot(Option<[u8; 32]>);

impl Random for OneShot {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        match self.0.take() {
            Some(bytes) if dest.len() == 32 => {
                dest.copy_from_slice(&bytes);
                Ok(())
            }
            _ => Err(snow::Error::Rng),
        }
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        if let Some(b) = self.0.as_mut() {
            b.zeroize();
        }
    }
}

impl CryptoResolver for ZrttResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(OneShot(self.ephemeral)))
    }
    fn resolve_dh(&self, choice: &snow::params::DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &snow::params::HashChoice) -> Option<Box<dyn Hash>> {
        RingResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &snow::params::CipherChoice) -> Option<Box<dyn Cipher>> {
        RingResolver.resolve_cipher(choice)
    }
}

impl Drop for ZrttResolver {
    fn drop(&mut self) {
        if let Some(b) = self.ephemeral.as_mut() {
            b.zeroize();
        }
    }
}

pub(crate) fn noise_params(name: &str) -> Result<NoiseParams, Error> {
    name.parse().map_err(|e: snow::Error| {
        Error::Handshake(crate::error::HandshakeError::Noise(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_random_is_deterministic_and_seed_dependent() {
        let a = SeededRandomForTestingOnly::new([1; 32]);
        let b = SeededRandomForTestingOnly::new([1; 32]);
        let c = SeededRandomForTestingOnly::new([2; 32]);
        let (mut x, mut y, mut z) = ([0u8; 50], [0u8; 50], [0u8; 50]);
        a.fill(&mut x).unwrap();
        b.fill(&mut y).unwrap();
        c.fill(&mut z).unwrap();
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    #[test]
    fn rfc7748_public_key() {
        // RFC 7748 §6.1, Alice's key pair.
        let sk = crate::record::unhex(
            "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        )
        .unwrap();
        let pk = crate::record::unhex(
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
        )
        .unwrap();
        let kp = X25519KeyPair::from_private(sk.try_into().unwrap());
        assert_eq!(kp.public().as_slice(), pk.as_slice());
    }
}
