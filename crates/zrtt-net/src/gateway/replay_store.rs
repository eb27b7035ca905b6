//! A replay store shared by the gateways of a fleet (docs/FLEET.md): Redis
//! (one server, or a Redis Cluster) remembers every first flight any of
//! them accepted, so a flight captured on its way to gateway A and
//! replayed to gateway B is refused there too.
//!
//! The process-local filter stays in front ([`ServerConfig::accept`]): it
//! catches replays to this gateway without a round trip. A flight it
//! accepted is then recorded with one atomic `SET <key> 1 NX PX <ttl>`:
//! - `OK`: nobody recorded it before: serve it;
//! - nil: another gateway (or this one) recorded it: a replay, refused as
//!   the core refuses one (Reject `Replay`);
//! - anything else (no answer within the deadline, an error, no
//!   connection, a store that may have lost what it held): **refused**
//!   with Reject `Busy`. The client falls back to TLS at once, which still
//!   serves; the gateway never serves a flight the store did not vouch
//!   for (serving it later, after the client's confirmation, would still
//!   let a replay of it run on another gateway once the store is back).
//!
//! Keys are `<prefix>:<key id, 8 hex digits>:<client ephemeral, 64 hex
//! digits>` and live `max_age + max_future + skew` (17 s by default): as
//! long as any gateway whose clock is within `skew` of the accepting
//! gateway's could still accept the flight.
//!
//! **Restart and failover guard.** A Redis that restarts without its data,
//! or a cluster replica promoted before it received the last writes, has
//! forgotten flights it acknowledged. Every such loss breaks this
//! gateway's connections to the node, so this store raises a guard on
//! every error and every (re)connection: flights stamped at or before
//! `now + max_future + skew` at that moment are refused `Busy` (none of
//! them can be vouched for), later ones are checked as usual. For one
//! server, connections are this module's own (a multiplexed connection,
//! replaced only here, so no reconnection goes unnoticed); for a cluster,
//! redis-rs reconnects and re-reads the slot map by itself; with retries
//! off and RESP2 it does so only after a command failed, and every failed
//! command reaches the guard (docs/FLEET.md says what this relies on).
//!
//! Checks never hold the replay filter's lock: the command runs in a task
//! of its own (so a late answer or error is still seen after the deadline
//! gave up on it) on one multiplexed connection, on which the commands of
//! concurrent accepts are pipelined.
//!
//! [`ServerConfig::accept`]: zrtt_proto::handshake::ServerConfig::accept

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use zrtt_proto::replay::ReplayConfig;
use zrtt_proto::UnixTime;

use crate::error::{Error, Result};

/// Longest wait for the store's answer before a flight is refused `Busy`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1);
/// Clock skew allowed between the gateways sharing a store.
pub const DEFAULT_SKEW: Duration = Duration::from_secs(5);
/// The first part of every key.
pub const DEFAULT_PREFIX: &str = "zrtt";
/// Connecting to a Redis node, and a command's own bound inside redis-rs
/// (the check's deadline is far shorter; this only bounds late answers).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Most checks in flight at once; beyond it a flight is refused `Busy` at
/// once (a stalled store must not pile up tasks: each lives up to
/// `CONNECT_TIMEOUT`).
pub const MAX_IN_FLIGHT: usize = 4096;
/// Most TLS session commands (gateway/tls/shared.rs) in flight at once,
/// counted apart from the checks: sessions never push a check into
/// `Overloaded`.
pub const MAX_SESSION_IN_FLIGHT: usize = 1024;
/// Pause between two connection attempts, doubling up to `RETRY_MAX`.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Where the store is.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreAddress {
    /// One Redis server: `redis://[user:password@]host:port[/db]`.
    Single(String),
    /// A Redis Cluster's seed nodes (`redis://...` each), written
    /// `redis+cluster://[user:password@]h1:p1,h2:p2,...`.
    Cluster(Vec<String>),
}

