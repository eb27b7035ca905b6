//! Restart without a blackout (`--handover PATH`, docs/GATEWAY.md): a new
//! gateway process takes the listening sockets and the replay filter from
//! the running one over a Unix socket, as HAProxy's `-x` and Envoy's hot
//! restart do, so no SYN meets a closed port and early answers never stop.
//!
//! The exchange (the successor connects; both sides check the peer runs as
//! the same user):
//! 1. successor: `ZRTT-HANDOVER/1 <listen address>\n`;
//! 2. running gateway: stops accepting (connections wait in the kernel's
//!    queues), seals its replay filter and takes its snapshot in one step
//!    (a sealed filter refuses every flight Busy: each flight this process
//!    ever accepted is in the snapshot, none can be accepted twice), then
//!    sends a 24-byte header (`ZRTTHO1\0`, listeners, admin, snapshot
//!    length) with the listening sockets (and the admin socket) attached
//!    (`SCM_RIGHTS`), then the snapshot; or `REFUSED <why>\n`;
//! 3. successor: restores the filter, builds its gateway on the sockets,
//!    then `READY\n`;
//! 4. running gateway: `GO\n`, then drains its connections and exits
//!    without saving its filter; the successor starts accepting and takes
//!    over PATH. Without `READY` in time (the successor failed), the
//!    running gateway unseals its filter (nobody used the snapshot) and
//!    accepts again; a successor without `GO` exits.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use zrtt_net::gateway::AcceptControl;
use zrtt_proto::replay::BloomReplayFilter;

const HELLO: &str = "ZRTT-HANDOVER/1";
const MAGIC: &[u8; 8] = b"ZRTTHO1\0";
const HEADER: usize = 24;
/// At most this many sockets are handed over (listeners plus admin).
const MAX_FDS: usize = 256;
/// Each step of the exchange must come within this bound.
const STEP: Duration = Duration::from_secs(10);

/// What a successor received: the sockets and the replay filter's snapshot,
/// with the connection on which it says `READY` and waits for `GO`.
pub struct Taken {
    /// The gateway's listening sockets (one per `SO_REUSEPORT` member).
    pub listeners: Vec<std::net::TcpListener>,
    /// The admin listener, if the running gateway had one.
    pub admin: Option<std::net::TcpListener>,
    /// The running gateway's replay filter (`BloomReplayFilter::to_snapshot`).
    pub snapshot: Vec<u8>,
    conn: UnixStream,
}

impl Taken {
    /// Say `READY` and wait for `GO`: after it, this process is the one
    /// that accepts.
    pub fn ready(mut self) -> Result<()> {
        self.conn.write_all(b"READY\n")?;
        let line = read_line(&mut self.conn).context("waiting for GO")?;
        if line != "GO" {
            bail!("the running gateway answered {line:?} instead of GO");
        }
        Ok(())
    }
}

/// Ask the gateway serving hand-overs at `path` for its sockets; `None`
/// if no gateway listens there (the socket file is missing or stale).
pub fn request(path: &Path, listen: SocketAddr) -> Result<Option<Taken>> {
    let mut conn = match UnixStream::connect(path) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e).with_context(|| format!("connecting to {}", path.display())),
    };
    same_user(conn.as_fd()).with_context(|| format!("{}", path.display()))?;
    conn.set_read_timeout(Some(STEP))?;
    conn.set_write_timeout(Some(STEP))?;
    conn.write_all(format!("{HELLO} {listen}\n").as_bytes())?;
    let mut header = [0u8; HEADER];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        &conn,
        &mut [IoSliceMut::new(&mut header)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .context("receiving the sockets")?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 {
        bail!("the running gateway closed the hand-over");
    }
    conn.read_exact(&mut header[got.bytes..])?;
    if &header[..8] != MAGIC {
        let mut rest = Vec::new();
        let _ = conn.take(1024).read_to_end(&mut rest);
        let mut text = header.to_vec();
        text.extend_from_slice(&rest);
        bail!(
            "the running gateway refused: {}",
            String::from_utf8_lossy(&text).trim()
        );
    }
    let listeners = u32::from_be_bytes(header[8..12].try_into()?) as usize;
    let admin = u32::from_be_bytes(header[12..16].try_into()?) as usize;
    let len = u64::from_be_bytes(header[16..24].try_into()?);
    if listeners == 0 || admin > 1 || fds.len() != listeners + admin {
        bail!(
            "hand-over: {} sockets received for {listeners} listeners and {admin} admin",
            fds.len()
        );
    }
    // A snapshot is a few MB (two Bloom filters of the default capacity).
    if len > 1 << 30 {
        bail!("hand-over: a {len}-byte snapshot");
    }
    let mut snapshot = vec![0u8; usize::try_from(len)?];
    conn.read_exact(&mut snapshot)
        .context("receiving the replay filter")?;
    let mut tcp = fds
        .into_iter()
        .map(|fd| {
            if !rustix::net::sockopt::socket_acceptconn(&fd)? {
                bail!("hand-over: a socket that is not listening");
            }
            Ok(std::net::TcpListener::from(fd))
        })
        .collect::<Result<Vec<_>>>()?;
    let admin = (admin == 1).then(|| tcp.remove(listeners));
    for l in &tcp {
        let at = l.local_addr()?;
        if at != listen && !(listen.port() == 0 && at.ip() == listen.ip()) {
            bail!("hand-over: the running gateway listens on {at}, not {listen}");
        }
    }
    Ok(Some(Taken {
        listeners: tcp,
        admin,
        snapshot,
        conn,
    }))
}

