//! Address gating: nothing but the SYN-ACK goes to an unproven client
//! address before its TCP handshake completes (docs/PROTOCOL.md §8).
//!
//! Linux has no readiness event that means "this Fast Open child socket
//! left `SYN_RECV`", but the transition calls the socket's state-change
//! callback, which wakes every epoll registration of the socket; with
//! edge-triggered epoll (tokio's) that reports the socket's current
//! readiness again. So [`Gate::wait_complete`] clears the write readiness
//! of its own registration, checks `TCP_INFO`, and sleeps until the next
//! event on the socket: no polling while a spoofed source stays silent,
//! one `getsockopt` per event otherwise. A slow safety poll (backing off
//! to `MAX_SAFETY_POLL`) covers kernels that would not report it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::sys::{self, state};

/// First safety poll after a wait starts, doubling up to [`MAX_SAFETY_POLL`].
const FIRST_SAFETY_POLL: Duration = Duration::from_millis(2);
/// Longest pause between two safety polls.
const MAX_SAFETY_POLL: Duration = Duration::from_millis(250);

/// Whether and when a connection may send bytes to its peer.
#[derive(Debug)]
pub struct Gate {
    fd: AsyncFd<Arc<OwnedFd>>,
    proven: AtomicBool,
    complete: AtomicBool,
    max_wait: Duration,
    /// One waiter at a time watches the socket; others wait for it.
    watch: tokio::sync::Mutex<()>,
    /// When the gate was made (the connection's first bytes were read).
    created: std::time::Instant,
}

impl Gate {
    /// A gate for the socket `fd` (a duplicate the gate owns and registers
    /// with the runtime; call inside one). `proven`: the peer's address is
    /// proven (token, provenance, trusted network), so sending before the
    /// handshake completes is allowed.
    pub fn new(fd: Arc<OwnedFd>, proven: bool, max_wait: Duration) -> Result<Self> {
        Ok(Self {
            fd: sys::register(fd, Interest::WRITABLE).map_err(Error::io("registering the gate"))?,
            proven: AtomicBool::new(proven),
            complete: AtomicBool::new(false),
            max_wait,
            watch: tokio::sync::Mutex::new(()),
            created: std::time::Instant::now(),
        })
    }

    /// The connection's socket.
    pub(super) fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }

    /// Time since the gate was made, near the connection's start.
    pub fn age(&self) -> Duration {
        self.created.elapsed()
    }

    /// Whether the address was proven.
    pub fn proven(&self) -> bool {
        self.proven.load(Ordering::Acquire)
    }

    /// The address was proven after the gate was made (a TLS session
    /// ticket bound to it, seen once the ClientHello was processed).
    pub fn set_proven(&self) {
        self.proven.store(true, Ordering::Release);
    }

    /// Non-blocking: has the TCP handshake completed? `Err` if the socket
    /// closed before completing it.
    pub fn handshake_complete(&self) -> Result<bool> {
        if self.complete.load(Ordering::Acquire) {
            return Ok(true);
        }
        let info = sys::tcp_info(self.fd.get_ref().as_fd()).map_err(Error::io("TCP_INFO"))?;
        match info.state {
            state::SYN_RECV | state::SYN_SENT => Ok(false),
            state::CLOSE => Err(Error::NoAnswer),
            _ => {
                self.complete.store(true, Ordering::Release);
                Ok(true)
            }
        }
    }

    /// Wait until bytes may be sent: at once for a proven address, else
    /// until the handshake completes (bounded).
    pub async fn wait_to_send(&self) -> Result<()> {
        if self.proven() {
            return Ok(());
        }
        self.wait_complete().await
    }

    /// Wait until the TCP handshake completes, whatever the address.
    pub async fn wait_complete(&self) -> Result<()> {
        if self.handshake_complete()? {
            return Ok(());
        }
        let deadline = Instant::now() + self.max_wait;
        let _watching = tokio::time::timeout_at(deadline, self.watch.lock())
            .await
            .map_err(|_| Error::HandshakeIncomplete(self.max_wait))?;
        let mut pause = FIRST_SAFETY_POLL;
        loop {
            // The registration reports the socket writable at once, then
            // again on every state change. Clear it before checking, so a
            // change after the check ends the next wait.
            let wake = deadline.min(Instant::now() + pause);
            match tokio::time::timeout_at(wake, self.fd.writable()).await {
                Ok(Ok(mut ready)) => ready.clear_ready(),
                Ok(Err(e)) => return Err(Error::io("waiting for the handshake")(e)),
                Err(_) => pause = (pause * 2).min(MAX_SAFETY_POLL),
            }
            if self.handshake_complete()? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::HandshakeIncomplete(self.max_wait));
            }
        }
    }
}

/// `budget`, kept within what the kernel sends now without the client's
/// ACK while `fd`'s handshake is incomplete
/// (`AmplificationBudget::within_window` with
/// `TcpInfo::send_window_bytes`); call it when the bytes are about to be
/// planned (the window shrinks after SYN-ACK timeouts). Unchanged once the
/// handshake has completed, when `TCP_INFO` fails or when it reports no
/// window (only ever lowers the budget).
pub(super) fn within_first_window(
    budget: zrtt_proto::admission::AmplificationBudget,
    fd: std::os::fd::BorrowedFd<'_>,
) -> zrtt_proto::admission::AmplificationBudget {
    match sys::tcp_info(fd) {
        Ok(i) if i.state == state::SYN_RECV => match i.send_window_bytes() {
            Some(w) => budget.within_window(w),
            None => budget,
        },
        _ => budget,
    }
}

/// Run `read` (reading a first flight or a ClientHello) for at most `limit`,
/// but give up after `gate` if the TCP handshake of `fd` still has not
/// completed: the rest of a partial first flight or ClientHello from a
/// source that never completes its handshake cannot come, and waiting
/// longer only holds a place in the listener's Fast Open queue (a flood of
/// spoofed SYNs carrying a partial frame would otherwise hold each place
/// for `limit`). `None` when either bound expired.
pub(super) async fn read_within<F: std::future::Future>(
    fd: std::os::fd::BorrowedFd<'_>,
    gate: Duration,
    limit: Duration,
    read: F,
) -> Option<F::Output> {
    let mut read = std::pin::pin!(read);
    let first = gate.min(limit);
    if let Ok(v) = tokio::time::timeout(first, read.as_mut()).await {
        return Some(v);
    }
    if sys::tcp_info(fd).is_ok_and(|i| i.state == state::SYN_RECV) {
        return None;
    }
    tokio::time::timeout(limit - first, read).await.ok()
}
