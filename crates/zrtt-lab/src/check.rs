//! Accuracy check: measures the RTT the lab really produces for a list of
//! configured RTTs, with UDP echo probes and TCP handshakes.

use std::fmt;
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::hub::HubStats;
use crate::lab::Lab;
use crate::lateness::LatenessStats;
use crate::topology::Topology;

const UDP_PORT: u16 = 7007;
const TCP_PORT: u16 = 7008;
const MAGIC: &[u8; 8] = b"zrttprob";
const PROBE_LEN: usize = 64;
const CLIENT: &str = "client";
const SERVER: &str = "server";

/// Options of [`run_check`].
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Round-trip times to configure and verify (default 20, 100, 200 ms).
    pub rtts: Vec<Duration>,
    /// UDP echo probes per RTT (default 50).
    pub probes: usize,
    /// Gap between consecutive UDP probes; probes are pipelined, so several
    /// may be in flight (default 10 ms).
    pub probe_interval: Duration,
    /// TCP handshakes (connect time = 1 RTT) per RTT; 0 disables the TCP rows
    /// (default 10).
    pub tcp_connects: usize,
    /// Upper bound on the time spent measuring one RTT per probe kind
    /// (default 20 s); unanswered probes count as lost.
    pub time_budget_per_rtt: Duration,
    /// Hub spin margin (see [`Topology::spin_margin`], default 1 ms).
    pub spin_margin: Duration,
    /// Hub SCHED_FIFO priority (default `Some(50)`).
    pub realtime_priority: Option<i32>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            rtts: [20, 100, 200].map(Duration::from_millis).to_vec(),
            probes: 50,
            probe_interval: Duration::from_millis(10),
            tcp_connects: 10,
            time_budget_per_rtt: Duration::from_secs(20),
            spin_margin: Duration::from_millis(1),
            realtime_priority: Some(50),
        }
    }
}

/// What a [`CheckRow`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// UDP echo request/response.
    Udp,
    /// TCP connect (SYN → SYN-ACK), one RTT.
    TcpConnect,
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Udp => "udp echo",
            ProbeKind::TcpConnect => "tcp connect",
        })
    }
}

/// Result for one configured RTT and one probe kind.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRow {
    /// Probe kind.
    pub kind: ProbeKind,
    /// Configured RTT.
    pub configured: Duration,
    /// Probes sent.
    pub sent: usize,
    /// Probes answered.
    pub received: usize,
    /// Median measured RTT (zero if nothing was received).
    pub median: Duration,
    /// 90th percentile measured RTT.
    pub p90: Duration,
    /// Maximum measured RTT.
    pub max: Duration,
    /// `median - configured` in milliseconds.
    pub error_ms: f64,
    /// `median - configured` as a percentage of `configured`.
    pub error_pct: f64,
    /// Whether `|median - configured| <= tolerance(configured)` and at least
    /// half of the probes were answered.
    pub pass: bool,
    /// Hub lateness while this row was measured.
    pub lateness: LatenessStats,
}

/// Result of [`run_check`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// One row per (RTT, probe kind).
    pub rows: Vec<CheckRow>,
    /// Hub counters at the end (lateness covers only the last row, as the
    /// statistics are reset per row; see the rows).
    pub hub: HubStats,
    /// Warnings from bringing the lab up.
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// True if every row passed.
    pub fn passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(|r| r.pass)
    }

    /// Largest lateness seen in any row.
    pub fn max_lateness(&self) -> Duration {
        self.rows
            .iter()
            .map(|r| r.lateness.max)
            .max()
            .unwrap_or_default()
    }
}

