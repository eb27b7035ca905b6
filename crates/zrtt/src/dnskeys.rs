//! Flags shared by the clients of the binary (`zrtt get`, `zrtt proxy`)
//! and the DNS users (`--dns-server`). What they configure lives in the
//! library: `zrtt_net::client` (with `DnsKeySource`), `zrtt_net::verifier::DnsVerifiers`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

pub fn parse_dns_server(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| {
            s.trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .map_err(|_| format!("{s:?}: use ADDR or ADDR:PORT"))
}

/// How the client may use zrtt, shared by `zrtt get` and `zrtt proxy`.
#[derive(clap::Args, Debug)]
pub struct ClientFlags {
    /// Do not put the first flight in the SYN.
    #[arg(long)]
    no_fast_open: bool,
    /// Never send the request as early data.
    #[arg(long)]
    no_early_data: bool,
    /// Do not fall back to TLS for hosts with a key (`get` fails, `proxy` answers 502).
    #[arg(long)]
    zrtt_only: bool,
    /// Speak HTTP/2 inside zrtt to gateways whose key record says they
    /// serve it (flag `h2`): one connection carries all of a host's
    /// requests; HTTP/1.1 elsewhere.
    #[arg(long)]
    http2: bool,
    /// Address tokens (and the per-server static keys they are bound to),
    /// loaded at start and saved after use: a gateway issues one after a
    /// first visit, and a later visit from the same address that carries
    /// it is answered before the TCP handshake completes. Default
    /// `$XDG_STATE_HOME/zrtt/tokens` (else `~/.local/state/zrtt/tokens`);
    /// the file holds private keys (mode 0600, directory 0700).
    #[arg(long, conflicts_with = "no_state")]
    token_state: Option<PathBuf>,
    /// Keep no token state between runs (every visit is a first visit).
    #[arg(long)]
    no_state: bool,
    /// The DNS shortcut (docs/DNS.md §8): a GET or HEAD without a body to
    /// a host whose key record is held but whose address is not known also
    /// goes inside a DNS query (TXT under `zq.<host>`), answered by the
    /// gateway's SDNS through the resolver; raced against the plain lookup
    /// and connection, whichever answers first. The backend may then run
    /// the request twice (both marked `Early-Data: 1`).
    #[arg(long)]
    dns_shortcut: bool,
    /// Ask for and use no zrtt resumption tickets (docs/PROTOCOL.md §12;
    /// with token state, tickets are kept there and each used once).
    #[arg(long)]
    no_resume: bool,
}

/// The per-user state directory: `$XDG_STATE_HOME/zrtt`, else
/// `$HOME/.local/state/zrtt` (the XDG base directory rules; relative
/// values are ignored as the specification says).
pub fn state_dir() -> Option<PathBuf> {
    let abs = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_STATE_HOME")
        .and_then(abs)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(abs)
                .map(|h| h.join(".local/state"))
        })
        .map(|d| d.join("zrtt"))
}

impl ClientFlags {
    /// Where token state lives: `--token-state`, else the per-user default
    /// (created mode 0700 when missing); `None` with `--no-state` or when
    /// no home directory is known.
    pub fn token_state(&self) -> std::io::Result<Option<PathBuf>> {
        if self.no_state {
            return Ok(None);
        }
        if let Some(p) = &self.token_state {
            return Ok(Some(p.clone()));
        }
        let Some(dir) = state_dir() else {
            tracing::info!("no token state: neither XDG_STATE_HOME nor HOME is set");
            return Ok(None);
        };
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(b.recursive(true), 0o700);
        b.create(&dir)?;
        Ok(Some(dir.join("tokens")))
    }

    /// `--dns-shortcut`.
    pub fn dns_shortcut(&self) -> bool {
        self.dns_shortcut
    }

    /// `--no-state`: keep nothing between runs.
    pub fn no_state(&self) -> bool {
        self.no_state
    }

    /// Where provenance certificates live when no `--provenance-state` is
    /// given: `provenance` next to the default token state; `None` with
    /// `--no-state` or `--token-state` (an explicit state file names no
    /// directory to keep others in) or when no home directory is known.
    pub fn provenance_state(&self) -> std::io::Result<Option<PathBuf>> {
        if self.no_state || self.token_state.is_some() {
            return Ok(None);
        }
        Ok(self.token_state()?.map(|t| t.with_file_name("provenance")))
    }

    /// Set these choices on a client config.
    pub fn apply(&self, cfg: &mut zrtt_net::client::ClientConfig) {
        cfg.fast_open = !self.no_fast_open;
        cfg.resume = !self.no_resume;
        cfg.tls_fallback = !self.zrtt_only;
        cfg.dns_shortcut = self.dns_shortcut;
        if self.no_early_data {
            cfg.early_data = zrtt_net::client::EarlyDataPolicy::Never;
        }
        if self.http2 {
            cfg.http2 = zrtt_net::client::Http2Policy::WhenAdvertised;
        }
    }
}
