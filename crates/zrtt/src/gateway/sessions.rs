//! `zrtt gateway` flags for TLS sessions (docs/GATEWAY.md, TLS sessions):
//! how long one is kept for resumption, in this process, across a restart
//! and in a fleet's Redis (docs/FLEET.md).

use std::time::Duration;

use clap::Args;
use zrtt_net::gateway::{config::TLS_SESSION_CACHE, GatewayConfig, TlsSessions};

use crate::util;

#[derive(Args, Debug)]
pub(super) struct SessionArgs {
    /// How long a TLS session may be resumed (and is kept in the replay
    /// store's Redis with --replay-store: each session costs memory there
    /// for this long); a client coming back later gets a full handshake
    /// (nginx `ssl_session_timeout`, also 5 minutes by default). At most 1d.
    #[arg(long, default_value = "5m", value_parser = util::parse_duration)]
    tls_session_ttl: Duration,
}

impl SessionArgs {
    /// Set these in `cfg`; `token_lifetime` is how long a retired token
    /// key still opens what it sealed (TLS sessions are sealed under a key
    /// derived from it).
    pub(super) fn apply(
        &self,
        cfg: &mut GatewayConfig,
        token_lifetime: Duration,
    ) -> anyhow::Result<()> {
        let day = Duration::from_secs(24 * 3600);
        if self.tls_session_ttl.is_zero() || self.tls_session_ttl > day {
            anyhow::bail!(
                "--tls-session-ttl: above 0 and at most 1d (the lifetime rustls gives clients)"
            );
        }
        if self.tls_session_ttl > token_lifetime {
            tracing::warn!(
                "--tls-session-ttl {:?} is above --token-lifetime {token_lifetime:?}: with rotating token keys (--keystore), sessions issued late in a key's epoch stop resuming when that key retires",
                self.tls_session_ttl
            );
        }
        cfg.tls_sessions = TlsSessions::new(TLS_SESSION_CACHE, self.tls_session_ttl);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_flag_default_is_the_library_default() {
        assert_eq!(
            crate::util::parse_duration("5m"),
            Ok(zrtt_net::gateway::DEFAULT_SESSION_TTL)
        );
    }
}
