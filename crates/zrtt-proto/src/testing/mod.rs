//! Test fixtures and fuzz entry points (feature `fixtures`; never in
//! production builds). The fixed keys here make the test vectors in
//! docs/PROTOCOL.md reproducible.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    missing_docs
)]

use pki_types::pem::PemObject;

use crate::crypto::{SeededRandomForTestingOnly, X25519KeyPair};
use crate::handshake::ServerKey;
use crate::handshake::{read_frame, Expect, Frame, ServerConfig, Transport};
use crate::record::{encodings, sha256, Aead, KeyRecord, RecordBody, RecordFlags, RecordSigner};
use crate::replay::ReplayFilter;
use crate::time::UnixTime;

/// Binary record decoders (key records and verifier key records);
/// round-trip what they accept.
pub fn record(data: &[u8]) {
    if let Ok(r) = KeyRecord::decode(data) {
        let again = r.encode();
        assert_eq!(again, data, "accepted record must re-encode identically");
    }
    if let Ok(r) = crate::record::VerifierKeyRecord::decode(data) {
        assert_eq!(
            r.encode(),
            data,
            "accepted verifier record must re-encode identically"
        );
    }
    let _ = crate::record::decode_record_list(data);
}

/// TXT (key and verifier key records), SVCB, AAAA-tunnel and TLSA decoders.
pub fn encodings(data: &[u8]) {
    if let Ok(r) = encodings::decode_txt_rdata(data) {
        let again = encodings::decode_txt_rdata(&encodings::txt_rdata(&r)).ok();
        assert_eq!(again.as_ref(), Some(&r));
    }
    if let Ok(r) = encodings::decode_verifier_txt_rdata(data) {
        let again = encodings::decode_verifier_txt_rdata(&encodings::verifier_txt_rdata(&r)).ok();
        assert_eq!(again.as_ref(), Some(&r));
    }
    if let Ok(s) = encodings::SvcbRdata::decode(data) {
        let _ = s.zrtt_records();
        let _ = s.to_presentation();
        assert_eq!(encodings::SvcbRdata::decode(&s.encode()).ok(), Some(s));
    }
    let addrs: Vec<std::net::Ipv6Addr> = data
        .chunks_exact(16)
        .map(|c| {
            let mut o = [0u8; 16];
            o.copy_from_slice(c);
            o.into()
        })
        .collect();
    let _ = encodings::decode_aaaa_tunnel(&addrs);
    let _ = encodings::decode_tlsa_rdata(data);
}

/// Frame reader in every mode.
pub fn frames(data: &[u8]) {
    for expect in [
        Expect::FirstFlight,
        Expect::ReplyOrReject,
        Expect::Transport,
    ] {
        if let Ok(Some((_, used))) = read_frame(data, expect) {
            assert!(used <= data.len());
        }
    }
}

/// A replay filter that accepts everything, so fuzzing reaches decryption.
pub struct NoReplayFilter;

impl ReplayFilter for NoReplayFilter {
    fn seen(&self, _: u32, _: &[u8; 32]) -> bool {
        false
    }
    fn check_and_insert(
        &mut self,
        _: u32,
        _: &[u8; 32],
        _: UnixTime,
        _: UnixTime,
    ) -> Result<(), crate::ReplayError> {
        Ok(())
    }
}

/// The server side of the handshake against arbitrary bytes, with the
/// test-vector key set.
pub fn server_first_flight(config: &ServerConfig, now: UnixTime, data: &[u8]) {
    let rng = crate::crypto::SeededRandomForTestingOnly::new([0; 32]);
    if let Ok(Some((frame @ Frame::FirstFlight { .. }, _))) = read_frame(data, Expect::FirstFlight)
    {
        let _ = config.accept(&frame, Transport::Tcp, now, &mut NoReplayFilter, &rng);
    }
}

// ------------------------------------------------------------------ fixtures

/// Start of the vectors' validity window (2027-01-15T08:00:00Z).
pub const T0: u64 = 1_800_000_000;
/// The host name of every fixture.
pub const NAME: &str = "www.example.com";

