//! The gateway's replay filter across restarts (docs/PROTOCOL.md §7): saved
//! when the gateway stops, after its last flight, and restored (then
//! removed, so it is used once) by the next start, which then answers early
//! at once instead of refusing for `max_future` every flight stamped before
//! it started. A missing, unreadable, exposed, foreign, stale or damaged
//! file costs only that refusal.
//!
//! A snapshot is sound only if no other process accepted flights with the
//! same keys since its owner started. Three checks enforce that:
//! - a generation counter in `<state>.gen`, incremented under an exclusive
//!   lock by every start: a snapshot is restored only if it carries the
//!   generation the counter still holds, i.e. if its owner was the last
//!   gateway to start with this state file (a gateway started while another
//!   was still draining, then crashed, leaves the older snapshot unusable);
//! - an owner tag (host and listen address) in the snapshot, so gateways
//!   sharing a key store never take each other's snapshot;
//! - the snapshot's latest time must not be ahead of this start's clock by
//!   more than `max_future` (a clock stepped back, or a forged file).
//!
//! The TLS sessions a lone gateway holds go the same way, in `<state>.tls`
//! (`ZRTTTS\0\0`, the generation, then the sessions sealed under the
//! session key: zrtt-net's `TlsSessions::hand_over`): written after the
//! filter under the same generation check, taken and removed with it, and
//! used only when the filter is restored (a process that could not save its
//! filter, or another's file, gives no sessions: each is used once).
//!
//! Files are opened without following symbolic links and must be regular
//! files owned by this user with mode 0600.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
use zrtt_proto::UnixTime;

const MAGIC: &[u8; 8] = b"ZRTTRS2\0";
const TLS_MAGIC: &[u8; 8] = b"ZRTTTS\0\0";

type Bytes = Vec<u8>;

/// The replay filter a gateway serves with, and what it needs to save it.
pub struct ReplayState {
    /// The filter, shared with the gateway.
    pub filter: Arc<Mutex<BloomReplayFilter>>,
    /// The generation this start took (0 without a state file).
    generation: u64,
    owner: String,
    /// The TLS sessions the predecessor left (hand them to `TlsSessions::adopt`).
    pub sessions: Vec<u8>,
}

/// The owner tag of a gateway listening on `listen`: this host (its
/// machine id and host name) and the address.
pub fn owner(listen: std::net::SocketAddr) -> String {
    let machine = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    format!("{} {} {listen}", machine.trim(), hostname())
}

/// This host's name (empty when unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The filter to serve with: restored from `path` if this gateway's
/// predecessor left a usable snapshot there, else a fresh one whose restart
/// guard starts now (or at the latest time a discarded snapshot saw, if
/// that is later and plausible).
pub fn load(path: Option<&Path>, owner: &str) -> anyhow::Result<ReplayState> {
    let now = zrtt_net::client::system_clock();
    let Some(path) = path else {
        return Ok(state(fresh(now, None)?, 0, owner));
    };
    let (generation, found, tls) = take(path)?;
    let mut sessions = Vec::new();
    let (filter, latest) = match found.map(|bytes| restore(&bytes, generation - 1, owner, now)) {
        Some(Ok(f)) => {
            tracing::info!("replay filter restored from {}", path.display());
            sessions = tls
                .and_then(|t| {
                    let rest = t.strip_prefix(TLS_MAGIC.as_slice())?;
                    let (g, blob) = rest.split_at_checked(8)?;
                    (g == (generation - 1).to_be_bytes()).then(|| blob.to_vec())
                })
                .unwrap_or_default();
            (Some(f), None)
        }
        Some(Err((e, latest))) => {
            tracing::warn!(
                "{}: {e:#}; early data is refused for 2 s after this start",
                path.display()
            );
            (None, latest)
        }
        None => (None, None),
    };
    let filter = match filter {
        Some(f) => f,
        None => fresh(now, latest)?,
    };
    let mut st = state(filter, generation, owner);
    st.sessions = sessions;
    Ok(st)
}

/// The filter a running predecessor handed over (gateway/handover.rs): its
/// whole state, sealed there, so this start needs no restart refusal. It
/// takes no generation of the state file yet: [`ReplayState::claim`] does,
/// once the hand-over is done (an aborted one must leave the running
/// gateway's snapshot valid).
pub fn adopt(owner: &str, snapshot: &[u8]) -> anyhow::Result<ReplayState> {
    let now = zrtt_net::client::system_clock();
    let filter = BloomReplayFilter::from_snapshot(ReplayConfig::default(), snapshot)
        .context("the replay filter handed over")?;
    if filter.latest() > now.saturating_add(ReplayConfig::default().max_future) {
        bail!("the replay filter handed over saw a time ahead of this clock");
    }
    Ok(state(filter, 0, owner))
}

