//! `zrtt lab`: the emulated wide-area lab (crate `zrtt-lab`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Measure the lab's own accuracy: UDP echo and TCP connect times through
    /// the delay hub against the configured RTT (target: within 1% + 0.5 ms).
    /// Exits 1 if any RTT misses the target.
    Check {
        /// Round-trip times to check, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = "20,100,200")]
        rtt: Vec<u64>,
        /// UDP echo probes per RTT.
        #[arg(long, default_value_t = 50)]
        probes: usize,
        /// TCP handshakes per RTT (0 disables the TCP rows).
        #[arg(long, default_value_t = 10)]
        tcp_connects: usize,
        /// How long before a deadline the hub stops sleeping and spins, microseconds.
        #[arg(long, default_value_t = 1000)]
        spin_us: u64,
        /// Do not give the hub real-time (SCHED_FIFO) priority, to see what it buys.
        #[arg(long)]
        no_realtime: bool,
    },
    /// Remove namespaces left by crashed lab runs (those whose owner process is gone).
    Clean,
}

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    if !zrtt_lab::is_root() {
        bail!("the lab creates network namespaces and TUN devices: run it as root");
    }
    match cmd {
        LabCommand::Check {
            rtt,
            probes,
            tcp_connects,
            spin_us,
            no_realtime,
        } => {
            let opts = zrtt_lab::CheckOptions {
                rtts: rtt.into_iter().map(Duration::from_millis).collect(),
                probes,
                tcp_connects,
                spin_margin: Duration::from_micros(spin_us),
                realtime_priority: if no_realtime { None } else { Some(50) },
                ..zrtt_lab::CheckOptions::default()
            };
            eprintln!(
                "zrtt lab check: {} RTT(s), {} probes each ...",
                opts.rtts.len(),
                opts.probes
            );
            let report = zrtt_lab::run_check(opts)?;
            println!("{report}");
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        LabCommand::Clean => {
            let removed = zrtt_lab::cleanup_stale_namespaces()?;
            if removed.is_empty() {
                println!("no stale zrtt namespaces");
            } else {
                println!("removed {}", removed.join(" "));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
