//! Signing key records with a certificate's private key: Ed25519, ECDSA
//! P-256 or P-384, or RSA (2048 to 4096 bits, RSASSA-PSS with SHA-256), the
//! keys of the certificates public CAs issue.

use super::*;

/// A certificate private key that signs key records.
pub enum RecordSigner {
    /// An Ed25519 key.
    Ed25519(signature::Ed25519KeyPair),
    /// An ECDSA P-256 key.
    EcdsaP256(signature::EcdsaKeyPair),
    /// An ECDSA P-384 key.
    EcdsaP384(signature::EcdsaKeyPair),
    /// An RSA key.
    Rsa(signature::RsaKeyPair),
}

impl fmt::Debug for RecordSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordSigner({}, <redacted>)", self.algorithm().name())
    }
}

impl RecordSigner {
    /// From a PKCS#8 DER private key (`-----BEGIN PRIVATE KEY-----`):
    /// Ed25519, ECDSA P-256 or P-384, or RSA of 2048 to 4096 bits.
    pub fn from_pkcs8(der: &[u8], rng: &dyn ring::rand::SecureRandom) -> Result<Self, RecordError> {
        if let Ok(k) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            return Ok(Self::Ed25519(k));
        }
        if let Ok(k) = signature::EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            der,
            rng,
        ) {
            return Ok(Self::EcdsaP256(k));
        }
        if let Ok(k) = signature::EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
            der,
            rng,
        ) {
            return Ok(Self::EcdsaP384(k));
        }
        match signature::RsaKeyPair::from_pkcs8(der) {
            Ok(k) if (2048..=4096).contains(&(k.public().modulus_len() * 8)) => Ok(Self::Rsa(k)),
            Ok(_) => Err(RecordError::UnsupportedKey(
                "an RSA key must have 2048 to 4096 bits",
            )),
            Err(_) => Err(RecordError::UnsupportedKey(
                "need a PKCS#8 Ed25519, ECDSA P-256 or P-384, or RSA key",
            )),
        }
    }

    /// The algorithm of this key.
    pub fn algorithm(&self) -> SignatureAlgorithm {
        match self {
            Self::Ed25519(_) => SignatureAlgorithm::Ed25519,
            Self::EcdsaP256(_) => SignatureAlgorithm::EcdsaP256Sha256,
            Self::EcdsaP384(_) => SignatureAlgorithm::EcdsaP384Sha384,
            Self::Rsa(_) => SignatureAlgorithm::RsaPssSha256,
        }
    }

    /// The raw public key (32 bytes for Ed25519, the uncompressed point for
    /// ECDSA, the DER RSAPublicKey for RSA).
    pub fn public_key(&self) -> &[u8] {
        match self {
            Self::Ed25519(k) => k.public_key().as_ref(),
            Self::EcdsaP256(k) | Self::EcdsaP384(k) => k.public_key().as_ref(),
            Self::Rsa(k) => k.public().as_ref(),
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
            Self::EcdsaP256(k) | Self::EcdsaP384(k) => k
                .sign(rng, msg)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| RecordError::UnsupportedKey("ECDSA signing failed")),
            Self::Rsa(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(&signature::RSA_PSS_SHA256, rng, msg, &mut sig)
                    .map_err(|_| RecordError::UnsupportedKey("RSA signing failed"))?;
                Ok(sig)
            }
        }
    }
}
