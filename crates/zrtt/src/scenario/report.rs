//! What every lab scenario writes: a markdown report (tables, the paper's
//! figures beside ours, notes), one SVG with its charts, and JSON with every
//! sample, plus the statistics and the progress bar they share.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// Order statistics of one set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    pub p5: f64,
    pub p95: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

/// The `q` quantile (0..=1) of sorted `v` by the nearest-rank method.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Summary {
    /// Statistics of `samples` (NaN everywhere when empty). The median of an
    /// even count is the mean of the two middle samples.
    pub fn of(samples: &[f64]) -> Summary {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Summary {
            n,
            median,
            mean: if n == 0 {
                f64::NAN
            } else {
                v.iter().sum::<f64>() / n as f64
            },
            p5: quantile(&v, 0.05),
            p95: quantile(&v, 0.95),
            p99: quantile(&v, 0.99),
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }

    pub fn to_json(self) -> Value {
        let f = |x: f64| {
            if x.is_finite() {
                json!(round3(x))
            } else {
                Value::Null
            }
        };
        json!({"n": self.n, "median": f(self.median), "mean": f(self.mean), "p5": f(self.p5),
               "p95": f(self.p95), "p99": f(self.p99), "min": f(self.min), "max": f(self.max)})
    }
}

/// `x` rounded to three decimals (for JSON).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A markdown table.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Columns right-aligned (numbers); by index.
    pub numeric: Vec<usize>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numeric: (1..headers.len()).collect(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn markdown(&self) -> String {
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

    pub fn to_json(&self) -> Value {
        json!({"title": self.title, "headers": self.headers, "rows": self.rows})
    }
}

/// One line or bar group of a chart; `None` is a missing value.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Drawn dashed/hatched: the paper's figures beside ours.
    pub reference: bool,
}

#[derive(Clone, Debug)]
pub enum Axis {
    /// Categories along x, one bar per series in each.
    Categories(Vec<String>),
    /// Numbers along x (lines), optionally on a log scale.
    Numbers { xs: Vec<f64>, log: bool },
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: Axis,
    pub series: Vec<Series>,
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const W: f64 = 900.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 95.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" upper bound and tick step for values up to `max`.
fn nice_scale(max: f64) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.2);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

