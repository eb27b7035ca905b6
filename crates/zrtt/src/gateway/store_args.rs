//! `--replay-store*`: the replay store a fleet shares (docs/FLEET.md), and
//! the short durations (`500us`, `1ms`, `2s`) its deadline and the
//! backends' timeouts take.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use zrtt_net::gateway::replay_store::{self, ReplayStore, ReplayStoreConfig, StoreAddress};

/// The replay store shared by a fleet (docs/FLEET.md).
#[derive(Args, Debug)]
pub(super) struct ReplayStoreArgs {
    /// Share replay state with the other gateways holding these keys
    /// (docs/FLEET.md): `redis://[user:password@]host:port[/db]`, or a
    /// Redis Cluster as `redis+cluster://host:port,host:port,...`. Each
    /// first flight the local filter accepts is recorded there (SET NX):
    /// one recorded before, by any gateway, is refused as a replay; one the
    /// store cannot vouch for (slow, down, restarted) is refused Busy and
    /// the client falls back to TLS.
    #[arg(long, value_name = "URL")]
    pub(super) replay_store: Option<String>,
    /// Longest wait for the replay store's answer before refusing the
    /// flight Busy: e.g. 500us, 1ms, 0.002s (a number alone: milliseconds).
    #[arg(long, default_value_t = ShortDuration(replay_store::DEFAULT_TIMEOUT), value_parser = parse_store_timeout)]
    pub(super) replay_store_timeout: ShortDuration,
    /// Clock skew allowed between the gateways sharing the replay store
    /// (keep their clocks within it with NTP): keys live 12 s plus this;
    /// with its unit (5s, 1500ms).
    #[arg(long, default_value_t = ShortDuration(replay_store::DEFAULT_SKEW))]
    pub(super) replay_store_skew: ShortDuration,
    /// First part of every replay store key: every gateway holding a given
    /// key must use the same (the key id already keeps sites apart).
    #[arg(long, default_value = replay_store::DEFAULT_PREFIX)]
    pub(super) replay_store_prefix: String,
}

/// A duration of a few milliseconds or seconds, with its unit: `500us`,
/// `1ms`, `1.5ms`, `2s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortDuration(pub Duration);

impl std::str::FromStr for ShortDuration {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim();
        let (num, unit) = match t.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
            Some(i) => (&t[..i], &t[i..]),
            None => (t, ""),
        };
        let scale = match unit {
            "us" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            _ => return Err(format!("invalid duration {s:?}: use e.g. 500us, 1ms, 2s")),
        };
        let n: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: use e.g. 500us, 1ms, 2s"))?;
        Duration::try_from_secs_f64(n * scale)
            .map(Self)
            .map_err(|e| format!("invalid duration {s:?}: {e}"))
    }
}

impl std::fmt::Display for ShortDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.0.as_micros();
        if us.is_multiple_of(1_000_000) {
            write!(f, "{}s", us / 1_000_000)
        } else if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{us}us")
        }
    }
}

/// `--replay-store-timeout`: a [`ShortDuration`], or a number of milliseconds.
fn parse_store_timeout(s: &str) -> std::result::Result<ShortDuration, String> {
    if !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return format!("{}ms", s.trim()).parse();
    }
    s.parse()
}

/// The shared replay store of `--replay-store`, if any (not connected yet).
pub(super) fn replay_store(
    a: &ReplayStoreArgs,
    clock: fn() -> zrtt_proto::UnixTime,
) -> Result<Option<Arc<ReplayStore>>> {
    let Some(url) = &a.replay_store else {
        return Ok(None);
    };
    let address: StoreAddress = url.parse()?;
    if matches!(address, StoreAddress::Cluster(_)) {
        tracing::warn!(
            "replay store on a Redis Cluster: a failover that lost recorded flights is guarded except for a race of about one slot-map refresh (docs/FLEET.md, Failures); where a replay must never run twice, use one Redis server without failover"
        );
    }
    let mut store = ReplayStoreConfig::new(address);
    store.prefix = a.replay_store_prefix.clone();
    store.timeout = a.replay_store_timeout.0;
    store.skew = a.replay_store_skew.0;
    tracing::info!(
        "replay store {:?}: keys {}:*, kept {:?}, answer within {}",
        store.address,
        store.prefix,
        store.ttl(),
        a.replay_store_timeout
    );
    Ok(Some(ReplayStore::new(store, clock)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn short_durations() {
        let d = |s: &str| s.parse::<ShortDuration>().map(|d| d.0);
        assert!(
            d("5").is_err(),
            "a unit is needed (a skew of 5 is not 5 ms)"
        );
        assert_eq!(
            parse_store_timeout("1").map(|d| d.0),
            Ok(Duration::from_millis(1)),
            "a deadline alone is ms"
        );
        assert_eq!(
            parse_store_timeout("2s").map(|d| d.0),
            Ok(Duration::from_secs(2))
        );
        assert_eq!(d("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(d("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(d("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(d("2s"), Ok(Duration::from_secs(2)));
        assert!(d("1h").is_err() && d("ms").is_err() && d("-1ms").is_err());
        for s in ["1ms", "500us", "5s", "1500us"] {
            assert_eq!(s.parse::<ShortDuration>().unwrap().to_string(), s);
        }
        assert_eq!(
            ShortDuration(replay_store::DEFAULT_TIMEOUT).to_string(),
            "1ms"
        );
    }
}
