//! Signed records: the server's short-lived X25519 key as published in DNS
//! (ZTLS's "Z-data", HTTPCrypt's published key), and a provenance
//! verifier's Ed25519 key ([`verifier`]).
//!
//! Both kinds share one machinery ([`SignedRecord`] over a [`RecordKind`]):
//! a binary form whose first byte names the kind and version, a body that
//! names a DNS name and the SHA-256 of the certificate whose key signs it,
//! a validity window, and a signature by that certificate's key over a
//! kind-specific context and the body. They are verified the same way
//! ([`SignedRecord::verify`]): name, certificate hash, subjectAltName,
//! signature, lifetime bound, inside the certificate's validity, then the
//! window at `now`.
//!
//! A key record is encoded once in a binary form (see docs/PROTOCOL.md §2)
//! and carried by several DNS encodings ([`encodings`]). Decoding is syntax
//! only ([`KeyRecord::decode`]); a client may only use a record that went
//! through [`KeyRecord::verify`], which yields a [`VerifiedKeyRecord`].

pub mod cert;
pub mod encodings;
mod signer;
pub mod verifier;

pub use signer::RecordSigner;

pub use verifier::{
    VerifiedVerifierKeyRecord, VerifierKeyBody, VerifierKeyRecord,
    MAX_VERIFIER_RECORD_LIFETIME_SECS, VERIFIER_RECORD_FORMAT, VERIFIER_SIGNATURE_CONTEXT,
};

use core::fmt;

use ring::digest;
use ring::signature::{self, KeyPair};

use crate::codec::{Put, Reader};
use crate::error::{InvalidMessage, RecordError};
use crate::time::UnixTime;

/// The record format version this crate emits and accepts.
pub const RECORD_VERSION: u8 = 1;
/// Largest encoded record accepted.
pub const MAX_RECORD_LEN: usize = 1024;
/// Most records one record list may carry.
pub const MAX_RECORDS_PER_LIST: usize = 8;
/// Most provenance verifiers a key record names.
pub const MAX_ADVERTISED_VERIFIERS: usize = 4;
/// Longest validity a client accepts in a record (7 days, as RFC 9345
/// delegated credentials), so a stolen certificate key cannot mint records
/// that outlive revocation by years.
pub const MAX_RECORD_LIFETIME_SECS: u64 = 7 * 86400;
/// Domain separation for the signature input.
pub const SIGNATURE_CONTEXT: &[u8] = b"zrtt key record v1\0";

/// An AEAD a server accepts for first flights and transport messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Aead {
    /// ChaCha20-Poly1305 (Noise `ChaChaPoly`).
    ChaChaPoly = 1,
    /// AES-256-GCM (Noise `AESGCM`).
    AesGcm = 2,
}

impl Aead {
    /// From its wire id.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::ChaChaPoly),
            2 => Some(Self::AesGcm),
            _ => None,
        }
    }

    /// The Noise cipher name.
    pub fn noise_name(self) -> &'static str {
        match self {
            Self::ChaChaPoly => "ChaChaPoly",
            Self::AesGcm => "AESGCM",
        }
    }

    /// Short human name, also used in the TXT encoding.
    pub fn name(self) -> &'static str {
        match self {
            Self::ChaChaPoly => "chacha20poly1305",
            Self::AesGcm => "aes256gcm",
        }
    }
}

/// Record flags (a u16 on the wire; docs/PROTOCOL.md §2). Bits 0-7 are
/// critical: a record with one this version does not know is refused (the
/// server may need what it asks for). Bits 8-15 are advisory: one this
/// version does not know is kept and ignored, so a server can announce a
/// capability without older clients refusing its records (the record is
/// signed, so an advisory bit cannot be added in transit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct RecordFlags(u16);

impl RecordFlags {
    /// The server requires a client static key (Noise IK). Critical.
    pub const CLIENT_AUTH_REQUIRED: u16 = 0x0001;
    /// The server issues address tokens after a completed handshake.
    /// Critical.
    pub const ISSUES_TOKENS: u16 = 0x0002;
    /// The server serves HTTP/2 inside the channel (first-flight ALPN
    /// `h2`) as well as HTTP/1.1: clients may offer `h2`. Advisory (bit 8).
    pub const HTTP2: u16 = 0x0100;
    /// Bits 0-7: unknown ones make a record unusable.
    pub const CRITICAL: u16 = 0x00ff;
    const DEFINED: u16 = Self::CLIENT_AUTH_REQUIRED | Self::ISSUES_TOKENS | Self::HTTP2;

