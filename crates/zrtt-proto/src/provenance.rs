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

/// How long certificates last (ASAP §2.4 adaptive expiry).
#[derive(Clone, Copy, Debug)]
pub struct IssuePolicy {
    /// Duration of a first certificate for an address (default 30 minutes).
    pub initial_secs: u32,
    /// Cap on doubling (default one day).
    pub max_secs: u32,
}

impl Default for IssuePolicy {
    fn default() -> Self {
        Self {
            initial_secs: 1800,
            max_secs: 86400,
        }
    }
}

/// A verifier's signing key. Stateless: everything it needs to issue or
/// refresh is in the request and the previous certificate.
pub struct VerifierSigner {
    pair: signature::Ed25519KeyPair,
    key: VerifierKey,
}

impl core::fmt::Debug for VerifierSigner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "VerifierSigner({:08x}, <redacted>)", self.key.id)
    }
}

impl VerifierSigner {
    /// From a PKCS#8 Ed25519 key.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, crate::RecordError> {
        let pair = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
            .map_err(|_| crate::RecordError::UnsupportedKey("need a PKCS#8 Ed25519 key"))?;
        let mut public = [0u8; 32];
        public.copy_from_slice(pair.public_key().as_ref());
        Ok(Self {
            pair,
            key: VerifierKey::new(public),
        })
    }

    /// A new verifier key; returns the signer and its PKCS#8 form to store.
    pub fn generate(rng: &dyn ring::rand::SecureRandom) -> Result<(Self, Vec<u8>), crate::Error> {
        let pkcs8 =
            signature::Ed25519KeyPair::generate_pkcs8(rng).map_err(|_| crate::Error::Rng)?;
        let signer = Self::from_pkcs8(pkcs8.as_ref())?;
        Ok((signer, pkcs8.as_ref().to_vec()))
    }

    /// The public key and id.
    pub fn key(&self) -> VerifierKey {
        self.key
    }

    /// Issue a certificate for `client_static` seen at `address` (the caller
    /// has proven the address: a completed TCP handshake or a challenge
    /// round trip). `previous`, if this verifier issued it for the same key
    /// and address and it is still valid, doubles the duration (up to the
    /// cap); otherwise the duration is the initial one. `requested_secs`
    /// caps the result.
    pub fn issue(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        now: UnixTime,
    ) -> Certificate {
        self.issue_with(
            policy,
            client_static,
            address,
            requested_secs,
            previous,
            &[],
            u64::MAX,
            now,
        )
    }

    /// [`Self::issue`], also accepting as `previous` a certificate signed by
    /// one of `also_mine` (this verifier's other keys), and ending the
    /// certificate by `until` at the latest.
    #[allow(clippy::too_many_arguments)]
    fn issue_with(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        also_mine: &[VerifierKey],
        until: u64,
        now: UnixTime,
    ) -> Certificate {
        let now_s = now.as_secs();
        let refreshed = previous.filter(|p| {
            let key = core::iter::once(&self.key)
                .chain(also_mine)
                .find(|k| k.id == p.verifier_id);
            key.is_some_and(|key| {
                p.address == address
                    && p.start <= now_s
                    && now_s < p.end()
                    && p.verify_signature(key, client_static)
            })
        });
        let base = match refreshed {
            Some(p) => p.duration.saturating_mul(2).min(policy.max_secs),
            None => policy.initial_secs.min(policy.max_secs),
        };
        let left = u32::try_from(until.saturating_sub(now_s)).unwrap_or(u32::MAX);
        let duration = base.min(requested_secs.max(1)).min(left);
        let msg = Certificate::signed_bytes(self.key.id, &address, client_static, now_s, duration);
        let mut signature = [0u8; 64];
        signature.copy_from_slice(self.pair.sign(&msg).as_ref());
        Certificate {
            verifier_id: self.key.id,
            address,
            start: now_s,
            duration,
            signature,
        }
    }
}

/// The keys of one verifier during a rotation: the current key signs, and
/// certificates from its other keys (still published, still trusted by
/// gateways) count as the previous certificate of a refresh, so the
/// adaptive expiry keeps doubling across a rotation. Certificates never
/// outlive `sign_until` (the end of the current key's published validity
/// minus a margin), so no certificate outlives the key gateways trust.
#[derive(Debug)]
pub struct VerifierKeys {
    current: VerifierSigner,
    sign_until: u64,
    others: Vec<VerifierKey>,
}

impl VerifierKeys {
    /// `current` signs until `sign_until` (seconds; `None`: no bound);
    /// `others` are this verifier's other keys.
    pub fn new(current: VerifierSigner, sign_until: Option<u64>, others: Vec<VerifierKey>) -> Self {
        Self {
            current,
            sign_until: sign_until.unwrap_or(u64::MAX),
            others,
        }
    }

    /// The key that signs.
    pub fn current(&self) -> VerifierKey {
        self.current.key()
    }