impl Chart {
    /// The chart as an SVG group, drawn at vertical offset `y0`.
    fn svg(&self, y0: f64) -> String {
        let mut s = String::new();
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let max = self
            .series
            .iter()
            .flat_map(|r| r.values.iter().flatten())
            .copied()
            .fold(0.0f64, f64::max);
        let (ymax, step) = nice_scale(max);
        let y = |v: f64| y0 + TOP + ph - v / ymax * ph;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
            LEFT,
            y0 + 22.0,
            esc(&self.title)
        );
        // Grid and y ticks.
        let mut t = 0.0;
        while t <= ymax + step / 2.0 {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                y(t) + 4.0,
                fmt_tick(t),
                yy = y(t)
            );
            t += step;
        }
        let _ = writeln!(
            s,
            r#"<text transform="translate(16,{:.1}) rotate(-90)" font-size="12" text-anchor="middle">{}</text>"#,
            y0 + TOP + ph / 2.0,
            esc(&self.y_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            y0 + H - 12.0,
            esc(&self.x_label)
        );
        match &self.x {
            Axis::Categories(cats) => {
                let group = pw / cats.len().max(1) as f64;
                let nser = self.series.len().max(1) as f64;
                let bw = group * 0.8 / nser;
                // Long labels in narrow groups are slanted so they do not overlap.
                let slant = cats.iter().any(|c| c.len() as f64 * 6.5 > group);
                for (ci, c) in cats.iter().enumerate() {
                    let gx = LEFT + group * ci as f64;
                    let (lx, ly) = (gx + group / 2.0, y0 + TOP + ph + 16.0);
                    if slant {
                        let _ = writeln!(
                            s,
                            r#"<text x="{lx:.1}" y="{ly:.1}" font-size="10" text-anchor="end" transform="rotate(-25 {lx:.1} {ly:.1})">{}</text>"#,
                            esc(c)
                        );
                    } else {
                        let _ = writeln!(
                            s,
                            r#"<text x="{lx:.1}" y="{ly:.1}" font-size="11" text-anchor="middle">{}</text>"#,
                            esc(c)
                        );
                    }
                    for (si, ser) in self.series.iter().enumerate() {
                        let Some(v) = ser.values.get(ci).copied().flatten() else {
                            continue;
                        };
                        let x = gx + group * 0.1 + bw * si as f64;
                        let color = PALETTE[si % PALETTE.len()];
                        let style = if ser.reference {
                            format!(r#"fill="white" stroke="{color}" stroke-dasharray="4 2""#)
                        } else {
                            format!(r#"fill="{color}""#)
                        };
                        let _ = writeln!(
                            s,
                            r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" {style}><title>{}: {}</title></rect>"#,
                            y(v),
                            (bw - 1.0).max(1.0),
                            (y0 + TOP + ph - y(v)).max(0.0),
                            esc(&ser.name),
                            fmt_tick(v)
                        );
                    }
                }
            }
            Axis::Numbers { xs, log } => {
                let tx = |v: f64| if *log { v.max(1e-9).log10() } else { v };
                let (lo, hi) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| {
                    (a.min(tx(v)), b.max(tx(v)))
                });
                let span = if hi > lo { hi - lo } else { 1.0 };
                let x = |v: f64| LEFT + (tx(v) - lo) / span * pw;
                for &v in xs {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
                        x(v),
                        y0 + TOP + ph + 16.0,
                        fmt_tick(v)
                    );
                }
                for (si, ser) in self.series.iter().enumerate() {
                    let color = PALETTE[si % PALETTE.len()];
                    let pts: Vec<String> = xs
                        .iter()
                        .zip(&ser.values)
                        .filter_map(|(&xv, v)| v.map(|v| format!("{:.1},{:.1}", x(xv), y(v))))
                        .collect();
                    let dash = if ser.reference {
                        r#" stroke-dasharray="5 3""#
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        s,
                        r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                        pts.join(" ")
                    );
                    for p in &pts {
                        let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                        let _ =
                            writeln!(s, r#"<circle cx="{px}" cy="{py}" r="3" fill="{color}"/>"#);
                    }
                }
            }
        }
        // Legend.
        for (si, ser) in self.series.iter().enumerate() {
            let color = PALETTE[si % PALETTE.len()];
            let ly = y0 + TOP + 8.0 + 18.0 * si as f64;
            let lx = W - RIGHT + 14.0;
            let style = if ser.reference {
                format!(r#"fill="white" stroke="{color}" stroke-dasharray="3 2""#)
            } else {
                format!(r#"fill="{color}""#)
            };
            let _ = writeln!(
                s,
                r#"<rect x="{lx}" y="{:.1}" width="12" height="12" {style}/><text x="{}" y="{:.1}" font-size="11">{}</text>"#,
                ly - 10.0,
                lx + 18.0,
                ly,
                esc(&ser.name)
            );
        }
        s
    }

    pub fn to_json(&self) -> Value {
        let x = match &self.x {
            Axis::Categories(c) => json!({"categories": c}),
            Axis::Numbers { xs, log } => json!({"numbers": xs, "log": log}),
        };
        json!({
            "title": self.title, "x_label": self.x_label, "y_label": self.y_label, "x": x,
            "series": self.series.iter().map(|s| json!({
                "name": s.name, "reference": s.reference,
                "values": s.values.iter().map(|v| v.map(round3)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

fn fmt_tick(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// All charts of a report in one SVG document, stacked vertically.
pub fn svg_document(charts: &[Chart]) -> String {
    let height = H * charts.len().max(1) as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif">"#
    );
    s.push('\n');
    s.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    s.push('\n');
    for (i, c) in charts.iter().enumerate() {
        s.push_str(&c.svg(H * i as f64));
    }
    s.push_str("</svg>\n");
    s
}

/// One scenario's results.
#[derive(Debug, Default)]
pub struct Report {
    /// File stem: `<out>/<name>.md`, `.svg`, `.json`.
    pub name: String,
    pub title: String,
    /// How it was run: machine, command, parameters (bullet lines).
    pub setup: Vec<String>,
    pub tables: Vec<Table>,
    pub charts: Vec<Chart>,
    /// The honest reading, below the tables.
    pub notes: Vec<String>,
    /// Raw samples and anything else worth keeping.
    pub data: Value,
}

impl Report {
    pub fn new(name: &str, title: &str) -> Report {
        Report {
            name: name.into(),
            title: title.into(),
            data: json!({}),
            ..Report::default()
        }
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("## {}\n\n", self.title);
        for l in &self.setup {
            let _ = writeln!(s, "- {l}");
        }
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
        crate::util::write_atomic(&md, self.markdown().as_bytes(), false)?;
        out.push(md);
        let js = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.to_json())? + "\n";
        crate::util::write_atomic(&js, text.as_bytes(), false)?;
        out.push(js);
        if !self.charts.is_empty() {
            let svg = dir.join(format!("{}.svg", self.name));
            crate::util::write_atomic(&svg, svg_document(&self.charts).as_bytes(), false)?;
            out.push(svg);
        }
        Ok(out)
    }
}

/// A progress bar on stderr: redrawn in place on a terminal, one line per
/// tenth of the work otherwise (logs stay short).
pub struct Progress {
    total: usize,
    done: usize,
    label: String,
    tty: bool,
    started: Instant,
    last_tenth: usize,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Progress {
        Progress {
            total: total.max(1),
            done: 0,
            label: label.into(),
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last_tenth: 0,
        }
    }

    /// One unit of work done; `what` says what is running now.
    pub fn tick(&mut self, what: &str) {
        self.done = (self.done + 1).min(self.total);
        let frac = self.done as f64 / self.total as f64;
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = if self.done > 0 {
            elapsed / self.done as f64 * (self.total - self.done) as f64
        } else {
            0.0
        };
        let width = 30;
        let filled = (frac * width as f64).round() as usize;
        let line = format!(
            "{} [{}{}] {}/{} {:>3.0}% eta {:.0}s {}",
            self.label,
            "#".repeat(filled),
            ".".repeat(width - filled),
            self.done,
            self.total,
            frac * 100.0,
            eta,
            what
        );
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K{line}");
            if self.done == self.total {
                let _ = writeln!(e);
            }
        } else {
            let tenth = (frac * 10.0).floor() as usize;
            if tenth > self.last_tenth || self.done == self.total {
                self.last_tenth = tenth;
                let _ = writeln!(e, "{line}");
            }
        }
        let _ = e.flush();
    }

    /// A message on its own line, not disturbing the bar.
    pub fn note(&self, msg: &str) {
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[2K");
        }
        let _ = writeln!(e, "{msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            (s.n, s.median, s.mean, s.min, s.max),
            (5, 3.0, 3.0, 1.0, 5.0)
        );
        let even = Summary::of(&[1.0, 2.0, 3.0, 10.0]);
        assert_eq!(even.median, 2.5);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Summary::of(&v);
        assert_eq!((p.p5, p.p95, p.p99), (5.0, 95.0, 99.0));
        let e = Summary::of(&[f64::NAN]);
        assert_eq!(e.n, 0);
        assert!(e.median.is_nan());
        assert_eq!(e.to_json()["median"], Value::Null);
    }

    #[test]
    fn nice_scales() {
        assert_eq!(nice_scale(3.1), (4.0, 1.0));
        assert_eq!(nice_scale(606.7), (800.0, 200.0));
        assert_eq!(nice_scale(95.0), (100.0, 20.0));
        assert_eq!(nice_scale(0.0), (1.0, 0.2));
    }

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
    }
}