    /// From raw bits; fails on an undefined critical bit (0-7). Undefined
    /// advisory bits (8-15) are kept, so the record re-encodes unchanged,
    /// and otherwise ignored.
    pub fn from_bits(bits: u16) -> Option<Self> {
        (bits & Self::CRITICAL & !Self::DEFINED == 0).then_some(Self(bits))
    }

    /// Raw bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// Whether the server requires a client static key.
    pub fn client_auth_required(self) -> bool {
        self.0 & Self::CLIENT_AUTH_REQUIRED != 0
    }

    /// Whether the server issues address tokens.
    pub fn issues_tokens(self) -> bool {
        self.0 & Self::ISSUES_TOKENS != 0
    }

    /// Whether the server serves HTTP/2 inside the channel.
    pub fn http2(self) -> bool {
        self.0 & Self::HTTP2 != 0
    }
}

/// The algorithm of the certificate key that signs a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SignatureAlgorithm {
    /// ECDSA over P-256 with SHA-256, DER-encoded signature (as in X.509 and TLS).
    EcdsaP256Sha256 = 1,
    /// Ed25519 (RFC 8032), 64-byte signature.
    Ed25519 = 2,
    /// ECDSA over P-384 with SHA-384, DER-encoded signature.
    EcdsaP384Sha384 = 3,
    /// RSASSA-PSS with SHA-256 (MGF1 SHA-256, salt of 32 bytes; as TLS 1.3's
    /// `rsa_pss_rsae_sha256`), from an RSA key of 2048 to 4096 bits; the
    /// signature is as long as the modulus.
    RsaPssSha256 = 4,
}

impl SignatureAlgorithm {
    /// From its wire id.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::EcdsaP256Sha256),
            2 => Some(Self::Ed25519),
            3 => Some(Self::EcdsaP384Sha384),
            4 => Some(Self::RsaPssSha256),
            _ => None,
        }
    }

    /// Human name, also used in the TXT encoding.
    pub fn name(self) -> &'static str {
        match self {
            Self::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Self::Ed25519 => "ed25519",
            Self::EcdsaP384Sha384 => "ecdsa-p384-sha384",
            Self::RsaPssSha256 => "rsa-pss-sha256",
        }
    }

    fn max_sig_len(self) -> usize {
        match self {
            Self::EcdsaP256Sha256 => 72,
            Self::Ed25519 => 64,
            Self::EcdsaP384Sha384 => 104,
            Self::RsaPssSha256 => 512,
        }
    }

    fn webpki_alg(self) -> &'static dyn pki_types::SignatureVerificationAlgorithm {
        match self {
            Self::EcdsaP256Sha256 => webpki::ring::ECDSA_P256_SHA256,
            Self::Ed25519 => webpki::ring::ED25519,
            Self::EcdsaP384Sha384 => webpki::ring::ECDSA_P384_SHA384,
            Self::RsaPssSha256 => webpki::ring::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
        }
    }
}

/// Everything a record says except its signature.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RecordBody {
    /// Key id, chosen by the publisher; unique among live keys of a name.
    pub key_id: u32,
    /// The semi-static X25519 public key.
    pub public_key: [u8; 32],
    /// Start of validity, seconds since the epoch.
    pub not_before: u64,
    /// End of validity (exclusive), seconds since the epoch.
    pub not_after: u64,
    /// Largest first-flight request the server accepts, in bytes.
    pub max_early_data_bytes: u32,
    /// AEADs the server accepts, in its order of preference.
    pub aeads: Vec<Aead>,
    /// Flags.
    pub flags: RecordFlags,
    /// Provenance certificates needed for an answer before the TCP handshake
    /// completes; 0 means the server accepts no provenance certificates.
    pub provenance_quorum: u8,
    /// DNS names of provenance verifiers whose certificates the server
    /// accepts (at most [`MAX_ADVERTISED_VERIFIERS`], only with a quorum):
    /// a client that holds no certificates from them may fetch some after
    /// this first contact, so its next first contact is proven
    /// (docs/PROVENANCE.md). Empty: the server names none.
    pub verifiers: Vec<String>,
    /// The host name the record is for: lowercase, no trailing dot.
    pub name: String,
    /// SHA-256 of the DER certificate whose key signs the record.
    pub cert_sha256: [u8; 32],
}

