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
//!    (`SCM_RIGHTS`), then the snapshot; or `REFUSED <why>\n`. When it
//!    holds TLS sessions (a lone gateway; in a fleet the replay store holds
//!    them) it stops taking and issuing them and removes them all, sealed,
//!    in the same step: the header is then `ZRTTHO2\0` with 8 more bytes
//!    (their length), and they follow the snapshot;
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
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
/// With TLS sessions after the snapshot (their length closes the header).
const MAGIC_TLS: &[u8; 8] = b"ZRTTHO2\0";
const HEADER: usize = 24;
/// At most this many sockets are handed over (listeners plus admin).
const MAX_FDS: usize = 256;
/// Each step of the exchange before the pause must come within this bound.
const STEP: Duration = Duration::from_secs(10);
/// Bound on the pause: from it to the successor's READY, each read or write
/// (the successor restores the filter and builds its gateway meanwhile).
const PAUSED: Duration = Duration::from_secs(3);

/// What a successor received: the sockets and the replay filter's snapshot,
/// with the connection on which it says `READY` and waits for `GO`.
pub struct Taken {
    /// The gateway's listening sockets (one per `SO_REUSEPORT` member).
    pub listeners: Vec<std::net::TcpListener>,
    /// The admin listener, if the running gateway had one.
    pub admin: Option<std::net::TcpListener>,
    /// The running gateway's replay filter (`BloomReplayFilter::to_snapshot`).
    pub snapshot: Vec<u8>,
    /// Its TLS sessions, sealed (`TlsSessions::adopt`).
    pub sessions: Vec<u8>,
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

/// What a starting gateway does with `--handover PATH`: with a shared
/// replay store, connect to it and wait (at most 20 s) until it checks
/// flights (past the guard of a first connection, docs/FLEET.md) while
/// the running gateway still serves, so the hand-over costs no Busy; then
/// ask for the sockets.
pub fn take(
    runtime: &tokio::runtime::Runtime,
    path: &Path,
    listen: SocketAddr,
    store: Option<&Arc<zrtt_net::gateway::ReplayStore>>,
) -> Result<Option<Taken>> {
    if let Some(store) = store {
        runtime.block_on(async {
            store.connect();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while !store.checking() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if !store.checking() {
                tracing::warn!("hand-over: the replay store does not check flights yet; taking over anyway (Busy until it does)");
            }
        });
    }
    request(path, listen)
}

/// After the sockets came: READY, GO, then the state file's next
/// generation (taken only now, so an aborted hand-over leaves the running
/// gateway's snapshot valid).
pub fn finish(
    taken: Taken,
    replay: &mut crate::replay_state::ReplayState,
    state_file: Option<&Path>,
) -> Result<()> {
    taken.ready()?;
    tracing::info!("hand-over: this gateway accepts now");
    if let Some(p) = state_file {
        if let Err(e) = replay.claim(p) {
            tracing::error!(
                "{}: {e:#}: the filter will not be saved at exit",
                p.display()
            );
        }
    }
    Ok(())
}

/// Serve hand-overs at `path` for a successor: binds it (an error fails a
/// first start; after a hand-over it is logged, as the sockets are taken
/// already) and returns what resolves once a successor took over.
pub fn offer(
    path: &Path,
    offer: Offer,
    first_start: bool,
) -> Result<tokio::sync::oneshot::Receiver<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let listener = match bind_private(path) {
        Ok(l) => l,
        Err(e) if !first_start => {
            tracing::error!("{e:#}: no hand-over to a successor");
            return Ok(rx);
        }
        Err(e) => return Err(e),
    };
    tokio::spawn(async move {
        serve(listener, offer).await;
        let _ = tx.send(());
    });
    Ok(rx)
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
    let with_tls = &header[..8] == MAGIC_TLS;
    if &header[..8] != MAGIC && !with_tls {
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
    let tls_len = if with_tls {
        let mut b = [0u8; 8];
        conn.read_exact(&mut b)?;
        u64::from_be_bytes(b)
    } else {
        0
    };
    if listeners == 0 || admin > 1 || fds.len() != listeners + admin {
        bail!(
            "hand-over: {} sockets received for {listeners} listeners and {admin} admin",
            fds.len()
        );
    }
    // A snapshot is a few MB (two Bloom filters of the default capacity).
    if len > 1 << 30 || tls_len > 1 << 30 {
        bail!("hand-over: a {len}-byte snapshot, {tls_len} bytes of TLS sessions");
    }
    let mut snapshot = vec![0u8; usize::try_from(len)?];
    conn.read_exact(&mut snapshot)
        .context("receiving the replay filter")?;
    let mut sessions = vec![0u8; usize::try_from(tls_len)?];
    conn.read_exact(&mut sessions)
        .context("receiving the TLS sessions")?;
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
        sessions,
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
    /// Its TLS sessions.
    pub sessions: Arc<zrtt_net::gateway::TlsSessions>,
}

/// Serve hand-overs on `listener` ([`bind_private`]) until one succeeds
/// (returns); the caller then stops serving and exits.
async fn serve(listener: tokio::net::UnixListener, offer: Offer) {
    let offer = Arc::new(offer);
    loop {
        let conn = match listener.accept().await {
            Ok((c, _)) => c
                .into_std()
                .and_then(|c| c.set_nonblocking(false).map(|()| c)),
            Err(e) => Err(e),
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: the socket stays, try again.
                tracing::warn!("hand-over socket: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let offer = offer.clone();
        match tokio::task::spawn_blocking(move || hand_over(conn, &offer)).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => tracing::error!("hand-over not done, serving on: {e:#}"),
            Err(e) => tracing::error!("hand-over task: {e}"),
        }
    }
}

/// Undoes the pause and the seal unless the successor got GO (also on a
/// panic): then nobody used the snapshot and this filter is still the only one.
struct Resume<'a> {
    offer: &'a Offer,
    done: bool,
    sessions: Vec<u8>,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.offer
                .filter
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unseal();
            self.offer.sessions.resume(&self.sessions);
            self.offer.accept.resume();
        }
    }
}

