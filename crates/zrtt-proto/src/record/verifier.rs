//! Verifier key records: a provenance verifier's Ed25519 public key, as
//! published in DNS next to the verifier's name and signed by the TLS
//! certificate key of that name, exactly like key records
//! (docs/PROTOCOL.md §11.1).
//!
//! ```text
//! u8 format=0x11 | u32 verifier_id | 32 Ed25519 public key | u64 not_before | u64 not_after
//!   | u8 len || name | 32 cert_sha256 | u8 sig_alg | u16 len || signature
//! ```
//!
//! Signature input: `"zrtt verifier key record v1\0" || record[0 .. sig_alg]`
//! (every byte before the signature length, `sig_alg` included).
//! `verifier_id` must be the id certificates carry for this key, the first
//! four bytes of SHA-256(public key). The window says when gateways trust
//! the key: it covers the time the key signs certificates and the life of
//! the last certificate it signs.

use core::fmt;

use super::{
    check_window, decode_name_field, hex, normalize_name, sha256, sign_body, signed_bytes_of,
    validate_name, RecordKind, RecordSigner, SignatureAlgorithm, SignedRecord, Verified,
};
use crate::codec::{Put, Reader};
use crate::error::{InvalidMessage, RecordError};
use crate::provenance::{verifier_id_for, VerifierKey};
use crate::time::UnixTime;

/// Byte 0 of a verifier key record: kind 1 (verifier key), version 1. Key
/// records start with `0x01` (kind 0, version 1).
pub const VERIFIER_RECORD_FORMAT: u8 = 0x11;
/// Domain separation for the signature input, distinct from key records'.
pub const VERIFIER_SIGNATURE_CONTEXT: &[u8] = b"zrtt verifier key record v1\0";
/// Longest validity a gateway accepts in a verifier key record (14 days):
/// long enough for a key that signs for a week plus the life of its last
/// certificates (one day by default), short enough that a stolen certificate
/// key cannot mint verifier keys that outlive revocation for long.
pub const MAX_VERIFIER_RECORD_LIFETIME_SECS: u64 = 14 * 86400;

/// Everything a verifier key record says except its signature.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct VerifierKeyBody {
    /// The verifier id certificates signed by this key carry: the first four
    /// bytes of SHA-256(public_key) ([`verifier_id_for`]).
    pub verifier_id: u32,
    /// The verifier's Ed25519 public key.
    pub public_key: [u8; 32],
    /// Start of validity, seconds since the epoch: gateways trust the key from here.
    pub not_before: u64,
    /// End of validity (exclusive), seconds since the epoch: no certificate
    /// the key signed is valid after it.
    pub not_after: u64,
    /// The verifier's DNS name: lowercase, no trailing dot.
    pub name: String,
    /// SHA-256 of the DER certificate (for `name`) whose key signs the record.
    pub cert_sha256: [u8; 32],
}

/// A signed verifier key record, parsed but not yet verified.
pub type VerifierKeyRecord = SignedRecord<VerifierKeyBody>;

/// A verifier key record whose signature, certificate, name and validity
/// were checked: the only way a key learned from DNS becomes trusted.
pub type VerifiedVerifierKeyRecord = Verified<VerifierKeyBody>;

impl fmt::Debug for VerifierKeyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierKeyBody")
            .field("verifier_id", &format_args!("{:08x}", self.verifier_id))
            .field("public_key", &hex(&self.public_key))
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("name", &self.name)
            .field("cert_sha256", &hex(&self.cert_sha256))
            .finish()
    }
}

impl VerifierKeyBody {
    /// The body for `public_key` of the verifier `name`, valid
    /// `[not_before, not_after)`, to be signed by the key of `cert_der`.
    /// The verifier id is derived from the key; the name is normalised.
    pub fn new(
        public_key: [u8; 32],
        not_before: u64,
        not_after: u64,
        name: &str,
        cert_der: &[u8],
    ) -> Self {
        Self {
            verifier_id: verifier_id_for(&public_key),
            public_key,
            not_before,
            not_after,
            name: normalize_name(name),
            cert_sha256: sha256(cert_der),
        }
    }

    /// Check the fields a decoder checks: the name, `not_after >
    /// not_before`, and that the verifier id is derived from the key.
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        validate_name(&self.name)?;
        if self.not_after <= self.not_before {
            return Err(InvalidMessage::InvalidField(
                "not_after must be after not_before",
            ));
        }
        if self.verifier_id != verifier_id_for(&self.public_key) {
            return Err(InvalidMessage::InvalidField(
                "verifier_id is not the first 4 bytes of SHA-256(public key)",
            ));
        }
        Ok(())
    }

    /// The bytes the signature covers, given the algorithm that will sign:
    /// `VERIFIER_SIGNATURE_CONTEXT || body || sig_alg`.
    pub fn signed_bytes(&self, alg: SignatureAlgorithm) -> Vec<u8> {
        signed_bytes_of(self, alg)
    }

    /// Sign this body with the certificate key of the verifier's name.
    pub fn sign(
        self,
        signer: &RecordSigner,
        rng: &dyn ring::rand::SecureRandom,
    ) -> Result<VerifierKeyRecord, RecordError> {
        sign_body(self, signer, rng)
    }

    /// Whether `now` lies in `[not_before, not_after)`.
    pub fn check_validity(&self, now: UnixTime) -> Result<(), RecordError> {
        check_window(self.not_before, self.not_after, now)
    }

    /// The key as certificates name it.
    pub fn verifier_key(&self) -> VerifierKey {
        VerifierKey {
            id: self.verifier_id,
            public: self.public_key,
        }
    }
}

impl RecordKind for VerifierKeyBody {
    const FORMAT: u8 = VERIFIER_RECORD_FORMAT;
    const SIGNATURE_CONTEXT: &'static [u8] = VERIFIER_SIGNATURE_CONTEXT;
    const MAX_LIFETIME_SECS: u64 = MAX_VERIFIER_RECORD_LIFETIME_SECS;

    fn encode_fields(&self, out: &mut Vec<u8>) {
        out.put_u32(self.verifier_id);
        out.extend_from_slice(&self.public_key);
        out.put_u64(self.not_before);
        out.put_u64(self.not_after);
        out.put_vec_u8(self.name.as_bytes());
        out.extend_from_slice(&self.cert_sha256);
    }

    fn decode_fields(r: &mut Reader<'_>) -> Result<Self, InvalidMessage> {
        Ok(Self {
            verifier_id: r.u32()?,
            public_key: r.array()?,
            not_before: r.u64()?,
            not_after: r.u64()?,
            name: decode_name_field(r)?,
            cert_sha256: r.array()?,
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
        curve25519_dalek::edwards::CompressedEdwardsY(self.public_key)
            .decompress()
            .is_some_and(|p| !p.is_small_order())
    }
}
