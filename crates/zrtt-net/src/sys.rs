//! The few raw socket options zrtt needs that `socket2` does not wrap:
//! TCP Fast Open without cookies and `TCP_INFO`.
//!
//! This is the only module of the crate allowed to use `unsafe`; every
//! `unsafe` block carries a SAFETY comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `TCP_FASTOPEN` (listener: queue length of pending Fast Open requests).
pub const TCP_FASTOPEN: libc::c_int = 23;
/// `TCP_FASTOPEN_CONNECT`: `connect` returns at once, the first write goes into the SYN.
pub const TCP_FASTOPEN_CONNECT: libc::c_int = 30;
/// `TCP_FASTOPEN_NO_COOKIE`: send (client) or accept (listener) SYN data without a cookie.
pub const TCP_FASTOPEN_NO_COOKIE: libc::c_int = 34;
/// `TCPI_OPT_SYN_DATA`: the SYN's data was acknowledged (client) or accepted (server).
pub const TCPI_OPT_SYN_DATA: u8 = 0x20;

/// TCP states as `TCP_INFO` reports them (`include/net/tcp_states.h`).
pub mod state {
    /// Handshake complete.
    pub const ESTABLISHED: u8 = 1;
    /// Client sent its SYN, no SYN-ACK yet.
    pub const SYN_SENT: u8 = 2;
    /// Server: SYN received (a Fast Open child socket before the final ACK).
    pub const SYN_RECV: u8 = 3;
    /// Closed (reset or never connected).
    pub const CLOSE: u8 = 7;
}

/// The parts of `struct tcp_info` zrtt reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpInfo {
    /// `tcpi_state`, see [`state`].
    pub state: u8,
    /// `tcpi_options` bits (`TCPI_OPT_*`).
    pub options: u8,
    /// Smoothed RTT in microseconds (`tcpi_rtt`).
    pub rtt_us: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Segments carrying data sent so far, retransmissions included
    /// (`tcpi_data_segs_out`, Linux 4.6+).
    pub data_segs_out: u32,
    /// Payload bytes per segment the socket sends, TCP options such as
    /// timestamps taken off (`tcpi_snd_mss`).
    pub snd_mss: u32,
    /// Congestion window in segments (`tcpi_snd_cwnd`).
    pub snd_cwnd: u32,
    /// The peer's receive window in bytes (`tcpi_snd_wnd`, Linux 5.4+;
    /// 0 on older kernels).
    pub snd_wnd: u32,
}

impl TcpInfo {
    /// The SYN carried data that the peer acknowledged (client) or accepted (server).
    pub fn syn_data(&self) -> bool {
        self.options & TCPI_OPT_SYN_DATA != 0
    }

    /// Payload bytes the kernel sends now without waiting for an ACK: the
    /// free part of the congestion window, in full segments, and no more
    /// whole segments than the peer's receive window holds. Before a
    /// server's handshake completes that is its first flight (ten segments
    /// by default, RFC 6928): anything written beyond it waits one round
    /// trip, for the client's ACK. `None` when the kernel reports no
    /// segment size or congestion window (unknown, not zero); a receive
    /// window of 0 is read as unknown too (kernels before 5.4).
    pub fn send_window_bytes(&self) -> Option<usize> {
        if self.snd_mss == 0 || self.snd_cwnd == 0 {
            return None;
        }
        let mss = self.snd_mss as usize;
        let mut segments = self.snd_cwnd.saturating_sub(self.unacked) as usize;
        if self.snd_wnd > 0 {
            segments = segments.min(self.snd_wnd as usize / mss);
        }
        Some(segments.saturating_mul(mss))
    }
}

/// Set an integer `IPPROTO_TCP` option.
pub fn set_tcp_int(fd: BorrowedFd<'_>, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is a valid open descriptor for the lifetime of the borrow;
    // we pass a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Read an integer TCP-level socket option.
pub fn get_tcp_int(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is a valid open descriptor for the lifetime of the borrow;
    // we pass a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

/// Read `TCP_INFO`.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    // SAFETY: tcp_info is a plain struct of integers, so all-zero is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is valid for the borrow; `info` is a live, writable buffer
    // of `len` bytes and the kernel writes at most `len` bytes into it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpInfo {
        state: info.tcpi_state,
        options: info.tcpi_options,
        rtt_us: info.tcpi_rtt,
        unacked: info.tcpi_unacked,
        data_segs_out: info.tcpi_data_segs_out,
        snd_mss: info.tcpi_snd_mss,
        snd_cwnd: info.tcpi_snd_cwnd,
        snd_wnd: info.tcpi_snd_wnd,
    })
}