/// What a running gateway hands over.
pub struct Offer {
    /// Its listen address (a successor must name the same).
    pub listen: SocketAddr,
    /// Pauses its accept loops.
    pub accept: AcceptControl,
    /// Its listening sockets.
    pub listeners: Vec<OwnedFd>,
    /// Its admin listener.
    pub admin: Option<OwnedFd>,
    /// Its replay filter.
    pub filter: Arc<Mutex<BloomReplayFilter>>,
}

/// Serve hand-overs on `listener` ([`bind_private`]) until one succeeds
/// (returns `Ok`); the caller then stops serving and exits.
pub async fn serve(listener: tokio::net::UnixListener, offer: Offer) -> Result<()> {
    let offer = Arc::new(offer);
    loop {
        let (conn, _) = listener.accept().await?;
        let conn = conn.into_std()?;
        conn.set_nonblocking(false)?;
        let offer = offer.clone();
        let done = tokio::task::spawn_blocking(move || hand_over(conn, &offer)).await?;
        match done {
            Ok(()) => return Ok(()),
            Err(e) => tracing::error!("hand-over not done, serving on: {e:#}"),
        }
    }
}

/// One successor's request; `Ok` once it said READY and got GO.
fn hand_over(mut conn: UnixStream, offer: &Offer) -> Result<()> {
    same_user(conn.as_fd())?;
    conn.set_read_timeout(Some(STEP))?;
    conn.set_write_timeout(Some(STEP))?;
    let line = read_line(&mut conn)?;
    let Some(theirs) = line.strip_prefix(HELLO).map(str::trim) else {
        bail!("not a hand-over request: {line:?}");
    };
    if theirs != offer.listen.to_string() {
        let why = format!(
            "REFUSED this gateway listens on {}, not {theirs}\n",
            offer.listen
        );
        let _ = conn.write_all(why.as_bytes());
        bail!("{}", why.trim());
    }
    offer.accept.pause();
    let snapshot = offer
        .filter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .hand_over();
    tracing::info!(
        "hand-over: accepting paused, replay filter sealed ({} bytes)",
        snapshot.len()
    );
    let result = send_and_wait(&mut conn, offer, &snapshot);
    if result.is_err() {
        // Nobody started with the snapshot: this filter is still the only one.
        offer
            .filter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unseal();
        offer.accept.resume();
    }
    result
}

fn send_and_wait(conn: &mut UnixStream, offer: &Offer, snapshot: &[u8]) -> Result<()> {
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&u32::try_from(offer.listeners.len())?.to_be_bytes());
    header[12..16].copy_from_slice(&u32::from(offer.admin.is_some()).to_be_bytes());
    header[16..24].copy_from_slice(&(snapshot.len() as u64).to_be_bytes());
    let fds: Vec<BorrowedFd<'_>> = offer
        .listeners
        .iter()
        .chain(offer.admin.iter())
        .map(AsFd::as_fd)
        .collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        bail!("too many sockets to hand over");
    }
    let sent = rustix::net::sendmsg(
        &*conn,
        &[IoSlice::new(&header)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    conn.write_all(&header[sent..])?;
    conn.write_all(snapshot)?;
    let line = read_line(conn).context("waiting for READY")?;
    if line != "READY" {
        bail!("the successor said {line:?} instead of READY");
    }
    conn.write_all(b"GO\n")?;
    tracing::info!("hand-over done: the successor accepts now; draining");
    Ok(())
}

/// Listen at `path` (owner only), replacing what is there atomically: a
/// successor's socket replaces its predecessor's file, which keeps serving
/// its (now nameless) socket until it exits.
pub fn bind_private(path: &Path) -> Result<tokio::net::UnixListener> {
    let tmp = path.with_file_name(format!(
        ".{}.{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let l = std::os::unix::net::UnixListener::bind(&tmp)
        .with_context(|| format!("binding {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming onto {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(l)?)
}

/// The peer runs as this process's user (or as root).
fn same_user(fd: BorrowedFd<'_>) -> Result<()> {
    let peer = rustix::net::sockopt::socket_peercred(fd)?;
    let me = rustix::process::geteuid();
    if peer.uid != me && !peer.uid.is_root() {
        bail!(
            "hand-over peer runs as uid {}, not {}",
            peer.uid.as_raw(),
            me.as_raw()
        );
    }
    Ok(())
}

/// One line (at most 256 bytes), without its newline.
fn read_line(conn: &mut UnixStream) -> Result<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while out.len() < 256 {
        if conn.read(&mut b)? == 0 {
            bail!("connection closed");
        }
        if b[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.push(b[0]);
    }
    bail!("line too long")
}
