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
