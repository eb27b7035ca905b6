//! `zrtt gateway` flags for backends' health and for request bodies and
//! streams (docs/GATEWAY.md, Backends): names an operator of nginx
//! (`max_fails`, `fail_timeout`, `client_max_body_size`,
//! `client_body_timeout`) or HAProxy (`check inter rise fall`) recognises;
//! every default is the library's.

use clap::Args;
use zrtt_net::gateway::{
    BackendHealth, GatewayConfig, HealthCheck, Timeouts, DEFAULT_CHECK_INTERVAL,
    DEFAULT_CHECK_TIMEOUT, DEFAULT_FAIL_TIMEOUT, DEFAULT_FALL, DEFAULT_MAX_CONCURRENT_STREAMS,
    DEFAULT_MAX_EARLY_REQUESTS, DEFAULT_MAX_FAILS, DEFAULT_MAX_REQUEST_BODY, DEFAULT_RISE,
};

use super::ShortDuration;

#[derive(Args, Debug)]
pub(super) struct BackendArgs {
    /// Connect failures within --backend-fail-timeout that mark a backend
    /// down (requests then go to the site's other backends); 0: never
    /// (nginx `max_fails`).
    #[arg(long, default_value_t = DEFAULT_MAX_FAILS)]
    backend_max_fails: u32,
    /// How long a backend marked down by failures is skipped, and the
    /// window they are counted in (nginx `fail_timeout`).
    #[arg(long, default_value_t = ShortDuration(DEFAULT_FAIL_TIMEOUT))]
    backend_fail_timeout: ShortDuration,
    /// Check every backend with `GET PATH` on a new connection; 2xx and 3xx
    /// pass (HAProxy `option httpchk`). Off by default.
    #[arg(long, value_name = "PATH")]
    backend_health: Option<String>,
    /// Time between two checks of a backend (HAProxy `inter`).
    #[arg(long, default_value_t = ShortDuration(DEFAULT_CHECK_INTERVAL), requires = "backend_health")]
    backend_health_interval: ShortDuration,
    /// A check that has no response head within this fails (HAProxy
    /// `timeout check`).
    #[arg(long, default_value_t = ShortDuration(DEFAULT_CHECK_TIMEOUT), requires = "backend_health")]
    backend_health_timeout: ShortDuration,
    /// Passed checks in a row that bring a down backend up (HAProxy `rise`).
    #[arg(long, default_value_t = DEFAULT_RISE, requires = "backend_health")]
    backend_health_rise: u32,
    /// Failed checks in a row that take an up backend down (HAProxy `fall`).
    #[arg(long, default_value_t = DEFAULT_FALL, requires = "backend_health")]
    backend_health_fall: u32,
    /// Largest request body (bytes, or with k, m, g: 10m); larger ones get
    /// 413. 0: no limit (nginx `client_max_body_size`).
    #[arg(long, default_value_t = Size(DEFAULT_MAX_REQUEST_BODY))]
    max_request_body: Size,
    /// A request body from which nothing arrives for this long is cut (408
    /// if the backend has not answered) (nginx `client_body_timeout`).
    #[arg(long, default_value_t = ShortDuration(Timeouts::default().request_body))]
    request_body_timeout: ShortDuration,
    /// A connection on which nothing moves either way for this long is
    /// closed (no other limit on a live connection or stream).
    #[arg(long, default_value_t = ShortDuration(Timeouts::default().stream_idle))]
    stream_idle_timeout: ShortDuration,
    /// An HTTP/1.1 request head not complete within this (from the
    /// connection's start or the previous answer) gets 408 and a close; a
    /// connection that sent nothing is closed silently (nginx
    /// `client_header_timeout`).
    #[arg(long, default_value_t = ShortDuration(Timeouts::default().request_head))]
    request_head_timeout: ShortDuration,
    /// Most concurrent HTTP/2 streams, and so backend requests, per client
    /// connection; more are refused (nginx `http2_max_concurrent_streams`).
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_STREAMS)]
    max_concurrent_streams: u32,
    /// Serve only HTTP/1.1 inside zrtt: a first flight asking for h2 gets
    /// Reject 8 (sign records without `--h2` then).
    #[arg(long)]
    no_zrtt_http2: bool,
    /// Most requests of one zrtt first flight's early data that run before
    /// the client confirms the handshake (HTTP/2; HTTP/1.1 sends one):
    /// a replayed flight costs a backend at most this many; the rest wait
    /// for the confirmation, else 425 (0: all wait).
    #[arg(long, default_value_t = DEFAULT_MAX_EARLY_REQUESTS)]
    max_early_requests: usize,
}

