//! The gateway of a lab scenario as a process in the server host: started
//! with the key store and extra flags, signalled and restarted by PID, its
//! counters read from its admin endpoint (`zrtt lab faults`, `zrtt lab soak`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, LabChild};

use crate::proc;
use crate::stack::Gateway;
use crate::Bench;

/// The gateway's port in the server host.
pub(crate) const GW_PORT: u16 = 443;
/// The gateway's admin endpoint, on the server's loopback.
pub(crate) const ADMIN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9090));

/// The gateway process, restartable by PID.
pub(crate) struct GatewayProc {
    child: Option<LabChild>,
    args: Vec<OsString>,
    log: PathBuf,
    zrtt: PathBuf,
}

impl GatewayProc {
    /// Starts `zrtt gateway` on the server's port 443 in front of the
    /// backend, with `keystore`, the admin endpoint, a replay state file in
    /// `dir` and `extra` flags; returns once it listens.
    pub(crate) fn start(
        bench: &Bench,
        lab: &Lab,
        keystore: &Path,
        dir: &Path,
        extra: Vec<OsString>,
    ) -> Result<GatewayProc> {
        let listen = SocketAddr::from((lab.addr("server")?, GW_PORT));
        let mut args = Gateway {
            admin: Some(ADMIN),
            replay_state: Some(dir.join("replay.state")),
            ..Gateway::new(listen)
        }
        .args(keystore);
        args.extend(extra);
        let mut g = GatewayProc {
            child: None,
            args,
            log: dir.join("gateway.log"),
            zrtt: bench.zrtt.clone(),
        };
        g.spawn(lab)?;
        Ok(g)
    }

    /// The process id of the running gateway.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(LabChild::pid)
    }

    /// Whether it is still running.
    pub(crate) fn running(&self) -> bool {
        self.child
            .as_ref()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn listen(&self) -> Result<SocketAddr> {
        let i = self
            .args
            .iter()
            .position(|a| a == "--listen")
            .context("--listen")?;
        Ok(self.args[i + 1].to_string_lossy().parse()?)
    }

    fn spawn(&mut self, lab: &Lab) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut c = lab.command("server", &self.zrtt)?;
        c.args(&self.args).stdout(Stdio::null()).stderr(log);
        self.child = Some(lab.spawn("server", c)?);
        proc::wait_listening(lab, "server", self.listen()?)?;
        proc::wait_listening(lab, "server", ADMIN)
    }

    /// A new gateway process takes over from this one (`--handover`, which
    /// the caller passed in the extra flags); milliseconds until the old
    /// one exited by itself (its drain).
    pub(crate) fn hand_over(&mut self, lab: &Lab) -> Result<f64> {
        let t0 = Instant::now();
        let old = self.child.take().context("no gateway running")?;
        self.spawn(lab)?;
        match old.wait_timeout(Duration::from_secs(30))? {
            Some(st) if st.success() => Ok(t0.elapsed().as_secs_f64() * 1000.0),
            Some(st) => bail!("the old gateway exited with {st} after the hand-over"),
            None => {
                let _ = old.terminate(Duration::from_secs(2));
                bail!("the old gateway did not exit within 30 s of the hand-over")
            }
        }
    }

    /// SIGTERM by PID, wait for the exit (the drain and the replay
    /// snapshot), start again; milliseconds until it listens again.
    pub(crate) fn restart(&mut self, lab: &Lab) -> Result<f64> {
        let t0 = Instant::now();
        if let Some(c) = self.child.take() {
            let st = c.terminate(Duration::from_secs(10))?;
            if !st.success() {
                bail!("the gateway exited with {st} on SIGTERM");
            }
        }
        self.spawn(lab)?;
        Ok(t0.elapsed().as_secs_f64() * 1000.0)
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            let _ = c.terminate(Duration::from_secs(2));
        }
    }
}

/// The gateway's counters (`*_total` without labels) from its admin endpoint.
pub(crate) fn scrape(lab: &Lab) -> Result<BTreeMap<String, f64>> {
    Ok(parse_metrics(&crate::admin_page::fetch(
        lab, "server", ADMIN,
    )?))
}

pub(crate) fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, v) = l.split_once(' ')?;
            let name = name.strip_prefix("zrtt_gateway_")?.strip_suffix("_total")?;
            Some((name.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

pub(crate) fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}