/// Accuracy target: 1 % of the configured RTT plus 0.5 ms.
pub fn tolerance(configured: Duration) -> Duration {
    configured / 100 + Duration::from_micros(500)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| probe | RTT ms | recv/sent | median ms | p90 ms | max ms | err ms | err % | tol ms | pass | late p50 µs | late p99 µs | late max µs |"
        )?;
        writeln!(
            f,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "| {} | {:.0} | {}/{} | {:.3} | {:.3} | {:.3} | {:+.3} | {:+.2} | {:.2} | {} | {:.0} | {:.0} | {:.0} |",
                r.kind,
                ms(r.configured),
                r.received,
                r.sent,
                ms(r.median),
                ms(r.p90),
                ms(r.max),
                r.error_ms,
                r.error_pct,
                ms(tolerance(r.configured)),
                if r.pass { "ok" } else { "FAIL" },
                us(r.lateness.p50),
                us(r.lateness.p99),
                us(r.lateness.max),
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "hub: forwarded={} dropped(loss/queue/unroutable)={}/{}/{} errors(read/write)={}/{} max lateness={:.0}µs",
            self.hub.forwarded,
            self.hub.dropped_loss,
            self.hub.dropped_queue,
            self.hub.dropped_unroutable,
            self.hub.read_errors,
            self.hub.write_errors,
            us(self.max_lateness()),
        )?;
        match (&self.hub.realtime_priority, &self.hub.realtime_error) {
            (Some(p), _) => writeln!(f, "hub threads: SCHED_FIFO priority {p}")?,
            (None, Some(e)) => writeln!(f, "hub threads: not real-time ({e})")?,
            (None, None) => writeln!(f, "hub threads: not real-time")?,
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        write!(
            f,
            "overall: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// Summary statistics of measured RTT samples.
fn summarize(
    kind: ProbeKind,
    configured: Duration,
    sent: usize,
    mut samples: Vec<Duration>,
    lateness: LatenessStats,
) -> CheckRow {
    samples.sort();
    let pick = |q: f64| -> Duration {
        if samples.is_empty() {
            return Duration::ZERO;
        }
        let idx = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[idx]
    };
    let median = if samples.is_empty() {
        Duration::ZERO
    } else if samples.len() % 2 == 1 {
        samples[samples.len() / 2]
    } else {
        (samples[samples.len() / 2 - 1] + samples[samples.len() / 2]) / 2
    };
    let error_ms = ms(median) - ms(configured);
    let error_pct = if configured.is_zero() {
        0.0
    } else {
        100.0 * error_ms / ms(configured)
    };
    let pass = !samples.is_empty()
        && samples.len() * 2 >= sent
        && error_ms.abs() <= ms(tolerance(configured));
    CheckRow {
        kind,
        configured,
        sent,
        received: samples.len(),
        median,
        p90: pick(0.90),
        max: samples.last().copied().unwrap_or_default(),
        error_ms,
        error_pct,
        pass,
        lateness,
    }
}

/// Builds a two-host lab (`client`, `server`) and, for every RTT in
/// `opts.rtts`, measures UDP echo RTTs and TCP connect times from client to
/// server. Needs root. Bounded in time by `opts.time_budget_per_rtt`.
pub fn run_check(opts: CheckOptions) -> Result<CheckReport> {
    let topo = Topology::new()
        .host(CLIENT)
        .host(SERVER)
        .spin_margin(opts.spin_margin)
        .realtime_priority(opts.realtime_priority);
    let lab = Lab::up(topo).context("bringing up the check lab")?;
    let server_addr = lab.addr(SERVER)?;
    let udp_target = SocketAddr::V4(SocketAddrV4::new(server_addr, UDP_PORT));
    let tcp_target = SocketAddr::V4(SocketAddrV4::new(server_addr, TCP_PORT));

    // Servers: sockets are created inside the server host, then served from
    // plain threads.
    let echo = lab
        .in_host(SERVER, || UdpSocket::bind(udp_target))?
        .context("binding UDP echo socket")?;
    echo.set_read_timeout(Some(Duration::from_millis(50)))
        .context("setting echo read timeout")?;
    let listener = lab
        .in_host(SERVER, || TcpListener::bind(tcp_target))?
        .context("binding TCP listener")?;
    listener
        .set_nonblocking(true)
        .context("making listener non-blocking")?;
    let client = lab
        .in_host(CLIENT, || UdpSocket::bind("0.0.0.0:0"))?
        .context("binding UDP client socket")?;

    let stop = AtomicBool::new(false);
    let mut rows = Vec::new();
    let result = std::thread::scope(|s| -> Result<()> {
        s.spawn(|| echo_loop(&echo, &stop));
        s.spawn(|| accept_loop(&listener, &stop));
        let r = (|| -> Result<()> {
            for (idx, &rtt) in opts.rtts.iter().enumerate() {
                lab.set_rtt(CLIENT, SERVER, rtt)?;
                // Let packets scheduled under the previous delay drain.
                std::thread::sleep(Duration::from_millis(20));
                lab.reset_hub_stats();
                let (sent, samples) = udp_probes(&client, udp_target, idx as u32, rtt, &opts)?;
                let late = lab.hub_stats().lateness;
                rows.push(summarize(ProbeKind::Udp, rtt, sent, samples, late));
                if opts.tcp_connects > 0 {
                    lab.reset_hub_stats();
                    let budget = opts.time_budget_per_rtt;
                    let n = opts.tcp_connects;
                    let samples =
                        lab.in_host(CLIENT, || tcp_connects(tcp_target, n, rtt, budget))?;
                    let late = lab.hub_stats().lateness;
                    rows.push(summarize(ProbeKind::TcpConnect, rtt, n, samples, late));
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        r
    });
    let hub = lab.hub_stats();
    let warnings = lab.warnings().to_vec();
    let down = lab.down();
    result?;
    down?;
    Ok(CheckReport {
        rows,
        hub,
        warnings,
    })
}

fn echo_loop(sock: &UdpSocket, stop: &AtomicBool) {
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, _)) => drop(conn),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Sends `opts.probes` pipelined UDP probes and returns (sent, RTT samples).
fn udp_probes(
    sock: &UdpSocket,
    target: SocketAddr,
    round: u32,
    rtt: Duration,
    opts: &CheckOptions,
) -> Result<(usize, Vec<Duration>)> {
    let n = opts.probes;
    let start = Instant::now();
    let hard_deadline = start + opts.time_budget_per_rtt;
    let sent_at: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; n]);
    let mut got: Vec<Option<Duration>> = vec![None; n];
    let rx = sock.try_clone().context("cloning UDP client socket")?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))
        .context("setting client read timeout")?;
    let grace = (rtt * 2 + Duration::from_millis(500)).min(Duration::from_secs(5));

    let sent = std::thread::scope(|s| -> Result<usize> {
        let sender = s.spawn(|| -> usize {
            let mut sent = 0;
            for i in 0..n {
                let at = start + opts.probe_interval * i as u32;
                if at >= hard_deadline {
                    break;
                }
                if let Some(d) = at.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                let mut pkt = [0u8; PROBE_LEN];
                pkt[..8].copy_from_slice(MAGIC);
                pkt[8..12].copy_from_slice(&round.to_be_bytes());
                pkt[12..16].copy_from_slice(&(i as u32).to_be_bytes());
                let now = Instant::now();
                sent_at.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(now);
                if sock.send_to(&pkt, target).is_ok() {
                    sent += 1;
                }
            }
            sent
        });
        let mut buf = [0u8; 2048];
        let mut received = 0;
        let mut last_send_done: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if received == n || now >= hard_deadline {
                break;
            }
            if last_send_done.is_none() && sender.is_finished() {
                last_send_done = Some(now);
            }
            if let Some(t) = last_send_done {
                if now >= t + grace {
                    break;
                }
            }
            let Ok(len) = rx.recv(&mut buf) else { continue };
            let arrived = Instant::now();
            if len != PROBE_LEN || &buf[..8] != MAGIC {
                continue;
            }
            let r = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
            let i = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]) as usize;
            if r != round || i >= n || got[i].is_some() {
                continue;
            }
            let sent_time = sent_at.lock().unwrap_or_else(|e| e.into_inner())[i];
            if let Some(t0) = sent_time {
                got[i] = Some(arrived - t0);
                received += 1;
            }
        }
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("probe sender thread panicked"))?;
        Ok(sent)
    })?;
    Ok((sent, got.into_iter().flatten().collect()))
}