impl BackendArgs {
    /// Set these in `cfg`.
    pub(super) fn apply(&self, cfg: &mut GatewayConfig) -> anyhow::Result<()> {
        let mut health = BackendHealth::default();
        health.max_fails = self.backend_max_fails;
        health.fail_timeout = self.backend_fail_timeout.0;
        if let Some(path) = &self.backend_health {
            if !path.starts_with('/') {
                anyhow::bail!("--backend-health {path:?}: a path starting with /");
            }
            let mut check = HealthCheck::new(path.clone());
            check.interval = self.backend_health_interval.0;
            check.timeout = self.backend_health_timeout.0;
            check.rise = self.backend_health_rise;
            check.fall = self.backend_health_fall;
            if check.interval.is_zero() || check.timeout.is_zero() {
                anyhow::bail!(
                    "--backend-health-interval and --backend-health-timeout must be above 0"
                );
            }
            health.check = Some(check);
        }
        cfg.backend_health = health;
        cfg.max_request_body = (self.max_request_body.0 > 0).then_some(self.max_request_body.0);
        cfg.timeouts.request_body = self.request_body_timeout.0;
        cfg.timeouts.stream_idle = self.stream_idle_timeout.0;
        cfg.timeouts.request_head = self.request_head_timeout.0;
        if self.max_concurrent_streams == 0 || self.request_head_timeout.0.is_zero() {
            anyhow::bail!("--max-concurrent-streams and --request-head-timeout must be above 0");
        }
        cfg.max_concurrent_streams = self.max_concurrent_streams;
        cfg.zrtt_http2 = !self.no_zrtt_http2;
        cfg.max_early_requests = self.max_early_requests;
        Ok(())
    }
}

/// A size in bytes: `1048576`, `1024k`, `1m`, `1g` (binary units, as nginx).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Size(pub u64);

impl std::str::FromStr for Size {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let (num, shift) = match t.strip_suffix(['k', 'm', 'g']) {
            Some(n) if t.ends_with('k') => (n, 10),
            Some(n) if t.ends_with('m') => (n, 20),
            Some(n) => (n, 30),
            None => (t.as_str(), 0),
        };
        num.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1 << shift))
            .map(Self)
            .ok_or_else(|| format!("invalid size {s:?}: use e.g. 1048576, 512k, 10m, 1g"))
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            n if n > 0 && n % (1 << 30) == 0 => write!(f, "{}g", n >> 30),
            n if n > 0 && n % (1 << 20) == 0 => write!(f, "{}m", n >> 20),
            n if n > 0 && n % (1 << 10) == 0 => write!(f, "{}k", n >> 10),
            n => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sizes_parse_and_print_back() {
        for (s, n) in [
            ("0", 0),
            ("1000", 1000),
            ("512k", 512 << 10),
            ("10M", 10 << 20),
            ("1g", 1 << 30),
        ] {
            let v: Size = s.parse().unwrap();
            assert_eq!(v.0, n, "{s}");
            assert_eq!(v.to_string().parse::<Size>().unwrap(), v);
        }
        for bad in ["", "m", "1t", "-1", "1.5m", "99999999999g"] {
            assert!(bad.parse::<Size>().is_err(), "{bad}");
        }
    }
}
