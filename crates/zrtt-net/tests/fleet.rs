//! Gateways of a fleet sharing one replay store (docs/FLEET.md), against a
//! real `redis-server` (scripts/install-deps.sh installs it) started on a
//! free loopback port in its own directory and killed by PID at the end
//! (also when a test fails):
//! - a first flight served by gateway A and replayed to gateway B is
//!   refused there as a replay, and the backend runs it once; without the
//!   store it runs twice;
//! - a store that is slow, down or restarted: flights are refused Busy
//!   (the library client falls back to TLS and gets its answer), then
//!   checked again once the store is back, without restarting the gateway;
//! - a Redis Cluster: the same across gateways; with a node killed, no
//!   flight is served unless the store recorded it, flights hashing to the
//!   dead node's slots are refused Busy, and TLS still serves;
//! - a failover to a replica that lost a recorded flight: the flight is
//!   not served again (the store's guard).
//!
//! `measure_store_check_and_accept_rate` (ignored) prints the figures in
//! docs/FLEET.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::*;
use common::*;
use std::io::Write as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_net::client::{system_clock, Mode};
use zrtt_net::gateway::replay_store::{StoreVerdict, Unavailable};
use zrtt_net::gateway::{ReplayStore, ReplayStoreConfig, StoreAddress};
use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, Frame, RejectReason,
};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};

/// Bound on waits for something that happens within milliseconds (a
/// server starting, a connection coming back): only a broken setup
/// reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

/// A store for tests: gateways here share one clock (no skew), and the
/// deadline is generous (this checks behaviour, not speed, on a shared
/// machine; the 1 ms default is measured below).
fn store(address: StoreAddress) -> Arc<ReplayStore> {
    let mut cfg = ReplayStoreConfig::new(address);
    cfg.skew = Duration::ZERO;
    cfg.timeout = Duration::from_secs(2);
    ReplayStore::new(cfg, system_clock).unwrap()
}