/// Times `n` TCP connects (must run inside the client host).
fn tcp_connects(target: SocketAddr, n: usize, rtt: Duration, budget: Duration) -> Vec<Duration> {
    let start = Instant::now();
    let timeout = (rtt * 3 + Duration::from_millis(500)).min(Duration::from_secs(5));
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if start.elapsed() + timeout > budget {
            break;
        }
        let t0 = Instant::now();
        if let Ok(conn) = TcpStream::connect_timeout(&target, timeout) {
            out.push(t0.elapsed());
            drop(conn);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_tolerance() {
        let rtt = Duration::from_millis(100);
        assert_eq!(tolerance(rtt), Duration::from_micros(1500));
        let samples = (0..10)
            .map(|i| Duration::from_micros(100_200 + i * 100))
            .collect();
        let row = summarize(ProbeKind::Udp, rtt, 10, samples, LatenessStats::default());
        assert_eq!(row.received, 10);
        assert_eq!(row.median, Duration::from_micros(100_650));
        assert_eq!(row.p90, Duration::from_micros(101_000));
        assert_eq!(row.max, Duration::from_micros(101_100));
        assert!(row.pass);
        let bad = summarize(
            ProbeKind::Udp,
            rtt,
            10,
            vec![Duration::from_millis(103); 10],
            LatenessStats::default(),
        );
        assert!(!bad.pass);
        let lost = summarize(
            ProbeKind::Udp,
            rtt,
            10,
            vec![Duration::from_millis(100); 4],
            LatenessStats::default(),
        );
        assert!(!lost.pass);
        let report = CheckReport {
            rows: vec![row],
            hub: HubStats::default(),
            warnings: vec![],
        };
        let text = report.to_string();
        assert!(text.contains("| udp echo | 100 | 10/10 |"), "{text}");
        assert!(text.ends_with("overall: PASS"));
    }
}
