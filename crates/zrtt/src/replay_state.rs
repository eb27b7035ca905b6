//! The gateway's replay filter across restarts (docs/PROTOCOL.md §7): saved
//! when the gateway stops, after its last flight, and restored (then
//! removed, so it is used once) by the next start, which then answers early
//! at once instead of refusing for `max_future` every flight stamped before
//! it started. A missing, unreadable, exposed or damaged file costs only
//! that refusal.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};

/// The filter to serve with: restored from `path` if a predecessor left a
/// usable snapshot there, else a fresh one whose restart guard starts now.
pub fn load(path: Option<&Path>) -> anyhow::Result<Arc<Mutex<BloomReplayFilter>>> {
    let fresh = || zrtt_net::gateway::new_replay_filter(zrtt_net::client::system_clock());
    let Some(path) = path else {
        return Ok(Arc::new(Mutex::new(fresh()?)));
    };
    let filter = match restore(path) {
        Ok(Some(f)) => {
            tracing::info!("replay filter restored from {}", path.display());
            f
        }
        Ok(None) => fresh()?,
        Err(e) => {
            tracing::warn!(
                "{}: {e:#}; early data is refused for 2 s after this start",
                path.display()
            );
            fresh()?
        }
    };
    Ok(Arc::new(Mutex::new(filter)))
}

fn restore(path: &Path) -> anyhow::Result<Option<BloomReplayFilter>> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let bytes = if meta.file_type().is_file() {
        Some(std::fs::read(path)?)
    } else {
        None
    };
    // Used once, whatever it holds: a later crash must not find it again.
    std::fs::remove_file(path)?;
    let Some(bytes) = bytes else {
        anyhow::bail!("not a regular file");
    };
    let mode = meta.permissions().mode() & 0o7777;
    if zrtt_dns::fsutil::is_exposed(mode) {
        anyhow::bail!("mode {mode:o} lets others change it (it must be 0600)");
    }
    Ok(Some(BloomReplayFilter::from_snapshot(
        ReplayConfig::default(),
        &bytes,
    )?))
}

/// Saves `filter` to `path` (owner-only, atomically); call once the
/// gateway has stopped accepting flights.
pub fn save(path: &Path, filter: &Mutex<BloomReplayFilter>) -> anyhow::Result<()> {
    let snap = filter
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .to_snapshot();
    zrtt_dns::fsutil::write_atomic(path, &snap, true)?;
    Ok(())
}

/// Where the snapshot lives: `--replay-state`, else
/// `replay-<address>_<port>.state` in the key store: named by the listen
/// address, so that gateways sharing a key store never take each other's
/// snapshot (one that crashed must not continue another's filter).
pub fn location(
    flag: Option<&Path>,
    keystore: Option<&Path>,
    listen: std::net::SocketAddr,
) -> Option<PathBuf> {
    flag.map(Path::to_path_buf).or_else(|| {
        keystore.map(|k| k.join(format!("replay-{}_{}.state", listen.ip(), listen.port())))
    })
}
