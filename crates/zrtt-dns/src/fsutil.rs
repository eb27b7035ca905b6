//! Files that never appear half-written, and private files only their owner
//! can read.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `data` to `path` atomically: a temporary file in the same directory
/// (created exclusively, mode 0600 when `private`, else 0644), synced, then
/// renamed over `path`, and the directory synced. Readers see the old file or
/// the new one, never a partial one. Creates the parent directory.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("zrtt");
    let tmp = dir.join(format!(
        ".{base}.tmp{}.{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_dir(dir);
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
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
