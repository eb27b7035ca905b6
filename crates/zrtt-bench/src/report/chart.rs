//! Charts: bars by category or lines over numbers, drawn as SVG, the
//! papers' figures dashed beside ours.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::round3;

/// One line or bar group of a chart; `None` is a missing value.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) values: Vec<Option<f64>>,
    /// Drawn dashed/hatched: the paper's figures beside ours.
    pub(crate) reference: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum Axis {
    /// Categories along x, one bar per series in each.
    Categories(Vec<String>),
    /// Numbers along x (lines), optionally on a log scale.
    Numbers { xs: Vec<f64>, log: bool },
}

#[derive(Clone, Debug)]
pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) x: Axis,
    pub(crate) series: Vec<Series>,
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

    pub(crate) fn to_json(&self) -> Value {
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
pub(crate) fn svg_document(charts: &[Chart]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_scales() {
        assert_eq!(nice_scale(3.1), (4.0, 1.0));
        assert_eq!(nice_scale(606.7), (800.0, 200.0));
        assert_eq!(nice_scale(95.0), (100.0, 20.0));
        assert_eq!(nice_scale(0.0), (1.0, 0.2));
    }
}
