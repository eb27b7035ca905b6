//! TCP Fast Open without cookies: the client connect that puts the first
//! flight into the SYN, the Fast Open listener, and the client's memory of
//! destinations whose path drops SYN data.
//!
//! Kernel settings: `net.ipv4.tcp_fastopen` is per network namespace. The
//! client needs bit 0x1 (default); the server needs bit 0x2 (so 3 in total).
//! Cookieless operation comes from the `TCP_FASTOPEN_NO_COOKIE` socket option
//! on both sides, so bits 0x4 and 0x200 are not needed.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::error::{Error, Result};
use crate::sys;

/// How a connection was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectMode {
    /// `TCP_FASTOPEN_CONNECT` + `TCP_FASTOPEN_NO_COOKIE`: the first write rode in the SYN
    /// (if the kernel and the path allowed it; check `TCP_INFO` afterwards).
    FastOpen,
    /// An ordinary connect; the first bytes follow the handshake.
    Plain,
}

/// Open a TCP connection to `addr` and send `first` as its first bytes.
///
/// With `fast_open`, the bytes go into the SYN (`TCP_FASTOPEN_CONNECT`,
/// cookieless); if the kernel refuses the options, this silently uses an
/// ordinary connect. Returns the stream and how it was opened. Does not
/// wait for the handshake: with Fast Open the SYN is in flight on return.
pub async fn connect_with_data(
    addr: SocketAddr,
    first: &[u8],
    fast_open: bool,
    connect_timeout: Duration,
) -> Result<(TcpStream, ConnectMode)> {
    connect_inner(addr, first, fast_open.then_some(true), connect_timeout).await
}

/// Like [`connect_with_data`] with standard RFC 7413 Fast Open: `first`
/// rides in the SYN only when the kernel holds a cookie for `addr` from an
/// earlier connection (otherwise the SYN asks for one and `first` follows
/// the handshake). This is what TFO-enabled browsers and curl do; zrtt
/// itself does not need cookies.
pub async fn connect_with_data_cookie(
    addr: SocketAddr,
    first: &[u8],
    connect_timeout: Duration,
) -> Result<(TcpStream, ConnectMode)> {
    connect_inner(addr, first, Some(false), connect_timeout).await
}

/// `fast_open`: `None` plain connect, `Some(cookieless)` Fast Open.
async fn connect_inner(
    addr: SocketAddr,
    first: &[u8],
    fast_open: Option<bool>,
    connect_timeout: Duration,
) -> Result<(TcpStream, ConnectMode)> {
    if let Some(cookieless) = fast_open {
        match fast_open_socket(addr, cookieless) {
            Ok(sock) => {
                let sent = match sock.connect(&addr.into()) {
                    Ok(()) => send_nonblocking(&sock, first)?,
                    Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => 0,
                    Err(e) => return Err(Error::io("connect")(e)),
                };
                let std: std::net::TcpStream = sock.into();
                let mut tcp = TcpStream::from_std(std).map_err(Error::io("registering socket"))?;
                if sent < first.len() {
                    tokio::time::timeout(connect_timeout, tcp.write_all(&first[sent..]))
                        .await
                        .map_err(|_| Error::Timeout("connect"))?
                        .map_err(Error::io("write"))?;
                }
                return Ok((tcp, ConnectMode::FastOpen));
            }
            Err(e) => tracing::debug!("fast open unavailable ({e}); plain connect"),
        }
    }
    let mut tcp = tokio::time::timeout(connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Timeout("connect"))?
        .map_err(Error::io("connect"))?;
    tcp.set_nodelay(true).map_err(Error::io("TCP_NODELAY"))?;
    tcp.write_all(first).await.map_err(Error::io("write"))?;
    Ok((tcp, ConnectMode::Plain))
}

fn fast_open_socket(addr: SocketAddr, cookieless: bool) -> io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    sys::set_tcp_int(sock.as_fd(), sys::TCP_FASTOPEN_CONNECT, 1)?;
    if cookieless {
        sys::set_tcp_int(sock.as_fd(), sys::TCP_FASTOPEN_NO_COOKIE, 1)?;
    }
    Ok(sock)
}

/// `send` on a non-blocking Fast Open socket: copies what fits into the SYN
/// and returns how much; 0 when the kernel wants us to wait.
fn send_nonblocking(sock: &Socket, data: &[u8]) -> Result<usize> {
    match sock.send(data) {
        Ok(n) => Ok(n),
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock
                || e.raw_os_error() == Some(libc::EINPROGRESS) =>
        {
            Ok(0)
        }
        Err(e) => Err(Error::io("send in SYN")(e)),
    }
}

/// Settings of a gateway's listening sockets.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ListenOptions {
    /// `listen()` backlog, per socket: the SYN and accept queues (the kernel
    /// caps it at `net.core.somaxconn` and `net.ipv4.tcp_max_syn_backlog`;
    /// past it, SYN cookies, which carry no Fast Open data).
    pub backlog: i32,
    /// Fast Open queue length (`TCP_FASTOPEN`), per socket; 0 disables Fast Open.
    pub fast_open_queue: i32,
    /// Sockets bound to the same address with `SO_REUSEPORT` (one per
    /// worker thread: the kernel spreads new connections over them by
    /// their addresses, each with its own accept loop); at least 1.
    pub listeners: usize,
}

