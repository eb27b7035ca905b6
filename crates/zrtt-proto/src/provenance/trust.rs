//! Checking certificates: the trust policy a gateway applies (quorum of
//! trusted verifiers) and the cache of certificates already verified.

use super::*;

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
