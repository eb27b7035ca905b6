//! Server-side CPU per accepted first flight, against its crypto floor.
//!
//! `cargo bench -p zrtt-net --bench gateway_cpu` runs, on loopback:
//!
//! - an HTTP/1.1 backend on its own thread (not counted);
//! - the gateway on a dedicated current-thread tokio runtime, so that every
//!   bit of its work (accept, first-flight decryption, gating, hyper's server
//!   over the channel, hyper's pooled client to the backend, timers) runs on
//!   one OS thread whose CPU time the kernel accounts precisely
//!   (`/proc/<pid>/task/<tid>/schedstat`, ns; user/system split from `stat`;
//!   context switches from `status`);
//! - clients on other threads opening one new connection per request
//!   (first flight → gateway → backend → reply → close).
//!
//! It prints µs of gateway CPU per connection for four paths (zrtt to a
//! proven address, the same resumed with a ticket (docs/PROTOCOL.md §12),
//! zrtt gated, TLS 1.3 on the same port) beside the crypto
//! floor of an accepted first flight (1 X25519 DH + HKDF + AEAD open of the
//! request + SHA-256 of the transcript, the same primitives snow uses, as in
//! `zrtt-proto/benches/core.rs`) and the cost of the core's `accept` + `reply`
//! alone, all as thread CPU time re-measured after every tenth of each path
//! (the ratios are medians of per-tenth ratios, robust to a shared, drifting
//! machine). `ZRTT_BENCH_CONNS` sets the connections per path (default
//! 3000), `ZRTT_BENCH_ONLY=proven|resumed|gated|tls` runs one path (for
//! `strace -ff`). Results and their reading: docs/GATEWAY.md.
//! Fast Open is off on the client: the namespace's `tcp_fastopen` usually
//! lacks the server bit, and SYN data changes no server CPU but the SYN path.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    missing_docs,
    dead_code
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use common::*;
use pki_types::pem::PemObject;
use ring::{digest, hmac};
use snow::params::{CipherChoice, DHChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver, RingResolver};
use zrtt_net::client::ClientConfig;
use zrtt_net::gateway::{tls_server_config, Gateway, GatewayConfig, Metrics};
use zrtt_proto::admission::IpNet;
use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, Extensions, ServerConfig, Transport,
};
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};

const CERT_PEM: &str = include_str!("../../zrtt-proto/tests/data/ed25519-cert.pem");
const KEY_PEM: &str = include_str!("../../zrtt-proto/tests/data/ed25519-cert.key");
/// What hyper's client writes for `get("/")` (the early data).
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nhost: www.example.com\r\n\r\n";

/// CPU counters of one thread.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    run_ns: u64,
    utime: u64,
    stime: u64,
    ctx: u64,
}

/// This thread's CPU time, exact (`/proc/.../schedstat` of a running
/// thread is only updated at ticks).
#[allow(unsafe_code)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Another thread's counters from /proc (exact while it is not running:
/// sample it when idle).
struct ThreadCpu(PathBuf);

impl ThreadCpu {
    /// The calling thread (resolved to a stable `/proc/<pid>/task/<tid>` path).
    fn current() -> Self {
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        Self(PathBuf::from("/proc").join(link))
    }

    fn sample(&self) -> Sample {
        let read = |f: &str| std::fs::read_to_string(self.0.join(f)).unwrap();
        let run_ns = read("schedstat")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let stat = read("stat");
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        let field = |text: &str, name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim_start_matches(':').trim().parse().unwrap())
                .unwrap_or(0)
        };
        let status = read("status");
        Sample {
            run_ns,
            utime: rest[11].parse().unwrap(),
            stime: rest[12].parse().unwrap(),
            ctx: field(&status, "voluntary_ctxt_switches")
                + field(&status, "nonvoluntary_ctxt_switches"),
        }
    }
}

/// Start the backend on its own thread; returns its address.
fn backend_thread() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    let builder = std::thread::Builder::new().name("zrtt-backend".into());
    builder
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (addr, _) = start_backend().await;
                tx.send(addr).unwrap();
                std::future::pending::<()>().await;
            });
        })
        .unwrap();
    rx.recv().unwrap()
}

struct GatewayThread {
    addr: SocketAddr,
    cpu: ThreadCpu,
    metrics: Arc<Metrics>,
}