impl ReplayState {
    /// Take the state file's next generation for a filter handed over, as
    /// every start does (a snapshot file there is older than this filter,
    /// and is removed): the predecessor can no longer save, and this
    /// process's snapshot is the one the next start restores.
    pub fn claim(&mut self, path: &Path) -> anyhow::Result<()> {
        self.generation = take(path)?.0;
        Ok(())
    }
}

fn state(filter: BloomReplayFilter, generation: u64, owner: &str) -> ReplayState {
    ReplayState {
        filter: Arc::new(Mutex::new(filter)),
        generation,
        owner: owner.to_owned(),
        sessions: Vec::new(),
    }
}

/// A fresh filter starting at `now`, or at a discarded snapshot's latest
/// time when that is later but no further ahead than `max_future` (the
/// restart guard then covers what the predecessor saw with a clock ahead
/// of ours).
fn fresh(now: UnixTime, latest: Option<UnixTime>) -> anyhow::Result<BloomReplayFilter> {
    let cap = now.saturating_add(ReplayConfig::default().max_future);
    let start = latest.map_or(now, |l| l.min(cap).max(now));
    Ok(zrtt_net::gateway::new_replay_filter(start)?)
}

fn generation_path(path: &Path) -> PathBuf {
    suffixed(path, ".gen")
}

fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Read and remove the private file at `path`, if any.
fn take_file(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let bytes = match open_private(path, false) {
        Ok(Some(mut f)) => {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            Some(bytes)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!("{e}");
            None
        }
    };
    match std::fs::remove_file(path) {
        Ok(()) => zrtt_dns::fsutil::sync_dir(zrtt_dns::fsutil::parent_dir(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
    }
    Ok(bytes)
}

/// Open an existing private file without following a symbolic link; it must
/// be a regular file of this user that nobody else may read or write.
fn open_private(path: &Path, write: bool) -> std::io::Result<Option<File>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let euid = zrtt_net::sys::euid();
    let mode = meta.mode() & 0o7777;
    let why = if !meta.file_type().is_file() {
        Some("not a regular file".to_owned())
    } else if meta.uid() != euid {
        Some(format!(
            "owned by uid {}, not by this user ({euid})",
            meta.uid()
        ))
    } else if zrtt_dns::fsutil::is_exposed(mode) {
        Some(format!(
            "mode {mode:o} lets others read or change it (it must be 0600)"
        ))
    } else {
        None
    };
    match why {
        Some(why) => Err(std::io::Error::other(format!("{}: {why}", path.display()))),
        None => Ok(Some(file)),
    }
}

/// Under the generation file's lock: take this start's generation (the
/// stored one plus one) and the snapshot's bytes, if any (the snapshot is
/// removed, so it is used once whatever it holds), and the TLS sessions'.
fn take(path: &Path) -> anyhow::Result<(u64, Option<Bytes>, Option<Bytes>)> {
    let gen_path = generation_path(path);
    std::fs::create_dir_all(zrtt_dns::fsutil::parent_dir(path))?;
    let mut gen_file = open_private(&gen_path, true)?
        .with_context(|| format!("creating {}", gen_path.display()))?;
    gen_file
        .lock()
        .with_context(|| format!("locking {}", gen_path.display()))?;
    let mut text = String::new();
    gen_file.read_to_string(&mut text)?;
    let stored: u64 = match text.trim() {
        "" => 0,
        t => t
            .parse()
            .with_context(|| format!("{}: not a generation number", gen_path.display()))?,
    };
    let generation = stored.checked_add(1).context("generation overflow")?;
    let snapshot = take_file(path)?;
    let tls = take_file(&suffixed(path, ".tls"))?;
    gen_file.set_len(0)?;
    gen_file.rewind()?;
    gen_file.write_all(format!("{generation}\n").as_bytes())?;
    gen_file.sync_all()?;
    Ok((generation, snapshot, tls))
}

/// The filter in `bytes` if it is the snapshot of generation `expected`
/// taken by `owner`; else why not, with the latest time it saw if it
/// parsed.
fn restore(
    bytes: &[u8],
    expected: u64,
    owner: &str,
    now: UnixTime,
) -> Result<BloomReplayFilter, (anyhow::Error, Option<UnixTime>)> {
    let fail = |e: anyhow::Error| (e, None);
    let (generation, tag, core) = parse(bytes).map_err(fail)?;
    let filter = BloomReplayFilter::from_snapshot(ReplayConfig::default(), core)
        .map_err(|e| fail(e.into()))?;
    let latest = Some(filter.latest());
    if tag != owner.as_bytes() {
        return Err((
            anyhow::anyhow!(
                "taken by another gateway ({}), not this one ({owner})",
                String::from_utf8_lossy(tag)
            ),
            latest,
        ));
    }
    if generation != expected {
        return Err((
            anyhow::anyhow!(
                "stale: taken by the gateway of start {generation}, but the last start before this one was {expected}"
            ),
            latest,
        ));
    }
    if filter.latest() > now.saturating_add(ReplayConfig::default().max_future) {
        return Err((
            anyhow::anyhow!(
                "it saw a time {} ms ahead of this start's clock",
                filter.latest().as_millis() - now.as_millis()
            ),
            latest,
        ));
    }
    Ok(filter)
}

fn parse(bytes: &[u8]) -> anyhow::Result<(u64, &[u8], &[u8])> {
    let rest = bytes
        .strip_prefix(MAGIC.as_slice())
        .context("not a replay state file")?;
    if rest.len() < 10 {
        bail!("truncated");
    }
    let (g, rest) = rest.split_at(8);
    let generation = u64::from_be_bytes(g.try_into()?);
    let (n, rest) = rest.split_at(2);
    let n = usize::from(u16::from_be_bytes(n.try_into()?));
    if rest.len() < n {
        bail!("truncated");
    }
    let (tag, core) = rest.split_at(n);
    Ok((generation, tag, core))
}

/// Saves the filter to `path` (owner-only, atomically), tagged with this
/// start's generation and owner; call once the gateway has stopped
/// accepting flights. Nothing is saved if another gateway started with this
/// state file since (its generation is newer: this snapshot could never be
/// restored).
pub fn save(path: &Path, st: &ReplayState, sessions: &[u8]) -> anyhow::Result<()> {
    if st
        .filter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_sealed()
    {
        bail!("handed over to a successor (docs/GATEWAY.md): not saved");
    }
    let gen_path = generation_path(path);
    let mut gen_file = open_private(&gen_path, false)?
        .with_context(|| format!("{} is gone", gen_path.display()))?;
    gen_file.lock()?;
    let mut text = String::new();
    gen_file.read_to_string(&mut text)?;
    if text.trim() != st.generation.to_string() {
        bail!(
            "another gateway started with this state file since this one did (generation {} now, {} here): not saved",
            text.trim(),
            st.generation
        );
    }
    let core = st
        .filter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .to_snapshot();
    let tag = st.owner.as_bytes();
    let mut out = Vec::with_capacity(MAGIC.len() + 10 + tag.len() + core.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&st.generation.to_be_bytes());
    out.extend_from_slice(&u16::try_from(tag.len())?.to_be_bytes());
    out.extend_from_slice(tag);
    out.extend_from_slice(&core);
    zrtt_dns::fsutil::write_atomic(path, &out, true)?;
    if !sessions.is_empty() {
        let mut tls = TLS_MAGIC.to_vec();
        tls.extend_from_slice(&st.generation.to_be_bytes());
        tls.extend_from_slice(sessions);
        zrtt_dns::fsutil::write_atomic(&suffixed(path, ".tls"), &tls, true)?;
    }
    Ok(())
}

/// Where the snapshot lives: `--replay-state`, else
/// `replay-<host>-<address>_<port>.state` in the key store: named by host
/// and listen address, so that gateways sharing a key store never take
/// each other's snapshot (the owner tag inside checks it again).
pub fn location(
    flag: Option<&Path>,
    keystore: Option<&Path>,
    listen: std::net::SocketAddr,
) -> Option<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| {
        let host: String = hostname()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        keystore.map(|k| {
            k.join(format!(
                "replay-{host}-{}_{}.state",
                listen.ip(),
                listen.port()
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use zrtt_proto::replay::ReplayFilter;

    const OWNER: &str = "m h 127.0.0.1:443";

    /// Start, accept one flight, stop: the state file holds its snapshot.
    fn run_once(path: &Path, owner: &str) -> ReplayState {
        let st = load(Some(path), owner).unwrap();
        // A flight stamped after the restart guard (start + max_future).
        std::thread::sleep(std::time::Duration::from_millis(5));
        let now = zrtt_net::client::system_clock();
        st.filter
            .lock()
            .unwrap()
            .check_and_insert(
                1,
                &[7; 32],
                now.saturating_add(std::time::Duration::from_secs(2)),
                now,
            )
            .unwrap();
        st
    }

    fn restored(path: &Path, owner: &str) -> bool {
        let st = load(Some(path), owner).unwrap();
        // A restored filter remembers its predecessor's flight.
        let f = st.filter.lock().unwrap();
        f.seen(1, &[7; 32])
    }

    #[test]
    fn a_restart_restores_its_own_snapshot_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = run_once(&path, OWNER);
        save(&path, &st, &[]).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(restored(&path, OWNER));
        assert!(!path.exists(), "used once");
        assert!(!restored(&path, OWNER), "nothing left to restore");
    }

    #[test]
    fn tls_sessions_go_with_the_filter_once_and_only_to_its_successor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = run_once(&path, OWNER);
        save(&path, &st, b"sealed sessions").unwrap();
        let tls = suffixed(&path, ".tls");
        let mode = std::fs::metadata(&tls).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let next = load(Some(&path), OWNER).unwrap();
        assert_eq!(next.sessions, b"sealed sessions");
        assert!(!tls.exists(), "used once");
        assert!(load(Some(&path), OWNER).unwrap().sessions.is_empty());
        // A filter that is not restored (another gateway's) brings none.
        let st = run_once(&path, "m h 10.0.0.1:443");
        save(&path, &st, b"sealed sessions").unwrap();
        assert!(load(Some(&path), OWNER).unwrap().sessions.is_empty());
        assert!(!tls.exists());
    }

    #[test]
    fn a_snapshot_older_than_another_start_is_refused() {
        // A drains; B starts meanwhile (no snapshot yet); A saves; B crashes;
        // C must not take A's snapshot (it lacks B's flights).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let a = run_once(&path, OWNER);
        let _b = load(Some(&path), OWNER).unwrap();
        // A notices the newer start and saves nothing...
        assert!(save(&path, &a, &[]).is_err());
        assert!(!path.exists());
        // ...and a snapshot planted with A's generation is refused too.
        let c = run_once(&path, OWNER);
        let mut forged = ReplayState {
            filter: c.filter.clone(),
            generation: a.generation,
            owner: OWNER.into(),
            sessions: Vec::new(),
        };
        forged.generation = a.generation;
        let bytes = {
            let gen_path = generation_path(&path);
            let current = std::fs::read_to_string(&gen_path).unwrap();
            std::fs::write(&gen_path, format!("{}\n", a.generation)).unwrap();
            save(&path, &forged, &[]).unwrap();
            std::fs::write(&gen_path, current).unwrap();
            std::fs::read(&path).unwrap()
        };
        assert!(!bytes.is_empty());
        assert!(!restored(&path, OWNER));
    }

    #[test]
    fn another_gateways_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = run_once(&path, "m h 10.0.0.1:443");
        save(&path, &st, &[]).unwrap();
        assert!(!restored(&path, OWNER));
    }

    #[test]
    fn exposed_foreign_and_linked_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = run_once(&path, OWNER);
        save(&path, &st, &[]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(!restored(&path, OWNER));

        let st = run_once(&path, OWNER);
        save(&path, &st, &[]).unwrap();
        let real = dir.path().join("elsewhere");
        std::fs::rename(&path, &real).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(!restored(&path, OWNER));
        assert!(real.exists(), "the link's target is left alone");
    }

    #[test]
    fn a_snapshot_from_the_future_is_refused_and_its_time_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = load(Some(&path), OWNER).unwrap();
        let now = zrtt_net::client::system_clock();
        let ahead = now.saturating_add(std::time::Duration::from_secs(60));
        st.filter
            .lock()
            .unwrap()
            .check_and_insert(1, &[7; 32], ahead, ahead)
            .unwrap();
        save(&path, &st, &[]).unwrap();
        let next = load(Some(&path), OWNER).unwrap();
        let f = next.filter.lock().unwrap();
        assert!(!f.seen(1, &[7; 32]), "not restored");
        // A fresh filter whose guard starts at most max_future ahead.
        let start = f.latest();
        assert!(start > now && start <= now.saturating_add(std::time::Duration::from_secs(3)));
    }

    #[test]
    fn a_damaged_snapshot_costs_only_the_restart_guard() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.state");
        let st = run_once(&path, OWNER);
        save(&path, &st, &[]).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 40] ^= 1;
        zrtt_dns::fsutil::write_atomic(&path, &bytes, true).unwrap();
        assert!(!restored(&path, OWNER));
    }
}