fn pem_cert(pem: &str) -> Vec<u8> {
    pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

fn pem_key(pem: &str) -> Vec<u8> {
    match pki_types::PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap() {
        pki_types::PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
        _ => panic!("fixture keys are PKCS#8"),
    }
}

/// Ed25519 certificate for www.example.com (signs the vectors).
pub fn ed25519_cert() -> Vec<u8> {
    pem_cert(include_str!("../../tests/data/ed25519-cert.pem"))
}

/// Its private key.
pub fn ed25519_signer() -> RecordSigner {
    RecordSigner::from_pkcs8(
        &pem_key(include_str!("../../tests/data/ed25519-cert.key")),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// ECDSA P-256 certificate for www.example.com.
pub fn ecdsa_cert() -> Vec<u8> {
    pem_cert(include_str!("../../tests/data/ecdsa-cert.pem"))
}

/// Its private key.
pub fn ecdsa_signer() -> RecordSigner {
    RecordSigner::from_pkcs8(
        &pem_key(include_str!("../../tests/data/ecdsa-cert.key")),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// ECDSA P-384 certificate for www.example.com (made by openssl).
pub fn p384_cert() -> Vec<u8> {
    pem_cert(include_str!("../../tests/data/p384-cert.pem"))
}

/// Its private key.
pub fn p384_signer() -> RecordSigner {
    RecordSigner::from_pkcs8(
        &pem_key(include_str!("../../tests/data/p384-cert.key")),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// RSA 2048 certificate for www.example.com (made by openssl).
pub fn rsa_cert() -> Vec<u8> {
    pem_cert(include_str!("../../tests/data/rsa-cert.pem"))
}

/// Its private key.
pub fn rsa_signer() -> RecordSigner {
    RecordSigner::from_pkcs8(
        &pem_key(include_str!("../../tests/data/rsa-cert.key")),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// ECDSA P-256 certificate for other.example.com.
pub fn other_cert() -> Vec<u8> {
    pem_cert(include_str!("../../tests/data/other-cert.pem"))
}

/// Its private key.
pub fn other_signer() -> RecordSigner {
    RecordSigner::from_pkcs8(
        &pem_key(include_str!("../../tests/data/other-cert.key")),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// A semi-static key derived from a label (vectors use "zrtt vector key 1").
pub fn semi_static(label: &str) -> X25519KeyPair {
    X25519KeyPair::from_private(sha256(label.as_bytes()))
}

/// The fields of a record for `key`, valid for an hour from [`T0`].
pub fn body(key: &X25519KeyPair, cert: &[u8]) -> RecordBody {
    RecordBody {
        key_id: crate::record::key_id_for(key.public()),
        public_key: *key.public(),
        not_before: T0,
        not_after: T0 + 3600,
        max_early_data_bytes: 16384,
        aeads: vec![Aead::ChaChaPoly, Aead::AesGcm],
        flags: RecordFlags::from_bits(RecordFlags::ISSUES_TOKENS).unwrap(),
        provenance_quorum: 0,
        verifiers: Vec::new(),
        name: NAME.to_owned(),
        cert_sha256: sha256(cert),
    }
}

/// The vector record: key "zrtt vector key 1", signed with Ed25519 (deterministic).
pub fn vector_record() -> KeyRecord {
    let key = semi_static("zrtt vector key 1");
    body(&key, &ed25519_cert())
        .sign(&ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap()
}

/// A server config holding the vector key.
pub fn vector_server() -> ServerConfig {
    let key = semi_static("zrtt vector key 1");
    ServerConfig::new(vec![ServerKey::new(vector_record(), key).unwrap()]).unwrap()
}

/// The Ed25519 public key of the vector verifier (seed SHA-256("zrtt vector verifier key")).
pub fn vector_verifier_public() -> [u8; 32] {
    use ring::signature::KeyPair as _;
    let pair =
        ring::signature::Ed25519KeyPair::from_seed_unchecked(&sha256(b"zrtt vector verifier key"))
            .unwrap();
    pair.public_key().as_ref().try_into().unwrap()
}

/// The fields of a verifier key record for `public`, verifier name
/// [`NAME`], valid from [`T0`] for 50 hours.
pub fn verifier_body(public: [u8; 32], cert: &[u8]) -> crate::record::VerifierKeyBody {
    crate::record::VerifierKeyBody::new(public, T0, T0 + 50 * 3600, NAME, cert)
}

/// The vector verifier key record, signed with Ed25519 (deterministic).
pub fn vector_verifier_record() -> crate::record::VerifierKeyRecord {
    verifier_body(vector_verifier_public(), &ed25519_cert())
        .sign(&ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap()
}

/// A seeded RNG for vectors.
pub fn rng(seed: u8) -> SeededRandomForTestingOnly {
    SeededRandomForTestingOnly::new([seed; 32])
}

mod fuzz;
mod fuzz_resume;
mod fuzz_shortcut;
mod seeds;
pub use fuzz::*;
pub use fuzz_resume::*;
pub use fuzz_shortcut::*;
pub use seeds::*;
