//! What every lab scenario writes: a markdown report (tables, the paper's
//! figures beside ours, notes), one SVG with its charts, and JSON with every
//! sample. Fixed prose (methods, readings) lives in docs/LAB.md; a report
//! links to its section and keeps only text computed from the measurement.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::{json, Value};

mod chart;
mod stats;

pub(crate) use chart::{svg_document, Axis, Chart, Series};
pub(crate) use stats::{round3, Summary};

/// One scenario's results: what `zrtt lab <name>` writes and prints.
#[derive(Debug, Default)]
pub struct Report {
    /// File stem: `<out>/<name>.md`, `.svg`, `.json`.
    pub(crate) name: String,
    pub(crate) title: String,
    /// How it was run: machine, command, parameters (bullet lines).
    pub(crate) setup: Vec<String>,
    pub(crate) tables: Vec<Table>,
    pub(crate) charts: Vec<Chart>,
    /// The reading computed from the measurement, below the tables.
    pub(crate) notes: Vec<String>,
    /// Raw samples and anything else worth keeping.
    pub(crate) data: Value,
}

impl Report {
    /// An empty report for scenario `name` (also its file stem and its
    /// section in docs/LAB.md).
    pub(crate) fn new(name: &str, title: &str) -> Report {
        Report {
            name: name.into(),
            title: title.into(),
            data: json!({}),
            ..Report::default()
        }
    }

    /// The scenario's name: the stem of the files [`Report::write`] writes.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The setup lines every scenario starts with: the machine and the
    /// peers' versions.
    pub(crate) fn standard_setup(&mut self) {
        self.setup = machine_lines();
    }

    /// The report as markdown (a `##` section). The setup ends with a link
    /// to the scenario's section in docs/LAB.md, relative to docs/results/
    /// where scripts/results.sh writes (scripts/results-splice.py rewrites
    /// it for docs/RESULTS.md).
    pub fn markdown(&self) -> String {
        let mut s = format!("## {}\n\n", self.title);
        for l in &self.setup {
            let _ = writeln!(s, "- {l}");
        }
        let _ = writeln!(
            s,
            "- Method and reading: [docs/LAB.md#{0}](../LAB.md#{0}).",
            self.name
        );
        s.push('\n');
        for t in &self.tables {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        if !self.charts.is_empty() {
            let _ = writeln!(s, "![{}]({}.svg)\n", self.name, self.name);
        }
        for n in &self.notes {
            let _ = writeln!(s, "{n}\n");
        }
        s
    }

    /// The report as JSON: setup, tables, charts, notes, and every sample.
    pub fn to_json(&self) -> Value {
        json!({
            "scenario": self.name, "title": self.title, "setup": self.setup,
            "tables": self.tables.iter().map(Table::to_json).collect::<Vec<_>>(),
            "charts": self.charts.iter().map(Chart::to_json).collect::<Vec<_>>(),
            "notes": self.notes, "data": self.data,
        })
    }

    /// Writes `<dir>/<name>.md`, `.json` and (with charts) `.svg`; returns the paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut out = Vec::new();
        let md = dir.join(format!("{}.md", self.name));
        write_file(&md, self.markdown().as_bytes())?;
        out.push(md);
        let js = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.to_json())? + "\n";
        write_file(&js, text.as_bytes())?;
        out.push(js);
        if !self.charts.is_empty() {
            let svg = dir.join(format!("{}.svg", self.name));
            write_file(&svg, svg_document(&self.charts).as_bytes())?;
            out.push(svg);
        }
        Ok(out)
    }
}

/// Writes a result file atomically (the key store's writer).
pub(crate) fn write_file(path: &Path, data: &[u8]) -> Result<()> {
    zrtt_dns::fsutil::write_atomic(path, data, false)
        .with_context(|| format!("writing {}", path.display()))
}

/// The machine a run happened on, for the report's setup lines.
fn machine_lines() -> Vec<String> {
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
    // The lab's namespaces inherit it (docs/LAB.md): every stack's TCP.
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
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
            "Machine: {cpu}, {cores} cores, Linux {kernel}, TCP congestion control {cc}; run {}.",
            zrtt_dns::fmt_time(zrtt_net::client::system_clock().as_secs())
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

/// A markdown table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    /// Columns right-aligned (numbers); by index.
    pub(crate) numeric: Vec<usize>,
}

impl Table {
    pub(crate) fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numeric: (1..headers.len()).collect(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn markdown(&self) -> String {
        let mut s = String::new();
        if !self.title.is_empty() {
            let _ = writeln!(s, "**{}**\n", self.title);
        }
        let _ = writeln!(s, "| {} |", self.headers.join(" | "));
        let aligns: Vec<&str> = (0..self.headers.len())
            .map(|i| {
                if self.numeric.contains(&i) {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        let _ = writeln!(s, "|{}|", aligns.join("|"));
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"title": self.title, "headers": self.headers, "rows": self.rows})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_files() {
        let mut t = Table::new("t", &["stack", "ms"]);
        t.row(vec!["TLS 1.3".into(), "305.8".into()]);
        let md = t.markdown();
        assert!(
            md.contains("| stack | ms |\n|---|---:|\n| TLS 1.3 | 305.8 |"),
            "{md}"
        );
        let mut r = Report::new("x", "X");
        r.tables.push(t);
        r.charts.push(Chart {
            title: "c <1>".into(),
            x_label: "rtt".into(),
            y_label: "ms".into(),
            x: Axis::Categories(vec!["20".into(), "100".into()]),
            series: vec![
                Series {
                    name: "ours".into(),
                    values: vec![Some(1.0), None],
                    reference: false,
                },
                Series {
                    name: "paper".into(),
                    values: vec![Some(2.0), Some(3.0)],
                    reference: true,
                },
            ],
        });
        r.charts.push(Chart {
            title: "lines".into(),
            x_label: "KB".into(),
            y_label: "ms".into(),
            x: Axis::Numbers {
                xs: vec![1.0, 10.0, 100.0],
                log: true,
            },
            series: vec![Series {
                name: "a".into(),
                values: vec![Some(1.0), Some(2.0), Some(4.0)],
                reference: false,
            }],
        });
        let dir = tempfile::tempdir().unwrap();
        let files = r.write(dir.path()).unwrap();
        assert_eq!(files.len(), 3);
        let svg = std::fs::read_to_string(dir.path().join("x.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("c &lt;1&gt;"));
        // Three bars (one value missing) and three line points.
        assert_eq!(
            svg.matches("<rect x=").count(),
            3 + 3,
            "bars + legend squares"
        );
        assert_eq!(svg.matches("<circle").count(), 3);
        let js: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("x.json")).unwrap())
                .unwrap();
        assert_eq!(js["tables"][0]["rows"][0][1], "305.8");
        assert_eq!(js["charts"][0]["series"][0]["values"][1], Value::Null);
        let md = std::fs::read_to_string(dir.path().join("x.md")).unwrap();
        assert!(md.contains("![x](x.svg)"));
        assert!(md.contains("- Method and reading: [docs/LAB.md#x](../LAB.md#x)."));
    }
}
