//! A running lab: namespaces, TUN devices, the hub, tracked child processes
//! and teardown (explicit, on drop, and on SIGINT/SIGTERM).

use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::hub::{Hub, HubConfig, HubStats};
use crate::netns::{self, NETNS_DIR};
use crate::sys;
use crate::topology::{validate_link, Link, Topology, LAB_NET, LAB_PREFIX};

/// Name of the TUN device inside every host namespace.
pub const HOST_DEV: &str = "zrtt0";
/// How long teardown waits after SIGTERM before sending SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

static LAB_SEQ: AtomicU64 = AtomicU64::new(0);
static REGISTRY: Mutex<Vec<Weak<LabState>>> = Mutex::new(Vec::new());
static SIGNALS: OnceLock<std::result::Result<(), String>> = OnceLock::new();

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether this process runs as root (effective uid 0), which the lab needs.
pub fn is_root() -> bool {
    sys::geteuid() == 0
}

/// One host of a running lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabHost {
    /// Host name from the topology.
    pub name: String,
    /// The host's IPv4 address (inside 198.18.0.0/15).
    pub addr: Ipv4Addr,
    /// Name of the host's network namespace (`zrtt-<pid>-<seq>-<host>`).
    pub netns: String,
}

type ChildSlot = Arc<Mutex<Child>>;

/// Everything teardown needs; shared with the signal handler's registry.
pub(crate) struct LabState {
    pub(crate) hosts: Vec<LabHost>,
    /// Anycast addresses: name, address, every member's host index.
    pub(crate) anycast: Vec<(String, Ipv4Addr, Vec<usize>)>,
    pub(crate) hub: Mutex<Option<Hub>>,
    children: Mutex<Vec<ChildSlot>>,
    torn_down: AtomicBool,
    teardown_lock: Mutex<()>,
}

