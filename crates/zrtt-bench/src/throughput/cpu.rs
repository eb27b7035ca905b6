//! CPU accounting: per-process and per-core clock ticks from `/proc`, the
//! snapshots taken at a measured window's edges, and CPU pinning (`taskset`;
//! the crate has no `unsafe`).

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{CLIENT_CPU, SERVER_CPU};
use crate::proc::run_capture;

/// utime + stime (clock ticks) from the text of `/proc/<pid>/stat` or
/// `/proc/<pid>/task/<tid>/stat`. The command name may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_stat_cpu(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); utime and stime are
    // fields 14 and 15.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks of CPU `cpu` from `/proc/stat`: (busy, of which irq +
/// softirq). Busy is user + nice + system + irq + softirq + steal (not idle,
/// not iowait).
fn parse_core_busy(proc_stat: &str, cpu: usize) -> Option<(u64, u64)> {
    let v = crate::proc::proc_stat_cpu(proc_stat, &format!("cpu{cpu}"))?;
    Some((v[0] + v[1] + v[2] + v[5] + v[6] + v[7], v[5] + v[6]))
}

/// CPU counters at one moment, in clock ticks.
pub(super) struct Snapshot {
    pub(super) at: Instant,
    /// Per server process, in the order given.
    pub(super) pids: Vec<u64>,
    /// The generator thread itself.
    pub(super) me: u64,
    /// CPU 0 and CPU 1: busy time (everything that ran there), and irq +
    /// softirq time (loopback packet processing).
    pub(super) cores: [(u64, u64); 2],
}

impl Snapshot {
    /// Must run on the generator thread (reads `/proc/thread-self`).
    pub(super) fn take(pids: &[u32]) -> Result<Snapshot> {
        let mut v = Vec::with_capacity(pids.len());
        for pid in pids {
            let path = format!("/proc/{pid}/stat");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {path} (server gone?)"))?;
            v.push(parse_stat_cpu(&text).with_context(|| format!("parsing {path}"))?);
        }
        let me = parse_stat_cpu(&std::fs::read_to_string("/proc/thread-self/stat")?)
            .context("parsing /proc/thread-self/stat")?;
        let stat = std::fs::read_to_string("/proc/stat")?;
        let core = |c| parse_core_busy(&stat, c).unwrap_or((0, 0));
        Ok(Snapshot {
            at: Instant::now(),
            pids: v,
            me,
            cores: [core(SERVER_CPU), core(CLIENT_CPU)],
        })
    }
}

/// Pins the calling thread to `cpu` (`taskset -p` on its thread id; the
/// crate has no `unsafe`) and returns its allowed-CPU list.
pub(super) fn pin_this_thread(cpu: usize) -> Result<String> {
    let link = std::fs::read_link("/proc/thread-self")?;
    let tid = link
        .file_name()
        .and_then(|t| t.to_str())
        .context("no thread id in /proc/thread-self")?
        .to_string();
    let mut c = Command::new("taskset");
    c.args(["-p", "-c", &cpu.to_string(), &tid])
        .stdout(Stdio::null());
    run_capture(c).context("pinning the load generator")?;
    cpus_allowed("/proc/thread-self/status")
}

fn cpus_allowed(status_path: &str) -> Result<String> {
    let s = std::fs::read_to_string(status_path)?;
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .with_context(|| format!("no Cpus_allowed_list in {status_path}"))
}

/// Fails unless `pid` runs `comm` and is allowed on `SERVER_CPU` only.
pub(super) fn check_server(pid: u32, comm: &str) -> Result<()> {
    let got = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if got.trim() != comm {
        bail!(
            "pid {pid} runs {:?}, expected {comm} (did it exit?)",
            got.trim()
        );
    }
    let cpus = cpus_allowed(&format!("/proc/{pid}/status"))?;
    if cpus != SERVER_CPU.to_string() {
        bail!("{comm} (pid {pid}) is allowed on CPUs {cpus}, not {SERVER_CPU}");
    }
    Ok(())
}

/// Clock ticks per second for `/proc` CPU times.
pub(super) fn clk_tck() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_counts_fields_after_the_name() {
        // Field 14 (utime) = 1500, field 15 (stime) = 250; the name holds
        // spaces and a parenthesis.
        let s = "4242 (ngi nx) (x)) S 1 4242 4242 0 -1 4194624 100 0 0 0 1500 250 0 0 20 0 1 0 123 456 789";
        assert_eq!(parse_stat_cpu(s), Some(1750));
        assert_eq!(parse_stat_cpu("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat_cpu("garbage"), None);
        // The real thing parses.
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat_cpu(&me).is_some(), "{me}");
    }

    #[test]
    fn core_busy_excludes_idle_and_iowait() {
        let s = "cpu  10 10 10 10 10 10 10 10 0 0\ncpu0 1 2 3 1000 500 4 5 6 0 0\ncpu1 7 0 0 9 0 0 0 0 0 0\n";
        assert_eq!(parse_core_busy(s, 0), Some((1 + 2 + 3 + 4 + 5 + 6, 4 + 5)));
        assert_eq!(parse_core_busy(s, 1), Some((7, 0)));
        assert_eq!(parse_core_busy(s, 2), None);
        assert_eq!(parse_core_busy("cpu0 1 2\n", 0), None);
    }
}
