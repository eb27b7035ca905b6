//! Which certificates published in TLSA are trusted: CA roots for server
//! authentication (webpki), checked for the host name.

use std::path::Path;

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, ServerName, TrustAnchor};
use zrtt_proto::UnixTime;

use super::ResolveError;

/// The platform's CA roots, found as rustls clients find them
/// (`rustls-native-certs`: `SSL_CERT_FILE` or `SSL_CERT_DIR` when set, else
/// the distribution's bundle or directory). Unreadable entries are skipped
/// (logged at debug); none found gives an empty list.
pub fn system_roots() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!("system CA roots: {e}");
    }
    found.certs
}

/// How certificates from TLSA are trusted.
#[derive(Debug, Default)]
pub struct Trust {
    anchors: Vec<TrustAnchor<'static>>,
}

impl Trust {
    /// No CA roots: only pinned certificates are trusted.
    pub fn none() -> Self {
        Self::default()
    }

    /// CA roots from a PEM file; refuses a file without any usable one.
    pub fn from_pem_file(path: &Path) -> Result<Self, ResolveError> {
        let err = |reason: String| ResolveError::CaFile {
            path: path.display().to_string(),
            reason,
        };
        let iter = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
        let mut t = Self::none();
        for c in iter {
            let c = c.map_err(|e| err(e.to_string()))?;
            t.add_root_der(&c).map_err(err)?;
        }
        if t.anchors.is_empty() {
            return Err(err("no certificates".into()));
        }
        Ok(t)
    }

    /// The platform's roots ([`system_roots`]); none when there are none.
    pub fn system() -> Self {
        let mut t = Self::none();
        for c in system_roots() {
            // A root webpki cannot use (an unusual encoding) is skipped.
            let _ = t.add_root_der(&c);
        }
        t
    }

    /// Add one DER root certificate.
    pub fn add_root_der(&mut self, der: &[u8]) -> Result<(), String> {
        let c = CertificateDer::from(der);
        let a = webpki::anchor_from_trusted_cert(&c).map_err(|e| format!("CA certificate: {e}"))?;
        self.anchors.push(a.to_owned());
        Ok(())
    }

    /// Number of roots.
    pub fn len(&self) -> usize {
        self.anchors.len()
    }

    /// Whether there are no roots.
    pub fn is_empty(&self) -> bool {
        self.anchors.is_empty()
    }

    /// Chain `der` (with `intermediates`) to a root for server
    /// authentication at `now`, and check that it covers `host`.
    pub fn check(
        &self,
        der: &[u8],
        intermediates: &[Vec<u8>],
        host: &str,
        now: UnixTime,
    ) -> Result<(), String> {
        if self.anchors.is_empty() {
            return Err("no CA roots configured".into());
        }
        let c = CertificateDer::from(der);
        let ee =
            webpki::EndEntityCert::try_from(&c).map_err(|e| format!("bad certificate: {e}"))?;
        let inter: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|d| CertificateDer::from(d.as_slice()))
            .collect();
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &self.anchors,
            &inter,
            now.to_pki(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| format!("chain check failed: {e}"))?;
        let name = ServerName::try_from(host).map_err(|_| format!("{host:?} is not a DNS name"))?;
        ee.verify_is_valid_for_subject_name(&name)
            .map_err(|e| format!("certificate does not cover {host}: {e}"))
    }
}
