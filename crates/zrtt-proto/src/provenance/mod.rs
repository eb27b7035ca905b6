//! Provenance certificates (ASAP, CoNEXT 2011 §2.2-2.4), sans-IO.
//!
//! A provenance verifier (PV) that has seen a client complete a handshake
//! from an address signs `(client static key, address, start, duration)`.
//! A gateway that trusts a quorum of verifiers answers a first flight
//! carrying their certificates before the TCP handshake completes. ASAP's
//! "request certificate" is not needed: the flight uses Noise IK with the
//! certified static key, whose first-message key includes `ss`, so only the
//! holder of the static private key can use the certificates
//! (docs/PROTOCOL.md §11).
//!
//! Wire form of one certificate (the client key is not carried: the
//! gateway takes it from the IK handshake, the address from the socket):
//!
//! ```text
//! u8 version=1 | u32 verifier_id | u8 family (4|6) | 4|16 address | u64 start | u32 duration | 64 Ed25519 signature
//! ```
//!
//! Signature input: `"zrtt provenance v1\0" || version || verifier_id ||
//! family || address || client_static (32) || start || duration`.

use std::collections::HashMap;
use std::net::IpAddr;

use ring::signature::{self, KeyPair};

use crate::codec::{Put, Reader};
use crate::error::InvalidMessage;
use crate::time::UnixTime;

/// Certificate format version.
pub const PROVENANCE_VERSION: u8 = 1;
/// Domain separation for verifier signatures.
pub const SIGNATURE_CONTEXT: &[u8] = b"zrtt provenance v1\0";
/// Most certificates one first flight may carry.
pub const MAX_CERTIFICATES: usize = 8;

/// Why provenance was not accepted.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProvenanceError {
    /// The certificates do not parse.
    #[error("malformed certificate: {0}")]
    Malformed(InvalidMessage),
    /// A certificate for another address than the connection's source.
    #[error(
        "certificate from verifier {verifier:08x} is for {certified}, connection is from {peer}"
    )]
    AddressMismatch {
        /// Verifier id.
        verifier: u32,
        /// Address in the certificate.
        certified: IpAddr,
        /// The connection's source address.
        peer: IpAddr,
    },
    /// The certificate's validity has ended.
    #[error("certificate from verifier {0:08x} expired")]
    Expired(u32),
    /// The certificate's validity has not started.
    #[error("certificate from verifier {0:08x} not yet valid")]
    NotYetValid(u32),
    /// A verifier the policy does not trust.
    #[error("verifier {0:08x} is not trusted")]
    UntrustedVerifier(u32),
    /// A trusted verifier key outside the validity its record gives it (a
    /// key learned from DNS that expired or is not valid yet).
    #[error("verifier key {0:08x} is not valid now")]
    VerifierKeyNotValid(u32),
    /// A signature that does not verify (forged, or for another client key).
    #[error("bad signature from verifier {0:08x}")]
    BadSignature(u32),
    /// Two certificates from one verifier.
    #[error("two certificates from verifier {0:08x}")]
    DuplicateVerifier(u32),
    /// Certificates need an IK flight (a client static key).
    #[error("provenance needs a client static key (Noise IK)")]
    NoStaticKey,
    /// The gateway's rate of signature checks is used up (overload,
    /// ASAP §2.5): the flight is served as unproven, never refused.
    #[error("certificate check rate exceeded")]
    CheckRateExceeded,
    /// Fewer valid certificates from distinct trusted verifiers than the quorum.
    #[error("quorum not met: {valid} valid of {needed} needed")]
    QuorumNotMet {
        /// Certificates from distinct trusted verifiers that pass every
        /// check but the signature (not checked when the quorum cannot be met).
        valid: usize,
        /// The policy's quorum.
        needed: usize,
    },
}

impl From<InvalidMessage> for ProvenanceError {
    fn from(e: InvalidMessage) -> Self {
        Self::Malformed(e)
    }
}

/// A verifier's public key and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VerifierKey {
    /// `verifier_id_for(public)`.
    pub id: u32,
    /// Ed25519 public key.
    pub public: [u8; 32],
}

impl VerifierKey {
    /// The key and its derived id.
    pub fn new(public: [u8; 32]) -> Self {
        Self {
            id: verifier_id_for(&public),
            public,
        }
    }
}

/// A verifier key a gateway trusts: the key, the verifier it belongs to,
/// and when it is trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TrustedKey {
    /// The key.
    pub key: VerifierKey,
    /// The verifier (operator) holding the key, an identifier the policy's
    /// builder assigns. During a rotation a verifier has several valid keys;
    /// certificates under keys of one verifier count once toward the
    /// quorum, which counts verifiers, not keys.
    pub verifier: u32,
    /// Trusted from here (seconds since the epoch).
    pub not_before: u64,
    /// Trusted until here, exclusive (seconds since the epoch).
    pub not_after: u64,
}