    /// The other keys accepted as a refresh's previous certificate.
    pub fn others(&self) -> &[VerifierKey] {
        &self.others
    }

    /// Issue as [`VerifierSigner::issue`] with the current key, the
    /// duration cut so the certificate ends by `sign_until`; `None` once
    /// the current key may sign nothing more.
    pub fn issue(
        &self,
        policy: &IssuePolicy,
        client_static: &[u8; 32],
        address: IpAddr,
        requested_secs: u32,
        previous: Option<&Certificate>,
        now: UnixTime,
    ) -> Option<Certificate> {
        if now.as_secs() >= self.sign_until {
            return None;
        }
        Some(self.current.issue_with(
            policy,
            client_static,
            address,
            requested_secs,
            previous,
            &self.others,
            self.sign_until,
            now,
        ))
    }
}

/// Certificates already verified, so the same one is not checked twice.
/// Keyed by the certificate, the verifier key that verified it and the
/// client key, so a certificate only counts again under the key that
/// checked it. Bounded without scans: two generations of at most
/// `capacity / 2` entries; when the current one fills, the older one is
/// dropped (an entry used since is found in the current one).
#[derive(Debug)]
pub struct VerifiedCache {
    current: HashMap<[u8; 32], u64>,
    previous: HashMap<[u8; 32], u64>,
    capacity: usize,
}

impl VerifiedCache {
    /// A cache holding at most `capacity` certificates.
    pub fn new(capacity: usize) -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
            capacity,
        }
    }

    fn key(cert: &Certificate, verifier: &VerifierKey, client_static: &[u8; 32]) -> [u8; 32] {
        let mut b = Vec::with_capacity(172);
        cert.encode(&mut b);
        b.extend_from_slice(&verifier.public);
        b.extend_from_slice(client_static);
        crate::record::sha256(&b)
    }

    fn hit(&mut self, k: &[u8; 32], now: u64) -> bool {
        if self.current.get(k).is_some_and(|&end| now < end) {
            return true;
        }
        match self.previous.remove(k) {
            Some(end) if now < end => {
                // Used again: keep it in the current generation.
                self.insert(*k, end, now);
                true
            }
            _ => false,
        }
    }

    fn insert(&mut self, k: [u8; 32], end: u64, _now: u64) {
        if self.capacity == 0 {
            return;
        }
        // Two generations of half the capacity each (one of all of it when
        // there is no room for two).
        let generation = if self.capacity >= 2 {
            self.capacity / 2
        } else {
            self.capacity
        };
        if self.current.len() >= generation {
            let full = std::mem::take(&mut self.current);
            self.previous = if self.capacity >= 2 {
                full
            } else {
                HashMap::new()
            };
        }
        self.current.insert(k, end);
    }

    /// Number of cached certificates.
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A gateway's provenance policy: which verifier keys it trusts and how
/// many valid certificates from distinct verifiers it needs.
#[derive(Clone, Debug)]
pub struct TrustPolicy {
    /// Trusted verifier keys (configured ones via `TrustedKey::from`).
    pub keys: Vec<TrustedKey>,
    /// Certificates from distinct verifiers needed (at least 1).
    pub quorum: usize,
    /// Clock skew tolerated at the edges of a certificate's validity, seconds.
    pub skew_secs: u64,
}

/// What an accepted quorum consisted of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumOk {
    /// Verifier ids (as certificates carry them) of the certificates that
    /// counted: one per verifier.
    pub verifiers: Vec<u32>,
    /// Signatures verified by this call (the rest came from the cache).
    pub signatures_checked: usize,
}

impl TrustPolicy {
    /// Check `certs` for a connection from `peer` whose IK static key is
    /// `client_static`, at `now`. Stops as soon as the quorum is met, so at
    /// most `quorum` signatures are checked per call. A certificate from a
    /// verifier that already counted (under another of its keys) is skipped.
    pub fn verify(
        &self,
        certs: &[Certificate],
        peer: IpAddr,
        client_static: Option<&[u8; 32]>,
        now: UnixTime,
        cache: &mut VerifiedCache,
    ) -> Result<QuorumOk, ProvenanceError> {
        let cache = std::cell::RefCell::new(cache);
        self.verify_with(
            certs,
            peer,
            client_static,
            now,
            &mut |k, now_s| cache.borrow_mut().hit(k, now_s),
            &mut || true,
            &mut |k, end, now_s| cache.borrow_mut().insert(k, end, now_s),
        )
    }

