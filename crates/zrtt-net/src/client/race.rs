//! The race inside [`establish`](super::establish): what the zrtt attempts
//! share with the TLS handshake started beside them when zrtt is late
//! ([`Race`]), when that is ([`late_after`]), and whether TLS takes the
//! request once its handshake has completed ([`switch_to_tls`]): when the
//! flight is unacknowledged (the path drops it), or when the server has it
//! and its Reply is overdue ([`reply_overdue_at`]; servers send it within
//! [`REPLY_BOUND`](crate::reply_bound::REPLY_BOUND) of the handshake), never
//! once a Reply arrived.

use std::future::Future;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::connect::{Fallback, TlsReady, ZrttOutcome};
use super::paths::PathMemory;
use super::reply_wait::reply_overdue_at;
use crate::error::Result;
use crate::sys::{self, state};

/// Shared between the zrtt attempts and the race that may start TLS.
#[derive(Default)]
pub(super) struct Race {
    /// Fired when a zrtt answer is late.
    pub(super) late: tokio::sync::Notify,
    /// The socket of the zrtt attempt in progress, to ask whether the
    /// server acknowledged the flight, and when that attempt started.
    socket: Mutex<Option<(OwnedFd, Instant)>>,
    /// A zrtt Reply arrived: from then on zrtt keeps the request (the
    /// request may be on its way over the channel).
    replied: AtomicBool,
}

impl Race {
    pub(super) fn watch(&self, fd: OwnedFd, started: Instant) {
        *self.socket.lock().unwrap_or_else(|p| p.into_inner()) = Some((fd, started));
    }

    pub(super) fn set_replied(&self) {
        self.replied.store(true, Ordering::Release);
    }

    fn replied(&self) -> bool {
        self.replied.load(Ordering::Acquire)
    }

    /// When the attempt in progress started and the RTT its socket measured.
    fn attempt(&self) -> Option<(Instant, Duration)> {
        let guard = self.socket.lock().unwrap_or_else(|p| p.into_inner());
        let (fd, started) = guard.as_ref()?;
        let rtt = sys::tcp_info(fd.as_fd()).map_or(0, |i| i.rtt_us);
        Some((*started, Duration::from_micros(u64::from(rtt))))
    }

    /// The zrtt flight never reached the server: no SYN-ACK yet, or bytes
    /// still unacknowledged (in flight, or held back by the send queue).
    pub(super) fn flight_unacknowledged(&self) -> bool {
        let guard = self.socket.lock().unwrap_or_else(|p| p.into_inner());
        let Some((fd, _)) = guard.as_ref() else {
            return true;
        };
        match (sys::tcp_info(fd.as_fd()), sys::send_queue_bytes(fd.as_fd())) {
            (Ok(i), Ok(queued)) => i.state == state::SYN_SENT || i.unacked > 0 || queued > 0,
            _ => true,
        }
    }
}

/// Waits until a zrtt answer is late: [`PathMemory::race_delay`] after
/// `t0` (the start of the request, so a retry without Fast Open does not
/// restart the clock), with the RTT remembered for the path, or else the
/// RTT this connection's SYN-ACK gave (checked a bounded number of times).
pub(super) async fn late_after(
    t0: Instant,
    rtt_hint: Option<Duration>,
    max: Duration,
    fd: OwnedFd,
) {
    let start = tokio::time::Instant::from_std(t0);
    if rtt_hint.is_some() {
        tokio::time::sleep_until(start + PathMemory::race_delay(rtt_hint, max)).await;
        return;
    }
    let mut step = Duration::from_millis(5);
    while start.elapsed() < max {
        if let Ok(i) = sys::tcp_info(fd.as_fd()) {
            if i.state != state::SYN_SENT && i.rtt_us > 0 {
                let rtt = Duration::from_micros(u64::from(i.rtt_us));
                let delay = PathMemory::race_delay(Some(rtt), max);
                tokio::time::sleep_until(start + delay).await;
                return;
            }
        }
        tokio::time::sleep(step).await;
        step = (step * 2).min(Duration::from_millis(100));
    }
}

/// The raced TLS handshake completed: whether TLS takes the request
/// (`Ok`, why) or zrtt keeps it (`Err`, zrtt's outcome). TLS takes it when
/// the flight is unacknowledged, or when the server has it but no Reply
/// came by [`reply_overdue_at`]; never once a Reply arrived.
pub(super) async fn switch_to_tls<F>(
    race: &Race,
    tls: &TlsReady,
    mut zrtt: Pin<&mut F>,
) -> std::result::Result<Fallback, Result<ZrttOutcome>>
where
    F: Future<Output = Result<ZrttOutcome>>,
{
    if race.replied() {
        return Err(zrtt.await);
    }
    if race.flight_unacknowledged() {
        return Ok(Fallback::FlightUnacknowledged);
    }
    let (tls_done, tls_rtt) = (Instant::now(), tls.rtt());
    loop {
        let Some((started, rtt)) = race.attempt() else {
            return Err(zrtt.await);
        };
        let overdue = reply_overdue_at(started, rtt.max(tls_rtt), tls_done);
        tokio::select! {
            biased;
            r = zrtt.as_mut() => return Err(r),
            () = tokio::time::sleep_until(overdue.into()) => {}
        }
        if race.replied() {
            return Err(zrtt.await);
        }
        // A new attempt (a refusal's fresh keys) gets its own due time.
        if race.attempt().is_some_and(|(s, _)| s == started) {
            return Ok(Fallback::ReplyOverdue);
        }
    }
}