impl fmt::Debug for RecordBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBody")
            .field("key_id", &format_args!("{:#010x}", self.key_id))
            .field("public_key", &hex(&self.public_key))
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("max_early_data_bytes", &self.max_early_data_bytes)
            .field("aeads", &self.aeads)
            .field("flags", &self.flags)
            .field("provenance_quorum", &self.provenance_quorum)
            .field("verifiers", &self.verifiers)
            .field("name", &self.name)
            .field("cert_sha256", &hex(&self.cert_sha256))
            .finish()
    }
}

/// A signed record of kind `B`, parsed but not yet verified.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SignedRecord<B> {
    /// The signed fields.
    pub body: B,
    /// Algorithm of the signing certificate key.
    pub sig_alg: SignatureAlgorithm,
    /// The signature over [`SignedRecord::signed_bytes`].
    pub signature: Vec<u8>,
}

/// A signed key record (docs/PROTOCOL.md §2), parsed but not yet verified.
pub type KeyRecord = SignedRecord<RecordBody>;

/// A record whose signature, certificate, name and validity were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified<B>(SignedRecord<B>);

/// A verified key record. Only this type can start a client handshake.
pub type VerifiedKeyRecord = Verified<RecordBody>;

impl<B> Verified<B> {
    /// The verified record.
    pub fn record(&self) -> &SignedRecord<B> {
        &self.0
    }

    /// The verified fields.
    pub fn body(&self) -> &B {
        &self.0.body
    }

    /// Wrap a record without checking it. For servers building their own
    /// key set from keys they generated, and for tests.
    pub fn dangerous_assume_verified(record: SignedRecord<B>) -> Self {
        Self(record)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::RecordBody {}
    impl Sealed for super::verifier::VerifierKeyBody {}
}

/// Byte 0 of every kind of record this crate knows (kind and version), so
/// a record of one kind given to another kind's decoder is named as such.
const KNOWN_FORMATS: [u8; 2] = [RECORD_VERSION, VERIFIER_RECORD_FORMAT];

/// What one kind of signed record carries besides its signature. The
/// encoding, signing and verification around it are shared
/// ([`SignedRecord`]); a kind only has its own first byte, signature
/// context, lifetime bound and fields. Sealed: the kinds are
/// [`RecordBody`] (key records) and [`VerifierKeyBody`].
pub trait RecordKind: sealed::Sealed + Clone + fmt::Debug + PartialEq + Eq {
    /// Byte 0 of the binary form: kind and version.
    const FORMAT: u8;
    /// Domain separation for the signature input.
    const SIGNATURE_CONTEXT: &'static [u8];
    /// Longest validity (`not_after - not_before`) a verifier accepts.
    const MAX_LIFETIME_SECS: u64;
    /// Encode the fields after byte 0, up to and including `cert_sha256`.
    fn encode_fields(&self, out: &mut Vec<u8>);
    /// Decode what [`Self::encode_fields`] writes (syntax only).
    fn decode_fields(r: &mut Reader<'_>) -> Result<Self, InvalidMessage>;
    /// Check the fields a decoder checks, so encoders never emit what the
    /// decoder refuses.
    fn check_fields(&self) -> Result<(), InvalidMessage>;
    /// The DNS name the record is for: lowercase, no trailing dot.
    fn name(&self) -> &str;
    /// SHA-256 of the DER certificate whose key signs the record.
    fn cert_sha256(&self) -> &[u8; 32];
    /// `(not_before, not_after)`, seconds; `not_after` exclusive.
    fn window(&self) -> (u64, u64);
    /// Whether the published public key is usable: not a point of small
    /// order (with which no secret, or no signature, means anything).
    fn key_is_strong(&self) -> bool;
}

/// `SIGNATURE_CONTEXT || byte 0 || fields || sig_alg`: what a record of
/// kind `B` signed with `alg` signs.
fn signed_bytes_of<B: RecordKind>(body: &B, alg: SignatureAlgorithm) -> Vec<u8> {
    let mut out = Vec::with_capacity(B::SIGNATURE_CONTEXT.len() + 160);
    out.extend_from_slice(B::SIGNATURE_CONTEXT);
    encode_body(body, &mut out);
    out.put_u8(alg as u8);
    out
}

fn encode_body<B: RecordKind>(body: &B, out: &mut Vec<u8>) {
    out.put_u8(B::FORMAT);
    body.encode_fields(out);
}

fn decode_body<B: RecordKind>(r: &mut Reader<'_>) -> Result<B, InvalidMessage> {
    let format = r.u8()?;
    if format != B::FORMAT {
        return Err(if KNOWN_FORMATS.contains(&format) {
            InvalidMessage::InvalidField("a record of another kind")
        } else {
            InvalidMessage::UnsupportedVersion(format)
        });
    }
    let body = B::decode_fields(r)?;
    body.check_fields()?;
    Ok(body)
}

/// Sign `body` with a certificate key.
fn sign_body<B: RecordKind>(
    body: B,
    signer: &RecordSigner,
    rng: &dyn ring::rand::SecureRandom,
) -> Result<SignedRecord<B>, RecordError> {
    body.check_fields()?;
    let alg = signer.algorithm();
    let signature = signer.sign(&signed_bytes_of(&body, alg), rng)?;
    Ok(SignedRecord {
        body,
        sig_alg: alg,
        signature,
    })
}

/// Whether `now` lies in `[not_before, not_after)`.
fn check_window(not_before: u64, not_after: u64, now: UnixTime) -> Result<(), RecordError> {
    let now = now.as_secs();
    if now < not_before {
        return Err(RecordError::NotYetValid { not_before, now });
    }
    if now >= not_after {
        return Err(RecordError::Expired { not_after, now });
    }
    Ok(())
}

impl RecordKind for RecordBody {
    const FORMAT: u8 = RECORD_VERSION;
    const SIGNATURE_CONTEXT: &'static [u8] = SIGNATURE_CONTEXT;
    const MAX_LIFETIME_SECS: u64 = MAX_RECORD_LIFETIME_SECS;