    /// [`Self::verify`] for a gateway serving many connections at once:
    /// the shared `cache` is locked only to look a certificate up and to
    /// record it, never across a signature check, and `may_check` is asked
    /// before each signature check (a rate limit on checks, not on flights:
    /// a flight whose certificates are all cached costs none). When it
    /// refuses, the result is [`ProvenanceError::CheckRateExceeded`].
    pub fn verify_shared(
        &self,
        certs: &[Certificate],
        peer: IpAddr,
        client_static: Option<&[u8; 32]>,
        now: UnixTime,
        cache: &std::sync::Mutex<VerifiedCache>,
        may_check: &mut dyn FnMut() -> bool,
    ) -> Result<QuorumOk, ProvenanceError> {
        let lock = || cache.lock().unwrap_or_else(|p| p.into_inner());
        self.verify_with(
            certs,
            peer,
            client_static,
            now,
            &mut |k, now_s| lock().hit(k, now_s),
            may_check,
            &mut |k, end, now_s| lock().insert(k, end, now_s),
        )
    }

    /// The checks in the order that costs least and cannot be steered by
    /// an attacker: every certificate's cheap checks first, the cached ones
    /// count without a signature check, then signatures only if the
    /// uncached certificates could still reach the quorum, stopping at the
    /// first bad one (a forged certificate costs one check, not eight).
    #[allow(clippy::too_many_arguments)]
    fn verify_with(
        &self,
        certs: &[Certificate],
        peer: IpAddr,
        client_static: Option<&[u8; 32]>,
        now: UnixTime,
        cached: &mut dyn FnMut(&[u8; 32], u64) -> bool,
        may_check: &mut dyn FnMut() -> bool,
        remember: &mut dyn FnMut([u8; 32], u64, u64),
    ) -> Result<QuorumOk, ProvenanceError> {
        let client_static = client_static.ok_or(ProvenanceError::NoStaticKey)?;
        // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d; the
        // verifier certified a.b.c.d.
        let peer = crate::admission::canonical_ip(peer);
        let now_s = now.as_secs();
        let quorum = self.quorum.max(1);
        let mut ok = QuorumOk {
            verifiers: Vec::new(),
            signatures_checked: 0,
        };
        let mut counted: Vec<u32> = Vec::new();
        let mut first_error = None;
        // Certificates that passed the cheap checks but are not cached:
        // (certificate, trusted key, cache key).
        let mut to_check: Vec<(&Certificate, &TrustedKey, [u8; 32])> = Vec::new();
        for (i, c) in certs.iter().enumerate() {
            if certs[..i].iter().any(|o| o.verifier_id == c.verifier_id) {
                return Err(ProvenanceError::DuplicateVerifier(c.verifier_id));
            }
            let check = (|| {
                let key = self
                    .keys
                    .iter()
                    .find(|k| k.key.id == c.verifier_id)
                    .ok_or(ProvenanceError::UntrustedVerifier(c.verifier_id))?;
                if !key.valid_at(now_s) {
                    return Err(ProvenanceError::VerifierKeyNotValid(c.verifier_id));
                }
                if crate::admission::canonical_ip(c.address) != peer {
                    return Err(ProvenanceError::AddressMismatch {
                        verifier: c.verifier_id,
                        certified: c.address,
                        peer,
                    });
                }
                if now_s.saturating_add(self.skew_secs) < c.start {
                    return Err(ProvenanceError::NotYetValid(c.verifier_id));
                }
                if now_s >= c.end().saturating_add(self.skew_secs) {
                    return Err(ProvenanceError::Expired(c.verifier_id));
                }
                Ok(key)
            })();
            match check {
                Ok(key) => {
                    let k = VerifiedCache::key(c, &key.key, client_static);
                    if counted.contains(&key.verifier) {
                        // Another key of a verifier that already counted.
                    } else if cached(&k, now_s) {
                        counted.push(key.verifier);
                        ok.verifiers.push(c.verifier_id);
                        if ok.verifiers.len() >= quorum {
                            return Ok(ok);
                        }
                    } else {
                        to_check.push((c, key, k));
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let mut reachable: Vec<u32> = counted.clone();
        for (_, key, _) in &to_check {
            if !reachable.contains(&key.verifier) {
                reachable.push(key.verifier);
            }
        }
        if reachable.len() >= quorum {
            for (c, key, k) in to_check {
                if counted.contains(&key.verifier) {
                    continue;
                }
                if !may_check() {
                    // Out of signature checks (ASAP §2.5): served unproven.
                    return Err(ProvenanceError::CheckRateExceeded);
                }
                ok.signatures_checked += 1;
                if !c.verify_signature(&key.key, client_static) {
                    return Err(ProvenanceError::BadSignature(c.verifier_id));
                }
                remember(k, c.end(), now_s);
                counted.push(key.verifier);
                ok.verifiers.push(c.verifier_id);
                if ok.verifiers.len() >= quorum {
                    return Ok(ok);
                }
            }
        }
        // The first concrete reason a certificate failed, or else how many
        // could count at most (signatures are not checked for a quorum
        // that cannot be met).
        Err(first_error.unwrap_or(ProvenanceError::QuorumNotMet {
            valid: reachable.len(),
            needed: quorum,
        }))
    }
}

#[cfg(test)]
mod tests;
