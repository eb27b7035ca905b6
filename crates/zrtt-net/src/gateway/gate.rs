//! Address gating: nothing but the SYN-ACK goes to an unproven client
//! address before its TCP handshake completes (docs/PROTOCOL.md §8).
//!
//! Linux gives no notification when a Fast Open child socket leaves
//! `SYN_RECV`, so [`Gate::wait_complete`] polls `TCP_INFO` with a bounded
//! exponential back-off and a bounded total wait.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::sys::{self, state};

/// Back-off bounds for polling `TCP_INFO`.
const FIRST_POLL: Duration = Duration::from_micros(100);
// At most 1 ms late noticing a completed handshake (0.05 RTT at 20 ms);
// a getsockopt per millisecond per gated connection is cheap.
const MAX_POLL: Duration = Duration::from_millis(1);

/// Whether and when a connection may send bytes to its peer.
#[derive(Debug)]
pub struct Gate {
    fd: OwnedFd,
    proven: bool,
    complete: AtomicBool,
    max_wait: Duration,
}

impl Gate {
    /// A gate for the socket `fd` (a duplicate the gate owns). `proven`:
    /// the peer's address is proven (token, provenance, trusted network),
    /// so sending before the handshake completes is allowed.
    pub fn new(fd: OwnedFd, proven: bool, max_wait: Duration) -> Self {
        Self {
            fd,
            proven,
            complete: AtomicBool::new(false),
            max_wait,
        }
    }

    /// Whether the address was proven.
    pub fn proven(&self) -> bool {
        self.proven
    }

    /// Non-blocking: has the TCP handshake completed? `Err` if the socket
    /// closed before completing it.
    pub fn handshake_complete(&self) -> Result<bool> {
        if self.complete.load(Ordering::Acquire) {
            return Ok(true);
        }
        let info = sys::tcp_info(self.fd.as_fd()).map_err(Error::io("TCP_INFO"))?;
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
        if self.proven {
            return Ok(());
        }
        self.wait_complete().await
    }

    /// Wait until the TCP handshake completes, whatever the address.
    pub async fn wait_complete(&self) -> Result<()> {
        let deadline = Instant::now() + self.max_wait;
        let mut pause = FIRST_POLL;
        loop {
            if self.handshake_complete()? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::HandshakeIncomplete(self.max_wait));
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(MAX_POLL);
        }
    }
}