impl From<VerifierKey> for TrustedKey {
    /// A configured key: its own verifier, trusted at all times.
    fn from(key: VerifierKey) -> Self {
        Self {
            key,
            verifier: key.id,
            not_before: 0,
            not_after: u64::MAX,
        }
    }
}

impl TrustedKey {
    /// A key from a verified verifier key record, for the verifier numbered
    /// `verifier`, trusted for the record's validity window.
    pub fn published(record: &crate::record::VerifiedVerifierKeyRecord, verifier: u32) -> Self {
        let b = record.body();
        Self {
            key: b.verifier_key(),
            verifier,
            not_before: b.not_before,
            not_after: b.not_after,
        }
    }

    fn valid_at(&self, now_s: u64) -> bool {
        self.not_before <= now_s && now_s < self.not_after
    }
}

/// A verifier's id: the first four bytes of SHA-256 of its public key.
pub fn verifier_id_for(public: &[u8; 32]) -> u32 {
    let h = crate::record::sha256(public);
    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
}

/// One provenance certificate (compact form).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Certificate {
    /// Issuing verifier.
    pub verifier_id: u32,
    /// Address the verifier saw the client at.
    pub address: IpAddr,
    /// Start of validity, seconds since the epoch.
    pub start: u64,
    /// Length of validity, seconds.
    pub duration: u32,
    /// Ed25519 signature.
    pub signature: [u8; 64],
}

fn put_addr(out: &mut Vec<u8>, a: &IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            out.put_u8(4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.put_u8(6);
            out.extend_from_slice(&v6.octets());
        }
    }
}

impl Certificate {
    /// End of validity (exclusive), seconds.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(u64::from(self.duration))
    }

    fn signed_bytes(
        verifier_id: u32,
        address: &IpAddr,
        client_static: &[u8; 32],
        start: u64,
        duration: u32,
    ) -> Vec<u8> {
        let mut m = Vec::with_capacity(SIGNATURE_CONTEXT.len() + 66);
        m.extend_from_slice(SIGNATURE_CONTEXT);
        m.put_u8(PROVENANCE_VERSION);
        m.put_u32(verifier_id);
        put_addr(&mut m, address);
        m.extend_from_slice(client_static);
        m.put_u64(start);
        m.put_u32(duration);
        m
    }

    /// Wire form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(PROVENANCE_VERSION);
        out.put_u32(self.verifier_id);
        put_addr(out, &self.address);
        out.put_u64(self.start);
        out.put_u32(self.duration);
        out.extend_from_slice(&self.signature);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, InvalidMessage> {
        let v = r.u8()?;
        if v != PROVENANCE_VERSION {
            return Err(InvalidMessage::UnsupportedVersion(v));
        }
        let verifier_id = r.u32()?;
        let address = match r.u8()? {
            4 => IpAddr::from(r.array::<4>()?),
            6 => IpAddr::from(r.array::<16>()?),
            _ => return Err(InvalidMessage::InvalidField("address family")),
        };
        let start = r.u64()?;
        let duration = r.u32()?;
        let signature = r.array::<64>()?;
        Ok(Self {
            verifier_id,
            address,
            start,
            duration,
            signature,
        })
    }

    fn verify_signature(&self, key: &VerifierKey, client_static: &[u8; 32]) -> bool {
        let msg = Self::signed_bytes(
            self.verifier_id,
            &self.address,
            client_static,
            self.start,
            self.duration,
        );
        signature::UnparsedPublicKey::new(&signature::ED25519, key.public)
            .verify(&msg, &self.signature)
            .is_ok()
    }
}

/// The PROVENANCE extension value: `u8 count || certificates`.
pub fn encode_certificates(certs: &[Certificate]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + certs.len() * 98);
    let n = certs.len().min(MAX_CERTIFICATES);
    out.put_u8(n as u8);
    for c in &certs[..n] {
        c.encode(&mut out);
    }
    out
}

/// Strictly decode a PROVENANCE extension value.
pub fn decode_certificates(bytes: &[u8]) -> Result<Vec<Certificate>, ProvenanceError> {
    let mut r = Reader::new(bytes);
    let n = usize::from(r.u8()?);
    if n == 0 || n > MAX_CERTIFICATES {
        return Err(InvalidMessage::InvalidField("certificate count").into());
    }
    let certs = (0..n)
        .map(|_| Certificate::decode(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    r.finish()?;
    Ok(certs)
}

mod issue;
mod trust;
mod wire;

pub use issue::{IssuePolicy, VerifierKeys, VerifierSigner};
pub use trust::{QuorumOk, TrustPolicy, VerifiedCache};
pub use wire::{
    decode_verifier_response, encode_verifier_response, VerifierRequest, VerifierWireError,
    MAX_VERIFIER_REQUEST, STATUS_BAD_REQUEST, STATUS_NO_KEY, STATUS_OK, VERIFIER_REQUEST_MAGIC,
};

#[cfg(test)]
mod tests;