/// Bytes in the socket's send queue, not yet acknowledged by the peer
/// (sent or not yet sent; `SIOCOUTQ`).
pub fn send_queue_bytes(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is valid for the borrow; SIOCOUTQ (= TIOCOUTQ) writes one
    // int into `n`, a live, writable int.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(n).unwrap_or(0))
}

/// Register an owned socket (possibly shared: `Arc<OwnedFd>`) with the
/// tokio reactor for `interest` (call inside a runtime).
pub fn register<F: std::os::fd::AsRawFd>(
    fd: F,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<F>> {
    // SAFETY: the callers pass an `OwnedFd` or an `Arc<OwnedFd>`: an open
    // descriptor that stays open, refers to the same file description and
    // returns the same number from `as_raw_fd` for as long as it (or the
    // `AsyncFd` holding a reference to it) lives.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }.map_err(Into::into)
}

/// The process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Raise the process's limit on open descriptors (`RLIMIT_NOFILE`) to
/// `want` (soft and hard; raising the hard limit needs `CAP_SYS_RESOURCE`),
/// else the soft limit to the hard one; never lowers it. Returns the soft
/// limit in force. Each connection still in its TCP handshake holds two
/// descriptors in the gateway (the socket, and one duplicate for its gate
/// and reset guard): a flood of 2,000 spoofed SYNs per second held for the
/// 3 s gate timeout needs about 12,000.
pub fn raise_open_files(want: u64) -> io::Result<u64> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `cur` is a live, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut cur) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if cur.rlim_cur >= want {
        return Ok(cur.rlim_cur);
    }
    let full = libc::rlimit {
        rlim_cur: want,
        rlim_max: want.max(cur.rlim_max),
    };
    // SAFETY: `full` is a live rlimit read by the kernel.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &full) } == 0 {
        return Ok(want);
    }
    let soft = libc::rlimit {
        rlim_cur: cur.rlim_max,
        rlim_max: cur.rlim_max,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cur.rlim_max)
}

/// The process's resident memory in bytes (`/proc/self/statm`); `None`
/// where that file does not exist.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Gives the heap's free memory back to the system (glibc's
/// `malloc_trim(0)`, which also releases free pages between chunks in
/// use); whether any was released. A no-op without glibc.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks and madvises the allocator's own
        // free lists; it takes no pointers from us.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(snd_mss: u32, snd_cwnd: u32, unacked: u32, snd_wnd: u32) -> TcpInfo {
        TcpInfo {
            state: state::SYN_RECV,
            options: 0,
            rtt_us: 0,
            unacked,
            data_segs_out: 0,
            snd_mss,
            snd_cwnd,
            snd_wnd,
        }
    }

    #[test]
    fn the_send_window_is_whole_free_segments_within_the_peers_window() {
        // A Fast Open child before anything was written (measured: cwnd 10,
        // MSS 1448 with timestamps, nothing in flight).
        assert_eq!(info(1448, 10, 0, 65_535).send_window_bytes(), Some(14_480));
        // Segments in flight take their slots.
        assert_eq!(
            info(1448, 10, 3, 65_535).send_window_bytes(),
            Some(7 * 1448)
        );
        // A small receive window: only the whole segments it holds.
        assert_eq!(info(1448, 10, 0, 4000).send_window_bytes(), Some(2 * 1448));
        // After SYN-ACK timeouts the window is one segment.
        assert_eq!(info(1448, 1, 0, 65_535).send_window_bytes(), Some(1448));
        // Unknown receive window (kernels before 5.4): the congestion window.
        assert_eq!(info(524, 10, 0, 0).send_window_bytes(), Some(5240));
        // No size or window reported: unknown, not zero.
        assert_eq!(info(0, 10, 0, 65_535).send_window_bytes(), None);
        assert_eq!(info(1448, 0, 0, 65_535).send_window_bytes(), None);
        assert_eq!(info(1448, 10, 12, 65_535).send_window_bytes(), Some(0));
    }
}
