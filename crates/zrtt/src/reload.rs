//! What a running gateway re-reads without a restart: the TLS certificate
//! and its key when their files change (checked every `--refresh`) or on
//! SIGHUP, and the key store on SIGHUP as on its timer. A file that does
//! not load (half-written, wrong key, unreadable) leaves the certificate in
//! force and is logged with the reason; it is tried again at the next
//! change or SIGHUP. Connections already open keep their certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify};
use zrtt_net::gateway::{load_certified_key, ReloadableCert};

/// Wakes the re-readers on every SIGHUP (`notify_waiters`: each loop waiting
/// at that moment re-reads once).
pub fn sighup() -> Arc<Notify> {
    let hup = Arc::new(Notify::new());
    let notify = hup.clone();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut s) => {
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    tracing::info!("SIGHUP: re-reading the certificate and the key store");
                    notify.notify_waiters();
                }
            });
        }
        Err(e) => tracing::warn!("no SIGHUP handler: {e}"),
    }
    hup
}

/// What identifies a file's version: modification time, size, inode.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Re-read `cert`/`key` into `served` when either file changes (polled
/// every `every`) or on `hup`, until `stop`.
pub async fn watch_certificate(
    served: Arc<ReloadableCert>,
    cert: PathBuf,
    key: PathBuf,
    every: Duration,
    hup: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut seen = (stamp(&cert), stamp(&key));
    loop {
        let forced = tokio::select! {
            _ = stop.changed() => return,
            () = hup.notified() => true,
            () = tokio::time::sleep(every) => false,
        };
        let now = (stamp(&cert), stamp(&key));
        if !forced && now == seen {
            continue;
        }
        seen = now;
        let (c, k) = (cert.clone(), key.clone());
        // A key file others can read is refused here as at start.
        let load = move || -> anyhow::Result<_> {
            zrtt_dns::keyfile::check_private_mode(&k)?;
            Ok(load_certified_key(&c, &k)?)
        };
        match tokio::task::spawn_blocking(load).await {
            Ok(Ok(fresh)) => {
                served.replace(fresh);
                tracing::info!("certificate reloaded from {}", cert.display());
            }
            Ok(Err(e)) => {
                tracing::error!("certificate not reloaded, still serving the previous one: {e}")
            }
            Err(e) => tracing::error!("certificate reload task: {e}"),
        }
    }
}