    fn encode_fields(&self, out: &mut Vec<u8>) {
        out.put_u32(self.key_id);
        out.extend_from_slice(&self.public_key);
        out.put_u64(self.not_before);
        out.put_u64(self.not_after);
        out.put_u32(self.max_early_data_bytes);
        out.put_u8(self.aeads.len() as u8);
        for a in &self.aeads {
            out.put_u8(*a as u8);
        }
        out.put_u16(self.flags.bits());
        out.put_u8(self.provenance_quorum);
        out.put_u8(self.verifiers.len() as u8);
        for v in &self.verifiers {
            out.put_vec_u8(v.as_bytes());
        }
        out.put_vec_u8(self.name.as_bytes());
        out.extend_from_slice(&self.cert_sha256);
    }

    fn decode_fields(r: &mut Reader<'_>) -> Result<Self, InvalidMessage> {
        let key_id = r.u32()?;
        let public_key = r.array()?;
        let not_before = r.u64()?;
        let not_after = r.u64()?;
        let max_early_data_bytes = r.u32()?;
        let n = r.u8()? as usize;
        let mut aeads = Vec::with_capacity(n.min(2));
        for _ in 0..n {
            let id = r.u8()?;
            aeads.push(Aead::from_u8(id).ok_or(InvalidMessage::InvalidField("unknown aead"))?);
        }
        let flags = RecordFlags::from_bits(r.u16()?).ok_or(InvalidMessage::InvalidField(
            "undefined critical flag bits set",
        ))?;
        let provenance_quorum = r.u8()?;
        let n = r.u8()? as usize;
        if n > MAX_ADVERTISED_VERIFIERS {
            return Err(InvalidMessage::InvalidField("too many verifiers"));
        }
        let mut verifiers = Vec::with_capacity(n);
        for _ in 0..n {
            verifiers.push(decode_name_field(r)?);
        }
        let name = decode_name_field(r)?;
        let cert_sha256 = r.array()?;
        Ok(Self {
            key_id,
            public_key,
            not_before,
            not_after,
            max_early_data_bytes,
            aeads,
            flags,
            provenance_quorum,
            verifiers,
            name,
            cert_sha256,
        })
    }