impl LabState {
    /// Kills tracked children, stops the hub (closing the TUN devices, which
    /// removes them) and deletes the namespaces. Idempotent.
    fn teardown(&self) -> Result<()> {
        let _guard = lock(&self.teardown_lock);
        if self.torn_down.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let mut errors = Vec::new();

        let children: Vec<ChildSlot> = std::mem::take(&mut *lock(&self.children));
        if let Err(e) = terminate_all(&children, KILL_GRACE) {
            errors.push(format!("{e:#}"));
        }
        if let Some(mut hub) = lock(&self.hub).take() {
            if let Err(e) = hub.stop() {
                errors.push(format!("{e:#}"));
            }
        }
        for h in &self.hosts {
            if let Err(e) = netns::delete_ns(&h.netns) {
                errors.push(format!("{e:#}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow!("lab teardown: {}", errors.join("; ")))
        }
    }
}

/// Sends SIGTERM to every still-running child, waits up to `grace` for them
/// all, then SIGKILLs and reaps the rest (bounded by one more second).
fn terminate_all(children: &[ChildSlot], grace: Duration) -> Result<()> {
    let mut errors = Vec::new();
    for slot in children {
        let mut c = lock(slot);
        // Only signal children that have not been reaped, so the PID is
        // guaranteed to still be ours.
        if let Ok(None) = c.try_wait() {
            if let Err(e) = sys::kill(c.id(), libc::SIGTERM) {
                errors.push(format!("SIGTERM {}: {e}", c.id()));
            }
        }
    }
    let deadline = Instant::now() + grace;
    for slot in children {
        let mut c = lock(slot);
        let remaining = deadline.saturating_duration_since(Instant::now());
        match wait_child(&mut c, remaining) {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => errors.push(format!("waiting for {}: {e:#}", c.id())),
        }
        if let Err(e) = c.kill() {
            errors.push(format!("SIGKILL {}: {e}", c.id()));
            continue;
        }
        match wait_child(&mut c, Duration::from_secs(1)) {
            Ok(Some(_)) => {}
            Ok(None) => errors.push(format!("pid {} survived SIGKILL for 1 s", c.id())),
            Err(e) => errors.push(format!("waiting for {}: {e:#}", c.id())),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("stopping children: {}", errors.join("; ")))
    }
}

/// Polls `child` until it exits or `timeout` passes.
fn wait_child(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().context("try_wait")? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Installs (once per process) a SIGINT/SIGTERM handler thread that tears
/// down every live lab and then exits with status 128 + signal.
fn install_signal_handler() -> Result<()> {
    SIGNALS
        .get_or_init(|| {
            use signal_hook::consts::{SIGINT, SIGTERM};
            let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
                .map_err(|e| format!("registering SIGINT/SIGTERM handler: {e}"))?;
            std::thread::Builder::new()
                .name("zrtt-lab-signals".into())
                .spawn(move || {
                    if let Some(sig) = signals.forever().next() {
                        eprintln!("zrtt-lab: signal {sig}: tearing down labs");
                        teardown_all_labs();
                        std::process::exit(128 + sig);
                    }
                })
                .map(|_| ())
                .map_err(|e| format!("spawning signal thread: {e}"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Tears down every lab of this process that is still up (what the signal
/// handler does before exiting). Errors are printed to stderr.
pub fn teardown_all_labs() {
    let labs: Vec<Arc<LabState>> = lock(&REGISTRY).iter().filter_map(Weak::upgrade).collect();
    for lab in labs {
        if let Err(e) = lab.teardown() {
            eprintln!("zrtt-lab: {e:#}");
        }
    }
}

/// A running emulated WAN: one network namespace per host, each with a TUN
/// device (`zrtt0`) whose packets go through the delay hub in this process.
///
/// Every host has its address as a /32 on `zrtt0`, `lo` up, a route for
/// 198.18.0.0/15 via `zrtt0`, and `net.ipv4.tcp_fastopen=3` (client and
/// server TCP Fast Open enabled) unless disabled in the [`Topology`].
///
/// Teardown (kill tracked children, stop the hub, delete the namespaces)
/// happens in [`Lab::down`], on drop (including panics), and on
/// SIGINT/SIGTERM via the handler installed by [`Lab::up`].
pub struct Lab {
    pub(crate) state: Arc<LabState>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("hosts", &self.state.hosts)
            .finish_non_exhaustive()
    }
}

impl Lab {
    /// Builds the lab described by `topology`. Requires root.
    ///
    /// First deletes leftover `zrtt-<pid>-*` namespaces of dead PIDs. On any
    /// error everything created so far is removed again.
    pub fn up(topology: Topology) -> Result<Lab> {
        topology.validate().context("invalid topology")?;
        if !is_root() {
            bail!("the zrtt lab needs root (network namespaces and TUN devices)");
        }
        let mut warnings = Vec::new();
        if let Err(e) = netns::cleanup_stale_namespaces() {
            warnings.push(format!("{e:#}"));
        }
        if topology.handle_signals {
            if let Err(e) = install_signal_handler() {
                warnings.push(format!("{e:#}"));
            }
        }
        let pid = std::process::id();
        let seq = LAB_SEQ.fetch_add(1, Ordering::Relaxed);
        let hosts: Vec<LabHost> = topology
            .hosts
            .iter()
            .map(|h| LabHost {
                name: h.name.clone(),
                addr: h.addr,
                netns: netns::ns_name(pid, seq, &h.name),
            })
            .collect();
        let anycast = topology
            .anycast
            .iter()
            .map(|a| {
                let m = a.members.iter().filter_map(|m| topology.host_index(m));
                (a.name.clone(), a.addr, m.collect())
            })
            .collect();
        let state = Arc::new(LabState {
            hosts,
            anycast,
            hub: Mutex::new(None),
            children: Mutex::new(Vec::new()),
            torn_down: AtomicBool::new(false),
            teardown_lock: Mutex::new(()),
        });
        {
            let mut reg = lock(&REGISTRY);
            reg.retain(|w| w.strong_count() > 0);
            reg.push(Arc::downgrade(&state));
        }
        // From here on, dropping `lab` tears down whatever exists.
        let mut lab = Lab { state, warnings };
        let devices = lab.build(&topology)?;

        let n = topology.hosts.len();
        let mut links = Vec::with_capacity(n * n);
        for from in 0..n {
            for to in 0..n {
                links.push(topology.link_between(from, to));
            }
        }
        let hub = Hub::start(
            devices,
            HubConfig {
                addrs: lab.state.hosts.iter().map(|h| h.addr).collect(),
                links,
                seed: topology.seed,
                queue_limit: topology.queue_limit,
                spin_margin: topology.spin_margin,
                rt_priority: topology.rt_priority,
                anycast: lab
                    .state
                    .anycast
                    .iter()
                    .map(|(_, a, m)| lab.anycast_of(*a, m))
                    .collect(),
            },
        )?;
        *lock(&lab.state.hub) = Some(hub);
        // Give the threads a moment to apply their scheduling policy so the
        // status is meaningful right away.
        std::thread::sleep(Duration::from_millis(5));
        if let Some(e) = lab.hub_stats().realtime_error {
            if topology.rt_priority.is_some() {
                lab.warnings.push(format!("hub not real-time: {e}"));
            }
        }
        lab.warnings.shrink_to_fit();
        Ok(lab)
    }

    /// Creates namespaces and TUN devices; returns the devices in host order.
    fn build(&mut self, topology: &Topology) -> Result<Vec<File>> {
        let net = format!("{LAB_NET}/{LAB_PREFIX}");
        let mut devices = Vec::with_capacity(self.state.hosts.len());
        for h in &self.state.hosts {
            let ns = h.netns.as_str();
            let ctx = || format!("setting up host {:?} (netns {ns})", h.name);
            netns::create_ns(ns).with_context(ctx)?;
            if topology.tcp_fastopen {
                netns::run(
                    Command::new(netns::ip_bin())
                        .args(["netns", "exec", ns, "sysctl", "-q", "-w"])
                        .arg("net.ipv4.tcp_fastopen=3"),
                )
                .with_context(ctx)?;
            }
            // Best effort: keep IPv6 chatter (router solicitations, MLD) off
            // the lab links; the hub would drop it anyway.
            let _ = netns::run(Command::new(netns::ip_bin()).args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-q",
                "-w",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ]));
            let (dev, tmp_name) = sys::create_tun("zrtt%d").with_context(ctx)?;
            devices.push(dev);
            netns::run(
                Command::new(netns::ip_bin()).args(["link", "set", "dev", &tmp_name, "netns", ns]),
            )
            .with_context(ctx)?;
            let addr = format!("{}/32", h.addr);
            let src = h.addr.to_string();
            netns::ip_in(ns, ["link", "set", "dev", &tmp_name, "name", HOST_DEV])
                .with_context(ctx)?;
            netns::ip_in(ns, ["addr", "add", &addr, "dev", HOST_DEV]).with_context(ctx)?;
            netns::ip_in(ns, ["link", "set", "dev", "lo", "up"]).with_context(ctx)?;
            netns::ip_in(ns, ["link", "set", "dev", HOST_DEV, "up"]).with_context(ctx)?;
            netns::ip_in(ns, ["route", "add", &net, "dev", HOST_DEV, "src", &src])
                .with_context(ctx)?;
        }
        for (_, vip, members) in &self.state.anycast {
            for &m in members {
                let ns = &self.state.hosts[m].netns;
                netns::ip_in(ns, ["addr", "add", &format!("{vip}/32"), "dev", "lo"])
                    .with_context(|| format!("anycast {vip} in {ns}"))?;
            }
        }
        Ok(devices)
    }

    /// Problems that did not prevent the lab from coming up (stale namespace
    /// cleanup failures, no real-time priority, signal handler not installed).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The hosts, in topology order.
    pub fn hosts(&self) -> &[LabHost] {
        &self.state.hosts
    }

    pub(crate) fn host_index(&self, host: &str) -> Result<usize> {
        self.state
            .hosts
            .iter()
            .position(|h| h.name == host)
            .ok_or_else(|| anyhow!("no host {host:?} in this lab"))
    }

    fn host(&self, host: &str) -> Result<&LabHost> {
        Ok(&self.state.hosts[self.host_index(host)?])
    }

    /// IPv4 address of `host` (or of an anycast address of that name).
    pub fn addr(&self, host: &str) -> Result<Ipv4Addr> {
        match self.state.anycast.iter().find(|(n, _, _)| n == host) {
            Some((_, a, _)) => Ok(*a),
            None => Ok(self.host(host)?.addr),
        }
    }

    /// Network namespace name of `host`.
    pub fn netns(&self, host: &str) -> Result<&str> {
        Ok(&self.host(host)?.netns)
    }

    /// A command that runs `program` inside `host`:
    /// `ip netns exec <netns> <program>`. Add arguments with `.arg(...)` and
    /// start it with [`Lab::spawn`] so that teardown kills it.
    pub fn command(&self, host: &str, program: impl AsRef<OsStr>) -> Result<Command> {
        let ns = self.netns(host)?;
        let mut cmd = Command::new(netns::ip_bin());
        cmd.args(["netns", "exec", ns]).arg(program);
        Ok(cmd)
    }

    /// Spawns `cmd` inside `host` and tracks it: teardown sends it SIGTERM,
    /// waits up to [`KILL_GRACE`], then SIGKILLs it.
    ///
    /// `cmd` may come from [`Lab::command`] for the same host (run as is), or
    /// be any plain command (it then enters the host's network namespace
    /// between fork and exec, keeping its stdio settings).
    pub fn spawn(&self, host: &str, mut cmd: Command) -> Result<LabChild> {
        let ns = self.netns(host)?.to_string();
        if self.state.torn_down.load(Ordering::SeqCst) {
            bail!("lab is torn down");
        }
        let args: Vec<&OsStr> = cmd.get_args().take(3).collect();
        let prog = cmd.get_program();
        let is_netns_exec = (prog == OsStr::new(netns::IP) || prog == OsStr::new("ip"))
            && args.len() == 3
            && args[0] == "netns"
            && args[1] == "exec";
        let _ns_file;
        if is_netns_exec {
            if args[2] != OsStr::new(&ns) {
                bail!(
                    "command is prepared for netns {:?}, not host {host:?} ({ns})",
                    args[2]
                );
            }
        } else {
            let f = File::open(format!("{NETNS_DIR}/{ns}"))
                .with_context(|| format!("opening netns {ns}"))?;
            sys::pre_exec_setns(&mut cmd, f.as_raw_fd());
            _ns_file = f;
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawning {:?} in host {host:?}", cmd.get_program()))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let slot = Arc::new(Mutex::new(child));
        lock(&self.state.children).push(slot.clone());
        Ok(LabChild {
            pid,
            slot,
            stdin,
            stdout,
            stderr,
        })
    }

    /// PIDs of tracked children that have not exited yet.
    pub fn running_children(&self) -> Vec<u32> {
        lock(&self.state.children)
            .iter()
            .filter_map(|s| {
                let mut c = lock(s);
                matches!(c.try_wait(), Ok(None)).then(|| c.id())
            })
            .collect()
    }

    fn open_ns(&self, host: &str) -> Result<File> {
        let ns = self.netns(host)?;
        File::open(format!("{NETNS_DIR}/{ns}")).with_context(|| format!("opening netns {ns}"))
    }

    /// Runs `f` on a fresh thread that has entered `host`'s network namespace
    /// and returns its result (a panic in `f` is propagated). Sockets created
    /// by `f` belong to the host and may be returned and used from any thread.
    pub fn in_host<F, T>(&self, host: &str, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let ns = self.open_ns(host)?;
        std::thread::scope(|s| {
            let handle = std::thread::Builder::new()
                .name(format!("zrtt-in-{host}"))
                .spawn_scoped(s, move || -> Result<T> {
                    sys::setns_net(&ns)?;
                    drop(ns);
                    Ok(f())
                })
                .context("spawning in-host thread")?;
            match handle.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Like [`Lab::in_host`] but does not wait: returns once the new thread
    /// is inside the namespace. The thread is not stopped by teardown; make
    /// `f` finish on its own (e.g. with socket timeouts).
    pub fn spawn_in_host<F, T>(&self, host: &str, f: F) -> Result<HostThread<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let ns = self.open_ns(host)?;
        let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let handle = std::thread::Builder::new()
            .name(format!("zrtt-in-{host}"))
            .spawn(move || {
                let entered = sys::setns_net(&ns);
                drop(ns);
                match entered {
                    Ok(()) => {
                        let _ = tx.send(Ok(()));
                        Some(f())
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("{e:#}")));
                        None
                    }
                }
            })
            .context("spawning in-host thread")?;
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("entering host {host:?}: {e}"),
            Err(_) => bail!("in-host thread for {host:?} did not start"),
        }
        Ok(HostThread { handle })
    }

    /// Sets the link used for packets from `from` to `to` (takes effect for
    /// packets arriving from now on).
    pub fn set_link(&self, from: &str, to: &str, link: Link) -> Result<()> {
        validate_link(&link)?;
        let (a, b) = (self.host_index(from)?, self.host_index(to)?);
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        hub.set_link(a, b, link);
        Ok(())
    }

    /// Sets the same link in both directions between `a` and `b`.
    pub fn set_link_symmetric(&self, a: &str, b: &str, link: Link) -> Result<()> {
        self.set_link(a, b, link)?;
        self.set_link(b, a, link)
    }

    /// Sets a symmetric path with round-trip time `rtt` between `a` and `b`
    /// (one-way delay `rtt / 2`), keeping each direction's loss and rate.
    pub fn set_rtt(&self, a: &str, b: &str, rtt: Duration) -> Result<()> {
        for (x, y) in [(a, b), (b, a)] {
            let mut l = self.link(x, y)?;
            l.delay = rtt / 2;
            self.set_link(x, y, l)?;
        }
        Ok(())
    }

    /// The link currently used for packets from `from` to `to`.
    pub fn link(&self, from: &str, to: &str) -> Result<Link> {
        let (a, b) = (self.host_index(from)?, self.host_index(to)?);
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        hub.link(a, b)
            .ok_or_else(|| anyhow!("no link {from} -> {to}"))
    }

    /// Current hub counters and lateness statistics.
    pub fn hub_stats(&self) -> HubStats {
        lock(&self.state.hub)
            .as_ref()
            .map(Hub::stats)
            .unwrap_or_default()
    }

    /// Arms a timestamp for the next packet `host` sends into the WAN: the
    /// hub records when it read that packet from the host's TUN device
    /// (the moment the packet left the host). Together with
    /// [`Lab::first_packet`] this times any client program from its first
    /// packet, excluding its process start-up.
    pub fn arm_first_packet(&self, host: &str) -> Result<()> {
        let i = self.host_index(host)?;
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        hub.arm_first_packet(i);
        Ok(())
    }

    /// When the first packet from `host` since [`Lab::arm_first_packet`]
    /// left it (`None` if none yet).
    pub fn first_packet(&self, host: &str) -> Result<Option<Instant>> {
        let i = self.host_index(host)?;
        let hub = lock(&self.state.hub);
        let hub = hub.as_ref().ok_or_else(|| anyhow!("hub is not running"))?;
        Ok(hub.first_packet(i))
    }

    /// Gives programs started in `host` with [`Lab::command`] (`ip netns
    /// exec`) this `/etc/resolv.conf`: it is written to
    /// `/etc/netns/<netns>/resolv.conf`, which `ip netns exec` mounts, and
    /// removed with the namespace. Rust code in [`Lab::in_host`] and plain
    /// commands given to [`Lab::spawn`] do not see it.
    pub fn set_resolv_conf(&self, host: &str, content: &str) -> Result<()> {
        let ns = self.netns(host)?;
        let dir = netns::etc_dir(ns);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("resolv.conf");
        std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))
    }

    /// Resets hub counters and lateness statistics to zero.
    pub fn reset_hub_stats(&self) {
        if let Some(h) = lock(&self.state.hub).as_ref() {
            h.reset_stats();
        }
    }

    /// Tears the lab down, reporting errors (drop does the same silently,
    /// printing errors to stderr).
    pub fn down(self) -> Result<()> {
        self.state.teardown()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.state.teardown() {
            eprintln!("zrtt-lab: {e:#}");
        }
    }
}

/// A thread started with [`Lab::spawn_in_host`], running inside a host's
/// network namespace.
#[derive(Debug)]
pub struct HostThread<T> {
    handle: JoinHandle<Option<T>>,
}

impl<T> HostThread<T> {
    /// Waits for the thread and returns its result; a panic in the closure is
    /// propagated.
    pub fn join(self) -> T {
        match self.handle.join() {
            Ok(Some(v)) => v,
            // Only happens when setns failed, which spawn_in_host reported.
            Ok(None) => unreachable!("in-host thread ran without entering its namespace"),
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// Whether the thread has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// A child process started with [`Lab::spawn`]. Teardown of the lab kills it
/// if it is still running; dropping the `LabChild` does not.
#[derive(Debug)]
pub struct LabChild {
    pid: u32,
    slot: ChildSlot,
    /// The child's stdin, if it was piped.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, if it was piped.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr, if it was piped.
    pub stderr: Option<ChildStderr>,
}

impl LabChild {
    /// Process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Exit status if the child has exited.
    pub fn try_wait(&self) -> Result<Option<ExitStatus>> {
        lock(&self.slot).try_wait().context("try_wait")
    }

    /// Waits up to `timeout` for the child to exit.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL now, and reap it (bounded: 5 s).
    pub fn kill(&self) -> Result<Option<ExitStatus>> {
        let mut c = lock(&self.slot);
        if let Ok(None) = c.try_wait() {
            c.kill().context("SIGKILL")?;
        }
        wait_child(&mut c, Duration::from_secs(5))
    }

    /// SIGHUP (if it still runs).
    pub fn hangup(&self) -> Result<()> {
        let mut c = lock(&self.slot);
        if let Ok(None) = c.try_wait() {
            sys::kill(c.id(), libc::SIGHUP).context("SIGHUP")?;
        }
        Ok(())
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; returns the exit status.
    pub fn terminate(&self, grace: Duration) -> Result<ExitStatus> {
        terminate_all(std::slice::from_ref(&self.slot), grace)?;
        lock(&self.slot)
            .try_wait()
            .context("try_wait")?
            .ok_or_else(|| anyhow!("pid {} still running", self.pid))
    }
}