/// Start a gateway on a dedicated current-thread runtime.
fn gateway_thread(
    backend: SocketAddr,
    keys: Vec<(
        zrtt_proto::record::KeyRecord,
        zrtt_proto::crypto::X25519KeyPair,
    )>,
    trusted: Vec<IpNet>,
    tokens: bool,
) -> GatewayThread {
    let (tx, rx) = std::sync::mpsc::channel();
    let builder = std::thread::Builder::new().name("zrtt-gateway".into());
    builder
        .spawn(move || {
            let cpu = ThreadCpu::current();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let chain =
                    vec![pki_types::CertificateDer::from_pem_slice(CERT_PEM.as_bytes()).unwrap()];
                let key = pki_types::PrivateKeyDer::from_pem_slice(KEY_PEM.as_bytes()).unwrap();
                let mut cfg = GatewayConfig::new(
                    Arc::new(RwLock::new(server_keys(&keys))),
                    tls_server_config(chain, key).unwrap(),
                    backend,
                )
                .unwrap();
                cfg.replay = Arc::new(Mutex::new(BloomReplayFilter::new(
                    ReplayConfig::default(),
                    [9; 32],
                    zrtt_net::client::system_clock().saturating_sub(Duration::from_secs(5)),
                )));
                cfg.admission.dangerous().set_trusted_networks(trusted);
                if tokens {
                    // Tokens on: resumption tickets are sealed with keys
                    // derived from the token keys.
                    use zrtt_proto::admission::{TokenKey, TokenKeyRing, TokenKeys};
                    cfg.admission.tokens = Some(TokenKeyRing::new(TokenKeys::single(
                        TokenKey::new(&[7; 32], Duration::from_secs(3600)),
                    )));
                }
                let l = &mut cfg.admission.limits;
                l.max_connections = 100_000;
                l.hard_max_connections = 100_000;
                l.decrypts_per_sec = 0.0;
                l.hard_decrypts_per_sec = 0.0;
                let gw = Gateway::bind("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
                let records = keys.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>();
                tx.send((gw.local_addr().unwrap(), gw.metrics(), cpu, records))
                    .unwrap();
                gw.run(std::future::pending()).await.unwrap();
            });
        })
        .unwrap();
    let (addr, metrics, cpu, _records) = rx.recv().unwrap();
    eprintln!("gateway thread {} on {addr}", cpu.0.display());
    GatewayThread { addr, cpu, metrics }
}

fn metric(m: &Metrics, name: &str) -> u64 {
    m.snapshot()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap()
}

