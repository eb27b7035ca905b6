//! How a gateway connection ends: a connection that never completed its
//! TCP handshake and got nothing is reset (it frees its Fast Open queue
//! place at once, and the kernel stops retransmitting SYN-ACKs to a spoofed
//! source); one that was answered closes with a lingering close, so a
//! client's late record does not make the kernel reset the answer.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::sys;

/// The last descriptor of a connection: closing it resets the connection
/// when its TCP handshake never completed and nothing was sent on it
/// ([`reset_if_unanswered`]): a spoofed or vanished source, a malformed or
/// undecryptable flight, a ClientHello that was never answered.
pub(super) struct ResetIfUnanswered(pub(super) Arc<std::os::fd::OwnedFd>);

impl Drop for ResetIfUnanswered {
    fn drop(&mut self) {
        reset_if_unanswered(self.0.as_fd());
    }
}

/// Make closing `fd` reset the connection (`SO_LINGER` 0) if its TCP
/// handshake never completed and nothing was sent or queued on it, instead
/// of leaving the kernel to retransmit its SYN-ACK for a minute. That also
/// frees its place in the listener's Fast Open queue at once, which a plain
/// close does not: a flood of spoofed SYNs with data (valid flights or
/// garbage) then holds each place only as long as the gateway looks at it
/// (docs/GATEWAY.md, Kernel settings). A connection that sent anything (an
/// early answer to a proven address) is never reset here: a reset could cut
/// that answer before the client acknowledged it.
pub(super) fn reset_if_unanswered(fd: std::os::fd::BorrowedFd<'_>) {
    let unanswered = crate::sys::tcp_info(fd).is_ok_and(|i| {
        i.state == crate::sys::state::SYN_RECV
            && i.data_segs_out == 0
            && crate::sys::send_queue_bytes(fd).is_ok_and(|q| q == 0)
    });
    if unanswered {
        let _ = socket2::SockRef::from(&fd).set_linger(Some(Duration::ZERO));
    }
}

/// Closes `tcp` after reading what the client still sends for at most
/// [`LINGER`] (until it closes its side), in a task of its own; at most
/// [`MAX_LINGERING`] at once, beyond which connections close at once. A
/// connection whose handshake still has not completed by then (a spoofed
/// source that got a proven early answer) is reset rather than left to the
/// kernel's SYN-ACK retransmissions.
pub(super) fn linger(mut tcp: TcpStream) {
    static LINGERING: AtomicUsize = AtomicUsize::new(0);
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if LINGERING.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
        LINGERING.fetch_sub(1, Ordering::AcqRel);
        reset_if_unanswered(tcp.as_fd());
        return;
    }
    rt.spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = tcp.shutdown().await;
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(LINGER, async {
            while let Ok(n) = tcp.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
        if sys::tcp_info(tcp.as_fd()).is_ok_and(|i| i.state == sys::state::SYN_RECV) {
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
        }
        drop(tcp);
        LINGERING.fetch_sub(1, Ordering::AcqRel);
    });
}

/// How long a closed zrtt connection keeps reading what the client still
/// sends (its confirmation record, arriving about one round trip after the
/// reply) before the socket closes: closing with unread data would make the
/// kernel reset the connection, and a reset can overtake the answer's last
/// segments when one is lost (the client then sees "connection reset" for
/// a request that ran). nginx's `lingering_close` does the same.
const LINGER: Duration = Duration::from_secs(2);

/// Most connections lingering at once (each holds a socket for at most
/// [`LINGER`] after the gateway stopped counting it as active).
const MAX_LINGERING: usize = 4096;
