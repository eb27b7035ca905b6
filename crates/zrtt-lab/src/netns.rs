//! Network namespace naming, creation, deletion and leftover cleanup, plus a
//! bounded runner for `ip` and friends.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Path of the `ip` binary (iproute2).
pub const IP: &str = "/usr/sbin/ip";
/// Directory where `ip netns` keeps its namespace bind mounts.
pub const NETNS_DIR: &str = "/run/netns";
/// Prefix of every namespace the lab creates.
pub const NS_PREFIX: &str = "zrtt-";

/// Upper bound for any helper command (`ip`, `sysctl`).
const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// Path of the `ip` binary to use: [`IP`] if present, else `ip` from `PATH`.
pub(crate) fn ip_bin() -> &'static str {
    if Path::new(IP).exists() {
        IP
    } else {
        "ip"
    }
}

/// Name of the namespace for `host` of lab number `seq` in process `pid`:
/// `zrtt-<pid>-<seq>-<host>`.
pub(crate) fn ns_name(pid: u32, seq: u64, host: &str) -> String {
    format!("{NS_PREFIX}{pid}-{seq}-{host}")
}

/// The PID encoded in a lab namespace name (`zrtt-<pid>-...`), if any.
pub fn parse_ns_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let (pid, tail) = rest.split_once('-')?;
    if pid.is_empty() || tail.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// All network namespaces (as listed by `ip netns`) whose name starts with
/// `zrtt-`, sorted.
pub fn list_namespaces() -> Result<Vec<String>> {
    let dir = match std::fs::read_dir(NETNS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {NETNS_DIR}")),
    };
    let mut out = Vec::new();
    for entry in dir {
        let entry = entry.with_context(|| format!("reading {NETNS_DIR}"))?;
        if let Some(name) = entry.file_name().to_str() {
            if name.starts_with(NS_PREFIX) {
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether a process with this PID currently exists.
pub(crate) fn pid_alive(pid: u32) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes every `zrtt-<pid>-*` namespace whose `<pid>` is not a live
/// process (leftovers of crashed or killed runs). Namespaces of live PIDs,
/// including our own, are never touched, and no process is killed.
/// Returns the names that were deleted.
pub fn cleanup_stale_namespaces() -> Result<Vec<String>> {
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for name in list_namespaces()? {
        let Some(pid) = parse_ns_pid(&name) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        match delete_ns(&name) {
            Ok(()) => deleted.push(name),
            Err(e) => errors.push(format!("{name}: {e:#}")),
        }
    }
    // `/etc/netns` entries of dead runs whose namespace is already gone.
    if let Ok(dir) = std::fs::read_dir(ETC_NETNS) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            match parse_ns_pid(&name) {
                Some(pid) if !pid_alive(pid) => {
                    if let Err(e) = std::fs::remove_dir_all(e.path()) {
                        errors.push(format!("{ETC_NETNS}/{name}: {e}"));
                    }
                }
                _ => {}
            }
        }
    }
    if errors.is_empty() {
        Ok(deleted)
    } else {
        Err(anyhow!(
            "failed to delete stale namespaces: {}",
            errors.join("; ")
        ))
    }
}

/// Whether the named namespace exists.
pub(crate) fn ns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// `ip netns add NAME`.
pub(crate) fn create_ns(name: &str) -> Result<()> {
    run(Command::new(ip_bin()).args(["netns", "add", name]))
}

/// `ip netns delete NAME` (no error if it does not exist).
pub(crate) fn delete_ns(name: &str) -> Result<()> {
    // Per-namespace files `ip netns exec` mounts (see [`etc_dir`]).
    if name.starts_with(NS_PREFIX) {
        match std::fs::remove_dir_all(etc_dir(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {ETC_NETNS}/{name}")),
        }
    }
    if !ns_exists(name) {
        return Ok(());
    }
    run(Command::new(ip_bin()).args(["netns", "delete", name]))
}

/// Where `ip netns exec` finds files it bind-mounts over `/etc` for a
/// namespace (`/etc/netns/<name>/resolv.conf` becomes `/etc/resolv.conf`).
pub const ETC_NETNS: &str = "/etc/netns";

pub(crate) fn etc_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(ETC_NETNS).join(name)
}

/// `ip -n NS <args>`.
pub(crate) fn ip_in<I, S>(ns: &str, args: I) -> Result<()>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(Command::new(ip_bin()).args(["-n", ns]).args(args))
}

/// Runs `cmd` with a time limit, failing with its stderr if it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let desc = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("spawning `{desc}`"))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() < CMD_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`{desc}` timed out after {CMD_TIMEOUT:?}");
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).with_context(|| format!("waiting for `{desc}`"));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    bail!("`{desc}` failed ({status}): {}", err.trim())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_namespace_pids() {
        assert_eq!(parse_ns_pid("zrtt-1234-0-client"), Some(1234));
        assert_eq!(parse_ns_pid("zrtt-999999999-x"), Some(999_999_999));
        assert_eq!(parse_ns_pid("zrtt-abc-x"), None);
        assert_eq!(parse_ns_pid("zrtt-12"), None);
        assert_eq!(parse_ns_pid("zrtt--x"), None);
        assert_eq!(parse_ns_pid("other-12-x"), None);
        assert_eq!(ns_name(7, 2, "server"), "zrtt-7-2-server");
        assert_eq!(parse_ns_pid(&ns_name(7, 2, "server")), Some(7));
    }
}