impl fmt::Debug for StoreAddress {
    // Without passwords.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hide = |u: &str| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
            _ => u.to_owned(),
        };
        match self {
            Self::Single(u) => f.debug_tuple("Single").field(&hide(u)).finish(),
            Self::Cluster(n) => f
                .debug_tuple("Cluster")
                .field(&n.iter().map(|u| hide(u)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl std::str::FromStr for StoreAddress {
    type Err = Error;

    /// `redis://host:port` or `redis+cluster://h1:p1,h2:p2,...` (user
    /// and password, if any, before the first host apply to every node).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::Config(format!("replay store {s:?}: {why}"));
        if let Some(rest) = s.strip_prefix("redis+cluster://") {
            let (auth, hosts) = match rest.rfind('@') {
                Some(at) => (&rest[..=at], &rest[at + 1..]),
                None => ("", rest),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| format!("redis://{auth}{h}"))
                .collect();
            if nodes.is_empty() {
                return Err(bad("no cluster node"));
            }
            for n in &nodes {
                redis::Client::open(n.as_str()).map_err(|e| bad(&e.to_string()))?;
            }
            return Ok(Self::Cluster(nodes));
        }
        if s.starts_with("redis://") {
            redis::Client::open(s).map_err(|e| bad(&e.to_string()))?;
            return Ok(Self::Single(s.to_owned()));
        }
        Err(bad(
            "use redis://host:port or redis+cluster://host:port,host:port,... (TLS is not supported)",
        ))
    }
}

/// Settings of a [`ReplayStore`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReplayStoreConfig {
    /// Where the store is.
    pub address: StoreAddress,
    /// The first part of every key: every gateway holding a given key must
    /// use the same prefix (the key id already keeps sites apart).
    pub prefix: String,
    /// Longest wait for the store's answer (then `Busy`).
    pub timeout: Duration,
    /// Clock skew allowed between the gateways sharing the store: extends
    /// each key's life and the restart guard.
    pub skew: Duration,
    /// The acceptance window of the gateways' replay filters (`max_age`
    /// and `max_future` matter): every gateway sharing the store must use
    /// the same.
    pub window: ReplayConfig,
}

impl ReplayStoreConfig {
    /// The store at `address` with the defaults: prefix `zrtt`, 1 ms
    /// deadline, 5 s skew, the default replay window.
    pub fn new(address: StoreAddress) -> Self {
        Self {
            address,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            skew: DEFAULT_SKEW,
            window: ReplayConfig::default(),
        }
    }

    /// How long a key lives: `max_age + max_future + skew`.
    pub fn ttl(&self) -> Duration {
        self.window.max_age + self.window.max_future + self.skew
    }

    /// The key recording the flight of `ephemeral` under `key_id`.
    pub fn key(&self, key_id: u32, ephemeral: &[u8; 32]) -> String {
        format!(
            "{}:{key_id:08x}:{}",
            self.prefix,
            zrtt_proto::record::hex(ephemeral)
        )
    }
}

/// What the store said about a flight.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreVerdict {
    /// Recorded now: nobody had recorded it.
    Fresh,
    /// Already recorded (by any gateway sharing the store): a replay.
    Replayed,
    /// The store could not vouch for it: refuse `Busy`.
    Unavailable(Unavailable),
}

/// Why the store could not vouch for a flight.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unavailable {
    /// No connection to the store (connecting in the background).
    NotConnected,
    /// No answer within the deadline.
    Timeout,
    /// The store answered with an error, or the connection failed.
    Failed(String),
    /// Stamped before the store was last (re)connected or failed: it may
    /// have been recorded in what the store lost.
    Guard,
    /// [`MAX_IN_FLIGHT`] checks are waiting for the store already.
    Overloaded,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotConnected => f.write_str("not connected"),
            Self::Timeout => f.write_str("no answer in time"),
            Self::Failed(e) => write!(f, "failed: {e}"),
            Self::Guard => f.write_str("flight stamped before the store's last failure"),
            Self::Overloaded => f.write_str("too many checks waiting for the store"),
        }
    }
}

enum Backend {
    Single(redis::Client),
    Cluster(Box<ClusterClient>),
}

#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

#[derive(Default)]
struct ConnState {
    /// The connection in use and its generation.
    conn: Option<(u64, Conn)>,
    generation: u64,
    connecting: bool,
}

