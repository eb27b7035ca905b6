//! A store's directory: its layout, creation (mode 0700), the rotation
//! lock, the change fingerprint, the `keys/` listing, private file modes
//! and the certificate that signs the records.
//!
//! ```text
//! <dir>/cert.pem            the certificate that signs the records
//! <dir>/cert.key            its PKCS#8 private key, mode 0600
//! <dir>/<config file>       name and policy (keystore.toml, verifier.toml)
//! <dir>/keys/<id>.key       a private key, mode 0600
//! <dir>/keys/<id>.record    its signed record (binary)
//! <dir>/keys/.rotate.lock   held while a rotation runs
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use zrtt_proto::record::{self, Aead, RecordBody, RecordFlags, RecordSigner};
use zrtt_proto::{RecordError, UnixTime};

use super::KeyStoreError;
use crate::{fsutil, keyfile};

/// Certificate file name in a store.
pub const CERT_FILE: &str = "cert.pem";
/// Certificate key file name in a store.
pub const CERT_KEY_FILE: &str = "cert.key";
/// Directory of keys and records in a store.
pub const KEYS_DIR: &str = "keys";
pub(crate) const LOCK_FILE: &str = ".rotate.lock";

/// Modification times and sizes of a store's files, to notice changes made
/// by another process cheaply (four `stat` calls).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Fingerprint(Vec<(Option<SystemTime>, u64)>);

impl Fingerprint {
    /// `keys/`, the policy file `config_file`, the certificate and its key.
    pub(crate) fn of(dir: &Path, config_file: &str) -> Self {
        let stat = |p: PathBuf| {
            fs::metadata(p)
                .map(|m| (m.modified().ok(), m.len()))
                .unwrap_or((None, 0))
        };
        Fingerprint(vec![
            stat(dir.join(KEYS_DIR)),
            stat(dir.join(config_file)),
            stat(dir.join(CERT_FILE)),
            stat(dir.join(CERT_KEY_FILE)),
        ])
    }
}

/// Creates a store directory (mode 0700, with `keys/`) for `name`: checks
/// that `cert_pem` and `cert_key_pem` sign records for it, copies them, and
/// writes the policy `config` to `config_file`. Refuses a directory that
/// already holds a store. Returns the normalised name.
pub(crate) fn init_store_dir(
    dir: &Path,
    config_file: &str,
    name: &str,
    cert_pem: &Path,
    cert_key_pem: &Path,
    config: impl FnOnce(&str) -> String,
) -> Result<String, KeyStoreError> {
    let config_path = dir.join(config_file);
    if config_path.exists() {
        return Err(KeyStoreError::AlreadyExists(dir.to_owned()));
    }
    let name = record::normalize_name(name);
    record::validate_name(&name).map_err(|e| KeyStoreError::Config {
        path: config_path.clone(),
        reason: format!("name {name:?}: {e}"),
    })?;
    // Check the pair before copying anything (the copy gets mode 0600
    // whatever the source's mode).
    load_signer(cert_pem, cert_key_pem, &name, false)?;
    let cert = fs::read(cert_pem).map_err(|e| KeyStoreError::io(cert_pem, e))?;
    let key = fs::read(cert_key_pem).map_err(|e| KeyStoreError::io(cert_key_pem, e))?;
    create_private_dir(dir)?;
    create_private_dir(&dir.join(KEYS_DIR))?;
    let write = |p: PathBuf, data: &[u8], private: bool| {
        fsutil::write_atomic(&p, data, private).map_err(|e| KeyStoreError::io(&p, e))
    };
    write(dir.join(CERT_FILE), &cert, false)?;
    write(dir.join(CERT_KEY_FILE), &key, true)?;
    write(config_path, config(&name).as_bytes(), false)?;
    Ok(name)
}

/// Runs `f` holding the exclusive rotation lock of the store in `dir`, so
/// that several rotators (the DNS server, a gateway or verifier, a timer)
/// can share one store.
pub(crate) fn with_rotation_lock<T>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, KeyStoreError>,
) -> Result<T, KeyStoreError> {
    let lock_path = dir.join(KEYS_DIR).join(LOCK_FILE);
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| KeyStoreError::io(&lock_path, e))?;
    lock.lock().map_err(|e| KeyStoreError::io(&lock_path, e))?;
    let result = f();
    drop(lock);
    result
}

