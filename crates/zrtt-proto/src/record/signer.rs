//! Signing key records with a certificate's private key (Ed25519 or
//! ECDSA P-256).

use super::*;

/// A certificate private key that signs key records.
pub enum RecordSigner {
    /// An Ed25519 key.
    Ed25519(signature::Ed25519KeyPair),
    /// An ECDSA P-256 key.
    EcdsaP256(signature::EcdsaKeyPair),
}

impl fmt::Debug for RecordSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordSigner({}, <redacted>)", self.algorithm().name())
    }
}

impl RecordSigner {
    /// From a PKCS#8 DER private key (`-----BEGIN PRIVATE KEY-----`), Ed25519 or ECDSA P-256.
    pub fn from_pkcs8(der: &[u8], rng: &dyn ring::rand::SecureRandom) -> Result<Self, RecordError> {
        if let Ok(k) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            return Ok(Self::Ed25519(k));
        }
        signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, der, rng)
            .map(Self::EcdsaP256)
            .map_err(|_| RecordError::UnsupportedKey("need a PKCS#8 Ed25519 or ECDSA P-256 key"))
    }

    /// The algorithm of this key.
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match self {
            Self::Ed25519(_) => SignatureAlgorithm::Ed25519,
            Self::EcdsaP256(_) => SignatureAlgorithm::EcdsaP256Sha256,
        }
    }

    /// The raw public key (32 bytes for Ed25519, 65-byte uncompressed point for P-256).
    pub fn public_key(&self) -> &[u8] {
        match self {
            Self::Ed25519(k) => k.public_key().as_ref(),
            Self::EcdsaP256(k) => k.public_key().as_ref(),
        }
    }

    /// Sign `msg`.
    pub fn sign(
        &self,
        msg: &[u8],
        rng: &dyn ring::rand::SecureRandom,
    ) -> Result<Vec<u8>, RecordError> {
        match self {
            Self::Ed25519(k) => Ok(k.sign(msg).as_ref().to_vec()),
            Self::EcdsaP256(k) => k
                .sign(rng, msg)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| RecordError::UnsupportedKey("ECDSA signing failed")),
        }
    }
}
