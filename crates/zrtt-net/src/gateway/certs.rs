//! The certificate the TLS path serves, replaceable while the gateway runs
//! (a certbot renewal): every handshake takes the chain in force; a
//! replacement is checked (parses, the key matches the certificate) before
//! it is put in force, so a broken file never replaces a working one, and
//! connections already open keep theirs.

use std::path::Path;
use std::sync::{Arc, RwLock};

use pki_types::pem::PemObject;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::{Error, Result};

/// A certificate chain and its key, replaceable ([`ResolvesServerCert`]).
#[derive(Debug)]
pub struct ReloadableCert(RwLock<Arc<CertifiedKey>>);

impl ReloadableCert {
    /// Serve `key` until replaced.
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self(RwLock::new(Arc::new(key))))
    }

    /// Put `key` in force for the next handshakes.
    pub fn replace(&self, key: CertifiedKey) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
    }

    /// The chain in force.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Certificates by server name (SNI) for a gateway serving several
/// sites: the first site's certificate answers a ClientHello without a
/// server name or with a name no site has (nginx's default server); each
/// stays replaceable ([`ReloadableCert`]).
#[derive(Debug)]
pub struct SniCerts {
    sites: Vec<(Vec<String>, Arc<ReloadableCert>)>,
}

impl SniCerts {
    /// `sites`: each site's names and certificate, the default first.
    pub fn new(sites: Vec<(Vec<String>, Arc<ReloadableCert>)>) -> Result<Arc<Self>> {
        if sites.is_empty() {
            return Err(Error::Config("no certificate".into()));
        }
        Ok(Arc::new(Self { sites }))
    }
}

impl ResolvesServerCert for SniCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().map(|n| n.trim_end_matches('.'));
        let site = name
            .and_then(|n| {
                self.sites
                    .iter()
                    .find(|(names, _)| names.iter().any(|s| s.eq_ignore_ascii_case(n)))
            })
            .unwrap_or(&self.sites[0]);
        Some(site.1.current())
    }
}

/// A chain and key as TLS serves them, checked: at least one certificate,
/// a key the provider can sign with, and the key matching the first
/// certificate.
pub fn certified_key(
    chain: Vec<pki_types::CertificateDer<'static>>,
    key: pki_types::PrivateKeyDer<'static>,
) -> Result<CertifiedKey> {
    if chain.is_empty() {
        return Err(Error::Config("no certificate in the chain".into()));
    }
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(Error::Tls)
}

/// Read a PEM chain and its PEM private key (PKCS#8, SEC1 or PKCS#1) and
/// check them as [`certified_key`] does; errors name the file.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let bad = |p: &Path, e: &dyn std::fmt::Display| Error::Config(format!("{}: {e}", p.display()));
    let chain = pki_types::CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, &e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, &e))?;
    let der = pki_types::PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, &e))?;
    certified_key(chain, der).map_err(|e| bad(cert, &e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn data(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../zrtt-proto/tests/data")
            .join(name)
    }

    #[test]
    fn a_mismatched_or_empty_chain_is_refused_and_replacing_changes_what_is_served() {
        let a = load_certified_key(&data("ecdsa-cert.pem"), &data("ecdsa-cert.key")).unwrap();
        let b = load_certified_key(&data("other-cert.pem"), &data("other-cert.key")).unwrap();
        let (a_cert, b_cert) = (a.cert[0].clone(), b.cert[0].clone());
        // One certificate with another's key: refused, naming the file.
        let e = load_certified_key(&data("other-cert.pem"), &data("ecdsa-cert.key")).unwrap_err();
        assert!(e.to_string().contains("other-cert.pem"), "{e}");
        let e = load_certified_key(&data("ecdsa-cert.key"), &data("ecdsa-cert.key")).unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");
        let r = ReloadableCert::new(a);
        assert_eq!(r.current().cert[0], a_cert);
        r.replace(b);
        assert_eq!(r.current().cert[0], b_cert);
    }
}
