//! zrtt-bench: the lab scenarios (`zrtt lab ladder|ztls|asap|plt|browser|throughput|faults`)
//! and the demo (`zrtt demo`), as a library the `zrtt` binary calls.
//!
//! Each scenario builds its own emulated WAN ([`zrtt_lab`]) with real peers
//! (nginx, curl, openssl, ngtcp2, unbound, and `zrtt` itself for gateways,
//! clients, verifiers and DNS), measures, tears everything down, and returns a
//! [`Report`]: a markdown table, an SVG and JSON beside the papers' figures.
//!
//! - [`ladder`], [`ztls`], [`asap`], [`plt`], [`browser`], [`throughput`], [`faults`]: one module per
//!   scenario, each with an options struct (`Default` holds the documented
//!   defaults) and `run`; [`demo`] likewise returns a [`demo::DemoReport`].
//! - `stack`: the one builder for a site's server side (backend nginx, TLS
//!   nginx baseline, zrtt gateways, provenance verifiers) that every
//!   scenario and the demo use.
//! - `report`: statistics, tables, charts, and the files a [`Report`]
//!   writes.
//!
//! The caller decides where messages go: progress and status lines go to
//! the [`Console`] in [`Bench`], results come back as values. How each
//! scenario is built and how to read it is in `docs/LAB.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

mod admin_page;
pub mod asap;
pub mod browser;
mod client;
pub mod demo;
pub mod faults;
pub mod fleet;
pub mod ladder;
pub mod plt;
mod proc;
mod progress;
mod report;
pub mod sidecar;
pub mod soak;
mod stack;
pub mod throughput;
pub mod ztls;

pub use report::Report;

/// What every scenario needs from the program that runs it, besides its
/// options.
#[derive(Clone, Debug)]
pub struct Bench {
    /// The `zrtt` executable the lab's hosts run (`zrtt gateway`, `zrtt get`,
    /// `zrtt verifier`, `zrtt dns`, `zrtt keys cert`); the binary passes itself.
    pub zrtt: PathBuf,
    /// Where progress and status lines go.
    pub console: Console,
}

impl Bench {
    /// Runs `zrtt` from the given path, with no progress output.
    pub fn new(zrtt: impl Into<PathBuf>) -> Bench {
        Bench {
            zrtt: zrtt.into(),
            console: Console::default(),
        }
    }

    /// The same, with progress and status lines sent to `console`.
    pub fn with_console(mut self, console: Console) -> Bench {
        self.console = console;
        self
    }
}

/// Where a run's progress bar and status lines go (the caller's choice): a
/// terminal (the bar is redrawn in place), a log (a line per tenth of the
/// work), or nowhere (the default). Cheap to clone; clones share the writer.
#[derive(Clone, Default)]
pub struct Console {
    out: Option<Arc<Mutex<Box<dyn Write + Send>>>>,
    tty: bool,
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field("enabled", &self.out.is_some())
            .field("tty", &self.tty)
            .finish()
    }
}

impl Console {
    /// Lines go to `out`; `tty` says whether it is a terminal.
    pub fn new(out: impl Write + Send + 'static, tty: bool) -> Console {
        Console {
            out: Some(Arc::new(Mutex::new(Box::new(out)))),
            tty,
        }
    }

    /// Whether `out` is a terminal (progress redrawn in place).
    pub fn is_tty(&self) -> bool {
        self.tty
    }

    /// A message on its own line (clearing a progress bar being drawn).
    pub fn line(&self, msg: &str) {
        self.write(|w, tty| {
            if tty {
                write!(w, "\r\x1b[2K")?;
            }
            writeln!(w, "{msg}")
        });
    }

    /// Runs `f` on the writer, if there is one; write errors are ignored
    /// (progress is not worth failing a run for).
    pub(crate) fn write(&self, f: impl FnOnce(&mut dyn Write, bool) -> std::io::Result<()>) {
        if let Some(out) = &self.out {
            let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
            let _ = f(&mut **w, self.tty);
            let _ = w.flush();
        }
    }
}
