//! The randomness seam and X25519 key pairs. The core never reads the OS
//! RNG: the shell passes a [`SecureRandom`] (usually `ring::rand::SystemRandom`),
//! tests pass a seeded one.

use core::fmt;

use curve25519_dalek::montgomery::MontgomeryPoint;
use snow::params::NoiseParams;
use snow::resolvers::{CryptoResolver, RingResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use zeroize::Zeroize;

use crate::error::Error;

/// A source of cryptographically secure random bytes.
pub trait SecureRandom: Send + Sync {
    /// Fill `dest` entirely.
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error>;

    /// `Some` only if this source is ring's `SystemRandom` (the OS
    /// generator). ring's X25519 ephemeral keys, cheaper than
    /// curve25519-dalek's, accept no other generator (ring's `SecureRandom`
    /// is sealed), so the server uses them for a reply's ephemeral key only
    /// when the injected source is the OS generator anyway; every other
    /// source (seeded tests, the vectors) keeps every key drawn through
    /// [`Self::fill`].
    fn system_random(&self) -> Option<&ring::rand::SystemRandom> {
        None
    }
}

impl SecureRandom for ring::rand::SystemRandom {
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error> {
        ring::rand::SecureRandom::fill(self, dest).map_err(|_| Error::Rng)
    }

    fn system_random(&self) -> Option<&ring::rand::SystemRandom> {
        Some(self)
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
        let public = scalar_mult(None, private, || {
            MontgomeryPoint::mul_base_clamped(private).to_bytes()
        });
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

/// An X25519 scalar multiplication (`point` `None`: the base point).
/// Outside fuzz builds it is `compute()`.
#[cfg(not(fuzzing))]
#[inline(always)]
fn scalar_mult(
    _point: Option<[u8; 32]>,
    _scalar: [u8; 32],
    compute: impl FnOnce() -> [u8; 32],
) -> [u8; 32] {
    compute()
}

/// Fuzz builds only (`cargo fuzz` sets `--cfg fuzzing`; no other build
/// does): results are memoized per thread (at most 4,096), so the fuzz
/// entry points that run whole handshakes with the fixed test keys spend
/// their time in the parsers, not in repeating the same multiplications.
#[cfg(fuzzing)]
fn scalar_mult(
    point: Option<[u8; 32]>,
    scalar: [u8; 32],
    compute: impl FnOnce() -> [u8; 32],
) -> [u8; 32] {
    use std::cell::RefCell;
    use std::collections::HashMap;
    type Memo = HashMap<(Option<[u8; 32]>, [u8; 32]), [u8; 32]>;
    thread_local!(static MEMO: RefCell<Memo> = RefCell::new(HashMap::new()));
    if let Some(r) = MEMO.with(|m| m.borrow().get(&(point, scalar)).copied()) {
        return r;
    }
    let r = compute();
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= 4096 {
            m.clear();
        }
        m.insert((point, scalar), r);
    });
    r
}

/// Resolver for snow: ring for AEADs and hashes, [`X25519`] for DH, and for
/// randomness exactly the 32 bytes of ephemeral secret we drew from the
/// injected [`SecureRandom`] (or, for a single-use ephemeral key and the OS
/// generator, ring's own key generation: [`ZrttResolver::single_use_ephemeral`]).
pub(crate) struct ZrttResolver {
    ephemeral: Option<[u8; 32]>,
    known_static: Option<X25519KeyPair>,
    /// The OS generator, when the ephemeral key is ring's.
    ring_ephemeral: Option<ring::rand::SystemRandom>,
}

impl ZrttResolver {
    /// `known_static` is the local static key the handshake will use, so its
    /// public key need not be re-derived (one scalar multiplication saved per
    /// handshake; the benchmark in benches/core.rs shows it).
    pub(crate) fn new(
        rng: &dyn SecureRandom,
        known_static: Option<&X25519KeyPair>,
    ) -> Result<Self, Error> {
        let mut e = [0u8; 32];
        rng.fill(&mut e)?;
        Ok(Self {
            ephemeral: Some(e),
            known_static: known_static.cloned(),
            ring_ephemeral: None,
        })
    }

    /// For a handshake whose local ephemeral key takes part in exactly one
    /// DH (the NK responder: `e, ee`): when `rng` is the OS generator, the
    /// ephemeral key is generated and used by ring (`EphemeralPrivateKey`,
    /// single use by construction: a second DH with it fails): key
    /// generation and DH cost about 60 µs with ring against 70-84 µs with
    /// curve25519-dalek here (docs/GATEWAY.md, Server CPU per connection).
    /// Any other `rng` behaves as [`Self::new`], so seeded tests and the
    /// vectors stay byte for byte.
    pub(crate) fn single_use_ephemeral(
        rng: &dyn SecureRandom,
        known_static: Option<&X25519KeyPair>,
    ) -> Result<Self, Error> {
        match rng.system_random() {
            Some(os) if !cfg!(fuzzing) => Ok(Self {
                ephemeral: None,
                known_static: known_static.cloned(),
                ring_ephemeral: Some(os.clone()),
            }),
            _ => Self::new(rng, known_static),
        }
    }
}

/// A local ephemeral X25519 key held by ring: generated from the OS
/// generator, used for one DH, then gone.
struct RingEphemeral {
    key: std::sync::Mutex<Option<ring::agreement::EphemeralPrivateKey>>,
    public: [u8; 32],
}

impl RingEphemeral {
    fn generate(rng: &ring::rand::SystemRandom) -> Result<Self, snow::Error> {
        let key = ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, rng)
            .map_err(|_| snow::Error::Rng)?;
        let public = key
            .compute_public_key()
            .ok()
            .and_then(|p| <[u8; 32]>::try_from(p.as_ref()).ok())
            .ok_or(snow::Error::Dh)?;
        Ok(Self {
            key: std::sync::Mutex::new(Some(key)),
            public,
        })
    }

    /// The one DH this key allows; ring refuses an all-zero result
    /// (small-order peer key), as [`X25519::dh`] does.
    fn dh(&self, peer: &[u8; 32], out: &mut [u8]) -> Result<(), snow::Error> {
        let key = self
            .key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or(snow::Error::Dh)?;
        let peer = ring::agreement::UnparsedPublicKey::new(&ring::agreement::X25519, peer);
        ring::agreement::agree_ephemeral(key, &peer, |shared| {
            let n = out.len().min(shared.len());
            out[..n].copy_from_slice(&shared[..n]);
        })
        .map_err(|_| snow::Error::Dh)
    }
}

