//! ring's single-use X25519 ephemeral key (the NK reply's) against
//! curve25519-dalek, and how snow uses it: the same shared secrets and the
//! same refusals, exactly one DH per reply, no silent zero key.
//! A child module of `crypto` (it reaches the private adapter types).

use std::sync::{Arc, Mutex};

use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::CryptoResolver;
use snow::types::{Cipher, Dh, Hash, Random};

use super::*;

const NK: &str = "Noise_NK_25519_ChaChaPoly_SHA256";

fn point(hex: &str) -> [u8; 32] {
    crate::record::unhex(hex).unwrap().try_into().unwrap()
}

/// The shared secret from ring, the private key given by ring's fixed-bytes
/// test generator: `Err` if ring refuses.
fn ring_shared(private: [u8; 32], peer: &[u8; 32]) -> Result<[u8; 32], ()> {
    #[allow(deprecated)] // ring's test generators: the only way to fix its key
    let rng = ring::test::rand::FixedSliceRandom { bytes: &private };
    let e = RingEphemeral::generate(&rng).map_err(|_| ())?;
    assert_eq!(&e.public, X25519KeyPair::from_private(private).public());
    let mut out = [0u8; 32];
    e.dh(peer, &mut out).map_err(|_| ())?;
    assert!(e.dh(peer, &mut out).is_err(), "single use");
    Ok(out)
}

/// The shared secret from the curve25519-dalek path of the adapter.
fn dalek_shared(private: [u8; 32], peer: &[u8; 32]) -> Result<[u8; 32], ()> {
    let dh = X25519 {
        pair: X25519KeyPair::from_private(private),
        known: None,
        ring_generate: None,
        ring: None,
    };
    let mut out = [0u8; 32];
    dh.dh(peer, &mut out).map_err(|_| ())?;
    Ok(out)
}

