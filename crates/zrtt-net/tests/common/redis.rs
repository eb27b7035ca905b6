//! A real `redis-server` for the fleet and TLS-session tests
//! (scripts/install-deps.sh installs it): one per test on a free loopback
//! port, in its own directory, without persistence, killed by its PID when
//! dropped (also when a test fails); and a three-master Redis Cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zrtt_net::gateway::StoreAddress;

/// Bound on waits for something that happens within milliseconds (a
/// server starting, a cluster forming): only a broken setup reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether the Redis binaries are here; as root they must be.
pub fn redis_installed() -> bool {
    let ok = ["redis-server", "redis-cli"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        assert!(
            !is_root(),
            "redis-server or redis-cli missing: run scripts/install-deps.sh"
        );
        eprintln!("skipped: redis-server/redis-cli not installed and not root to install them (scripts/install-deps.sh)");
    }
    ok
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One redis-server, killed (by its PID) when dropped.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

impl Redis {
    pub fn start(root: &Path, cluster: bool) -> Self {
        let port = free_port();
        let dir = root.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Self {
            port,
            dir,
            cluster,
            child: None,
        };
        r.restart();
        r
    }

    /// Start it (again) on its port, in its directory (nothing persisted:
    /// a restart starts empty).
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"]);
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "3000"])
                // The other nodes keep serving their slots when one is lost.
                .args(["--cluster-require-full-coverage", "no"]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while self.cli(&["PING"]) != "PONG" {
            assert!(
                start.elapsed() < PATIENCE,
                "redis-server on {} did not start: {}",
                self.port,
                std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `redis-cli -p PORT args...`, trimmed output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Recorded flights on this node (every key but the settings record).
    pub fn flights(&self) -> usize {
        self.cli(&["KEYS", "*"])
            .lines()
            .filter(|k| !k.is_empty() && !k.ends_with(":settings"))
            .count()
    }

    pub fn node(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn single(r: &Redis) -> StoreAddress {
    format!("redis://{}", r.node()).parse().unwrap()
}

/// A Redis Cluster of three masters, each serving a third of the slots.
pub async fn cluster(root: &Path) -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start(root, true)).collect();
    let mut create = Command::new("redis-cli");
    create.args(["--cluster", "create"]);
    for n in &nodes {
        create.arg(n.node());
    }
    let out = create
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    until_cluster_ok(&nodes).await;
    nodes
}

pub async fn until_cluster_ok(nodes: &[Redis]) {
    let start = Instant::now();
    while !nodes
        .iter()
        .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    {
        assert!(start.elapsed() < PATIENCE, "cluster never ok");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn cluster_address(nodes: &[Redis]) -> StoreAddress {
    format!(
        "redis+cluster://{}",
        nodes.iter().map(Redis::node).collect::<Vec<_>>().join(",")
    )
    .parse()
    .unwrap()
}