    fn check_fields(&self) -> Result<(), InvalidMessage> {
        self.validate()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn cert_sha256(&self) -> &[u8; 32] {
        &self.cert_sha256
    }

    fn window(&self) -> (u64, u64) {
        (self.not_before, self.not_after)
    }

    fn key_is_strong(&self) -> bool {
        // Clamped scalars are multiples of the cofactor 8, so the product
        // is zero exactly for the points of order 1, 2, 4 or 8.
        let product = curve25519_dalek::montgomery::MontgomeryPoint(self.public_key)
            .mul_clamped([0x5a; 32])
            .to_bytes();
        product.iter().any(|&b| b != 0)
    }
}

/// The `u8 len || name` field; [`validate_name`] is left to `check_fields`.
pub(crate) fn decode_name_field(r: &mut Reader<'_>) -> Result<String, InvalidMessage> {
    Ok(core::str::from_utf8(r.vec_u8()?)
        .map_err(|_| InvalidMessage::InvalidField("name is not ASCII"))?
        .to_owned())
}

impl RecordBody {
    /// Check the fields a decoder would check, so that encoders never emit
    /// what the decoder refuses.
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        validate_name(&self.name)?;
        if self.not_after <= self.not_before {
            return Err(InvalidMessage::InvalidField(
                "not_after must be after not_before",
            ));
        }
        if self.aeads.is_empty() || self.aeads.len() > 2 {
            return Err(InvalidMessage::InvalidField(
                "aead list must hold 1 or 2 entries",
            ));
        }
        if self.aeads.len() == 2 && self.aeads[0] == self.aeads[1] {
            return Err(InvalidMessage::InvalidField("duplicate aead"));
        }
        if self.verifiers.len() > MAX_ADVERTISED_VERIFIERS {
            return Err(InvalidMessage::InvalidField("too many verifiers"));
        }
        if !self.verifiers.is_empty() && self.provenance_quorum == 0 {
            return Err(InvalidMessage::InvalidField(
                "verifiers named but no certificates accepted (quorum 0)",
            ));
        }
        for (i, v) in self.verifiers.iter().enumerate() {
            validate_name(v)?;
            if self.verifiers[..i].contains(v) {
                return Err(InvalidMessage::InvalidField("duplicate verifier"));
            }
        }
        Ok(())
    }

    /// The bytes the signature covers, given the algorithm that will sign:
    /// `SIGNATURE_CONTEXT || body || sig_alg`.
    pub fn signed_bytes(&self, alg: SignatureAlgorithm) -> Vec<u8> {
        signed_bytes_of(self, alg)
    }

    /// Sign this body with a certificate key.
    pub fn sign(
        self,
        signer: &RecordSigner,
        rng: &dyn ring::rand::SecureRandom,
    ) -> Result<KeyRecord, RecordError> {
        sign_body(self, signer, rng)
    }

    /// Whether `now` lies in `[not_before, not_after)`.
    pub fn check_validity(&self, now: UnixTime) -> Result<(), RecordError> {
        check_window(self.not_before, self.not_after, now)
    }
}

impl<B: RecordKind> SignedRecord<B> {
    /// The binary form (docs/PROTOCOL.md §2 for key records, §11.1 for
    /// verifier key records).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(200);
        encode_body(&self.body, &mut out);
        out.put_u8(self.sig_alg as u8);
        out.put_vec_u16(&self.signature);
        out
    }

    /// Strictly decode the binary form. Checks syntax only; see [`Self::verify`].
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() > MAX_RECORD_LEN {
            return Err(InvalidMessage::Oversized {
                len: bytes.len(),
                max: MAX_RECORD_LEN,
            }
            .into());
        }
        let mut r = Reader::new(bytes);
        let body = decode_body::<B>(&mut r)?;
        let alg_id = r.u8()?;
        let sig_alg = SignatureAlgorithm::from_u8(alg_id)
            .ok_or(RecordError::UnsupportedSignatureAlgorithm(alg_id))?;
        let signature = r.vec_u16()?;
        if signature.is_empty() || signature.len() > sig_alg.max_sig_len() {
            return Err(InvalidMessage::InvalidField("signature length").into());
        }
        r.finish()?;
        Ok(Self {
            body,
            sig_alg,
            signature: signature.to_vec(),
        })
    }

    /// The bytes the signature covers.
    pub fn signed_bytes(&self) -> Vec<u8> {
        signed_bytes_of(&self.body, self.sig_alg)
    }

