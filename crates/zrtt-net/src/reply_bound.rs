//! The protocol's bound on when a server sends its Reply
//! (docs/PROTOCOL.md §4.3): within [`REPLY_BOUND`] of the moment it may
//! speak (the client's ACK for an unproven address, at once for a proven
//! one), with whatever response bytes it has by then, possibly none; the
//! rest follows in transport records.
//!
//! Both sides use it: the gateway's Reply timer (`gateway/reply_timer.rs`)
//! keeps it, and a client whose raced TLS handshake completed while the
//! server holds its flight computes from it when the Reply is overdue
//! (`client/reply_wait.rs`), instead of waiting for its reply timeout.

use std::time::Duration;

/// Longest time a server holds its Reply after it may send it, waiting for
/// the first response bytes to ride in it.
pub const REPLY_BOUND: Duration = Duration::from_millis(25);
