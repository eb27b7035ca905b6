//! `zrtt gateway --root DIR`: the default site's backend is a directory
//! the gateway serves itself (docs/GATEWAY.md, Static files).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use zrtt_net::gateway::{Backend, StaticRoot};

#[derive(Args, Debug)]
pub(super) struct RootArgs {
    /// Serve the files of this directory instead of proxying to a backend
    /// (docs/GATEWAY.md, Static files): content types, ranges, conditional
    /// requests, HEAD; no directory listing.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    root: Option<PathBuf>,
    /// With --root: answer a directory with its `index.html` (else 404).
    #[arg(long, requires = "root")]
    root_index: bool,
    /// With --root: follow symbolic links whose target is outside the
    /// directory (else 403).
    #[arg(long, requires = "root")]
    root_outside_links: bool,
}

impl RootArgs {
    /// With --root, the default site's only backend is its directory.
    pub(super) fn apply(&self, backends: &mut Vec<Backend>) {
        if let Some(dir) = &self.root {
            let mut root = StaticRoot::new(dir);
            root.index = self.root_index;
            root.outside_links = self.root_outside_links;
            *backends = vec![root.into()];
        }
    }
}

/// Every served directory exists (checked before anything starts, for
/// --check-config too).
pub(super) fn check<'a>(backends: impl IntoIterator<Item = &'a Backend>) -> Result<()> {
    for b in backends {
        if let Some(root) = b.files() {
            if !root.dir.is_dir() {
                bail!("{}: not a directory (--root)", root.dir.display());
            }
        }
    }
    Ok(())
}
