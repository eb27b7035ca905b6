//! Processes and places of a lab run: the working directory, children
//! stopped on every exit, commands run to completion, waiting for a
//! listener, and clients timed from their first packet.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, LabChild};

use crate::Console;

/// A temporary directory removed on drop unless kept (then its path is
/// shown on the console).
pub(crate) struct WorkDir {
    pub(crate) path: PathBuf,
    keep: bool,
    console: Console,
}

impl WorkDir {
    pub(crate) fn new(console: &Console, what: &str, keep: bool) -> Result<WorkDir> {
        let path = std::env::temp_dir().join(format!("zrtt-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir {
            path,
            keep,
            console: console.clone(),
        })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            self.console.line(&format!("kept {}", self.path.display()));
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Children terminated by PID even on early return; the lab's own teardown
/// would also catch them.
#[derive(Default)]
pub(crate) struct Children(pub(crate) Vec<LabChild>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = c.terminate(Duration::from_secs(2));
        }
    }
}

/// Fails unless every program in `tools` is on the PATH.
pub(crate) fn require_tools(tools: &[&str]) -> Result<()> {
    for tool in tools {
        if !have_tool(tool) {
            bail!("{tool} not found: run scripts/install-deps.sh as root");
        }
    }
    Ok(())
}

fn have_tool(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sets `sysctl name=value` in each of `hosts`.
pub(crate) fn sysctl(lab: &Lab, hosts: &[&str], name: &str, value: &str) -> Result<()> {
    for h in hosts {
        let mut c = lab.command(h, "sysctl")?;
        c.args(["-q", "-w", &format!("{name}={value}")]);
        run_capture(c).with_context(|| format!("sysctl {name} in {h}"))?;
    }
    Ok(())
}

/// Waits (up to 15 s) until a TCP connect from `host` to `addr` succeeds.
pub(crate) fn wait_listening(lab: &Lab, host: &str, addr: SocketAddr) -> Result<()> {
    let ok = lab.in_host(host, move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    })?;
    if !ok {
        bail!("nothing listens on {addr} after 15 s");
    }
    Ok(())
}

/// Runs `cmd` to completion; its stdout, or an error with its output.
pub(crate) fn run_capture(mut cmd: Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}{}",
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// Where a timed client's marker appears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Scans `r` for `marker`; sends the moment it is seen, then drains `r`
/// (keeping the last 4 KiB for error messages). Also notes which of
/// `probes` appeared anywhere in the output, however long it is.
fn watch(
    mut r: impl Read,
    marker: Option<Vec<u8>>,
    probes: Vec<Vec<u8>>,
    tx: mpsc::Sender<Instant>,
) -> (Vec<u8>, Vec<bool>) {
    let mut tail: Vec<u8> = Vec::new();
    let mut seen = vec![false; probes.len()];
    let mut buf = [0u8; 8192];
    let mut found = marker.is_none();
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        tail.extend_from_slice(&buf[..n]);
        if !found {
            if let Some(m) = &marker {
                if tail.windows(m.len()).any(|w| w == m.as_slice()) {
                    found = true;
                    let _ = tx.send(now);
                }
            }
        }
        // The tail keeps 4 KiB from before this read: a probe split
        // across reads is still found.
        for (p, s) in probes.iter().zip(seen.iter_mut()) {
            if !*s && !p.is_empty() {
                *s = tail.windows(p.len()).any(|w| w == p.as_slice());
            }
        }
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    (tail, seen)
}

/// What [`time_client`] looks for in a client's output.
pub(crate) struct Marker<'a> {
    /// The stream it appears in.
    pub stream: Stream,
    /// The text whose first appearance ends the measurement.
    pub text: &'a str,
    /// Texts whose presence anywhere in that stream is reported.
    pub probes: &'a [&'a str],
}

/// What [`time_client`] measured.
pub(crate) struct Timed {
    /// Milliseconds from the first packet to the marker.
    pub ms: f64,
    /// For each probe, whether it appeared in the watched stream.
    pub seen: Vec<bool>,
}

