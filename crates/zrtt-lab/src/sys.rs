//! The small set of raw OS calls the lab needs: TUN creation (`ioctl`),
//! entering a network namespace (`setns`), real-time scheduling, `poll`,
//! and signalling child processes.
//!
//! This is the only module of the crate that is allowed to use `unsafe`;
//! every `unsafe` block carries a SAFETY comment.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{bail, Context, Result};

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TUN` from `<linux/if_tun.h>`.
const IFF_TUN: libc::c_short = 0x0001;
/// `IFF_NO_PI` from `<linux/if_tun.h>`.
const IFF_NO_PI: libc::c_short = 0x1000;

/// Mirror of the start of `struct ifreq` as used by `TUNSETIFF`:
/// 16 bytes of name followed by the flags; padded to the full union size.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens `/dev/net/tun` non-blocking and creates a TUN device
/// (`IFF_TUN | IFF_NO_PI`) whose name follows `pattern` (which may contain
/// `%d`, e.g. `zrtt%d`). Returns the open device and the name the kernel gave.
pub(crate) fn create_tun(pattern: &str) -> Result<(File, String)> {
    if pattern.len() >= libc::IFNAMSIZ || pattern.contains('\0') {
        bail!("invalid TUN name pattern {pattern:?}");
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .context("opening /dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    for (dst, src) in req.name.iter_mut().zip(pattern.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `file` is an open /dev/net/tun descriptor and `req` is a properly
    // sized, initialised `struct ifreq` that lives for the duration of the call;
    // TUNSETIFF only reads/writes within that struct.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(io::Error::last_os_error()).context("ioctl(TUNSETIFF)");
    }
    let name: Vec<u8> = req
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let name = String::from_utf8(name).context("kernel returned a non-UTF-8 TUN name")?;
    Ok((file, name))
}

/// Moves the calling thread into the network namespace referred to by `ns`
/// (an open `/run/netns/NAME` file).
pub(crate) fn setns_net(ns: &File) -> Result<()> {
    setns_net_raw(ns.as_raw_fd()).context("setns(CLONE_NEWNET)")
}

/// `setns(fd, CLONE_NEWNET)` on a raw descriptor. Async-signal-safe, so it may
/// be used from a `pre_exec` hook.
fn setns_net_raw(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns takes a plain descriptor and flag; it does not touch our
    // memory. An invalid fd just yields EBADF.
    let rc = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Arranges for `cmd`'s child to enter the network namespace `ns_fd` between
/// fork and exec. The descriptor must stay open until the spawn returns.
pub(crate) fn pre_exec_setns(cmd: &mut std::process::Command, ns_fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook only calls `setns`, which is async-signal-safe and does
    // not allocate or take locks, as required for code running after fork().
    unsafe {
        cmd.pre_exec(move || setns_net_raw(ns_fd));
    }
}

/// Gives the calling thread `SCHED_FIFO` real-time priority `prio`.
pub(crate) fn set_realtime(prio: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pthread_self() is always a valid handle for the calling thread
    // and `param` is a valid, initialised sched_param.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        Err(io::Error::from_raw_os_error(rc))
    } else {
        Ok(())
    }
}

/// Waits up to `timeout_ms` for any of `fds` to become readable; returns the
/// indices of the readable ones (empty on timeout or `EINTR`).
pub(crate) fn poll_readable(fds: &[RawFd], timeout_ms: i32, out: &mut Vec<usize>) -> Result<()> {
    out.clear();
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid, initialised array of `pfds.len()` pollfd
    // structures that outlives the call.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(());
        }
        return Err(err).context("poll on TUN devices");
    }
    for (i, p) in pfds.iter().enumerate() {
        if p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0 {
            out.push(i);
        }
    }
    Ok(())
}

/// Sends `sig` to process `pid`.
pub(crate) fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to signal pid <= 0",
        ));
    }
    // SAFETY: kill() with a positive pid only signals that single process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Effective user id of this process.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