/// `keys/<id>.<ext>` in the store `dir`.
pub(crate) fn key_file(dir: &Path, id: u32, ext: &str) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{id:08x}.{ext}"))
}

/// Files of one kind in a store's `keys/`, by id.
pub(crate) type KeyFiles = BTreeMap<u32, PathBuf>;

/// The files in a store's `keys/`: records and private keys by id (temporary
/// files and the lock skipped, anything else ignored with a warning).
pub(crate) fn list_key_files(dir: &Path) -> Result<(KeyFiles, KeyFiles), KeyStoreError> {
    let kdir = dir.join(KEYS_DIR);
    let entries = fs::read_dir(&kdir).map_err(|e| KeyStoreError::io(&kdir, e))?;
    let mut records: BTreeMap<u32, PathBuf> = BTreeMap::new();
    let mut privs: BTreeMap<u32, PathBuf> = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|e| KeyStoreError::io(&kdir, e))?;
        let path = entry.path();
        let Some(fname) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if fname.starts_with('.') {
            continue; // temporary files and the lock
        }
        let parsed = fname.split_once('.').and_then(|(stem, ext)| {
            let hex_ok = stem.len() == 8
                && stem
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            let id = u32::from_str_radix(stem, 16).ok().filter(|_| hex_ok)?;
            matches!(ext, "key" | "record").then_some((id, ext == "key"))
        });
        let Some((id, is_key)) = parsed else {
            tracing::warn!(
                "{}: ignored (not <keyid>.key or <keyid>.record)",
                path.display()
            );
            continue;
        };
        let map = if is_key { &mut privs } else { &mut records };
        if map.insert(id, path.clone()).is_some() {
            return Err(KeyStoreError::DuplicateKeyId { path, key_id: id });
        }
    }
    Ok((records, privs))
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), KeyStoreError> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(|e| KeyStoreError::io(dir, e))
}

pub(crate) use crate::keyfile::check_private_mode;

/// Load a certificate and its key, and check that the key signs records
/// the certificate verifies for `name` (which also checks the name is
/// covered).
pub(crate) fn load_signer(
    cert_path: &Path,
    key_path: &Path,
    name: &str,
    check_mode: bool,
) -> Result<(Vec<u8>, RecordSigner), KeyStoreError> {
    let cert_der = keyfile::load_cert(cert_path)?;
    if check_mode {
        check_private_mode(key_path)?;
    }
    let pkcs8 = keyfile::load_pkcs8(key_path)?;
    // Only ECDSA key parsing uses randomness here (ring checks the key).
    let rng = ring::rand::SystemRandom::new();
    let signer =
        RecordSigner::from_pkcs8(&pkcs8, &rng).map_err(|e| KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: e.to_string(),
        })?;
    let (cert_nb, _) =
        record::cert::validity(&cert_der).map_err(|e| KeyStoreError::Certificate {
            path: cert_path.to_owned(),
            reason: format!("validity: {e}"),
        })?;
    let probe = RecordBody {
        key_id: 0,
        // The X25519 base point: any strong key would do for the probe
        // (an all-zero key is refused as WeakKey).
        public_key: {
            let mut base = [0u8; 32];
            base[0] = 9;
            base
        },
        not_before: cert_nb,
        not_after: cert_nb + 1,
        max_early_data_bytes: 0,
        aeads: vec![Aead::ChaChaPoly],
        flags: RecordFlags::default(),
        provenance_quorum: 0,
        verifiers: Vec::new(),
        name: name.to_owned(),
        cert_sha256: record::sha256(&cert_der),
    };
    let rec = probe
        .sign(&signer, &rng)
        .map_err(|e| KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: format!("cannot sign: {e}"),
        })?;
    match rec.verify(&cert_der, name, UnixTime::from_secs(cert_nb)) {
        Ok(_) => Ok((cert_der, signer)),
        Err(RecordError::BadSignature) => Err(KeyStoreError::Certificate {
            path: key_path.to_owned(),
            reason: format!("is not the key of {}", cert_path.display()),
        }),
        Err(e) => Err(KeyStoreError::Certificate {
            path: cert_path.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// The text of a store's config file.
pub(crate) fn read_config(path: &Path) -> Result<String, KeyStoreError> {
    fs::read_to_string(path).map_err(|e| KeyStoreError::io(path, e))
}