/// Until every store checks flights stamped now (connected, past the guard).
async fn until_checking(stores: &[&Arc<ReplayStore>]) {
    let start = Instant::now();
    while !stores.iter().all(|s| s.checking()) {
        assert!(start.elapsed() < PATIENCE, "the store never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn gateway(
    keys: &[(KeyRecord, zrtt_proto::crypto::X25519KeyPair)],
    backend: SocketAddr,
    store: Option<Arc<ReplayStore>>,
) -> Env {
    start_gateway(GatewayOpts {
        keys: keys.to_vec(),
        backend: Some(backend),
        trusted: vec!["127.0.0.0/8".parse().unwrap()],
        replay_store: store,
        ..Default::default()
    })
    .await
}

fn flight(rec: &KeyRecord, early: &[u8]) -> (ClientHandshake, Vec<u8>) {
    let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    ClientHandshake::start(
        &v,
        &ClientParams::default(),
        early,
        system_clock(),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
}

/// The store key a flight is recorded under.
fn store_key(cfg: &ReplayStoreConfig, flight: &[u8]) -> String {
    match read_frame(flight, Expect::FirstFlight).unwrap().unwrap().0 {
        Frame::FirstFlight { header, noise, .. } => {
            cfg.key(header.key_id, noise[..32].try_into().unwrap())
        }
        _ => unreachable!(),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Reply,
    Reject(RejectReason),
    Closed,
}

/// Send `flight` on a new connection (as a replayer: no confirmation) and
/// read the first frame back.
async fn answer(addr: SocketAddr, flight: &[u8]) -> Answer {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(flight).await.unwrap();
    let mut buf = Vec::new();
    loop {
        match read_frame(&buf, Expect::ReplyOrReject) {
            Ok(Some((Frame::Reply { .. }, _))) => return Answer::Reply,
            Ok(Some((Frame::Reject { reason, .. }, _))) => return Answer::Reject(reason),
            Ok(Some((other, _))) => panic!("unexpected {other:?}"),
            Ok(None) => {}
            Err(e) => panic!("{e}"),
        }
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout(PATIENCE, tcp.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Answer::Closed,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => panic!("no answer within {PATIENCE:?}"),
        }
    }
}

async fn until_seen(seen: &std::sync::Mutex<Vec<String>>, n: usize) {
    let start = Instant::now();
    while seen.lock().unwrap().len() < n {
        assert!(start.elapsed() < PATIENCE, "the backend never saw it");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const ONCE: &[u8] = b"GET /once HTTP/1.1\r\nHost: www.example.com\r\n\r\n";

/// A flight served by A, then replayed to B (and to A); what B answers
/// and what the backend saw.
async fn replay_across(a: &Env, b: &Env, seen: &std::sync::Mutex<Vec<String>>) -> Answer {
    let before = seen.lock().unwrap().len();
    let (_hs, f) = flight(&a.records[0], ONCE);
    assert_eq!(answer(a.addr, &f).await, Answer::Reply, "A serves it");
    until_seen(seen, before + 1).await;
    let at_b = answer(b.addr, &f).await;
    assert_eq!(
        answer(a.addr, &f).await,
        Answer::Reject(RejectReason::Replay),
        "A's own filter"
    );
    at_b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_replayed_to_another_gateway_of_the_fleet_is_refused() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let (backend, seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let (sa, sb) = (store(single(&redis)), store(single(&redis)));
    let a = gateway(&keys, backend, Some(sa.clone())).await;
    let b = gateway(&keys, backend, Some(sb.clone())).await;
    until_checking(&[&sa, &sb]).await;

    assert_eq!(
        replay_across(&a, &b, &seen).await,
        Answer::Reject(RejectReason::Replay),
        "B refuses the replay"
    );
    assert_eq!(b.metric("replay_store_replays"), 1);
    assert_eq!(b.metric("zrtt_rejects_sent"), 1);
    assert_eq!(a.metric("replay_store_replays"), 0, "A's local filter");
    assert_eq!(a.metric("replay_store_unavailable"), 0);
    assert_eq!(b.metric("replay_store_unavailable"), 0);
    // Some time for a wrongly forwarded request to show up.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        ["GET /once early=1"],
        "the backend ran it exactly once"
    );
    // One key, living max_age + max_future + skew (12 s here).
    let keys_in = redis.cli(&["KEYS", "zrtt:*"]);
    let flights: Vec<&str> = keys_in.lines().filter(|k| *k != "zrtt:settings").collect();
    assert_eq!(flights.len(), 1, "{keys_in}");
    let ttl: u64 = redis.cli(&["PTTL", flights[0]]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 12_000, "{ttl}");
    assert!(a
        .metrics
        .render()
        .contains("zrtt_gateway_replay_store_check_seconds_count 1"));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_store_a_replay_to_another_gateway_runs_again() {
    // The same as above with a filter per gateway only: what the store is for.
    let (backend, seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let a = gateway(&keys, backend, None).await;
    let b = gateway(&keys, backend, None).await;
    assert_eq!(replay_across(&a, &b, &seen).await, Answer::Reply);
    until_seen(&seen, 2).await;
    assert_eq!(
        *seen.lock().unwrap(),
        ["GET /once early=1", "GET /once early=1"],
        "the backend ran it twice"
    );
    a.stop().await;
    b.stop().await;
}

/// One GET through the library client (zrtt, TLS fallback on).
async fn client_get(env: &Env) -> Mode {
    let cfg = Arc::new(client_config(env.records.clone()));
    let (answers, info) = fetch(cfg, env.addr, vec![get("/tls")]).await.unwrap();
    assert_eq!(answers[0].0, 200, "{answers:?}");
    info.mode
}

/// Fresh flights until one is served; every one before must be refused Busy.
async fn until_served(env: &Env) -> usize {
    let start = Instant::now();
    let mut busy = 0;
    loop {
        let (_hs, f) = flight(&env.records[0], ONCE);
        match answer(env.addr, &f).await {
            Answer::Reply => return busy,
            Answer::Reject(RejectReason::Busy) => busy += 1,
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < PATIENCE, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_lost_store_refuses_busy_and_tls_serves_until_it_is_back() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut redis = Redis::start(tmp.path(), false);
    let mut cfg = ReplayStoreConfig::new(single(&redis));
    cfg.skew = Duration::ZERO;
    cfg.timeout = Duration::from_millis(300);
    let s = ReplayStore::new(cfg, system_clock).unwrap();
    let (backend, _seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let env = gateway(&keys, backend, Some(s.clone())).await;
    until_checking(&[&s]).await;
    assert_eq!(until_served(&env).await, 0);
    assert_ne!(client_get(&env).await, Mode::TlsFallback);

    // Slow: the store stops answering (SIGSTOP): refused at the deadline.
    let stop = |sig: &str, pid: u32| {
        assert!(Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success());
    };
    stop("-STOP", redis.pid());
    let (_hs, f) = flight(&env.records[0], ONCE);
    let refused = answer(env.addr, &f).await;
    stop("-CONT", redis.pid());
    assert_eq!(refused, Answer::Reject(RejectReason::Busy));
    assert_eq!(env.metric("replay_store_unavailable"), 1);
    // (Had redis-rs given up on the late answer, that error raised the
    // guard and flights are refused Busy a little longer.)
    until_checking(&[&s]).await;
    until_served(&env).await;

    // Down: Busy, and the library client gets its answer over TLS.
    redis.kill();
    let (_hs, f) = flight(&env.records[0], ONCE);
    assert_eq!(
        answer(env.addr, &f).await,
        Answer::Reject(RejectReason::Busy)
    );
    assert_eq!(client_get(&env).await, Mode::TlsFallback);
    assert!(env.metric("replay_store_unavailable") >= 3);
    let accepted = env.metric("zrtt_accepted");

    // Back, empty, on the same port: checked again, the gateway untouched.
    redis.restart();
    let busy = until_served(&env).await;
    assert_eq!(
        env.metric("zrtt_accepted"),
        accepted + 1,
        "nothing served unchecked meanwhile ({busy} refused Busy)"
    );
    assert_eq!(redis.flights(), 1, "recorded in the new store");
    env.stop().await;
}

/// The slot ranges a cluster node serves (from `CLUSTER NODES`).
fn own_slots(node: &Redis) -> Vec<(u16, u16)> {
    let nodes = node.cli(&["CLUSTER", "NODES"]);
    let me = nodes.lines().find(|l| l.contains("myself")).unwrap();
    me.split_whitespace()
        .skip(8)
        .filter(|r| !r.starts_with('['))
        .map(|r| match r.split_once('-') {
            Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
            None => (r.parse().unwrap(), r.parse().unwrap()),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_shares_replays_and_a_lost_node_fails_safe() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut nodes = cluster(tmp.path()).await;
    let address = cluster_address(&nodes);
    let (sa, sb) = (store(address.clone()), store(address));
    let (backend, seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let a = gateway(&keys, backend, Some(sa.clone())).await;
    let b = gateway(&keys, backend, Some(sb.clone())).await;
    until_checking(&[&sa, &sb]).await;

    // Across gateways, keys spread over the nodes.
    for _ in 0..6 {
        assert_eq!(
            replay_across(&a, &b, &seen).await,
            Answer::Reject(RejectReason::Replay)
        );
    }
    assert_eq!(b.metric("replay_store_replays"), 6);
    assert_eq!(seen.lock().unwrap().len(), 6);
    let held: Vec<usize> = nodes.iter().map(|n| n.flights()).collect();
    assert_eq!(held.iter().sum::<usize>(), 6, "{held:?}");

    // One node lost (no replica): never served unchecked.
    let dead = own_slots(&nodes[2]);
    nodes[2].kill();
    let live = &nodes[0];
    let in_dead = |slot: u16| dead.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot));
    let (mut dead_busy, mut served, mut busy) = (0, 0, 0);
    let start = Instant::now();
    while dead_busy < 3 {
        assert!(
            start.elapsed() < PATIENCE,
            "no flight hashed to the dead node"
        );
        let (_hs, f) = flight(&a.records[0], ONCE);
        let key = store_key(sa.config(), &f);
        let slot: u16 = live.cli(&["CLUSTER", "KEYSLOT", &key]).parse().unwrap();
        match answer(a.addr, &f).await {
            Answer::Reply => {
                served += 1;
                assert!(!in_dead(slot), "served with its key on the dead node");
                assert_eq!(
                    Command::new("redis-cli")
                        .args(["-c", "-h", "127.0.0.1", "-p", &live.port.to_string()])
                        .args(["GET", &key])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                        .unwrap(),
                    "1",
                    "served only once recorded"
                );
            }
            Answer::Reject(RejectReason::Busy) => {
                busy += 1;
                if in_dead(slot) {
                    dead_busy += 1;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    eprintln!("node lost: {served} served (recorded on live nodes), {busy} refused Busy");
    assert_eq!(a.metric("zrtt_accepted"), 6 + served);
    // The library client gets its answer: over TLS when refused Busy
    // (as it is while the guard of the last error lasts), else over zrtt,
    // checked like every flight above.
    let mode = client_get(&a).await;
    eprintln!("library client: {}", mode.as_str());
    // TLS itself, unaffected (a client without key records).
    let cfg = Arc::new(client_config(Vec::new()));
    let (answers, info) = fetch(cfg, a.addr, vec![get("/tls")]).await.unwrap();
    assert_eq!((answers[0].0, info.mode), (200, Mode::TlsFallback));
    a.stop().await;
    b.stop().await;
}

/// A fresh flight whose store key hashes into `slots`, and that key.
fn flight_in(
    rec: &KeyRecord,
    cfg: &ReplayStoreConfig,
    node: &Redis,
    slots: &[(u16, u16)],
) -> (Vec<u8>, String) {
    loop {
        let (_hs, f) = flight(rec, ONCE);
        let key = store_key(cfg, &f);
        let slot: u16 = node.cli(&["CLUSTER", "KEYSLOT", &key]).parse().unwrap();
        if slots.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot)) {
            return (f, key);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_a_flight_does_not_let_its_replay_run() {
    // Redis replication is asynchronous: a replica promoted after its
    // master died may lack the master's last writes. Here it certainly
    // does (the replica is cut off just before the flight is recorded);
    // the guard must keep the lost flight from being served again.
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut nodes = cluster(tmp.path()).await;
    let master_id = nodes[0].cli(&["CLUSTER", "MYID"]);
    let replica = Redis::start(tmp.path(), true);
    let out = Command::new("redis-cli")
        .args(["--cluster", "add-node", &replica.node(), &nodes[1].node()])
        .args(["--cluster-slave", "--cluster-master-id", &master_id])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let start = Instant::now();
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(start.elapsed() < PATIENCE, "replica never in sync");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let address = cluster_address(&nodes);
    let (sa, sb) = (store(address.clone()), store(address));
    let (backend, seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let a = gateway(&keys, backend, Some(sa.clone())).await;
    let b = gateway(&keys, backend, Some(sb.clone())).await;
    until_checking(&[&sa, &sb]).await;
    let slots = own_slots(&nodes[0]);
    let (f, key) = flight_in(&a.records[0], sa.config(), &nodes[1], &slots);

    // The replica cut off (and unable to come back: a password it lacks),
    // the flight recorded on the master only, the master lost at once.
    let mut cli = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &nodes[0].port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // One connection: it stays authenticated after the password is set.
    cli.stdin
        .take()
        .unwrap()
        .write_all(b"CONFIG SET requirepass zrtt-test\nCLIENT KILL TYPE replica\n")
        .unwrap();
    let out = cli.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK\n1");
    let recorded = Instant::now();
    assert_eq!(answer(a.addr, &f).await, Answer::Reply);
    nodes[0].kill();
    assert_eq!(replica.cli(&["CLUSTER", "FAILOVER", "TAKEOVER"]), "OK");
    let start = Instant::now();
    while !replica
        .cli(&["INFO", "replication"])
        .contains("role:master")
    {
        assert!(start.elapsed() < PATIENCE, "no failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        replica.cli(&["GET", &key]),
        "",
        "the promoted replica lost the flight"
    );

    // B has not seen the lost flight. Its first check of another flight on
    // that slot fails (the master is gone): Busy, and the guard is raised.
    let (other, _) = flight_in(&b.records[0], sb.config(), &nodes[1], &slots);
    assert_eq!(
        answer(b.addr, &other).await,
        Answer::Reject(RejectReason::Busy)
    );
    // B routes the slot to the promoted replica and serves fresh flights...
    let start = Instant::now();
    loop {
        let (fresh, _) = flight_in(&b.records[0], sb.config(), &nodes[1], &slots);
        match answer(b.addr, &fresh).await {
            Answer::Reply => break,
            Answer::Reject(RejectReason::Busy) => {}
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < PATIENCE, "B never served again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(replica.flights(), 1, "the fresh flight, on the new master");
    // ... but not the lost one, though neither the store nor B's own
    // filter has it: the guard.
    let again = answer(b.addr, &f).await;
    assert_ne!(again, Answer::Reply, "a lost flight served twice");
    if recorded.elapsed() < Duration::from_secs(9) {
        // Still inside the window: refused by the guard, not the clock.
        assert_eq!(again, Answer::Reject(RejectReason::Busy));
    } else {
        eprintln!("slow machine: the flight left its window first ({again:?})");
    }
    assert_eq!(b.metric("replay_store_replays"), 0);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2,
        "the lost flight once (on A), the fresh one once: {seen:?}"
    );
    a.stop().await;
    b.stop().await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Accepted first flights per second through `env`, `n` flights from
/// `conc` concurrent senders; (per second, replies, Busy refusals).
async fn accept_rate(env: &Env, n: usize, conc: usize) -> (f64, usize, usize) {
    let rec = env.records[0].clone();
    let addr = env.addr;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..conc {
        let rec = rec.clone();
        tasks.spawn(async move {
            let (mut ok, mut busy) = (0, 0);
            for _ in (i..n).step_by(conc) {
                let (_hs, f) = flight(&rec, ONCE);
                match answer(addr, &f).await {
                    Answer::Reply => ok += 1,
                    Answer::Reject(RejectReason::Busy) => busy += 1,
                    other => panic!("{other:?}"),
                }
            }
            (ok, busy)
        });
    }
    let (mut ok, mut busy) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (o, b) = r.unwrap();
        ok += o;
        busy += b;
    }
    (n as f64 / start.elapsed().as_secs_f64(), ok, busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p zrtt-net --test fleet -- --ignored --nocapture"]
async fn measure_store_check_and_accept_rate() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    // The store check alone, sequential, default deadline (1 ms).
    let s = ReplayStore::new(ReplayStoreConfig::new(single(&redis)), system_clock).unwrap();
    s.connect();
    until_checking(&[&s]).await;
    let used = |r: &Redis| -> i64 {
        r.cli(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = used(&redis);
    let n = 20_000;
    let mut times = Vec::with_capacity(n);
    let mut late = 0;
    for i in 0..n {
        let mut eph = [0u8; 32];
        eph[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let t0 = Instant::now();
        let v = s.check(7, &eph, system_clock()).await;
        times.push(t0.elapsed());
        if v != zrtt_net::gateway::replay_store::StoreVerdict::Fresh {
            late += 1;
        }
    }
    times.sort();
    println!(
        "redis memory: {} bytes per recorded flight ({} keys)",
        (used(&redis) - before) / n as i64,
        redis.flights()
    );
    println!(
        "store check, sequential, {n}: p50 {:?} p99 {:?} max {:?}; {late} not Fresh (deadline 1 ms)",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[n - 1]
    );
    // Accepts per second, with and without the store (default deadline).
    let (backend, _seen) = start_backend().await;
    let keys = vec![record("zrtt fleet key", 16384)];
    let plain = gateway(&keys, backend, None).await;
    let s2 = ReplayStore::new(ReplayStoreConfig::new(single(&redis)), system_clock).unwrap();
    let with = gateway(&keys, backend, Some(s2.clone())).await;
    until_checking(&[&s2]).await;
    for (name, env) in [("without store", &plain), ("with store", &with)] {
        let _ = accept_rate(env, 200, 8).await; // warm-up
        let (rate, ok, busy) = accept_rate(env, 3000, 8).await;
        println!("{name}: {rate:.0} first flights/s (8 concurrent), {ok} served, {busy} Busy");
    }
    let text = with.metrics.render();
    for l in text
        .lines()
        .filter(|l| l.starts_with("zrtt_gateway_replay_store"))
    {
        println!("{l}");
    }
    plain.stop().await;
    with.stop().await;
}

/// Gateways sharing a prefix must share the replay window: a key one of
/// them keeps `max_age + max_future + skew` must cover every other's
/// window. The first gateway records its settings in the store; one with
/// other settings does not use the store (every flight refused Busy, its
/// clients on TLS) and says why, until the settings agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_other_settings_does_not_use_the_store() {
    if !redis_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let redis = Redis::start(tmp.path(), false);
    let mut cfg = ReplayStoreConfig::new(single(&redis));
    cfg.timeout = Duration::from_millis(300);
    let first = ReplayStore::new(cfg.clone(), system_clock).unwrap();
    first.connect();
    let start = Instant::now();
    while !first.connected() {
        assert!(start.elapsed() < PATIENCE, "never connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(redis
        .cli(&["GET", "zrtt:settings"])
        .contains("skew_ms=5000"));
    let mut other = cfg.clone();
    other.skew = Duration::from_secs(1);
    let second = ReplayStore::new(other, system_clock).unwrap();
    // Every attempt (20 checks, each starting a connection attempt when
    // none is under way) is refused: it never connects.
    for _ in 0..20 {
        let v = second
            .check(
                1,
                &[9; 32],
                system_clock().saturating_add(Duration::from_secs(1)),
            )
            .await;
        assert_eq!(v, StoreVerdict::Unavailable(Unavailable::NotConnected));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!second.connected());
    // Settings changed everywhere: the record is removed, then it connects.
    redis.cli(&["DEL", "zrtt:settings"]);
    let start = Instant::now();
    while !second.connected() {
        assert!(start.elapsed() < PATIENCE, "never connected after the DEL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(redis
        .cli(&["GET", "zrtt:settings"])
        .contains("skew_ms=1000"));
}