/// X25519 for snow, computed exactly as snow's default resolver does
/// (curve25519-dalek `mul_clamped`), except that `set` reuses the public key
/// of a key pair we already hold instead of deriving it again, and that with
/// `ring_generate` a generated key is ring's single-use [`RingEphemeral`].
struct X25519 {
    pair: X25519KeyPair,
    known: Option<X25519KeyPair>,
    ring_generate: Option<ring::rand::SystemRandom>,
    ring: Option<RingEphemeral>,
}

impl Dh for X25519 {
    fn name(&self) -> &'static str {
        "25519"
    }
    fn pub_len(&self) -> usize {
        32
    }
    fn priv_len(&self) -> usize {
        32
    }
    fn set(&mut self, privkey: &[u8]) {
        self.ring = None;
        let mut private = [0u8; 32];
        let n = privkey.len().min(32);
        private[..n].copy_from_slice(&privkey[..n]);
        self.pair = match &self.known {
            Some(k) if k.private == private => k.clone(),
            _ => X25519KeyPair::from_private(private),
        };
        private.zeroize();
    }
    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        if let Some(os) = &self.ring_generate {
            self.ring = Some(RingEphemeral::generate(os)?);
            return Ok(());
        }
        let mut private = [0u8; 32];
        rng.try_fill_bytes(&mut private)?;
        self.pair = X25519KeyPair::from_private(private);
        private.zeroize();
        Ok(())
    }
    fn pubkey(&self) -> &[u8] {
        match &self.ring {
            Some(r) => &r.public,
            None => &self.pair.public,
        }
    }
    /// Empty for a ring key (ring never reveals it). snow 0.10 reads a
    /// private key only in `Builder::generate_keypair`, which zrtt never
    /// calls; the single-use resolver only ever builds `accept`'s responder.
    fn privkey(&self) -> &[u8] {
        match &self.ring {
            Some(_) => &[],
            None => &self.pair.private,
        }
    }
    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let Some(peer) = pubkey.get(..32).and_then(|p| <[u8; 32]>::try_from(p).ok()) else {
            return Err(snow::Error::Dh);
        };
        if let Some(r) = &self.ring {
            return r.dh(&peer, out);
        }
        let private = self.pair.private;
        let shared = scalar_mult(Some(peer), private, || {
            MontgomeryPoint(peer).mul_clamped(private).to_bytes()
        });
        // A small-order peer key gives an all-zero result: refuse it (Noise
        // §12.1 allows this), so no "authenticated" key exists without a
        // private key behind it.
        if shared.iter().fold(0u8, |acc, b| acc | b) == 0 {
            return Err(snow::Error::Dh);
        }
        let n = out.len().min(32);
        out[..n].copy_from_slice(&shared[..n]);
        Ok(())
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
        match choice {
            snow::params::DHChoice::Curve25519 => Some(Box::new(X25519 {
                pair: X25519KeyPair {
                    private: [0; 32],
                    public: [0; 32],
                },
                known: self.known_static.clone(),
                ring_generate: self.ring_ephemeral.clone(),
                ring: None,
            })),
            _ => None,
        }
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
    fn small_order_peer_keys_are_refused() {
        let mut dh = X25519 {
            pair: X25519KeyPair::from_private([7; 32]),
            known: None,
            ring_generate: None,
            ring: None,
        };
        let mut out = [0u8; 32];
        // 0 and 1 are small-order points: the shared secret would be zero.
        assert!(dh.dh(&[0u8; 32], &mut out).is_err());
        let mut one = [0u8; 32];
        one[0] = 1;
        assert!(dh.dh(&one, &mut out).is_err());
        dh.set(&[8; 32]);
        assert!(dh
            .dh(X25519KeyPair::from_private([9; 32]).public(), &mut out)
            .is_ok());
        assert_ne!(out, [0u8; 32]);
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // the OS generator is the case under test
    fn ring_ephemeral_agrees_with_dalek_and_serves_one_dh() {
        let os = ring::rand::SystemRandom::new();
        let seeded = SeededRandomForTestingOnly::new([3; 32]);
        let r = ZrttResolver::single_use_ephemeral(&os, None).unwrap();
        assert!(r.ring_ephemeral.is_some() && r.ephemeral.is_none());
        let r = ZrttResolver::single_use_ephemeral(&seeded, None).unwrap();
        assert!(
            r.ring_ephemeral.is_none() && r.ephemeral.is_some(),
            "seeded: as new()"
        );
        let Some(mut e) = ZrttResolver::single_use_ephemeral(&os, None)
            .unwrap()
            .resolve_dh(&snow::params::DHChoice::Curve25519)
        else {
            panic!("no DH")
        };
        e.generate(&mut OneShot(None)).unwrap();
        assert!(e.privkey().is_empty(), "ring keeps its private key");
        let peer = X25519KeyPair::from_private([9; 32]);
        let mut ours = [0u8; 32];
        e.dh(peer.public(), &mut ours).unwrap();
        let public: [u8; 32] = e.pubkey().try_into().unwrap();
        let theirs = MontgomeryPoint(public)
            .mul_clamped(*peer.private())
            .to_bytes();
        assert_eq!(ours, theirs);
        assert!(e.dh(peer.public(), &mut ours).is_err(), "a second DH fails");
        e.generate(&mut OneShot(None)).unwrap();
        assert!(e.dh(&[0u8; 32], &mut ours).is_err(), "small order refused");
        // A key that is set (a static key) is curve25519-dalek's.
        e.set(&[8; 32]);
        assert_eq!(e.pubkey(), X25519KeyPair::from_private([8; 32]).public());
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
