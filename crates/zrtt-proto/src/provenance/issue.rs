//! Issuing certificates: a verifier's signing keys and the adaptive
//! expiry policy (ASAP §2.4).

use super::*;

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