    /// Verify the record for `expected_name` at `now` against the DER
    /// certificate that signs it: the certificate hash, that the certificate
    /// covers the name, the signature, that the record's lifetime is at most
    /// the kind's bound ([`MAX_RECORD_LIFETIME_SECS`] for key records) and
    /// lies inside the certificate's validity, then the validity window at
    /// `now`.
    ///
    /// This does not check the certificate chain; the caller decides how the
    /// certificate is trusted (web PKI, DANE, pinning).
    pub fn verify(
        &self,
        cert_der: &[u8],
        expected_name: &str,
        now: UnixTime,
    ) -> Result<Verified<B>, RecordError> {
        let expected = normalize_name(expected_name);
        let name = self.body.name();
        if name != expected {
            return Err(RecordError::WrongName {
                expected,
                found: name.to_owned(),
            });
        }
        if &sha256(cert_der) != self.body.cert_sha256() {
            return Err(RecordError::CertificateMismatch);
        }
        let der = pki_types::CertificateDer::from(cert_der);
        let cert = webpki::EndEntityCert::try_from(&der)
            .map_err(|e| RecordError::BadCertificate(e.to_string()))?;
        let server_name = pki_types::ServerName::try_from(name)
            .map_err(|_| RecordError::BadCertificate("record name is not a DNS name".into()))?;
        cert.verify_is_valid_for_subject_name(&server_name)
            .map_err(|e| RecordError::BadCertificate(format!("does not cover the name: {e}")))?;
        cert.verify_signature(
            self.sig_alg.webpki_alg(),
            &self.signed_bytes(),
            &self.signature,
        )
        .map_err(|_| RecordError::BadSignature)?;
        if !self.body.key_is_strong() {
            return Err(RecordError::WeakKey);
        }
        let (not_before, not_after) = self.body.window();
        let lifetime = not_after - not_before;
        if lifetime > B::MAX_LIFETIME_SECS {
            return Err(RecordError::LifetimeTooLong {
                lifetime,
                max: B::MAX_LIFETIME_SECS,
            });
        }
        let (cert_nb, cert_na) =
            cert::validity(cert_der).map_err(|e| RecordError::BadCertificate(e.to_string()))?;
        if not_before < cert_nb || not_after > cert_na {
            return Err(RecordError::OutlivesCertificate {
                cert_not_before: cert_nb,
                cert_not_after: cert_na,
            });
        }
        check_window(not_before, not_after, now)?;
        Ok(Verified(self.clone()))
    }
}

/// Encode several records as one list: `u16 len || record` repeated.
/// Used by the SvcParam and AAAA encodings and by server refusals.
pub fn encode_record_list(records: &[KeyRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records.iter().take(MAX_RECORDS_PER_LIST) {
        out.put_vec_u16(&r.encode());
    }
    out
}

/// Strictly decode a record list; refuses empty lists, too many entries and
/// duplicate key ids.
pub fn decode_record_list(bytes: &[u8]) -> Result<Vec<KeyRecord>, RecordError> {
    let mut r = Reader::new(bytes);
    let mut out: Vec<KeyRecord> = Vec::new();
    while !r.is_empty() {
        if out.len() == MAX_RECORDS_PER_LIST {
            return Err(InvalidMessage::Oversized {
                len: out.len() + 1,
                max: MAX_RECORDS_PER_LIST,
            }
            .into());
        }
        let rec = KeyRecord::decode(r.vec_u16()?)?;
        if out.iter().any(|o| o.body.key_id == rec.body.key_id) {
            return Err(RecordError::DuplicateKeyId(rec.body.key_id));
        }
        out.push(rec);
    }
    if out.is_empty() {
        return Err(InvalidMessage::InvalidField("empty record list").into());
    }
    Ok(out)
}

/// The key id zrtt tools assign to a public key: the first four bytes of
/// its SHA-256 (HTTPCrypt derives its key ids from a hash the same way).
/// Any u32 unique among a name's live keys is valid on the wire.
pub fn key_id_for(public_key: &[u8; 32]) -> u32 {
    let h = sha256(public_key);
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// Lowercase, without the trailing dot.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A host name as records carry it: lowercase LDH labels (underscore
/// allowed), 1..=63 bytes each, at most 253 bytes, no trailing dot.
pub fn validate_name(name: &str) -> Result<(), InvalidMessage> {
    if name.is_empty() || name.len() > 253 {
        return Err(InvalidMessage::InvalidField("name length"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(InvalidMessage::InvalidField("name label length"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(InvalidMessage::InvalidField(
                "name must be lowercase letters, digits, '-' or '_'",
            ));
        }
    }
    Ok(())
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use core::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Parse lowercase or uppercase hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
