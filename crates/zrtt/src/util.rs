//! Small helpers for the binary: time, files, PEM.

use std::fs;
use std::io::Write;
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
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    u64::try_from(days)
        .ok()
        .map(|days| days * 86400 + h * 3600 + mi * 60 + se)
}

// Howard Hinnant's days-from-civil and its inverse.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn fmt_time(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Write a file atomically (temp file in the same directory, then rename),
/// readable only by the owner when `private`.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("zrtt"),
        std::process::id()
    ));
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(data)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().ok();
    }
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
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