/// Runs a client program in `host` and times it from its first packet
/// (the lab's hub timestamps it as it leaves the host) to the moment
/// `marker` appears in its output: time to the first response byte without
/// the program's start-up. Once the marker is seen the program gets
/// `linger` to finish by itself (saving session state, say) before it is
/// stopped; without a marker it is stopped after `timeout`. Returns
/// milliseconds and which of `probes` appeared anywhere in the marker's
/// stream, for callers that must check how the run went (early data
/// accepted, say).
pub(crate) fn time_client(
    lab: &Lab,
    host: &str,
    mut cmd: Command,
    watch_for: Marker<'_>,
    timeout: Duration,
    linger: Duration,
) -> Result<Timed> {
    let Marker {
        stream,
        text: marker,
        probes,
    } = watch_for;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    lab.arm_first_packet(host)?;
    let mut child = lab.spawn(host, cmd)?;
    let (tx, rx) = mpsc::channel();
    let m = marker.as_bytes().to_vec();
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    let p: Vec<Vec<u8>> = probes.iter().map(|p| p.as_bytes().to_vec()).collect();
    let ((mo, po), (me, pe)) = match stream {
        Stream::Stdout => ((Some(m), p), (None, Vec::new())),
        Stream::Stderr => ((None, Vec::new()), (Some(m), p)),
    };
    let tx2 = tx.clone();
    let t_out = std::thread::spawn(move || watch(out, mo, po, tx));
    let t_err = std::thread::spawn(move || watch(err, me, pe, tx2));
    let seen = rx.recv_timeout(timeout).ok();
    if seen.is_some() {
        let _ = child.wait_timeout(linger);
    }
    let _ = child.terminate(Duration::from_millis(500));
    let (tail_out, seen_out) = t_out.join().unwrap_or_default();
    let (tail_err, seen_err) = t_err.join().unwrap_or_default();
    let probed = match stream {
        Stream::Stdout => seen_out,
        Stream::Stderr => seen_err,
    };
    let first = lab.first_packet(host)?;
    match (seen, first) {
        (Some(t), Some(f)) if t >= f => Ok(Timed {
            ms: t.duration_since(f).as_secs_f64() * 1000.0,
            seen: probed,
        }),
        (Some(_), Some(_)) => bail!("marker {marker:?} seen before the first packet"),
        (Some(_), None) => bail!("marker {marker:?} seen but no packet left {host}"),
        (None, _) => bail!(
            "no {marker:?} within {timeout:?}; output: {}{}",
            String::from_utf8_lossy(&tail_out),
            String::from_utf8_lossy(&tail_err)
        ),
    }
}

/// The first eight counters (user, nice, system, idle, iowait, irq,
/// softirq, steal; clock ticks) of `/proc/stat`'s line `name` (`cpu` for
/// all CPUs, `cpu<N>` for one).
pub(crate) fn proc_stat_cpu(proc_stat: &str, name: &str) -> Option<[u64; 8]> {
    let line = proc_stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    v.get(..8)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_finds_a_marker_split_across_reads() {
        struct Chunks(Vec<&'static [u8]>);
        impl Read for Chunks {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                let c = self.0.remove(0);
                buf[..c.len()].copy_from_slice(c);
                Ok(c.len())
            }
        }
        let (tx, rx) = mpsc::channel();
        let (tail, seen) = watch(
            Chunks(vec![b"noise HTT", b"P/1.1 200 OK", b" more"]),
            Some(b"HTTP/1.1 200".to_vec()),
            vec![b"OK mo".to_vec(), b"absent".to_vec()],
            tx,
        );
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err(), "reported once");
        assert_eq!(tail, b"noise HTTP/1.1 200 OK more");
        assert_eq!(seen, [true, false], "a probe split across reads is found");
        let (tx, rx) = mpsc::channel();
        watch(
            Chunks(vec![b"HTTP/1.0 404"]),
            Some(b"HTTP/1.1 200".to_vec()),
            Vec::new(),
            tx,
        );
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn watch_finds_a_probe_long_before_the_end() {
        // A line early in a long log (a client's packet trace) is found
        // although only the last 4 KiB are kept.
        struct Log(usize);
        impl Read for Log {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0 += 1;
                let line: &[u8] = match self.0 {
                    1 => b"Early data was rejected by server\n",
                    n if n < 2000 => b"I00000001 0xabcd frm tx 1 1RTT ACK(0x02)\n",
                    _ => return Ok(0),
                };
                buf[..line.len()].copy_from_slice(line);
                Ok(line.len())
            }
        }
        let (tx, _rx) = mpsc::channel();
        let (tail, seen) = watch(Log(0), None, vec![b"Early data was rejected".to_vec()], tx);
        assert_eq!(seen, [true]);
        assert!(!String::from_utf8_lossy(&tail).contains("rejected"));
    }
}
