//! Wall-clock time as a value. The core never reads a clock: callers pass
//! [`UnixTime`] into every validity, replay and timestamp check.

use core::fmt;
use core::time::Duration;

/// Milliseconds since the Unix epoch (UTC), as passed in by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(u64);

impl UnixTime {
    /// From milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// From whole seconds since the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1000))
    }

    /// From a duration since the epoch, as `SystemTime::duration_since(UNIX_EPOCH)` returns.
    pub fn since_epoch(d: Duration) -> Self {
        Self(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the epoch (rounded down).
    pub const fn as_secs(self) -> u64 {
        self.0 / 1000
    }

    /// `self + d`, saturating.
    pub fn saturating_add(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    /// `self - d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        )
    }

    /// The same instant as webpki's time type.
    pub fn to_pki(self) -> pki_types::UnixTime {
        pki_types::UnixTime::since_unix_epoch(Duration::from_millis(self.0))
    }
}

impl fmt::Display for UnixTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Seconds since the epoch of a UTC civil time, or `None` if a field is out
/// of range (Howard Hinnant's days-from-civil).
pub fn unix_from_civil(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<u64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let (m, d) = (i64::from(mo), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    u64::try_from(days * 86400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)).ok()
}

/// The UTC civil time `(year, month, day, hour, minute, second)` of seconds
/// since the epoch.
pub fn civil_from_unix(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for s in [
            0u64,
            951_782_400,
            1_800_000_000,
            4_102_444_800,
            67_767_976_233_316_800 / 1000,
        ] {
            let (y, mo, d, h, mi, se) = civil_from_unix(s);
            assert_eq!(unix_from_civil(y, mo, d, h, mi, se), Some(s));
        }
        assert_eq!(civil_from_unix(1_700_000_000), (2023, 11, 14, 22, 13, 20));
        assert_eq!(unix_from_civil(2023, 13, 1, 0, 0, 0), None);
    }
}