/// One successor's request; `Ok` once it said READY and GO was written.
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
    // From the pause on, the successor has PAUSED in all to say READY: it
    // did its slow work before it asked.
    conn.set_read_timeout(Some(PAUSED))?;
    conn.set_write_timeout(Some(PAUSED))?;
    let mut resume = Resume {
        offer,
        done: false,
        sessions: Vec::new(),
    };
    offer.accept.pause();
    let snapshot = offer
        .filter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .hand_over();
    resume.sessions = offer.sessions.hand_over();
    tracing::info!(
        "hand-over: accepting paused, replay filter sealed ({} bytes), TLS sessions handed over ({} bytes)",
        snapshot.len(),
        resume.sessions.len()
    );
    send_and_wait(&mut conn, offer, &snapshot, &resume.sessions)?;
    resume.done = true;
    Ok(())
}

fn send_and_wait(
    conn: &mut UnixStream,
    offer: &Offer,
    snapshot: &[u8],
    sessions: &[u8],
) -> Result<()> {
    let mut header = [0u8; HEADER];
    // Without sessions, the header a predecessor of this version reads.
    header[..8].copy_from_slice(if sessions.is_empty() {
        MAGIC
    } else {
        MAGIC_TLS
    });
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
    if !sessions.is_empty() {
        conn.write_all(&(sessions.len() as u64).to_be_bytes())?;
    }
    conn.write_all(snapshot)?;
    conn.write_all(sessions)?;
    let deadline = std::time::Instant::now() + PAUSED;
    let line = read_line(conn).context("waiting for READY")?;
    if line != "READY" {
        bail!("the successor said {line:?} instead of READY");
    }
    if std::time::Instant::now() > deadline {
        bail!("the successor said READY after more than {PAUSED:?}");
    }
    conn.write_all(b"GO\n")?;
    tracing::info!("hand-over done: the successor accepts now; draining");
    Ok(())
}

/// Listen at `path` (owner only), replacing what is there atomically: a
/// successor's socket replaces its predecessor's file, which keeps serving
/// its (now nameless) socket until it exits. The directory must belong to
/// this user (or root) and be writable by nobody else, and `path` must be a
/// socket or absent: nobody else can plant or swap the file.
fn bind_private(path: &Path) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).with_context(|| format!("--handover: {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if (meta.uid() != me && meta.uid() != 0) || meta.mode() & 0o022 != 0 {
        bail!(
            "--handover: {} must belong to this user and be writable by nobody else (chmod go-w)",
            dir.display()
        );
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            bail!("--handover: {} exists and is not a socket", path.display())
        }
        _ => {}
    }
    let name = path
        .file_name()
        .with_context(|| format!("--handover: {} has no file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_socket_is_bound_only_in_a_private_directory_and_never_over_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let err = bind_private(&dir.join("gw.sock")).unwrap_err();
        assert!(
            format!("{err:#}").contains("writable by nobody else"),
            "{err:#}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.join("file"), b"data").unwrap();
        let err = bind_private(&dir.join("file")).unwrap_err();
        assert!(format!("{err:#}").contains("not a socket"), "{err:#}");
        assert_eq!(
            std::fs::read(dir.join("file")).unwrap(),
            b"data",
            "left alone"
        );
        // A socket (a predecessor's, or stale) is replaced, owner-only.
        let first = bind_private(&dir.join("gw.sock")).unwrap();
        let second = bind_private(&dir.join("gw.sock")).unwrap();
        let mode = std::fs::metadata(dir.join("gw.sock")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop((first, second));
    }

    #[test]
    fn no_gateway_at_the_path_means_bind_it_yourself() {
        let tmp = tempfile::tempdir().unwrap();
        let listen: SocketAddr = "127.0.0.1:443".parse().unwrap();
        assert!(request(&tmp.path().join("none.sock"), listen)
            .unwrap()
            .is_none());
        // A stale socket file (its process gone): connection refused.
        let stale = tmp.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(request(&stale, listen).unwrap().is_none());
    }
}
