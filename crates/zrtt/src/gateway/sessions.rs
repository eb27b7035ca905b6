//! `zrtt gateway` flags for TLS sessions (docs/GATEWAY.md, TLS sessions):
//! how long one is kept for resumption, in this process, across a restart
//! and in a fleet's Redis (docs/FLEET.md).

use std::time::Duration;

use clap::Args;
use zrtt_net::gateway::{config::TLS_SESSION_CACHE, GatewayConfig, SessionLimits, TlsSessions};

use crate::util;

#[derive(Args, Debug)]
pub(super) struct SessionArgs {
    /// How long a TLS session may be resumed (and is kept in the replay
    /// store's Redis with --replay-store: each session costs memory there
    /// for this long); a client coming back later gets a full handshake
    /// (nginx `ssl_session_timeout`, also 5 minutes by default). At most 1d.
    #[arg(long, default_value = "5m", value_parser = util::parse_duration)]
    tls_session_ttl: Duration,
    /// With --replay-store: most TLS sessions this gateway writes to Redis
    /// per second (bursts of as many); over it no ticket is issued (the
    /// client makes a full handshake next time). Bounds the sessions'
    /// memory in Redis: rate x --tls-session-ttl x ~312 bytes (docs/FLEET.md,
    /// Capacity). 0: no cap.
    #[arg(long, default_value_t = SessionLimits::default().puts_per_second, value_parser = rate)]
    tls_session_writes_per_sec: f64,
    /// With --replay-store: most look-ups of offered TLS sessions in Redis
    /// per second by this gateway (each leaves a 136-byte tombstone for
    /// 66 s), and a quarter of it more for ClientHellos sent before their
    /// TCP handshake completed (Fast Open: a spoofable source); over it a
    /// full handshake without a look-up. 0: no cap.
    #[arg(long, default_value_t = SessionLimits::default().lookups_per_second, value_parser = rate)]
    tls_session_lookups_per_sec: f64,
    /// With --replay-store: the same per client address (IPv6: per /64).
    /// 0: no cap.
    #[arg(long, default_value_t = SessionLimits::default().lookups_per_source_per_second, value_parser = rate)]
    tls_session_lookups_per_source: f64,
}

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!("{s:?}: a rate per second, 0 or more")),
    }
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
        let mut limits = SessionLimits::default();
        limits.puts_per_second = self.tls_session_writes_per_sec;
        limits.lookups_per_second = self.tls_session_lookups_per_sec;
        limits.lookups_per_source_per_second = self.tls_session_lookups_per_source;
        cfg.tls_sessions =
            TlsSessions::with_limits(TLS_SESSION_CACHE, self.tls_session_ttl, limits);
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

    #[test]
    fn rates_are_zero_or_more() {
        assert_eq!(super::rate("200"), Ok(200.0));
        assert_eq!(super::rate("0"), Ok(0.0));
        for bad in ["-1", "NaN", "inf", "x"] {
            assert!(super::rate(bad).is_err(), "{bad}");
        }
    }
}
