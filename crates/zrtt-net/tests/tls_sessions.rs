//! TLS sessions shared by the gateways of a fleet through a real
//! `redis-server` (scripts/install-deps.sh installs it; started on a free
//! loopback port, killed by PID at the end):
//! - a ClientHello resuming a session, captured and sent at once on eight
//!   connections to gateways A and B, is resumed by exactly one of them
//!   (the others get full handshakes: the ServerHello says which), on one
//!   Redis and on a Redis Cluster of three masters (then with one killed:
//!   every connection still served);
//! - a full Redis refusing session writes does not fail the replay store;
//! - `measure_shared_resumption` (ignored) prints the added latency of the
//!   Redis take on a resumption (docs/FLEET.md).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::redis::*;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::client::system_clock;
use zrtt_net::gateway::{
    ReplayStore, ReplayStoreConfig, SessionLimits, StoreAddress, TlsSessions, DEFAULT_SESSION_TTL,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// What the TLS-session tests read from a store.
impl Redis {
    /// The sessions held (not the tombstones a take leaves).
    fn sessions(&self) -> usize {
        self.session_keys()
            .iter()
            .filter(|k| self.cli(&["STRLEN", k]) != "0")
            .count()
    }

    fn session_keys(&self) -> Vec<String> {
        self.cli(&["--scan", "--pattern", "zrtt:tls:*"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The only session key (a session or a tombstone).
    fn session_key(&self) -> String {
        let keys = self.session_keys();
        assert_eq!(keys.len(), 1, "{keys:?}");
        keys[0].clone()
    }
}

/// A TCP relay to a Redis that holds what its clients send while `hold`
/// is set (a store slow to receive one gateway's commands); `replied`
/// counts the bytes Redis sent on each relayed connection, in order.
struct HoldProxy {
    port: u16,
    hold: Arc<AtomicBool>,
    replied: Arc<Mutex<Vec<usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HoldProxy {
    async fn start(to: u16, hold: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new(AtomicBool::new(hold));
        let replied = Arc::new(Mutex::new(Vec::new()));
        let (h, r) = (hold.clone(), replied.clone());
        let task = tokio::spawn(async move {
            let mut relays = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)).await else {
                    continue;
                };
                let i = {
                    let mut r = r.lock().unwrap();
                    r.push(0);
                    r.len() - 1
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let h = h.clone();
                relays.spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        while h.load(Ordering::Acquire) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                let r = r.clone();
                relays.spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = sr.read(&mut buf).await {
                        r.lock().unwrap()[i] += n;
                        let _ = cw.write_all(&buf[..n]).await;
                    }
                });
            }
        });
        Self {
            port,
            hold,
            replied,
            task,
        }
    }

    fn address(&self) -> StoreAddress {
        format!("redis://127.0.0.1:{}", self.port).parse().unwrap()
    }

    fn replied(&self, conn: usize) -> usize {
        self.replied.lock().unwrap().get(conn).copied().unwrap_or(0)
    }
}

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A gateway sharing `redis` (and the test token key, so the session key)
/// with the others, once its store checks; without `redis`, a lone one.
async fn gateway(redis: Option<&Redis>, timeout: Duration) -> Env {
    gateway_with_store(redis.map(single), timeout).await.0
}

async fn gateway_with_store(
    address: Option<StoreAddress>,
    timeout: Duration,
) -> (Env, Option<Arc<ReplayStore>>) {
    gateway_with_limits(address, timeout, SessionLimits::default()).await
}

async fn gateway_with_limits(
    address: Option<StoreAddress>,
    timeout: Duration,
    limits: SessionLimits,
) -> (Env, Option<Arc<ReplayStore>>) {
    let mut opts = GatewayOpts {
        tokens: true,
        tls_sessions: Some(TlsSessions::with_limits(1024, DEFAULT_SESSION_TTL, limits)),
        ..GatewayOpts::default()
    };
    if let Some(address) = address {
        let mut cfg = ReplayStoreConfig::new(address);
        cfg.skew = Duration::ZERO;
        cfg.timeout = timeout;
        let store = ReplayStore::new(cfg, system_clock).unwrap();
        store.connect();
        let start = Instant::now();
        while !store.checking() {
            assert!(start.elapsed() < PATIENCE, "the store never checked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        opts.replay_store = Some(store);
    }
    let store = opts.replay_store.clone();
    (start_gateway(opts).await, store)
}

fn client_config() -> Arc<rustls::ClientConfig> {
    client_config_for(&rustls::version::TLS13)
}

fn client_config_for(
    version: &'static rustls::SupportedProtocolVersion,
) -> Arc<rustls::ClientConfig> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[version])
    .unwrap()
    .with_root_certificates(tls_roots())
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

fn name() -> rustls::pki_types::ServerName<'static> {
    rustls::pki_types::ServerName::try_from(HOST).unwrap()
}

/// A TLS handshake with `addr`; the handshake's time and whether it resumed.
async fn handshake(cfg: &Arc<rustls::ClientConfig>, addr: SocketAddr) -> (Duration, bool) {
    let start = Instant::now();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(cfg.clone())
        .connect(name(), tcp)
        .await
        .unwrap();
    let took = start.elapsed();
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    // Read the session tickets (sent after the client's Finished).
    tls.write_all(
        format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut body = Vec::new();
    let _ = tls.read_to_end(&mut body).await;
    assert!(body.starts_with(b"HTTP/1.1 200"), "{:?}", body);
    (took, resumed)
}

/// Whether the server's first record is a ServerHello accepting a PSK
/// (its `pre_shared_key` extension: the ServerHello is not encrypted).
async fn psk_accepted(addr: SocketAddr, hello: &[u8]) -> bool {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(hello).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if buf.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
            if buf.len() >= 5 + len {
                break;
            }
        }
        let n = tokio::time::timeout(PATIENCE, tcp.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before the ServerHello");
        buf.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(buf[0], 22, "a handshake record");
    let sh = &buf[5..];
    assert_eq!(sh[0], 2, "a ServerHello");
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(sh[at]); // session id
    at += 2 + 1; // cipher suite, compression
    let end = at + 2 + usize::from(u16::from_be_bytes([sh[at], sh[at + 1]]));
    at += 2;
    while at < end {
        let kind = u16::from_be_bytes([sh[at], sh[at + 1]]);
        let len = usize::from(u16::from_be_bytes([sh[at + 2], sh[at + 3]]));
        if kind == 41 {
            return true;
        }
        at += 4 + len;
    }
    false
}

/// Two gateways on `address`: a captured resuming ClientHello sent eight
/// times at once to both is resumed once; sessions issued by either
/// resume at the other. `sessions` counts the sessions in the store.
async fn resumed_once_in_the_fleet(address: StoreAddress, sessions: impl Fn() -> usize) {
    let a = gateway_with_store(Some(address.clone()), Duration::from_secs(2))
        .await
        .0;
    let b = gateway_with_store(Some(address), Duration::from_secs(2))
        .await
        .0;
    let cfg = client_config();
    let (_, resumed) = handshake(&cfg, a.addr).await;
    assert!(!resumed);
    // Written to Redis off the handshake: one ticket in a fleet.
    wait_sessions(&sessions, 1).await;
    // The ClientHello resuming one of them, as a client would send it.
    let mut conn = rustls::ClientConnection::new(cfg.clone(), name()).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    // Sent at once to both gateways, four times each.
    let tries: Vec<_> = (0..8)
        .map(|i| {
            let addr = if i % 2 == 0 { a.addr } else { b.addr };
            let hello = hello.clone();
            tokio::spawn(async move { psk_accepted(addr, &hello).await })
        })
        .collect();
    let mut accepted = 0;
    for t in tries {
        accepted += usize::from(t.await.unwrap());
    }
    assert_eq!(accepted, 1, "exactly one connection resumed the session");
    assert_eq!(
        a.metric("tls_sessions_taken") + b.metric("tls_sessions_taken"),
        1
    );
    assert_eq!(
        a.metric("tls_sessions_missed") + b.metric("tls_sessions_missed"),
        7
    );
    assert_eq!(sessions(), 0, "taken, a tombstone left");
    // A session issued by A resumes at B, and one issued by B at A.
    let cfg = client_config();
    assert!(!handshake(&cfg, a.addr).await.1);
    wait_sessions(&sessions, 1).await;
    let (_, resumed) = handshake(&cfg, b.addr).await;
    assert!(resumed, "a ticket from A, at B");
    wait_sessions(&sessions, 1).await;
    let (_, resumed) = handshake(&cfg, a.addr).await;
    assert!(resumed, "a ticket from B, at A");
}

async fn wait_sessions(sessions: impl Fn() -> usize, n: usize) {
    let start = Instant::now();
    while sessions() < n {
        assert!(start.elapsed() < PATIENCE, "sessions never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The ClientHello resuming `cfg`'s ticket, with early data if any.
fn resuming_hello(cfg: &Arc<rustls::ClientConfig>) -> Vec<u8> {
    let mut conn = rustls::ClientConnection::new(cfg.clone(), name()).unwrap();
    if let Some(mut early) = conn.early_data() {
        let _ = std::io::Write::write(
            &mut early,
            format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes(),
        );
    }
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

fn early_client() -> Arc<rustls::ClientConfig> {
    let mut cfg = (*client_config()).clone();
    cfg.enable_early_data = true;
    Arc::new(cfg)
}

/// Review sess-1 M2: a session written late (after a take at another
/// gateway found nothing) is not brought back: the take left a
/// tombstone and the write is `SET NX`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_does_not_bring_a_taken_session_back() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let proxy = HoldProxy::start(redis.port, false).await;
    let (a, a_store) = gateway_with_store(Some(proxy.address()), Duration::from_secs(2)).await;
    let b = gateway(Some(&redis), Duration::from_secs(2)).await;
    let cfg = early_client();
    // A's session write is held on its way to Redis.
    proxy.hold.store(true, Ordering::Release);
    let before = proxy.replied(0);
    assert!(!handshake(&cfg, a.addr).await.1);
    let hello = resuming_hello(&cfg);
    // Taken at B before it arrived: nothing there, a tombstone left.
    assert!(!psk_accepted(b.addr, &hello).await);
    assert_eq!(b.metric("tls_sessions_missed"), 1);
    let key = redis.session_key();
    assert_eq!(redis.cli(&["STRLEN", &key]), "0", "a tombstone");
    // The write arrives (its answer came back): it wrote nothing.
    proxy.hold.store(false, Ordering::Release);
    let start = Instant::now();
    while proxy.replied(0) == before {
        assert!(start.elapsed() < PATIENCE, "the held write never answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(redis.cli(&["STRLEN", &key]), "0", "still a tombstone");
    assert_eq!(redis.sessions(), 0);
    // The captured ClientHello resumes nowhere.
    assert!(!psk_accepted(b.addr, &hello).await);
    assert!(!psk_accepted(a.addr, &hello).await);
    assert_eq!(
        a.metric("tls_sessions_taken") + b.metric("tls_sessions_taken"),
        0
    );
    drop(a_store);
}

/// Review sess-1 M2: a take a gateway could not send (its store not
/// connected) is sent once the store answers: the captured ClientHello
/// it refused does not resume (with 0-RTT) at another gateway later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_never_sent_is_sent_later() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let a = gateway(Some(&redis), Duration::from_secs(2)).await;
    // C's store: everything it sends is held (it cannot connect).
    let proxy = HoldProxy::start(redis.port, true).await;
    let mut scfg = ReplayStoreConfig::new(proxy.address());
    scfg.skew = Duration::ZERO;
    scfg.timeout = Duration::from_secs(2);
    let c_store = ReplayStore::new(scfg, system_clock).unwrap();
    let c = start_gateway(GatewayOpts {
        tokens: true,
        replay_store: Some(c_store.clone()),
        ..GatewayOpts::default()
    })
    .await;
    let cfg = early_client();
    assert!(!handshake(&cfg, a.addr).await.1);
    wait_sessions(|| redis.sessions(), 1).await;
    let hello = resuming_hello(&cfg);
    assert!(!psk_accepted(c.addr, &hello).await, "C cannot take it");
    assert_eq!(c.metric("tls_sessions_unavailable"), 1);
    assert!(!c_store.connected());
    // C's store answers again: the queued take runs.
    proxy.hold.store(false, Ordering::Release);
    let key = redis.session_key();
    let start = Instant::now();
    while redis.cli(&["STRLEN", &key]) != "0" {
        assert!(start.elapsed() < PATIENCE, "the queued take never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !psk_accepted(a.addr, &hello).await,
        "not resumed at A later"
    );
    assert_eq!(a.metric("tls_early_data"), 0);
}

/// Review sess-1 H1: sessions written to the fleet's store are capped per
/// gateway (over the cap: no ticket, counted), one ticket per handshake;
/// look-ups are capped per source (over it: a full handshake, counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_writes_and_lookups_are_capped() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let mut limits = SessionLimits::default();
    limits.puts_per_second = 0.001; // one, then none for 1000 s
    limits.lookups_per_source_per_second = 0.001;
    let mut scfg = ReplayStoreConfig::new(single(&redis));
    scfg.skew = Duration::ZERO;
    scfg.timeout = Duration::from_secs(2);
    let store = ReplayStore::new(scfg, system_clock).unwrap();
    let a = start_gateway(GatewayOpts {
        tokens: true,
        replay_store: Some(store.clone()),
        tls_sessions: Some(TlsSessions::with_limits(16, DEFAULT_SESSION_TTL, limits)),
        ..GatewayOpts::default()
    })
    .await;
    let start = Instant::now();
    while !store.checking() {
        assert!(start.elapsed() < PATIENCE, "the store never checked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = client_config();
    for cfg in [
        first.clone(),
        client_config(),
        client_config(),
        client_config(),
    ] {
        assert!(!handshake(&cfg, a.addr).await.1);
    }
    assert_eq!(a.metric("tls_sessions_puts_limited"), 3);
    wait_sessions(|| redis.sessions(), 1).await;
    assert_eq!(redis.session_keys().len(), 1, "one session written in all");
    // The one session: looked up once (taken) ...
    let hello = resuming_hello(&first);
    assert!(psk_accepted(a.addr, &hello).await);
    // ... then this source's look-ups are over its cap: no look-up.
    assert!(!psk_accepted(a.addr, &hello).await);
    assert_eq!(a.metric("tls_sessions_lookups_limited"), 1);
    assert_eq!(a.metric("tls_sessions_taken"), 1);
}

/// Review sess-1 H1: an error Redis answers to a session command (here a
/// wrong type under a session's key) neither raises the replay guard nor
/// drops the connection: flights are still checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_answered_to_a_session_command_does_not_fail_the_store() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let (a, store) = gateway_with_store(Some(single(&redis)), Duration::from_secs(2)).await;
    let store = store.unwrap();
    let cfg = client_config();
    assert!(!handshake(&cfg, a.addr).await.1);
    wait_sessions(|| redis.sessions(), 1).await;
    let key = redis.session_key();
    redis.cli(&["DEL", &key]);
    redis.cli(&["RPUSH", &key, "x"]);
    let hello = resuming_hello(&cfg);
    assert!(!psk_accepted(a.addr, &hello).await);
    assert_eq!(a.metric("tls_sessions_unavailable"), 1, "the error came");
    assert!(store.checking(), "an error reply failed the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_resumption_is_resumed_by_one_connection_of_the_fleet() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    resumed_once_in_the_fleet(single(&redis), || redis.sessions()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_shares_sessions_across_its_slots() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let nodes = cluster(tmp.path()).await;
    let address: StoreAddress = format!(
        "redis+cluster://{}",
        nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    )
    .parse()
    .unwrap();
    resumed_once_in_the_fleet(address.clone(), || nodes.iter().map(Redis::sessions).sum()).await;
    // A node lost: sessions in its slots are neither written nor taken
    // (full handshakes), the others resume; no connection fails.
    let a = gateway_with_store(Some(address.clone()), Duration::from_secs(2))
        .await
        .0;
    let b = gateway_with_store(Some(address), Duration::from_secs(2))
        .await
        .0;
    let mut nodes = nodes;
    drop(nodes.remove(0));
    let mut resumed = 0;
    for _ in 0..6 {
        let cfg = client_config();
        assert!(!handshake(&cfg, a.addr).await.1);
        resumed += usize::from(handshake(&cfg, b.addr).await.1);
    }
    eprintln!("with a node lost, {resumed} of 6 resumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refusing_sessions_does_not_fail_the_replay_store() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let (a, store) = gateway_with_store(Some(single(&redis)), Duration::from_secs(2)).await;
    let store = store.unwrap();
    // A session written before Redis is full.
    let before = early_client();
    assert!(!handshake(&before, a.addr).await.1);
    wait_sessions(|| redis.sessions(), 1).await;
    // Full, and not evicting (FLEET.md's requirement): writes are refused OOM.
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let oom = || {
        redis
            .cli(&["INFO", "errorstats"])
            .lines()
            .find_map(|l| l.strip_prefix("errorstat_OOM:count="))
            .and_then(|n| n.split(',').next()?.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let cfg = client_config();
    let (_, resumed) = handshake(&cfg, a.addr).await;
    assert!(!resumed);
    let start = Instant::now();
    while oom() < 1 {
        assert!(start.elapsed() < PATIENCE, "the session writes never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing was lost: the connection stays and flights are still checked.
    assert!(store.checking(), "a refused session write failed the store");
    assert_eq!(redis.sessions(), 1, "only the one written before");
    // A full Redis still gives a session away (the take frees memory;
    // its tombstone may be refused), once.
    let hello = resuming_hello(&before);
    assert!(
        psk_accepted(a.addr, &hello).await,
        "taken from a full Redis"
    );
    assert!(!psk_accepted(a.addr, &hello).await);
    assert_eq!(redis.sessions(), 0);
    assert!(
        store.checking(),
        "a take from a full Redis failed the store"
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_sessions_stay_in_the_gateway_that_issued_them() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let a = gateway(Some(&redis), Duration::from_secs(2)).await;
    let b = gateway(Some(&redis), Duration::from_secs(2)).await;
    let tls12 = client_config_for(&rustls::version::TLS12);
    assert!(!handshake(&tls12, a.addr).await.1);
    // TLS 1.3 after it: its ticket reaches Redis, the TLS 1.2 session
    // (written first, had it been) does not.
    assert!(!handshake(&client_config(), a.addr).await.1);
    wait_sessions(|| redis.sessions(), 1).await;
    assert_eq!(redis.sessions(), 1);
    // Resumed (by session id, reusable) where it was issued, not elsewhere.
    assert!(!handshake(&tls12, b.addr).await.1);
    let tls12 = client_config_for(&rustls::version::TLS12);
    assert!(!handshake(&tls12, a.addr).await.1);
    assert!(handshake(&tls12, a.addr).await.1);
    assert!(handshake(&tls12, a.addr).await.1);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// The take's histogram in the gateway's OpenMetrics text: (count, mean,
/// the buckets holding the p50 and the p99, as their upper bounds).
fn take_histogram(env: &Env) -> (u64, f64, f64, f64) {
    let text = env.metrics.render();
    let buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("zrtt_gateway_tls_session_take_seconds_bucket{le=\"")?;
            let (le, n) = rest.split_once("\"} ")?;
            Some((le.parse().ok()?, n.trim().parse().ok()?))
        })
        .collect();
    let total = buckets.last().map_or(0.0, |b| b.1);
    let q = |p: f64| {
        buckets
            .iter()
            .find(|(_, n)| *n >= total * p)
            .map_or(f64::INFINITY, |b| b.0)
    };
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let count = value("zrtt_gateway_tls_session_take_seconds_count");
    let sum = value("zrtt_gateway_tls_session_take_seconds_sum");
    let mean = if count > 0.0 { sum / count } else { 0.0 };
    (count as u64, mean, q(0.5), q(0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement: prints the added latency of the Redis take"]
async fn measure_shared_resumption() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    // The default 1 ms deadline, as a fleet runs; every client from one
    // address here: no per-source cap on look-ups.
    let mut limits = SessionLimits::default();
    limits.lookups_per_source_per_second = 0.0;
    let deadline = zrtt_net::gateway::replay_store::DEFAULT_TIMEOUT;
    let a = gateway_with_limits(Some(single(&redis)), deadline, limits)
        .await
        .0;
    let b = gateway_with_limits(Some(single(&redis)), deadline, limits)
        .await
        .0;
    let lone = gateway(None, Duration::ZERO).await;
    let n = 300;
    let (mut shared, mut local) = (Vec::new(), Vec::new());
    let (mut shared_full, mut local_full) = (0, 0);
    let mut bytes = String::new();
    for i in 0..n {
        // A fresh client each time: one ticket from A resumed at B ...
        let cfg = client_config();
        handshake(&cfg, a.addr).await;
        let start = Instant::now();
        while redis.sessions() < 1 && start.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if i == 0 {
            let key = redis.cli(&["--scan", "--pattern", "zrtt:tls:*"]);
            let key = key.lines().next().unwrap_or_default().to_owned();
            bytes = format!(
                "{} (value {} bytes)",
                redis.cli(&["MEMORY", "USAGE", &key]),
                redis.cli(&["STRLEN", &key])
            );
        }
        let (took, resumed) = handshake(&cfg, b.addr).await;
        if resumed {
            shared.push(took);
        } else {
            shared_full += 1;
        }
        redis.cli(&["FLUSHDB"]);
        // ... and one from the lone gateway resumed there.
        let cfg = client_config();
        handshake(&cfg, lone.addr).await;
        let (took, resumed) = handshake(&cfg, lone.addr).await;
        if resumed {
            local.push(took);
        } else {
            local_full += 1;
        }
    }
    shared.sort();
    local.sort();
    let (count, mean, p50, p99) = take_histogram(&b);
    println!(
        "resumed handshakes (client's view, TCP connect to handshake done), {n} each:\n  \
         through Redis (A issued, B resumed): p50 {:?} p99 {:?} ({} of {n} resumed; {shared_full} full: store late or failed)\n  \
         lone gateway (in-process store):   p50 {:?} p99 {:?} ({} of {n} resumed; {local_full} full)\n  \
         added p50 {:?}, p99 {:?}\n  \
         the take alone (script at B, histogram): {count} takes, mean {:.0} us, p50 <= {:.0} us, p99 <= {:.0} us; unavailable {}, missed {}, over the caps {} + {}\n  \
         Redis memory per session (MEMORY USAGE of one key): {bytes} bytes",
        percentile(&shared, 0.5),
        percentile(&shared, 0.99),
        shared.len(),
        percentile(&local, 0.5),
        percentile(&local, 0.99),
        local.len(),
        percentile(&shared, 0.5).saturating_sub(percentile(&local, 0.5)),
        percentile(&shared, 0.99).saturating_sub(percentile(&local, 0.99)),
        mean * 1e6,
        p50 * 1e6,
        p99 * 1e6,
        b.metric("tls_sessions_unavailable"),
        b.metric("tls_sessions_missed"),
        b.metric("tls_sessions_lookups_limited"),
        a.metric("tls_sessions_puts_limited"),
    );
}
