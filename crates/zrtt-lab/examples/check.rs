//! Runs the lab accuracy check and prints the report.
//!
//! `cargo run -p zrtt-lab --example check [--release] -- [PROBES] [RTT_MS...]`
//! (needs root). Environment knobs for experiments: `ZRTT_LAB_NO_RT=1`
//! (no SCHED_FIFO), `ZRTT_LAB_SPIN_US=N` (spin margin in µs, default 1000).

use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut opts = zrtt_lab::CheckOptions::default();
    if let Some(p) = args.next() {
        opts.probes = p.parse()?;
    }
    if std::env::var_os("ZRTT_LAB_NO_RT").is_some() {
        opts.realtime_priority = None;
    }
    if let Ok(us) = std::env::var("ZRTT_LAB_SPIN_US") {
        opts.spin_margin = Duration::from_micros(us.parse()?);
    }
    let rtts: Vec<Duration> = args
        .map(|a| a.parse::<u64>().map(Duration::from_millis))
        .collect::<Result<_, _>>()?;
    if !rtts.is_empty() {
        opts.rtts = rtts;
    }
    let report = zrtt_lab::run_check(opts)?;
    println!("{report}");
    if !report.passed() {
        std::process::exit(1);
    }
    Ok(())
}
