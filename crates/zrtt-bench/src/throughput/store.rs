//! The replay store of the Redis case: one `redis-server` (Debian's) on the
//! lab host's loopback, in its own directory, nothing persisted, pinned to
//! the load generator's CPU (a fleet's store runs on another machine: it
//! must not take CPU 0 from the gateway it serves). Started and stopped by
//! PID; the lab's teardown kills it too.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, LabChild};

use super::{loopback, CLIENT_CPU, HOST};
use crate::proc::run_capture;

/// The store's port on the lab host's loopback.
const PORT: u16 = 6390;
/// Bound on the wait for the server to answer `PING`.
const PATIENCE: Duration = Duration::from_secs(20);

/// A running `redis-server`: stopped when dropped.
pub(super) struct Store {
    child: Option<LabChild>,
    pub(super) pid: u32,
}

impl Store {
    /// Starts the server with its working directory `dir` (created) and
    /// returns once it answers `PING`.
    pub(super) fn start(lab: &Lab, dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir)?;
        let mut cmd = lab.command(HOST, "taskset")?;
        cmd.args(["-c", &CLIENT_CPU.to_string(), "redis-server"])
            .args(["--bind", "127.0.0.1", "--port", &PORT.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .args(["--logfile", "redis.log"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = lab.spawn(HOST, cmd)?;
        let store = Store {
            pid: child.pid(),
            child: Some(child),
        };
        let deadline = Instant::now() + PATIENCE;
        while store.cli(lab, &["PING"]).unwrap_or_default() != "PONG" {
            if Instant::now() > deadline {
                bail!("redis-server did not answer PING within {PATIENCE:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(store)
    }

    /// The address for `zrtt gateway --replay-store`.
    pub(super) fn url() -> String {
        format!("redis://{}", loopback(PORT))
    }

    /// `redis-cli` against the server, trimmed output.
    pub(super) fn cli(&self, lab: &Lab, args: &[&str]) -> Result<String> {
        let mut c = lab.command(HOST, "redis-cli")?;
        c.args(["-h", "127.0.0.1", "-p", &PORT.to_string()])
            .args(args)
            .stderr(Stdio::null());
        Ok(run_capture(c).context("redis-cli")?.trim().to_owned())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            let _ = c.terminate(Duration::from_secs(2));
        }
    }
}
