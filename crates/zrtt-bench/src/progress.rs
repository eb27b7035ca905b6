//! A scenario's progress bar, drawn on the caller's [`Console`].

use std::time::Instant;

use crate::Console;

/// A progress bar: redrawn in place on a terminal, one line per tenth of
/// the work otherwise (logs stay short).
pub(crate) struct Progress {
    console: Console,
    total: usize,
    done: usize,
    label: String,
    started: Instant,
    last_tenth: usize,
}

impl Progress {
    pub(crate) fn new(console: &Console, label: &str, total: usize) -> Progress {
        Progress {
            console: console.clone(),
            total: total.max(1),
            done: 0,
            label: label.into(),
            started: Instant::now(),
            last_tenth: 0,
        }
    }

    /// One unit of work done; `what` says what is running now.
    pub(crate) fn tick(&mut self, what: &str) {
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
        let tenth = (frac * 10.0).floor() as usize;
        let finished = self.done == self.total;
        let log_line = tenth > self.last_tenth || finished;
        if !self.console.is_tty() && log_line {
            self.last_tenth = tenth;
        }
        self.console.write(|w, tty| {
            if tty {
                write!(w, "\r\x1b[2K{line}")?;
                if finished {
                    writeln!(w)?;
                }
            } else if log_line {
                writeln!(w, "{line}")?;
            }
            Ok(())
        });
    }

    /// A message on its own line, not disturbing the bar.
    pub(crate) fn note(&self, msg: &str) {
        self.console.line(msg);
    }
}

/// The measurements of a run that failed: each shown as it happens, all
/// listed in the report's notes.
pub(crate) struct Failures {
    scenario: &'static str,
    list: Vec<String>,
}

impl Failures {
    pub(crate) fn new(scenario: &'static str) -> Failures {
        Failures {
            scenario,
            list: Vec::new(),
        }
    }

    /// One failure, shown below the progress bar.
    pub(crate) fn record(&mut self, progress: &Progress, msg: String) {
        progress.note(&format!("{}: {msg}", self.scenario));
        self.list.push(msg);
    }

    /// Fails the run when more than `max` measurements failed.
    pub(crate) fn at_most(&self, max: usize, what: &str) -> anyhow::Result<()> {
        if self.list.len() > max {
            anyhow::bail!("{what}: {}", self.list.join("; "));
        }
        Ok(())
    }

    /// The report's note listing the failures of `what` (none: no note).
    pub(crate) fn note(&self, what: &str) -> Option<String> {
        (!self.list.is_empty()).then(|| {
            format!(
                "Failed {what} ({}): {}",
                self.list.len(),
                self.list.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_log_gets_a_line_per_tenth_and_the_notes() {
        let out = Shared::default();
        let mut p = Progress::new(&Console::new(out.clone(), false), "ladder", 100);
        for i in 0..100 {
            p.tick(&format!("step {i}"));
            if i == 4 {
                p.note("ladder: a failure");
            }
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 11, "{text}");
        assert_eq!(lines[0], "ladder: a failure");
        assert!(lines[1].starts_with("ladder [###"), "{}", lines[1]);
        assert!(
            lines[10].contains(" 100/100 100% eta 0s step 99"),
            "{}",
            lines[10]
        );
    }

    #[test]
    fn failures_bound_a_run_and_make_one_note() {
        let progress = Progress::new(&Console::default(), "t", 3);
        let mut f = Failures::new("t");
        assert!(f.note("fetches").is_none());
        f.record(&progress, "a: refused".into());
        f.record(&progress, "b: timed out".into());
        assert!(f.at_most(2, "too many").is_ok());
        let e = f.at_most(1, "too many").unwrap_err();
        assert_eq!(e.to_string(), "too many: a: refused; b: timed out");
        assert_eq!(
            f.note("fetches").unwrap(),
            "Failed fetches (2): a: refused; b: timed out"
        );
    }
}
