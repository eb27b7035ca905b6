//! Small helpers for the binary: time, files, PEM.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};
use zeroize::Zeroizing;
use zrtt_proto::UnixTime;

/// The wall clock, read only here in the shell.
pub fn now() -> UnixTime {
    UnixTime::since_epoch(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// Parse a duration like `90s`, `30m`, `1h`, `2d` or plain seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    zrtt_dns::keystore::parse_duration(s)
}

/// Parse a time: `now`, unix seconds, or `YYYY-MM-DDTHH:MM:SSZ`.
pub fn parse_time(s: &str) -> Result<u64, String> {
    if s == "now" {
        return Ok(now().as_secs());
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    parse_rfc3339(s)
        .ok_or_else(|| format!("invalid time {s:?}: use now, unix seconds or 2026-01-02T03:04:05Z"))
}

fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<u32>().ok();
    zrtt_proto::time::unix_from_civil(
        i64::from(n(0..4)?),
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    )
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn fmt_time(secs: u64) -> String {
    zrtt_dns::fmt_time(secs)
}

/// Write a file atomically (temp file in the same directory, then rename),
/// readable only by the owner when `private`. One implementation with the
/// key store: `zrtt_dns::fsutil::write_atomic`.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> Result<()> {
    zrtt_dns::fsutil::write_atomic(path, data, private)
        .with_context(|| format!("writing {}", path.display()))
}

/// The first certificate of a PEM file, as DER.
pub fn load_cert(path: &Path) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_file(path)
        .with_context(|| format!("reading a PEM certificate from {}", path.display()))
}

/// A PKCS#8 private key from a PEM file, as DER (refused when others can
/// read the file).
pub fn load_pkcs8(path: &Path) -> Result<Zeroizing<Vec<u8>>> {
    let pem = zrtt_dns::keyfile::read_private(path)?;
    match PrivateKeyDer::from_pem_slice(&pem).with_context(|| format!("reading a PEM private key from {}", path.display()))? {
        PrivateKeyDer::Pkcs8(k) => Ok(Zeroizing::new(k.secret_pkcs8_der().to_vec())),
        _ => bail!("{}: need a PKCS#8 key (-----BEGIN PRIVATE KEY-----); convert with `openssl pkcs8 -topk8 -nocrypt`", path.display()),
    }
}

/// Resolves on SIGINT or SIGTERM: the end of a long-running role.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// CA roots from a PEM file, or the system bundle when `path` is `None`
/// (a missing system bundle gives an empty store; a missing given file is an error).
pub fn load_roots(path: Option<&Path>) -> Result<rustls::RootCertStore> {
    let Some(path) = path else {
        return Ok(zrtt_net::client::system_roots());
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?;
    for c in certs.flatten() {
        let _ = roots.add(c);
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trip() {
        for s in [0u64, 951_782_400, 1_800_000_000, 4_102_444_800] {
            assert_eq!(parse_time(&fmt_time(s)).unwrap(), s);
        }
        assert_eq!(fmt_time(1_700_000_000), "2023-11-14T22:13:20Z");
        assert!(parse_time("2023-13-01T00:00:00Z").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h").unwrap().as_secs(), 3600);
        assert_eq!(parse_duration("90").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("1500ms").unwrap().as_millis(), 1500);
        assert_eq!(parse_duration("1h 30m").unwrap().as_secs(), 5400);
        assert!(parse_duration("h").is_err());
    }
}
