//! `zrtt demo`: the main job (crate `zrtt-bench`, module `demo`): flags in,
//! the table on stdout, steps on stderr, JSON to a file if asked.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use zrtt_bench::demo::DemoOpts;

use crate::util;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Round-trip time between client and server, milliseconds.
    #[arg(long, default_value_t = DemoOpts::default().rtt_ms)]
    rtt_ms: u64,
    /// Fetches per row; the table shows medians.
    #[arg(long, default_value_t = DemoOpts::default().runs)]
    runs: usize,
    /// Keep the working directory (keys, configs, logs) instead of deleting it.
    #[arg(long)]
    keep: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    let opts = DemoOpts {
        rtt_ms: a.rtt_ms,
        runs: a.runs,
        keep: a.keep,
    };
    let report = zrtt_bench::demo::run(&crate::lab::bench()?, &opts)?;
    print!("{}", report.text());
    if let Some(path) = &a.json {
        util::write_atomic(path, report.json().as_bytes(), false)?;
    }
    Ok(ExitCode::SUCCESS)
}
