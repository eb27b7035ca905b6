//! Files that never appear half-written, and private files only their owner
//! can read.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `data` to `path` atomically: a new temporary file in the same
/// directory (see [`write_new_temp`]: never follows a symlink, never reuses
/// an existing file, mode 0600 when `private`, else 0644), synced, then
/// renamed over `path`, and the directory synced. Readers see the old file or
/// the new one, never a partial one. A symlink at `path` is replaced, not
/// followed, and the new file never keeps an old file's owner or mode.
/// Creates the parent directory. Every state and key file of the workspace
/// is written through here.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> io::Result<()> {
    let dir = parent_dir(path);
    fs::create_dir_all(dir)?;
    let tmp = write_new_temp(path, data, private)?;
    let result = fs::rename(&tmp, path);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    sync_dir(dir);
    result
}

/// The directory `path` is in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Write `data` to a new file next to `path` (`.<name>.tmp<pid>.<random>`),
/// synced, and return its path; the caller renames or links it into place.
/// The file is created with `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0600 when
/// `private` (else 0644), so a file or symlink planted under that name makes
/// it fail instead of being written through. Removed again on error.
pub fn write_new_temp(path: &Path, data: &[u8], private: bool) -> io::Result<PathBuf> {
    let dir = parent_dir(path);
    let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("zrtt");
    let mut nonce = [0u8; 8];
    // A name nobody can guess to plant a file under it first (O_EXCL would
    // then refuse it: a failed write, not a followed link). Falls back to
    // the counter alone if the system RNG fails.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
    let tmp = dir.join(format!(
        ".{base}.tmp{}.{}{:016x}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed),
        u64::from_le_bytes(nonce)
    ));
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 })
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    let mut f = opts.open(&tmp)?;
    let result = f.write_all(data).and_then(|()| f.sync_all());
    drop(f);
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Best-effort fsync of a directory so a rename or unlink is durable.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Overwrite a private file with zeros, then delete it. Overwriting is best
/// effort (copy-on-write file systems may keep old blocks); the unlink is not.
pub fn shred(path: &Path) -> io::Result<()> {
    if let Ok(meta) = fs::metadata(path) {
        if let Ok(mut f) = fs::OpenOptions::new().write(true).open(path) {
            let zeros = vec![0u8; usize::try_from(meta.len()).unwrap_or(0).min(1 << 16)];
            let _ = f.write_all(&zeros);
            let _ = f.sync_all();
        }
    }
    fs::remove_file(path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir);
    }
    Ok(())
}

/// The permission bits of a file (0 where the platform has none).
pub fn mode(path: &Path) -> io::Result<u32> {
    let meta = fs::metadata(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Ok(meta.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        Ok(0)
    }
}

/// Whether a file's mode lets anyone but the owner read or write it.
pub fn is_exposed(mode: u32) -> bool {
    mode & 0o077 != 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn write_atomic_replaces_a_symlink_instead_of_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("state");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomic(&path, b"secret", true).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched");
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read(&path).unwrap(), b"secret");
        // Nothing left behind but the file and the victim.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn write_atomic_does_not_keep_an_old_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&path, b"new", true).unwrap();
        assert_eq!(mode(&path).unwrap(), 0o600);
        assert_eq!(fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn temp_files_are_new_and_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let a = write_new_temp(&path, b"a", true).unwrap();
        let b = write_new_temp(&path, b"b", false).unwrap();
        assert_ne!(a, b);
        assert_eq!(mode(&a).unwrap(), 0o600);
        assert_eq!(fs::read(&b).unwrap(), b"b");
    }
}
