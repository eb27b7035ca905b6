//! Lab scenarios (`zrtt lab ladder|…`): each builds its own emulated WAN
//! with real peers, measures, tears everything down, and writes a markdown
//! table, an SVG and JSON beside the paper's figures (see [`report`]).

pub mod asap;
pub mod ladder;
pub mod plt;
pub mod report;
pub mod stack;
pub mod throughput;
pub mod ztls;

use std::process::Command;

/// The machine a run happened on, for the report's setup lines.
pub fn machine_lines() -> Vec<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let version = |prog: &str, args: &[&str]| -> String {
        Command::new(prog)
            .args(args)
            .output()
            .ok()
            .map(|o| {
                let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
                t.push_str(&String::from_utf8_lossy(&o.stderr));
                // "curl 7.88.1 (x86_64…) libcurl/…": the first two words.
                let first = t.lines().next().unwrap_or("").trim();
                first
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "absent".into())
    };
    vec![
        format!(
            "Machine: {cpu}, {cores} cores, Linux {kernel}; run {}.",
            crate::util::fmt_time(crate::util::now().as_secs())
        ),
        format!(
            "Peers: {}; {}; {}; zrtt {}.",
            version("nginx", &["-v"]),
            version("curl", &["--version"]),
            version("openssl", &["version"]),
            env!("CARGO_PKG_VERSION")
        ),
    ]
}