#[test]
fn ring_and_dalek_agree_on_edge_points_and_random_keys() {
    // Small-order points (libsodium's blocklist): 0, 1, the two of order 8,
    // p-1, p, p+1 (p = 2^255 - 19, little-endian).
    let small_order = [
        point("0000000000000000000000000000000000000000000000000000000000000000"),
        point("0100000000000000000000000000000000000000000000000000000000000000"),
        point("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
        point("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
        point("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        point("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        point("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
    ];
    let seeded = SeededRandomForTestingOnly::new([0x25; 32]);
    let mut others = vec![
        point("0900000000000000000000000000000000000000000000000000000000000000"),
        // p+2 and 2^255-1 (non-canonical encodings of 2 and 18).
        point("efffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        point("ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
    ];
    for _ in 0..4 {
        let mut k = [0u8; 32];
        seeded.fill(&mut k).unwrap();
        others.push(*X25519KeyPair::from_private(k).public());
        let mut raw = [0u8; 32]; // not necessarily on the curve (the twist)
        seeded.fill(&mut raw).unwrap();
        others.push(raw);
    }
    let high_bit = |p: &[u8; 32]| {
        let mut p = *p;
        p[31] |= 0x80;
        p
    };
    let small: Vec<_> = small_order.iter().flat_map(|p| [*p, high_bit(p)]).collect();
    let others: Vec<_> = others.iter().flat_map(|p| [*p, high_bit(p)]).collect();

    let mut keys = vec![[0u8; 32], [0xff; 32], [1; 32]];
    for _ in 0..6 {
        let mut k = [0u8; 32];
        seeded.fill(&mut k).unwrap();
        keys.push(k);
    }
    for k in &keys {
        for p in &small {
            assert_eq!(dalek_shared(*k, p), Err(()), "dalek refuses {p:02x?}");
            assert_eq!(ring_shared(*k, p), Err(()), "ring refuses {p:02x?}");
        }
        for p in &others {
            let (r, d) = (ring_shared(*k, p), dalek_shared(*k, p));
            assert_eq!(r, d, "key {k:02x?}, point {p:02x?}");
            assert!(d.is_ok(), "not small order: {p:02x?}");
        }
    }
}

#[test]
#[allow(clippy::disallowed_methods)] // the OS generator is the case under test
fn generate_keypair_with_the_single_use_resolver_is_never_a_silent_key() {
    let os = ring::rand::SystemRandom::new();
    let made = std::panic::catch_unwind(|| {
        let resolver = ZrttResolver::single_use_ephemeral(&os, None).unwrap();
        snow::Builder::with_resolver(noise_params(NK).unwrap(), Box::new(resolver))
            .generate_keypair()
    });
    // snow 0.10.0 copies the empty `privkey()` into 32 bytes: a panic.
    if let Ok(Ok(pair)) = made {
        panic!(
            "a key pair without ring's private key: {:02x?}",
            pair.public
        );
    }
}

/// What one `Dh` object of a handshake did.
#[derive(Debug, Default, Clone)]
struct Calls {
    generate: usize,
    dh_ok: usize,
    dh_err: usize,
    privkey: usize,
}

type Log = Arc<Mutex<Vec<Calls>>>;

struct CountingDh {
    inner: Box<dyn Dh>,
    id: usize,
    log: Log,
}

impl CountingDh {
    fn record(&self, f: impl FnOnce(&mut Calls)) {
        f(&mut self.log.lock().unwrap()[self.id]);
    }
}

impl Dh for CountingDh {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn pub_len(&self) -> usize {
        self.inner.pub_len()
    }
    fn priv_len(&self) -> usize {
        self.inner.priv_len()
    }
    fn set(&mut self, privkey: &[u8]) {
        self.inner.set(privkey)
    }
    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        self.record(|c| c.generate += 1);
        self.inner.generate(rng)
    }
    fn pubkey(&self) -> &[u8] {
        self.inner.pubkey()
    }
    fn privkey(&self) -> &[u8] {
        self.record(|c| c.privkey += 1);
        self.inner.privkey()
    }
    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let r = self.inner.dh(pubkey, out);
        self.record(|c| match r {
            Ok(()) => c.dh_ok += 1,
            Err(_) => c.dh_err += 1,
        });
        r
    }
}

struct Counting {
    inner: ZrttResolver,
    log: Log,
}

impl CryptoResolver for Counting {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        self.inner.resolve_rng()
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        let inner = self.inner.resolve_dh(choice)?;
        let mut log = self.log.lock().unwrap();
        log.push(Calls::default());
        Some(Box::new(CountingDh {
            inner,
            id: log.len() - 1,
            log: self.log.clone(),
        }))
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        self.inner.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        self.inner.resolve_cipher(choice)
    }
}

#[test]
#[allow(clippy::disallowed_methods)] // the OS generator is the case under test
fn an_nk_reply_does_exactly_one_dh_with_the_ring_ephemeral() {
    let os = ring::rand::SystemRandom::new();
    let seeded = SeededRandomForTestingOnly::new([0x4e; 32]);
    let server = X25519KeyPair::from_private([0x53; 32]);
    let log: Log = Arc::default();
    let inner = ZrttResolver::single_use_ephemeral(&os, Some(&server)).unwrap();
    assert!(inner.ring_ephemeral.is_some(), "ring's key under test");
    let counting = Counting {
        inner,
        log: log.clone(),
    };
    // As `accept` builds it (handshake/server.rs).
    let mut responder = snow::Builder::with_resolver(noise_params(NK).unwrap(), Box::new(counting))
        .local_private_key(server.private())
        .and_then(|b| b.build_responder())
        .unwrap();
    let client_resolver = ZrttResolver::new(&seeded, None).unwrap();
    let mut initiator =
        snow::Builder::with_resolver(noise_params(NK).unwrap(), Box::new(client_resolver))
            .remote_public_key(server.public())
            .and_then(|b| b.build_initiator())
            .unwrap();

    let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
    let n = initiator.write_message(b"flight", &mut a).unwrap();
    let m = responder.read_message(&a[..n], &mut b).unwrap();
    assert_eq!(&b[..m], b"flight");
    let before: Vec<Calls> = log.lock().unwrap().clone();
    let n = responder.write_message(b"reply", &mut a).unwrap();
    let m = initiator.read_message(&a[..n], &mut b).unwrap();
    assert_eq!(&b[..m], b"reply");

    let after = log.lock().unwrap().clone();
    let ephemeral: Vec<_> = after.iter().filter(|c| c.generate > 0).collect();
    assert_eq!(ephemeral.len(), 1, "one generated key: {after:?}");
    let e = ephemeral[0];
    assert_eq!(
        (e.generate, e.dh_ok, e.dh_err, e.privkey),
        (1, 1, 0, 0),
        "{after:?}"
    );
    let during: usize = after.iter().map(|c| c.dh_ok + c.dh_err).sum::<usize>()
        - before.iter().map(|c| c.dh_ok + c.dh_err).sum::<usize>();
    assert_eq!(
        during, 1,
        "write_message: `e, ee`, one DH: {before:?} {after:?}"
    );

    // Both ends derived the same keys.
    let mut responder = responder.into_transport_mode().unwrap();
    let mut initiator = initiator.into_transport_mode().unwrap();
    let n = responder.write_message(b"record", &mut a).unwrap();
    let m = initiator.read_message(&a[..n], &mut b).unwrap();
    assert_eq!(&b[..m], b"record");
}
