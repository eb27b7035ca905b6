//! PEM files: semi-static X25519 keys (`zrtt keys generate` and the key
//! store share this format), certificates and PKCS#8 certificate keys; and
//! the one check every private key file passes before it is read.

use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};
use zeroize::Zeroizing;
use zrtt_proto::crypto::X25519KeyPair;

use crate::fsutil;
use crate::keystore::KeyStoreError;

/// PEM label of a semi-static key file.
pub const KEY_PEM_LABEL: &str = "ZRTT X25519 PRIVATE KEY";

/// Write a semi-static key as PEM, atomically, mode 0600.
pub fn write_key(path: &Path, key: &X25519KeyPair) -> Result<(), KeyStoreError> {
    let pem = Zeroizing::new(pem_encode(KEY_PEM_LABEL, key.private()));
    fsutil::write_atomic(path, pem.as_bytes(), true).map_err(|e| KeyStoreError::io(path, e))
}

/// Read a semi-static key written by [`write_key`] (refused when others
/// can read it: [`check_private_mode`]).
pub fn read_key(path: &Path) -> Result<X25519KeyPair, KeyStoreError> {
    let data = read_private(path)?;
    let text = std::str::from_utf8(&data)
        .map_err(|_| KeyStoreError::bad_file(path, "not a zrtt key file (not text)"))?;
    parse_key(text).map_err(|reason| KeyStoreError::bad_file(path, reason))
}

/// Refuse a private key file that its group or others may read or write
/// ([`KeyStoreError::Permissions`]: names the file, its mode and the fix,
/// `chmod 600 FILE`).
pub fn check_private_mode(path: &Path) -> Result<(), KeyStoreError> {
    let mode = fsutil::mode(path).map_err(|e| KeyStoreError::io(path, e))?;
    if fsutil::is_exposed(mode) {
        return Err(KeyStoreError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// The contents of a private key file, checked with [`check_private_mode`]
/// first, in a buffer wiped when dropped.
pub fn read_private(path: &Path) -> Result<Zeroizing<Vec<u8>>, KeyStoreError> {
    check_private_mode(path)?;
    std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|e| KeyStoreError::io(path, e))
}

fn parse_key(text: &str) -> Result<X25519KeyPair, &'static str> {
    let begin = format!("-----BEGIN {KEY_PEM_LABEL}-----");
    if !text.lines().any(|l| l.trim() == begin) {
        return Err("not a zrtt key file (no `-----BEGIN ZRTT X25519 PRIVATE KEY-----`)");
    }
    let body: String = text
        .lines()
        .skip_while(|l| l.trim() != begin)
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let body = Zeroizing::new(body);
    let bytes = Zeroizing::new(
        B64.decode(body.trim())
            .map_err(|_| "key body is not base64")?,
    );
    let private: Zeroizing<[u8; 32]> = Zeroizing::new(
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| "key must be 32 bytes")?,
    );
    Ok(X25519KeyPair::from_private(*private))
}

/// PEM text of `data` under `label`, 64 columns.
pub fn pem_encode(label: &str, data: &[u8]) -> String {
    let b64 = B64.encode(data);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

/// The first certificate of a PEM file, as DER.
pub fn load_cert(path: &Path) -> Result<Vec<u8>, KeyStoreError> {
    let data = std::fs::read(path).map_err(|e| KeyStoreError::io(path, e))?;
    CertificateDer::from_pem_slice(&data)
        .map(|c| c.to_vec())
        .map_err(|e| KeyStoreError::bad_file(path, format!("no PEM certificate: {e}")))
}

/// A PKCS#8 private key from a PEM file, as DER. Its mode is not checked
/// here (a key store copies an operator's key whatever its mode): callers
/// reading a key they serve with check it with [`check_private_mode`].
pub fn load_pkcs8(path: &Path) -> Result<Vec<u8>, KeyStoreError> {
    let data = Zeroizing::new(std::fs::read(path).map_err(|e| KeyStoreError::io(path, e))?);
    match PrivateKeyDer::from_pem_slice(&data)
        .map_err(|e| KeyStoreError::bad_file(path, format!("no PEM private key: {e}")))?
    {
        PrivateKeyDer::Pkcs8(k) => Ok(k.secret_pkcs8_der().to_vec()),
        _ => Err(KeyStoreError::bad_file(
            path,
            "need a PKCS#8 key (-----BEGIN PRIVATE KEY-----); convert with `openssl pkcs8 -topk8 -nocrypt`",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        let key = X25519KeyPair::from_private([7; 32]);
        write_key(&p, &key).unwrap();
        assert_eq!(read_key(&p).unwrap().public(), key.public());
        assert_eq!(fsutil::mode(&p).unwrap(), 0o600);
        std::fs::write(&p, "hello").unwrap();
        let e = read_key(&p).unwrap_err().to_string();
        assert!(
            e.contains("k.key") && e.contains("not a zrtt key file"),
            "{e}"
        );
    }

    #[test]
    fn exposed_key_files_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        write_key(&p, &X25519KeyPair::from_private([7; 32])).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read_key(&p).unwrap_err();
            assert!(matches!(e, KeyStoreError::Permissions { .. }), "{e}");
            let e = e.to_string();
            assert!(
                e.contains("k.key")
                    && e.contains(&format!("{mode:04o}"))
                    && e.contains("chmod 600"),
                "{e}"
            );
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_key(&p).is_ok());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read_key(&p).is_ok());
    }
}
