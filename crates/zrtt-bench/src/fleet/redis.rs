//! The fleet's replay store: a three-node Redis Cluster (three masters, no
//! replicas, `cluster-require-full-coverage no`) of real `redis-server`
//! processes in the lab host `redis`, reached by the gateways through the
//! hub. Nodes are started and killed by PID (the lab's teardown also
//! kills them); nothing is persisted, so a restarted node comes back
//! empty (its `nodes.conf` keeps its slots).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, LabChild};

use crate::proc::run_capture;

/// The lab host of the cluster.
pub(super) const HOST: &str = "redis";
/// The nodes' ports on that host.
pub(super) const PORTS: [u16; 3] = [7001, 7002, 7003];
/// Bound on waits for the cluster (start, join, state ok).
const PATIENCE: Duration = Duration::from_secs(30);

/// One node.
struct Node {
    port: u16,
    dir: PathBuf,
    child: Option<LabChild>,
}

/// The cluster.
pub(super) struct Cluster {
    addr: Ipv4Addr,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts the three nodes under `dir` and joins them into a cluster;
    /// returns once every node says `cluster_state:ok`.
    pub(super) fn start(lab: &Lab, dir: &std::path::Path) -> Result<Cluster> {
        let addr = lab.addr(HOST)?;
        let mut c = Cluster {
            addr,
            nodes: PORTS
                .iter()
                .map(|&port| Node {
                    port,
                    dir: dir.join(format!("redis-{port}")),
                    child: None,
                })
                .collect(),
        };
        for i in 0..c.nodes.len() {
            std::fs::create_dir_all(&c.nodes[i].dir)?;
            c.spawn(lab, i)?;
        }
        let mut create = lab.command(HOST, "redis-cli")?;
        create.args(["--cluster", "create"]);
        for n in &c.nodes {
            create.arg(format!("{addr}:{}", n.port));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        run_capture(create).context("redis-cli --cluster create")?;
        c.until_ok(lab)?;
        Ok(c)
    }

    /// The store address for `zrtt gateway --replay-store`.
    pub(super) fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", self.addr, n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    fn spawn(&mut self, lab: &Lab, i: usize) -> Result<()> {
        let n = &self.nodes[i];
        let mut cmd = lab.command(HOST, "redis-server")?;
        cmd.args([
            "--bind",
            &self.addr.to_string(),
            "--port",
            &n.port.to_string(),
        ])
        .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--dir"])
        .arg(&n.dir)
        .args(["--logfile", "redis.log"])
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--cluster-node-timeout", "3000"])
        .args(["--cluster-require-full-coverage", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = lab.spawn(HOST, cmd)?;
        self.nodes[i].child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while self.cli(lab, i, &["PING"]).unwrap_or_default() != "PONG" {
            if Instant::now() > deadline {
                bail!("redis-server on port {} did not start", self.nodes[i].port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// `redis-cli` against node `i`, trimmed output.
    pub(super) fn cli(&self, lab: &Lab, i: usize, args: &[&str]) -> Result<String> {
        let mut c = lab.command(HOST, "redis-cli")?;
        c.args([
            "-h",
            &self.addr.to_string(),
            "-p",
            &self.nodes[i].port.to_string(),
        ])
        .args(args)
        .stderr(Stdio::null());
        Ok(run_capture(c)?.trim().to_owned())
    }

    /// Until every running node reports `cluster_state:ok` (bounded).
    pub(super) fn until_ok(&self, lab: &Lab) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            let ok = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].child.is_some())
                .all(|i| {
                    self.cli(lab, i, &["CLUSTER", "INFO"])
                        .is_ok_and(|s| s.contains("cluster_state:ok"))
                });
            if ok {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > PATIENCE {
                bail!("the Redis Cluster is not ok after {PATIENCE:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A master that does not hold the slot of `key` (the gateways'
    /// settings record, which a gateway starting needs): the one to kill.
    pub(super) fn victim(&self, lab: &Lab, key: &str) -> Result<usize> {
        let slot: u16 = self.cli(lab, 0, &["CLUSTER", "KEYSLOT", key])?.parse()?;
        for i in 0..self.nodes.len() {
            let nodes = self.cli(lab, i, &["CLUSTER", "NODES"])?;
            let me = nodes
                .lines()
                .find(|l| l.contains("myself"))
                .context("CLUSTER NODES without myself")?;
            let holds = me.split_whitespace().skip(8).any(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            });
            if !holds {
                return Ok(i);
            }
        }
        bail!("every node holds slot {slot}")
    }

    /// SIGKILL node `i`.
    pub(super) fn kill(&mut self, i: usize) -> Result<()> {
        if let Some(c) = self.nodes[i].child.take() {
            c.kill()?;
        }
        Ok(())
    }

    /// Starts node `i` again (empty, same slots) and waits for the cluster.
    pub(super) fn restart(&mut self, lab: &Lab, i: usize) -> Result<Duration> {
        self.spawn(lab, i)?;
        self.until_ok(lab)
    }

    /// `host:port` of node `i`.
    pub(super) fn node(&self, i: usize) -> String {
        format!("{}:{}", self.addr, self.nodes[i].port)
    }

    /// Keys held by the running nodes (recorded flights and the settings).
    pub(super) fn keys(&self, lab: &Lab) -> usize {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .filter_map(|i| self.cli(lab, i, &["DBSIZE"]).ok()?.parse::<usize>().ok())
            .sum()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = n.child.take() {
                let _ = c.terminate(Duration::from_secs(2));
            }
        }
    }
}
