//! A site's files: certificate, key store with signed key records, and the
//! pages it serves.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use pki_types::pem::PemObject;
use pki_types::CertificateDer;
use zrtt_dns::{KeyStore, Policy};
use zrtt_net::client::{system_clock, CertKeySource};
use zrtt_proto::record::KeyRecord;

use crate::proc::run_capture;
use crate::report::write_file;
use crate::Bench;

/// Certificate, key store and key records for one server name, in a
/// working directory.
pub(crate) struct Site {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    /// The key store directory (for `zrtt gateway --keystore`).
    pub(crate) keystore: PathBuf,
    /// Hex key record list (for `zrtt get --record`).
    pub(crate) records: PathBuf,
    /// The same records, for in-process clients.
    pub(crate) key_records: Vec<KeyRecord>,
    /// Document root.
    pub(crate) www: PathBuf,
}

impl Site {
    /// An ECDSA P-256 certificate from a fresh CA (`zrtt keys cert`), a key
    /// store with a current key, and an empty document root, under `dir`.
    pub(crate) fn create(bench: &Bench, dir: &Path, name: &str) -> Result<Site> {
        Site::create_with(bench, dir, name, Policy::default())
    }

    /// The same with the key store's rotation `policy`.
    pub(crate) fn create_with(
        bench: &Bench,
        dir: &Path,
        name: &str,
        policy: Policy,
    ) -> Result<Site> {
        let pki = dir.join("pki");
        make_cert(bench, &pki, name)?;
        Site::with_pki(dir, name, &pki, policy)
    }

    /// Sites for each of `names`, in `<dir>/s<i>`, sharing one certificate
    /// for `cert_name` (which covers them all, e.g. `*.example.com`) from
    /// one CA in `<dir>/pki`, each with its own key store (default policy)
    /// and document root: one `--cert` verifies all their records.
    pub(crate) fn create_sharing_cert(
        bench: &Bench,
        dir: &Path,
        cert_name: &str,
        names: &[&str],
    ) -> Result<Vec<Site>> {
        let pki = dir.join("pki");
        make_cert(bench, &pki, cert_name)?;
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Site::with_pki(&dir.join(format!("s{i}")), n, &pki, Policy::default()))
            .collect()
    }

    /// A site for `name` under `dir` with the certificate in `pki`.
    fn with_pki(dir: &Path, name: &str, pki: &Path, policy: Policy) -> Result<Site> {
        for sub in ["www", "nginx"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let mut site = Site {
            name: name.into(),
            dir: dir.into(),
            ca: pki.join("ca.pem"),
            cert: pki.join("cert.pem"),
            key: pki.join("cert.key"),
            keystore: dir.join("ks"),
            records: dir.join("records.hex"),
            key_records: Vec::new(),
            www: dir.join("www"),
        };
        let mut ks = KeyStore::init(&site.keystore, name, &site.cert, &site.key, policy)?;
        ks.rotate(system_clock(), &ring::rand::SystemRandom::new())?;
        site.key_records = ks.published_records(system_clock());
        if site.key_records.is_empty() {
            bail!("the key store published no record");
        }
        let list = zrtt_proto::record::encode_record_list(&site.key_records);
        write_file(&site.records, zrtt_proto::record::hex(&list).as_bytes())?;
        Ok(site)
    }

    /// Writes a page of `size` bytes at `www/<path>`.
    pub(crate) fn page(&self, path: &str, size: usize) -> Result<PathBuf> {
        let p = self.www.join(path.trim_start_matches('/'));
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, page_bytes(&self.name, size))?;
        Ok(p)
    }

    /// The server certificate, as DER.
    pub(crate) fn cert_der(&self) -> Result<CertificateDer<'static>> {
        pem_cert(&self.cert)
    }

    /// The CA certificate, as DER.
    pub(crate) fn ca_der(&self) -> Result<CertificateDer<'static>> {
        pem_cert(&self.ca)
    }

    /// The site's key records, checked against its certificate, as a
    /// client holds them after a DNS lookup.
    pub(crate) fn key_source(&self) -> Result<CertKeySource> {
        Ok(CertKeySource::new(
            self.cert_der()?.to_vec(),
            self.key_records.clone(),
        ))
    }
}

/// A fresh CA and an ECDSA P-256 certificate for `name` in `pki`
/// (`zrtt keys cert`).
fn make_cert(bench: &Bench, pki: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(pki)?;
    let mut cert = std::process::Command::new(&bench.zrtt);
    cert.args(["keys", "cert", "--name", name, "--alg", "ecdsa-p256"])
        .args(["--days", "30", "--out-dir"])
        .arg(pki);
    run_capture(cert).context("creating the site's certificate")?;
    Ok(())
}

fn pem_cert(path: &Path) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_file(path)
        .with_context(|| format!("reading a PEM certificate from {}", path.display()))
}

/// An HTML page of exactly `size` bytes (filler text after a short head).
pub(crate) fn page_bytes(name: &str, size: usize) -> Vec<u8> {
    let head = format!("<!doctype html><title>{name}</title><h1>Hello from {name}</h1><p>");
    let mut b = head.into_bytes();
    let filler = b"The first secure request in one round trip. ";
    while b.len() < size {
        let n = (size - b.len()).min(filler.len());
        b.extend_from_slice(&filler[..n]);
    }
    b.truncate(size);
    if size > 0 {
        b[size - 1] = b'\n';
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_have_exact_sizes() {
        for n in [1, 100, 1024, 11_448, 500 * 1024] {
            let p = page_bytes("www.example.com", n);
            assert_eq!(p.len(), n);
            assert_eq!(p[n - 1], b'\n');
        }
    }
}
