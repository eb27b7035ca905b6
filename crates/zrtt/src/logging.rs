//! Diagnostics on stderr through `tracing`, for every subcommand.
//!
//! `RUST_LOG` wins when set, in `tracing_subscriber`'s `Targets` syntax
//! (`info`, `zrtt_net=debug,warn`, ...); otherwise the subcommand's
//! `--log-level` (default `info`) applies to zrtt's own crates, and the
//! DNS libraries (hickory) log only warnings unless the level is `debug`.
//! What a command prints as its result (records, bodies, `get -v`'s
//! curl-style trace, `listening ...` lines) stays on stdout/stderr as it is.

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines look: servers stamp the time, one-shot commands do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Long-running roles (gateway, dns, pv serve, proxy): time and target.
    Service,
    /// One-shot commands: level and message only.
    Command,
}

/// The filter for `level` when `RUST_LOG` is not set.
fn default_filter(level: Level) -> Targets {
    let lib_level = if level >= Level::DEBUG {
        LevelFilter::from_level(level)
    } else {
        LevelFilter::WARN
    };
    Targets::new()
        .with_target("hickory_server", lib_level)
        .with_target("hickory_proto", lib_level)
        .with_target("hickory_net", lib_level)
        .with_target("hickory_resolver", lib_level)
        .with_default(LevelFilter::from_level(level))
}

/// Parses `RUST_LOG` if it is set; a malformed value is an error naming it.
fn env_filter() -> anyhow::Result<Option<Targets>> {
    match std::env::var("RUST_LOG") {
        Ok(s) if !s.trim().is_empty() => s
            .parse::<Targets>()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("RUST_LOG={s:?}: {e}")),
        _ => Ok(None),
    }
}

/// Installs the subscriber once for the process.
pub fn init(level: Level, style: Style) -> anyhow::Result<()> {
    let filter = match env_filter()? {
        Some(f) => f,
        None => default_filter(level),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests calling `run` twice) keeps the first subscriber.
    let _ = match style {
        Style::Service => registry.with(fmt).try_init(),
        Style::Command => registry
            .with(fmt.without_time().with_target(false))
            .try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keeps_hickory_quiet_below_debug() {
        let f = default_filter(Level::INFO);
        assert!(f.would_enable("zrtt_net::gateway", &Level::INFO));
        assert!(!f.would_enable("zrtt_net::gateway", &Level::DEBUG));
        assert!(!f.would_enable("hickory_server::server", &Level::INFO));
        assert!(f.would_enable("hickory_server::server", &Level::WARN));
        let f = default_filter(Level::DEBUG);
        assert!(f.would_enable("hickory_server::server", &Level::DEBUG));
    }

    #[test]
    fn rust_log_syntax_parses_and_bad_values_are_errors() {
        let f: Targets = "zrtt_net=debug,warn".parse().unwrap();
        assert!(f.would_enable("zrtt_net::gateway::gate", &Level::DEBUG));
        assert!(!f.would_enable("zrtt::gateway", &Level::INFO));
        assert!("zrtt_net=loud".parse::<Targets>().is_err());
    }
}
