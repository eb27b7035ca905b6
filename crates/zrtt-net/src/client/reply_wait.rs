//! How long a client waits for a zrtt Reply once its raced TLS handshake
//! has completed while the server holds the flight (acknowledged, so the
//! server has it).
//!
//! A server sends its Reply within [`REPLY_BOUND`] of the moment it may
//! speak (docs/PROTOCOL.md §4.3). That moment comes at most one and a half
//! round trips after the attempt's SYN left: with Fast Open the client's
//! ACK reaches the server then; without it, the flight does. So on a path
//! that works the Reply is back by `started + 2 RTT + REPLY_BOUND`. The
//! client gives it [`OVERDUE_SLACK_RTTS`] more round trips (at least
//! [`MIN_OVERDUE_SLACK`]) after the later of that and its TLS handshake's
//! completion; past that the path drops zrtt's bytes after the SYN (a
//! TLS-only middlebox), and the request goes over the TLS connection at
//! once instead of after the reply timeout.
//!
//! The RTT is the larger of the zrtt socket's and the TLS socket's (both
//! measured on this path just now).

use std::time::{Duration, Instant};

use crate::reply_bound::REPLY_BOUND;

/// Round trips of slack after the Reply was due (server load, a lost and
/// retransmitted segment, jitter).
pub const OVERDUE_SLACK_RTTS: u32 = 2;
/// Least slack after the Reply was due, for very short paths.
pub const MIN_OVERDUE_SLACK: Duration = Duration::from_millis(50);

/// When the Reply of a zrtt attempt that started at `started` is overdue,
/// given the path's `rtt` and the moment the raced TLS handshake completed.
pub fn reply_overdue_at(started: Instant, rtt: Duration, tls_done: Instant) -> Instant {
    let due = started + rtt.saturating_mul(2) + REPLY_BOUND;
    let slack = rtt
        .saturating_mul(OVERDUE_SLACK_RTTS)
        .max(MIN_OVERDUE_SLACK);
    due.max(tls_done) + slack
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn overdue_two_rtts_after_tls_when_the_reply_was_due_before() {
        // The faults lab: RTT 50 ms, the race starts TLS at 250 ms, which
        // completes two round trips later; the Reply was due at 125 ms.
        let t0 = Instant::now();
        let at = reply_overdue_at(t0, MS(50), t0 + MS(355));
        assert_eq!(at - t0, MS(355 + 100));
    }

    #[test]
    fn a_reply_not_yet_due_gets_its_due_time_plus_the_slack() {
        // A long path (RTT 400 ms) with a quick TLS handshake estimate.
        let t0 = Instant::now();
        let at = reply_overdue_at(t0, MS(400), t0 + MS(500));
        assert_eq!(at - t0, MS(800 + 25 + 800));
    }

    #[test]
    fn short_paths_get_the_minimum_slack() {
        let t0 = Instant::now();
        let at = reply_overdue_at(t0, MS(1), t0 + MS(260));
        assert_eq!(at - t0, MS(260) + MIN_OVERDUE_SLACK);
        // And the Reply bound itself is always inside the wait.
        let at = reply_overdue_at(t0, Duration::ZERO, t0);
        assert_eq!(at - t0, REPLY_BOUND + MIN_OVERDUE_SLACK);
    }
}
