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
