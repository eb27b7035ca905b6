//! Whether a backend takes requests: passive marks after connect failures
//! (nginx's `max_fails` and `fail_timeout`) and optional active HTTP checks
//! with rise and fall counts (HAProxy's `check inter rise fall`).
//!
//! - **Passive:** `max_fails` connect failures within `fail_timeout` mark a
//!   backend down for `fail_timeout`; then it is tried again. A response
//!   from it clears the count.
//! - **Active:** every `interval`, a `GET path` on a new connection (with a
//!   PROXY v2 LOCAL header for a `proxy-v2+` backend) must answer 2xx or
//!   3xx within `timeout`. `fall` failed checks in a row mark an up backend
//!   down, `rise` passed checks in a row an down one up (which also ends a
//!   passive mark). Backends start up.
//!
//! A site's only backend is never marked down by failures (nginx ignores
//! `max_fails` for a lone server too); active checks still apply to it.

use std::time::Duration;

use tokio::time::Instant;

/// How backends are judged healthy (docs/GATEWAY.md, Backends).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendHealth {
    /// Connect failures within `fail_timeout` that mark a backend down
    /// (nginx `max_fails`); 0 never marks it.
    pub max_fails: u32,
    /// How long a marked backend stays down, and the window the failures
    /// are counted in (nginx `fail_timeout`).
    pub fail_timeout: Duration,
    /// Active checks; `None`: passive marks only.
    pub check: Option<HealthCheck>,
}

/// nginx's `max_fails` default.
pub const DEFAULT_MAX_FAILS: u32 = 1;
/// nginx's `fail_timeout` default.
pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for BackendHealth {
    fn default() -> Self {
        Self {
            max_fails: DEFAULT_MAX_FAILS,
            fail_timeout: DEFAULT_FAIL_TIMEOUT,
            check: None,
        }
    }
}

/// An active HTTP check of every backend.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthCheck {
    /// The path requested (`GET`, with the site's first name as `Host`).
    pub path: String,
    /// Time between two checks of a backend (HAProxy `inter`).
    pub interval: Duration,
    /// Connect and response head within this, or the check fails
    /// (HAProxy `timeout check`).
    pub timeout: Duration,
    /// Passed checks in a row that bring a down backend up (HAProxy `rise`).
    pub rise: u32,
    /// Failed checks in a row that take an up backend down (HAProxy `fall`).
    pub fall: u32,
}

/// HAProxy's defaults: `inter 2s rise 2 fall 3`.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Check timeout default.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// HAProxy's `rise` default.
pub const DEFAULT_RISE: u32 = 2;
/// HAProxy's `fall` default.
pub const DEFAULT_FALL: u32 = 3;

impl HealthCheck {
    /// Checks of `path` with the defaults.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            interval: DEFAULT_CHECK_INTERVAL,
            timeout: DEFAULT_CHECK_TIMEOUT,
            rise: DEFAULT_RISE,
            fall: DEFAULT_FALL,
        }
    }
}

/// One backend's health (see the module docs); no I/O, time passed in.
#[derive(Debug)]
pub(super) struct HealthState {
    fails: u32,
    window_start: Option<Instant>,
    down_until: Option<Instant>,
    checked_up: bool,
    /// Check results in a row against `checked_up`.
    streak: u32,
}

impl HealthState {
    pub(super) fn new() -> Self {
        Self {
            fails: 0,
            window_start: None,
            down_until: None,
            checked_up: true,
            streak: 0,
        }
    }

    /// Whether requests may go to the backend at `now`.
    pub(super) fn available(&self, now: Instant) -> bool {
        self.checked_up && self.down_until.is_none_or(|t| now >= t)
    }

    /// A connection to the backend failed; `true` when that marks it down.
    pub(super) fn handle_connect_failure(&mut self, now: Instant, cfg: &BackendHealth) -> bool {
        if cfg.max_fails == 0 {
            return false;
        }
        if self
            .window_start
            .is_none_or(|s| now.saturating_duration_since(s) >= cfg.fail_timeout)
        {
            self.window_start = Some(now);
            self.fails = 0;
        }
        self.fails += 1;
        if self.fails >= cfg.max_fails {
            let was = self.available(now);
            self.down_until = Some(now + cfg.fail_timeout);
            self.fails = 0;
            self.window_start = None;
            return was;
        }
        false
    }

    /// The backend answered a request.
    pub(super) fn handle_response(&mut self) {
        self.fails = 0;
        self.window_start = None;
    }

    /// An active check passed (`ok`) or failed; `Some(up)` when the checks
    /// changed their verdict.
    pub(super) fn handle_check(&mut self, ok: bool, check: &HealthCheck) -> Option<bool> {
        if ok == self.checked_up {
            self.streak = 0;
            if ok {
                // A passing check ends a passive mark.
                self.down_until = None;
            }
            return None;
        }
        self.streak += 1;
        let needed = if ok { check.rise } else { check.fall };
        if self.streak < needed.max(1) {
            return None;
        }
        self.streak = 0;
        self.checked_up = ok;
        if ok {
            self.down_until = None;
            self.fails = 0;
            self.window_start = None;
        }
        Some(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_mark_a_backend_down_for_fail_timeout() {
        let cfg = BackendHealth {
            max_fails: 2,
            ..BackendHealth::default()
        };
        let t0 = Instant::now();
        let mut h = HealthState::new();
        assert!(h.available(t0));
        assert!(!h.handle_connect_failure(t0, &cfg));
        // The first failure's window ended: counting starts again.
        let t1 = t0 + cfg.fail_timeout;
        assert!(!h.handle_connect_failure(t1, &cfg));
        assert!(h.available(t1));
        assert!(h.handle_connect_failure(t1 + Duration::from_secs(1), &cfg));
        assert!(!h.available(t1 + Duration::from_secs(2)));
        assert!(h.available(t1 + Duration::from_secs(1) + cfg.fail_timeout));
        // A response clears the count.
        let mut h = HealthState::new();
        assert!(!h.handle_connect_failure(t0, &cfg));
        h.handle_response();
        assert!(!h.handle_connect_failure(t0, &cfg));
        // max_fails 0: never marked.
        let never = BackendHealth {
            max_fails: 0,
            ..BackendHealth::default()
        };
        assert!(!h.handle_connect_failure(t0, &never));
        assert!(h.available(t0));
    }

    #[test]
    fn checks_need_fall_failures_and_rise_passes_in_a_row() {
        let check = HealthCheck::new("/health");
        let now = Instant::now();
        let mut h = HealthState::new();
        assert_eq!(h.handle_check(false, &check), None);
        assert_eq!(h.handle_check(false, &check), None);
        // A pass in between starts the count again.
        assert_eq!(h.handle_check(true, &check), None);
        assert_eq!(h.handle_check(false, &check), None);
        assert_eq!(h.handle_check(false, &check), None);
        assert_eq!(h.handle_check(false, &check), Some(false));
        assert!(!h.available(now));
        assert_eq!(h.handle_check(true, &check), None);
        assert!(!h.available(now));
        assert_eq!(h.handle_check(true, &check), Some(true));
        assert!(h.available(now));
        // A passing check ends a passive mark.
        assert!(h.handle_connect_failure(now, &BackendHealth::default()));
        assert!(!h.available(now));
        assert_eq!(h.handle_check(true, &check), None);
        assert!(h.available(now));
    }
}