/// A replay store shared by a fleet (module docs). Cheap to share (`Arc`).
pub struct ReplayStore {
    cfg: ReplayStoreConfig,
    backend: Backend,
    state: Mutex<ConnState>,
    /// Flights stamped at or before this (Unix ms) are refused.
    guard_ms: AtomicU64,
    /// The latest time (Unix ms) the clock showed: the guard never moves
    /// back with a clock stepped back.
    latest_ms: AtomicU64,
    /// Checks waiting for the store ([`MAX_IN_FLIGHT`]).
    in_flight: AtomicUsize,
    /// TLS session commands waiting for the store
    /// ([`MAX_SESSION_IN_FLIGHT`]).
    session_in_flight: AtomicUsize,
    clock: fn() -> UnixTime,
}

impl fmt::Debug for ReplayStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayStore")
            .field("cfg", &self.cfg)
            .field("guard_ms", &self.guard_ms.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ReplayStore {
    /// A store for `cfg`, reading time from `clock` (the gateway's). No
    /// I/O: it connects on [`Self::connect`] or the first check, in the
    /// background, and refuses (`NotConnected`) until connected.
    pub fn new(cfg: ReplayStoreConfig, clock: fn() -> UnixTime) -> Result<Arc<Self>> {
        let bad = |e: redis::RedisError| Error::Config(format!("replay store: {e}"));
        // Braces would make a Redis Cluster hash tag: every key on one node.
        if cfg.prefix.is_empty()
            || cfg
                .prefix
                .chars()
                .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
        {
            return Err(Error::Config(format!(
                "replay store prefix {:?}: needs at least one character, no braces or spaces",
                cfg.prefix
            )));
        }
        if cfg.timeout.is_zero() {
            return Err(Error::Config(
                "replay store timeout: must be more than zero".into(),
            ));
        }
        let backend = match &cfg.address {
            StoreAddress::Single(url) => {
                Backend::Single(redis::Client::open(url.as_str()).map_err(bad)?)
            }
            StoreAddress::Cluster(nodes) => Backend::Cluster(Box::new(
                ClusterClient::builder(nodes.iter().map(String::as_str))
                    // Errors must reach the guard, not be retried away
                    // (with retries, redis-rs follows MOVED and reconnects
                    // to a restarted or promoted node unseen) ...
                    .retries(0)
                    // ... and no reconnection without a failed command
                    // (RESP3 disconnect pushes trigger one).
                    .use_protocol(redis::ProtocolVersion::RESP2)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(CONNECT_TIMEOUT)
                    .build()
                    .map_err(bad)?,
            )),
        };
        Ok(Arc::new(Self {
            cfg,
            backend,
            state: Mutex::new(ConnState::default()),
            guard_ms: AtomicU64::new(0),
            latest_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            session_in_flight: AtomicUsize::new(0),
            clock,
        }))
    }

    /// The settings.
    pub fn config(&self) -> &ReplayStoreConfig {
        &self.cfg
    }

    /// Start connecting in the background, unless connected or connecting
    /// (needs a Tokio runtime).
    pub fn connect(self: &Arc<Self>) {
        let mut st = lock(&self.state);
        if st.conn.is_some() || st.connecting {
            return;
        }
        st.connecting = true;
        drop(st);
        tokio::spawn(self.clone().connect_loop());
    }

    /// Whether a connection is up (for logs and tests).
    pub fn connected(&self) -> bool {
        lock(&self.state).conn.is_some()
    }

    /// Whether a flight stamped now would be checked (connected, and past
    /// the guard of the last failure or connection).
    pub fn checking(&self) -> bool {
        self.connected() && (self.clock)().as_millis() > self.guard_ms.load(Ordering::SeqCst)
    }

    async fn connect_loop(self: Arc<Self>) {
        let mut wait = RETRY_MIN;
        let mut failures = 0u32;
        loop {
            let attempt = match &self.backend {
                Backend::Single(c) => c
                    .get_multiplexed_async_connection_with_config(
                        &redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(CONNECT_TIMEOUT))
                            .set_response_timeout(Some(CONNECT_TIMEOUT)),
                    )
                    .await
                    .map(Conn::Single),
                Backend::Cluster(c) => c.get_async_connection().await.map(Conn::Cluster),
            };
            let attempt = match attempt {
                Ok(mut conn) => match self.same_settings(&mut conn).await {
                    Ok(()) => {
                        self.check_policy(&mut conn).await;
                        Ok(conn)
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match attempt {
                Ok(conn) => {
                    // Whatever the store lost before this connection, no
                    // flight it could have held is vouched for.
                    self.raise_guard();
                    let mut st = lock(&self.state);
                    st.generation += 1;
                    st.conn = Some((st.generation, conn));
                    st.connecting = false;
                    if failures > 0 {
                        tracing::info!("replay store: connected again");
                    }
                    return;
                }
                Err(e) => {
                    if failures == 0 {
                        tracing::warn!(
                            "replay store: cannot connect ({e}); first flights are refused Busy (clients fall back to TLS) until it answers"
                        );
                    }
                    failures = failures.saturating_add(1);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// The settings every gateway sharing this prefix must have: a key
    /// kept `ttl` by one gateway must cover the window of every other.
    fn settings_record(&self) -> String {
        format!(
            "zrtt replay store v1 max_age_ms={} max_future_ms={} skew_ms={}",
            millis(self.cfg.window.max_age),
            millis(self.cfg.window.max_future),
            millis(self.cfg.skew)
        )
    }

    /// Record this gateway's settings under `<prefix>:settings` if none are
    /// there, else check they are the same: gateways whose windows differ
    /// would keep each other's flights too short a time (a replay could
    /// run after the key expired on one and within the window of another).
    /// A mismatch keeps the store unused (flights refused Busy) and is
    /// logged; it is checked again at each connection attempt.
    async fn same_settings(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let key = format!("{}:settings", self.cfg.prefix);
        let mine = self.settings_record();
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(&mine).arg("NX").arg("GET");
        let theirs: Option<String> = match conn {
            Conn::Single(c) => set.query_async(c).await?,
            Conn::Cluster(c) => set.query_async(c).await?,
        };
        match theirs {
            None => Ok(()),
            Some(t) if t == mine => Ok(()),
            Some(t) => {
                tracing::error!(
                    "replay store: {key} holds {t:?}, this gateway has {mine:?}: gateways sharing the prefix must share the replay window and --replay-store-skew (or DEL {key} after changing them everywhere); not using the store"
                );
                Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the replay store's settings differ from this gateway's",
                )))
            }
        }
    }

    /// Warn when the store may evict keys (docs/FLEET.md, Requirements):
    /// an evicted replay key lets a replay of its flight run. Read with
    /// `CONFIG GET maxmemory-policy` where allowed (a managed Redis may
    /// refuse it: then nothing is said); on a cluster, one node's.
    async fn check_policy(&self, conn: &mut Conn) {
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("maxmemory-policy");
        let got: redis::RedisResult<Vec<String>> = match conn {
            Conn::Single(c) => get.query_async(c).await,
            Conn::Cluster(c) => get.query_async(c).await,
        };
        if let Ok(v) = got {
            if let Some(policy) = v.get(1).filter(|p| p.as_str() != "noeviction") {
                tracing::warn!(
                    "replay store: maxmemory-policy is {policy}: a full Redis may evict replay keys (a replay of an evicted flight would be served); set maxmemory-policy noeviction (docs/FLEET.md)"
                );
            }
        }
    }

    /// Refuse every flight stamped up to `now + max_future + skew`.
    fn raise_guard(&self) {
        let until = self
            .now_ms()
            .saturating_add(millis(self.cfg.window.max_future + self.cfg.skew));
        self.guard_ms.fetch_max(until, Ordering::SeqCst);
    }

    /// The clock, never behind a time it showed before.
    fn now_ms(&self) -> u64 {
        let now = (self.clock)().as_millis();
        self.latest_ms.fetch_max(now, Ordering::SeqCst).max(now)
    }

    /// A command of connection `generation` failed with `e`.
    fn failed(self: &Arc<Self>, generation: u64, e: &redis::RedisError) {
        self.raise_guard();
        // One server: any error, also one the server answered with
        // (READONLY, LOADING, MASTERDOWN: an endpoint that moved to
        // another role), replaces the connection, and the new one raises
        // the guard again.
        if matches!(self.backend, Backend::Single(_)) {
            let mut st = lock(&self.state);
            if st.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
                tracing::warn!("replay store: connection lost ({e}); reconnecting");
                st.conn = None;
            }
            drop(st);
            self.connect();
        }
    }

    /// Record the flight of `ephemeral` under `key_id`, stamped
    /// `timestamp`, unless recorded before.
    pub async fn check(
        self: &Arc<Self>,
        key_id: u32,
        ephemeral: &[u8; 32],
        timestamp: UnixTime,
    ) -> StoreVerdict {
        let conn = lock(&self.state).conn.clone();
        let Some((generation, mut conn)) = conn else {
            self.connect();
            return StoreVerdict::Unavailable(Unavailable::NotConnected);
        };
        let stamped = timestamp.as_millis();
        self.now_ms();
        if stamped <= self.guard_ms.load(Ordering::SeqCst) {
            return StoreVerdict::Unavailable(Unavailable::Guard);
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return StoreVerdict::Unavailable(Unavailable::Overloaded);
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.cfg.key(key_id, ephemeral))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(millis(self.cfg.ttl()).max(1));
        let this = self.clone();
        let task = tokio::spawn(async move {
            let r: redis::RedisResult<Option<String>> = match &mut conn {
                Conn::Single(c) => cmd.query_async(c).await,
                Conn::Cluster(c) => cmd.query_async(c).await,
            };
            if let Err(e) = &r {
                this.failed(generation, e);
            }
            this.in_flight.fetch_sub(1, Ordering::AcqRel);
            r
        });
        let verdict = match tokio::time::timeout(self.cfg.timeout, task).await {
            Err(_) => return StoreVerdict::Unavailable(Unavailable::Timeout),
            Ok(Err(e)) => return StoreVerdict::Unavailable(Unavailable::Failed(e.to_string())),
            Ok(Ok(Err(e))) => return StoreVerdict::Unavailable(Unavailable::Failed(e.to_string())),
            Ok(Ok(Ok(Some(_)))) => StoreVerdict::Fresh,
            Ok(Ok(Ok(None))) => StoreVerdict::Replayed,
        };
        // A failure seen meanwhile (another check's) may mean this answer
        // came from a store that lost what it held.
        if verdict == StoreVerdict::Fresh && stamped <= self.guard_ms.load(Ordering::SeqCst) {
            return StoreVerdict::Unavailable(Unavailable::Guard);
        }
        verdict
    }
}

impl ReplayStore {
    /// Run `cmd` on the store's connection (the TLS session store,
    /// gateway/tls/shared.rs), within `deadline` if any, under its own
    /// in-flight bound ([`MAX_SESSION_IN_FLIGHT`]). An error the store
    /// answered (OOM when full, a script's error, a wrong type: whatever
    /// a client's traffic can provoke) changes nothing: neither the guard
    /// nor the connection. Only what may mean lost or moved data raises
    /// the guard as a failed check does: a broken connection, and on a
    /// cluster the replies after which redis-rs may reconnect by itself
    /// ([`reaches_guard`]).
    pub(crate) async fn query<T>(
        self: &Arc<Self>,
        cmd: redis::Cmd,
        deadline: Option<Duration>,
    ) -> std::result::Result<T, Unavailable>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let conn = lock(&self.state).conn.clone();
        let Some((generation, mut conn)) = conn else {
            self.connect();
            return Err(Unavailable::NotConnected);
        };
        if self.session_in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_SESSION_IN_FLIGHT {
            self.session_in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Unavailable::Overloaded);
        }
        let this = self.clone();
        let cluster = matches!(self.backend, Backend::Cluster(_));
        let task = tokio::spawn(async move {
            let r: redis::RedisResult<T> = match &mut conn {
                Conn::Single(c) => cmd.query_async(c).await,
                Conn::Cluster(c) => cmd.query_async(c).await,
            };
            if let Some(e) = r.as_ref().err().filter(|e| reaches_guard(e, cluster)) {
                this.failed(generation, e);
            }
            this.session_in_flight.fetch_sub(1, Ordering::AcqRel);
            r
        });
        let joined = match deadline {
            Some(d) => tokio::time::timeout(d, task)
                .await
                .map_err(|_| Unavailable::Timeout)?,
            None => task.await,
        };
        match joined {
            Err(e) => Err(Unavailable::Failed(e.to_string())),
            Ok(Err(e)) => Err(Unavailable::Failed(e.to_string())),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The time up to which the store may have lost what it acknowledged
    /// (the restart and failover guard, module docs).
    pub(crate) fn guard(&self) -> UnixTime {
        UnixTime::from_millis(self.guard_ms.load(Ordering::SeqCst))
    }
}

/// Whether a TLS session command's error must reach the guard: not an
/// error the server answered (the connection is fine and nothing was
/// lost; a client's traffic can provoke these, e.g. OOM when sessions
/// fill the store), except, on a cluster, the replies after which
/// redis-rs may re-read the slot map or reconnect unseen (a moved slot, a
/// node changing role).
fn reaches_guard(e: &redis::RedisError, cluster: bool) -> bool {
    const TOPOLOGY: &[&str] = &[
        "MOVED",
        "ASK",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "READONLY",
        "LOADING",
        "MASTERDOWN",
    ];
    match e.code() {
        // A reply of another type than asked is no failure of the store.
        None => !matches!(e.kind(), redis::ErrorKind::UnexpectedReturnType),
        Some(code) => cluster && TOPOLOGY.contains(&code),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<StoreAddress>().unwrap(),
            StoreAddress::Single("redis://127.0.0.1:6379".into())
        );
        assert_eq!(
            "redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001"
                .parse::<StoreAddress>()
                .unwrap(),
            StoreAddress::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".into(),
                "redis://:pw@10.0.0.2:7001".into()
            ])
        );
        let shown = format!(
            "{:?}",
            "redis://:secret@h:1".parse::<StoreAddress>().unwrap()
        );
        assert!(!shown.contains("secret"), "{shown}");
        for bad in ["rediss://h:1", "h:1", "redis+cluster://", "memcached://h:1"] {
            assert!(bad.parse::<StoreAddress>().is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_are_checked_without_connecting() {
        let mut cfg = ReplayStoreConfig::new(StoreAddress::Single("redis://127.0.0.1:1".into()));
        assert!(ReplayStore::new(cfg.clone(), crate::client::system_clock).is_ok());
        cfg.timeout = Duration::ZERO;
        assert!(ReplayStore::new(cfg.clone(), crate::client::system_clock).is_err());
        cfg.timeout = DEFAULT_TIMEOUT;
        for bad in ["", "{www}", "a b"] {
            cfg.prefix = bad.into();
            assert!(
                ReplayStore::new(cfg.clone(), crate::client::system_clock).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn session_errors_answered_by_redis_do_not_reach_the_guard() {
        let reply = |r: &[u8]| {
            redis::parse_redis_value(r)
                .unwrap()
                .extract_error()
                .unwrap_err()
        };
        for r in [
            &b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"[..],
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"-ERR Error running script\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b"-BUSY Redis is busy running a script\r\n",
        ] {
            let e = reply(r);
            assert!(!reaches_guard(&e, false), "{e}");
            assert!(!reaches_guard(&e, true), "{e}");
        }
        // A cluster's topology replies do (redis-rs may reconnect after them).
        for r in [
            &b"-MOVED 3999 127.0.0.1:6381\r\n"[..],
            b"-READONLY You can't write against a read only replica.\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
        ] {
            let e = reply(r);
            assert!(!reaches_guard(&e, false), "{e}");
            assert!(reaches_guard(&e, true), "{e}");
        }
        // A broken connection does, everywhere.
        let io: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(reaches_guard(&io, false) && reaches_guard(&io, true));
    }

    #[test]
    fn keys_and_lifetime() {
        let cfg = ReplayStoreConfig::new(StoreAddress::Single("redis://h:1".into()));
        assert_eq!(cfg.ttl(), Duration::from_secs(17), "10 s + 2 s + 5 s");
        let k = cfg.key(0x0102_0304, &[0xab; 32]);
        assert_eq!(k, format!("zrtt:01020304:{}", "ab".repeat(32)));
    }
}
