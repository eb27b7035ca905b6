//! Small helpers for the binary: time, files, PEM.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer};
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
    let (num, mul) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1),
        Some(b'm') => (&s[..s.len() - 1], 60),
        Some(b'h') => (&s[..s.len() - 1], 3600),
        Some(b'd') => (&s[..s.len() - 1], 86400),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: use e.g. 90s, 30m, 1h, 2d"))?;
    Ok(std::time::Duration::from_secs(n.saturating_mul(mul)))
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
    let (y, m, d, h, mi, s) = zrtt_proto::time::civil_from_unix(secs);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
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

/// A PKCS#8 private key from a PEM file, as DER.
pub fn load_pkcs8(path: &Path) -> Result<Vec<u8>> {
    match PrivateKeyDer::from_pem_file(path).with_context(|| format!("reading a PEM private key from {}", path.display()))? {
        PrivateKeyDer::Pkcs8(k) => Ok(k.secret_pkcs8_der().to_vec()),
        _ => bail!("{}: need a PKCS#8 key (-----BEGIN PRIVATE KEY-----); convert with `openssl pkcs8 -topk8 -nocrypt`", path.display()),
    }
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
        assert!(parse_duration("h").is_err());
    }
}