impl Default for ListenOptions {
    fn default() -> Self {
        Self {
            // A flood of spoofed SYNs with data holds each place for the
            // gate timeout (3 s; the gateway resets what never completed):
            // 8,192 places absorb 2,700 such SYNs per second, measured in
            // crates/zrtt-net/tests/lab_flood.rs.
            backlog: 16_384,
            fast_open_queue: 8_192,
            listeners: 1,
        }
    }
}

/// The cores this process may run on (its CPU affinity), at least 1: the
/// default number of worker threads and listening sockets of a gateway.
pub fn default_listeners() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// [`bind_listener`] `opts.listeners` times on one address with
/// `SO_REUSEPORT` (port 0: the port the first one got). Returns the
/// listeners and whether Fast Open options were accepted on all.
///
/// Several sockets are bound only if nothing listens on the address yet: a
/// probe without `SO_REUSEPORT` is bound first, so a second gateway process
/// started on the same port (with replay state of its own, which
/// docs/PROTOCOL.md §7 forbids) gets "address in use" instead of a share of
/// the connections.
pub fn bind_listeners(addr: SocketAddr, opts: ListenOptions) -> Result<(Vec<TcpListener>, bool)> {
    let n = opts.listeners.max(1);
    let mut out = Vec::with_capacity(n);
    let mut fast_open = true;
    let mut at = addr;
    if n > 1 {
        let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(Error::io("socket"))?;
        probe
            .set_reuse_address(true)
            .map_err(Error::io("SO_REUSEADDR"))?;
        probe.bind(&addr.into()).map_err(Error::io("bind"))?;
        at = probe
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Config("probe socket has no address".into()))?;
        drop(probe);
    }
    for _ in 0..n {
        let (l, tfo) = bind_one(at, opts, n > 1)?;
        at = l.local_addr().map_err(Error::io("local address"))?;
        fast_open &= tfo;
        out.push(l);
    }
    warn_if_capped(opts.backlog);
    Ok((out, fast_open))
}

/// Warns when a sysctl caps `backlog` (then a SYN flood turns on SYN
/// cookies early, and cookies carry no Fast Open data).
fn warn_if_capped(backlog: i32) {
    for (sysctl, name) in [
        ("/proc/sys/net/core/somaxconn", "net.core.somaxconn"),
        (
            "/proc/sys/net/ipv4/tcp_max_syn_backlog",
            "net.ipv4.tcp_max_syn_backlog",
        ),
    ] {
        let cap: Option<i32> = std::fs::read_to_string(sysctl)
            .ok()
            .and_then(|v| v.trim().parse().ok());
        if let Some(cap) = cap.filter(|&c| c < backlog) {
            tracing::warn!(
                "{name} = {cap} caps the listen backlog {backlog}: under a SYN flood the \
                 kernel then sends SYN cookies sooner and ignores Fast Open data; raise it \
                 (docs/GATEWAY.md, Kernel settings)"
            );
        }
    }
}

/// Bind a listener; with Fast Open it accepts cookieless SYN data (the
/// namespace's `net.ipv4.tcp_fastopen` must still have bit 0x2).
/// Returns the listener and whether Fast Open options were accepted.
pub fn bind_listener(addr: SocketAddr, opts: ListenOptions) -> Result<(TcpListener, bool)> {
    warn_if_capped(opts.backlog);
    bind_one(addr, opts, false)
}

fn bind_one(
    addr: SocketAddr,
    opts: ListenOptions,
    reuse_port: bool,
) -> Result<(TcpListener, bool)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(Error::io("socket"))?;
    sock.set_reuse_address(true)
        .map_err(Error::io("SO_REUSEADDR"))?;
    if reuse_port {
        sock.set_reuse_port(true)
            .map_err(Error::io("SO_REUSEPORT"))?;
    }
    sock.set_nonblocking(true)
        .map_err(Error::io("O_NONBLOCK"))?;
    sock.bind(&addr.into()).map_err(Error::io("bind"))?;
    let mut fast_open = false;
    if opts.fast_open_queue > 0 {
        fast_open = sys::set_tcp_int(sock.as_fd(), sys::TCP_FASTOPEN, opts.fast_open_queue)
            .and_then(|()| sys::set_tcp_int(sock.as_fd(), sys::TCP_FASTOPEN_NO_COOKIE, 1))
            .map_err(|e| tracing::warn!("listener without Fast Open: {e}"))
            .is_ok();
    }
    sock.listen(opts.backlog).map_err(Error::io("listen"))?;
    let std: std::net::TcpListener = sock.into();
    let listener = TcpListener::from_std(std).map_err(Error::io("registering listener"))?;
    Ok((listener, fast_open))
}

/// `net.ipv4.tcp_fastopen` of the current network namespace, if readable.
pub fn fast_open_sysctl() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `TCP_INFO` of a tokio stream.
pub fn stream_info(tcp: &TcpStream) -> io::Result<sys::TcpInfo> {
    sys::tcp_info(tcp.as_fd())
}