/// `n` connections, one request each, `concurrency` at a time.
fn drive(rt: &tokio::runtime::Runtime, cfg: Arc<ClientConfig>, gw: &GatewayThread, n: usize) {
    let addr = gw.addr;
    let metrics = gw.metrics.clone();
    let concurrency = 4;
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for w in 0..concurrency {
            let cfg = cfg.clone();
            let metrics = metrics.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    let (resp, _) = match fetch(cfg.clone(), addr, vec![get("/")]).await {
                        Ok(r) => r,
                        Err(e) => panic!("connection {i}: {e}; gateway: {:?}", metrics.snapshot()),
                    };
                    assert_eq!(resp[0].0, 200);
                    i += concurrency;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

struct Row {
    name: &'static str,
    conns: usize,
    us: f64,
    user_share: f64,
    ctx: f64,
    /// Median over chunks of us/conn / floor of accept.
    x_accept: f64,
    /// The same against the floor of accept + reply.
    x_full: f64,
}

fn measure(
    name: &'static str,
    rt: &tokio::runtime::Runtime,
    cfg: Arc<ClientConfig>,
    gw: &GatewayThread,
    n: usize,
    cores: &mut Vec<Core>,
    check: impl Fn(&Metrics),
) -> Row {
    drive(rt, cfg.clone(), gw, n / 10 + 50); // warm up (pools, caches)
    std::thread::sleep(Duration::from_millis(100));
    // Ten chunks, each followed by the microbenchmarks, so that every ratio
    // compares CPU time measured on the same machine state.
    let chunks = 10;
    let (mut total, mut r_accept, mut r_full) = (Sample::default(), Vec::new(), Vec::new());
    for c in 0..chunks {
        let m = n / chunks + usize::from(c < n % chunks);
        let a = gw.cpu.sample();
        drive(rt, cfg.clone(), gw, m);
        std::thread::sleep(Duration::from_millis(50)); // let closes finish
        let b = gw.cpu.sample();
        total.run_ns += b.run_ns - a.run_ns;
        total.utime += b.utime - a.utime;
        total.stime += b.stime - a.stime;
        total.ctx += b.ctx - a.ctx;
        let us = (b.run_ns - a.run_ns) as f64 / 1e3 / m as f64;
        let core = core_costs(150);
        r_accept.push(us / core.floor_accept);
        r_full.push(us / core.floor_full);
        cores.push(core);
    }
    check(&gw.metrics);
    let ticks = (total.utime + total.stime).max(1) as f64;
    Row {
        name,
        conns: n,
        us: total.run_ns as f64 / 1e3 / n as f64,
        user_share: total.utime as f64 / ticks,
        ctx: total.ctx as f64 / n as f64,
        x_accept: median(r_accept),
        x_full: median(r_full),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The crypto floor of accepting one first flight (as in zrtt-proto's core bench).
struct Floor {
    dh: Box<dyn snow::types::Dh>,
    peer: [u8; 32],
    cipher: Box<dyn snow::types::Cipher>,
    ct: Vec<u8>,
    hmac_key: hmac::Key,
}

impl Floor {
    fn new(payload_len: usize) -> Self {
        let mut dh = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        dh.set(&[7u8; 32]);
        let mut peer_dh = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        peer_dh.set(&[9u8; 32]);
        let mut peer = [0u8; 32];
        peer.copy_from_slice(peer_dh.pubkey());
        let mut cipher = RingResolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .unwrap();
        cipher.set(&[1u8; 32]);
        let payload = vec![0u8; payload_len];
        let mut ct = vec![0u8; payload.len() + 16];
        cipher.encrypt(0, &[0u8; 32], &payload, &mut ct);
        Self {
            dh,
            peer,
            cipher,
            ct,
            hmac_key: hmac::Key::new(hmac::HMAC_SHA256, &[2u8; 32]),
        }
    }

    fn accept(&self) -> usize {
        let mut shared = [0u8; 32];
        self.dh.dh(&self.peer, &mut shared).unwrap();
        let temp = hmac::sign(&self.hmac_key, &shared);
        let tk = hmac::Key::new(hmac::HMAC_SHA256, temp.as_ref());
        let o1 = hmac::sign(&tk, &[1]);
        let mut m = o1.as_ref().to_vec();
        m.push(2);
        black_box(hmac::sign(&tk, &m));
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(&[0u8; 64]);
        ctx.update(&self.peer);
        ctx.update(&self.ct);
        black_box(ctx.finish());
        let mut pt = vec![0u8; self.ct.len()];
        self.cipher
            .decrypt(0, &[0u8; 32], &self.ct, &mut pt)
            .unwrap()
    }

    /// What answering adds (NK `e, ee`): ephemeral key generation, one more
    /// DH, HKDF, AEAD seal of the response.
    fn reply(&self, response_len: usize) -> usize {
        let mut e = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        e.set(&[black_box(3u8); 32]);
        black_box(e.pubkey());
        let mut shared = [0u8; 32];
        e.dh(&self.peer, &mut shared).unwrap();
        let temp = hmac::sign(&self.hmac_key, &shared);
        let tk = hmac::Key::new(hmac::HMAC_SHA256, temp.as_ref());
        black_box(hmac::sign(&tk, &[1]));
        let pt = vec![0u8; response_len];
        let mut ct = vec![0u8; response_len + 16];
        self.cipher.encrypt(0, &[0u8; 32], &pt, &mut ct)
    }
}

/// Median over 15 rounds of µs of this thread's CPU time per call, the
/// functions interleaved round by round so that all see the same machine
/// (other processes share the cores, and the VM's speed drifts).
fn time_us<const N: usize>(iters: usize, mut fs: [&mut dyn FnMut(); N]) -> [f64; N] {
    let mut samples = vec![Vec::new(); N];
    for _ in 0..15 {
        for (f, out) in fs.iter_mut().zip(samples.iter_mut()) {
            let a = thread_cpu_ns();
            for _ in 0..iters {
                f();
            }
            out.push((thread_cpu_ns() - a) as f64 / 1e3 / iters as f64);
        }
    }
    let mut res = [0.0; N];
    for (r, mut s) in res.iter_mut().zip(samples) {
        s.sort_by(f64::total_cmp);
        *r = s[s.len() / 2];
    }
    res
}

/// Microbenchmarks, µs of CPU per call.
struct Core {
    /// `ServerConfig::accept` + `Accepted::reply` (what the gateway calls per flight).
    accept_reply: f64,
    /// Floor of accepting: 1 DH + HKDF + AEAD open + SHA-256.
    floor_accept: f64,
    /// Floor of accepting and answering: adds key generation, 1 DH, HKDF, AEAD seal.
    floor_full: f64,
    /// X25519 key generation + DH with curve25519-dalek (snow; zrtt's IK
    /// replies; the flight's `es` is its DH alone).
    keygen_dh_dalek: f64,
    /// The same with ring (rustls, the TLS path; zrtt's NK replies).
    keygen_dh_ring: f64,
}

fn core_costs(iters: usize) -> Core {
    let keys = vec![record("zrtt test key 1", 16384)];
    let server: ServerConfig = server_keys(&keys);
    let now = zrtt_net::client::system_clock();
    let rec = keys[0].0.verify(&cert_der(), HOST, now).unwrap();
    let rng = ring::rand::SystemRandom::new();
    let flights: Vec<Vec<u8>> = (0..iters + 15)
        .map(|_| {
            ClientHandshake::start(&rec, &ClientParams::default(), REQUEST, now, &rng)
                .unwrap()
                .1
        })
        .collect();
    let mut filter = BloomReplayFilter::new(
        ReplayConfig::default(),
        [3; 32],
        now.saturating_sub(Duration::from_secs(5)),
    );
    let mut next = 0;
    let mut accept = || {
        let (frame, _) = read_frame(&flights[next], Expect::FirstFlight)
            .unwrap()
            .unwrap();
        next += 1;
        let a = server
            .accept(&frame, Transport::Tcp, now, &mut filter, &rng)
            .unwrap();
        black_box(
            a.reply(
                &Extensions::new(),
                b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\nGET / early=1 body=0",
            )
            .unwrap(),
        );
    };
    let floor = Floor::new(REQUEST.len() + 10);
    let mut floor_a = || {
        black_box(floor.accept());
    };
    let mut floor_f = || {
        black_box(floor.accept());
        black_box(floor.reply(64));
    };
    let mut dalek = || {
        let mut e = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        e.set(&[black_box(3u8); 32]);
        let mut shared = [0u8; 32];
        e.dh(&floor.peer, &mut shared).unwrap();
        black_box(shared);
    };
    let mut ring_x = || {
        let k =
            ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, &rng).unwrap();
        black_box(k.compute_public_key().unwrap());
        let peer = ring::agreement::UnparsedPublicKey::new(&ring::agreement::X25519, floor.peer);
        black_box(ring::agreement::agree_ephemeral(k, &peer, |s| s[0]).unwrap());
    };
    let [accept, floor_accept, floor_full, dalek, ring_x] = time_us(
        iters / 15,
        [
            &mut accept,
            &mut floor_a,
            &mut floor_f,
            &mut dalek,
            &mut ring_x,
        ],
    );
    Core {
        accept_reply: accept,
        floor_accept,
        floor_full,
        keygen_dh_dalek: dalek,
        keygen_dh_ring: ring_x,
    }
}

fn main() {
    // `cargo test --benches` runs benches with `--bench` absent: do a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("ZRTT_BENCH_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 40 } else { 3000 });

    let mut cores = vec![core_costs(1500)];
    let backend = backend_thread();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // One record for the client and every gateway (its id covers its validity).
    let keys = vec![record("zrtt test key 1", 16384)];
    let mut zrtt_cfg = client_config(keys.iter().map(|(r, _)| r.clone()).collect());
    zrtt_cfg.fast_open = false;
    zrtt_cfg.tls_fallback = false;
    // Resuming clients: a ticket store with room for every connection in
    // flight (the warm-up's first contacts fill it).
    let mut resume_cfg = client_config(keys.iter().map(|(r, _)| r.clone()).collect());
    resume_cfg.fast_open = false;
    resume_cfg.tls_fallback = false;
    resume_cfg.tokens = Some(Arc::new(
        zrtt_net::client::TokenStore::with_tickets_per_server(64),
    ));
    let resume_cfg = Arc::new(resume_cfg);
    let zrtt_cfg = Arc::new(zrtt_cfg);
    let mut tls_cfg = client_config(Vec::new());
    tls_cfg.fast_open = false;
    let tls_cfg = Arc::new(tls_cfg);

    // `ZRTT_BENCH_ONLY=proven|resumed|gated|tls` runs one path (e.g. under strace -ff).
    let only = std::env::var("ZRTT_BENCH_ONLY").unwrap_or_default();
    let run = |name: &str| only.is_empty() || only == name;
    let mut rows = Vec::new();
    if run("proven") {
        let gw = gateway_thread(
            backend,
            keys.clone(),
            vec!["127.0.0.0/8".parse().unwrap()],
            false,
        );
        rows.push(measure(
            "zrtt, proven address (answered early)",
            &rt,
            zrtt_cfg.clone(),
            &gw,
            n,
            &mut cores,
            |m| {
                assert_eq!(metric(m, "zrtt_answered_gated"), 0);
                assert!(metric(m, "zrtt_answered_early") > 0);
            },
        ));
    }
    if run("resumed") {
        let gw = gateway_thread(
            backend,
            keys.clone(),
            vec!["127.0.0.0/8".parse().unwrap()],
            true,
        );
        rows.push(measure(
            "zrtt resumed, proven (answered early)",
            &rt,
            resume_cfg,
            &gw,
            n,
            &mut cores,
            |m| {
                assert_eq!(metric(m, "zrtt_answered_gated"), 0);
                // All but the warm-up's first contacts resumed.
                let (acc, res) = (metric(m, "zrtt_accepted"), metric(m, "zrtt_resumed"));
                assert!(res + 16 >= acc, "{res} of {acc} resumed");
            },
        ));
    }
    if run("gated") {
        let gw = gateway_thread(backend, keys.clone(), Vec::new(), false);
        rows.push(measure(
            "zrtt, unproven address (gated)",
            &rt,
            zrtt_cfg,
            &gw,
            n,
            &mut cores,
            |m| {
                assert_eq!(metric(m, "zrtt_answered_early"), 0);
                assert!(metric(m, "zrtt_answered_gated") > 0);
            },
        ));
    }
    if run("tls") {
        let gw = gateway_thread(backend, keys.clone(), Vec::new(), false);
        rows.push(measure(
            "TLS 1.3, same port",
            &rt,
            tls_cfg,
            &gw,
            n,
            &mut cores,
            |m| {
                assert!(metric(m, "tls_connections") > 0);
            },
        ));
    }

    let med = |f: fn(&Core) -> f64| median(cores.iter().map(f).collect());
    let accept_us = med(|c| c.accept_reply);
    let floor_us = med(|c| c.floor_accept);
    let full_us = med(|c| c.floor_full);
    println!();
    println!("gateway CPU per connection (one request each, loopback, {n} connections per path)");
    println!(
        "{:<40} {:>8} {:>6} {:>6} {:>6} {:>8} {:>9}",
        "path", "us/conn", "user", "sys", "ctxsw", "x accept", "x acc+rep"
    );
    for r in &rows {
        println!(
            "{:<40} {:>8.1} {:>5.0}% {:>5.0}% {:>6.1} {:>7.1}x {:>8.1}x",
            r.name,
            r.us,
            r.user_share * 100.0,
            (1.0 - r.user_share) * 100.0,
            r.ctx,
            r.x_accept,
            r.x_full
        );
    }
    println!();
    println!("crypto floor, accept (X25519 DH + HKDF + AEAD open + SHA-256):   {floor_us:.1} us");
    println!("crypto floor, accept + reply (+ X25519 keygen + DH + HKDF + seal): {full_us:.1} us");
    println!(
        "core accept + reply (zrtt-proto, incl. replay filter):            {accept_us:.1} us ({:.2}x its floor)",
        accept_us / full_us
    );
    let Some(p) = rows.first() else { return };
    let user = p.us * p.user_share;
    let sys = p.us - user;
    println!(
        "{}: {:.1} us/conn = core accept+reply {accept_us:.1} ({:.0}%) \
         + other user space {:.1} ({:.0}%: tokio, hyper server and backend client, framing) \
         + kernel {sys:.1} ({:.0}%: syscalls, loopback TCP to client and backend)",
        p.name,
        p.us,
        accept_us / p.us * 100.0,
        (user - accept_us).max(0.0),
        (user - accept_us).max(0.0) / p.us * 100.0,
        sys / p.us * 100.0,
    );
    println!(
        "X25519 keygen + DH: curve25519-dalek (snow, zrtt IK replies) {:.1} us, ring (rustls, TLS, zrtt NK replies) {:.1} us",
        med(|c| c.keygen_dh_dalek),
        med(|c| c.keygen_dh_ring)
    );
    println!("(microbenchmarks: medians of thread CPU time, re-measured after every tenth of each path; ratios per tenth, median)");
}
