//! A configuration reload that keeps every connection: with `--handover`,
//! SIGHUP starts a new gateway process (this executable, the same
//! arguments, so the same `--config` file read again), which takes the
//! sockets and the replay filter over (handover.rs) once everything it
//! needs loaded. A configuration that does not load leaves this process
//! serving: the new process exits with the reason on the shared stderr.
//!
//! Under systemd (`Type=notify`, `NotifyAccess=all`) each process that
//! starts serving says `READY=1` and `MAINPID=<its pid>`, so the service
//! follows the new process instead of stopping when the old one exits.
//! `--pid-file` says the same to other supervisors.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::Notify;

/// How this process was started: what a successor is started with.
#[derive(Clone, Debug)]
pub struct Invocation {
    exe: PathBuf,
    args: Vec<OsString>,
}

impl Invocation {
    /// This process's executable (resolved now: a binary replaced on disk
    /// later starts the new version) and arguments.
    pub fn current() -> Result<Self> {
        Ok(Self {
            exe: std::env::current_exe().context("this executable's path")?,
            args: std::env::args_os().skip(1).collect(),
        })
    }

    fn spawn(&self) -> std::io::Result<Child> {
        Command::new(&self.exe).args(&self.args).spawn()
    }
}

/// On each SIGHUP (`hup`), start a successor unless one is starting;
/// reap it if it fails (a successor that took over outlives this process).
pub async fn on_sighup(inv: Invocation, hup: Arc<Notify>) {
    loop {
        hup.notified().await;
        let mut child = match inv.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    "SIGHUP: starting {}: {e}: serving on with this configuration",
                    inv.exe.display()
                );
                continue;
            }
        };
        tracing::info!(
            "SIGHUP: started a successor (pid {}) that reads the configuration again and takes over",
            child.id()
        );
        // Until it took over (this process then stops, and this task with
        // it) or failed, further SIGHUPs wait. Polled, not a blocking
        // wait: the runtime must not wait for a successor that runs on.
        loop {
            match child.try_wait() {
                Ok(None) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                Ok(Some(s)) => {
                    tracing::error!(
                        "SIGHUP: the successor exited ({s}) without taking over: serving on with this configuration (its error is logged above)"
                    );
                    break;
                }
                Err(e) => {
                    tracing::error!("SIGHUP: waiting for the successor: {e}");
                    break;
                }
            }
        }
    }
}

/// This process serves now: tell systemd (`READY=1`, `MAINPID`) and write
/// `pid_file` (if any).
pub fn serving(pid_file: Option<&Path>) {
    let pid = std::process::id();
    if let Err(e) = sd_notify::notify(&[
        sd_notify::NotifyState::MainPid(pid),
        sd_notify::NotifyState::Ready,
    ]) {
        tracing::warn!("sd_notify: {e}");
    }
    if let Some(p) = pid_file {
        if let Err(e) = crate::util::write_atomic(p, format!("{pid}\n").as_bytes(), false) {
            tracing::error!("--pid-file {}: {e:#}", p.display());
        }
    }
}

/// At exit: remove `pid_file` if it still names this process (a successor
/// may have written its own).
pub fn stopped(pid_file: Option<&Path>) {
    let Some(p) = pid_file else { return };
    let ours = std::fs::read_to_string(p).is_ok_and(|s| s.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(p);
    }
}
