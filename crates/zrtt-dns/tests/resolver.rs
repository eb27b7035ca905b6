//! `zrtt_dns::resolver` against `zrtt dns` in-process on loopback, through a
//! counting proxy that can misbehave like real resolvers and attackers do:
//! strip the private SvcParam, set TC on every UDP answer, serve another
//! host's records, tamper with a record. Every test counts the queries the
//! proxy actually saw, so cache claims are checked on the wire.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use ring::rand::SystemRandom;
use zrtt_dns::client::{self, DnsTransport};
use zrtt_dns::resolver::{
    Encoding, LookupError, RefusalReason, Refused, ResolveError, Resolver, ResolverConfig, Trust,
};
use zrtt_dns::server::{self, HostConfig, Listener, ZoneState};
use zrtt_dns::{KeyStore, Policy};
use zrtt_proto::{RecordError, UnixTime};

#[path = "resolver/proxy.rs"]
mod proxy;
use proxy::{start_proxy, Misbehave};

const T0: u64 = 1_800_000_000;
const HOST: &str = "www.example.com";

const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 2024010101 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\nwww IN TXT \"v=spf1 -all\"\n";

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../zrtt-proto/tests/data")
        .join(f)
}

fn cert(name: &str) -> Vec<u8> {
    zrtt_dns::keyfile::load_cert(&data(name)).unwrap()
}

/// The CA that issued `ed25519-cert.pem` (and not `ecdsa-cert.pem`).
fn trust() -> Trust {
    Trust::from_pem_file(&data("ed25519-ca.pem")).unwrap()
}

struct Running {
    addr: SocketAddr,
    trigger: server::shutdown::Trigger,
    thread: Option<std::thread::JoinHandle<()>>,
    published: Vec<u32>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.trigger.fire();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `zrtt dns` for example.com with a key store for www signed by `cert`
/// (`ed25519` or `ecdsa`), its clock fixed at T0.
fn start_server(cert: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("example.com.zone");
    std::fs::write(&zone, ZONE).unwrap();
    let ks_dir = dir.path().join("ks");
    let mut ks = KeyStore::init(
        &ks_dir,
        HOST,
        &data(&format!("{cert}-cert.pem")),
        &data(&format!("{cert}-cert.key")),
        Policy::default(),
    )
    .unwrap();
    ks.rotate(UnixTime::from_secs(T0), &SystemRandom::new())
        .unwrap();
    let published = ks
        .published_records(UnixTime::from_secs(T0))
        .iter()
        .map(|r| r.body.key_id)
        .collect();
    let hosts = vec![HostConfig {
        keystore: ks_dir,
        alpn: vec!["http/1.1".into()],
        port: None,
    }];
    let state = ZoneState::new(&zone, None, &hosts, false).unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let (trigger, shutdown) = server::shutdown::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = Listener::bind("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            tx.send(l.udp.local_addr().unwrap()).unwrap();
            let rng = SystemRandom::new();
            server::serve(
                state,
                vec![l],
                move || UnixTime::from_secs(clock.load(Ordering::SeqCst)),
                &rng,
                Duration::from_millis(50),
                shutdown,
            )
            .await
            .unwrap();
        });
    });
    let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Wait until the key records are served.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (m, _) = client::query(
            addr,
            HOST,
            RecordType::HTTPS,
            DnsTransport::Udp,
            Duration::from_secs(2),
        )
        .unwrap();
        if !m.answers.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no HTTPS record served");
        std::thread::sleep(Duration::from_millis(20));
    }
    Running {
        addr,
        trigger,
        thread: Some(thread),
        published,
        _dir: dir,
    }
}

fn resolver(addr: SocketAddr) -> Resolver {
    let mut cfg = ResolverConfig::new(addr);
    cfg.timeout = Duration::from_secs(3);
    Resolver::new(cfg, trust())
}

fn at(secs: u64) -> UnixTime {
    UnixTime::from_secs(secs)
}

fn ids(keys: &[zrtt_proto::record::VerifiedKeyRecord]) -> Vec<u32> {
    keys.iter().map(|k| k.body().key_id).collect()
}

#[tokio::test]
async fn address_and_verified_key_in_one_parallel_batch() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    let got = r.resolve("WWW.example.com.", at(T0 + 10)).await.unwrap();
    assert_eq!(got.host, HOST);
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!(got.key_encoding, Some(Encoding::Https));
    assert!(got.refused.is_empty(), "{:?}", got.refused);
    assert!(got.failed.is_empty(), "{:?}", got.failed);
    assert_eq!(
        got.addrs,
        vec![
            "192.0.2.10".parse::<IpAddr>().unwrap(),
            "2001:db8::10".parse().unwrap()
        ]
    );
    assert_eq!(
        got.cert_der.as_deref(),
        Some(cert("ed25519-cert.pem").as_slice())
    );
    // HTTPS, A, AAAA, TLSA: one query each, no TXT fallback, no retries.
    assert_eq!(got.lookups, 4);
    assert_eq!(p.udp.load(Ordering::SeqCst), 4);
    assert_eq!(p.tcp.load(Ordering::SeqCst), 0);
    // The same from the cache, synchronously.
    let cached = r.resolve_cached(HOST, at(T0 + 20)).unwrap();
    assert_eq!(ids(&cached.keys), s.published);
    assert_eq!(cached.lookups, 0);
    assert!(resolver(p.addr).resolve_cached(HOST, at(T0 + 20)).is_none());
}

#[tokio::test]
async fn cache_hits_send_no_query_and_entries_expire_by_ttl() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    r.resolve(HOST, at(T0)).await.unwrap();
    assert_eq!(p.queries(), 4);
    let again = r.resolve(HOST, at(T0 + 299)).await.unwrap();
    assert_eq!(again.lookups, 0);
    assert_eq!(p.queries(), 4, "a cache hit went to the wire");
    assert_eq!(ids(&again.keys), s.published);
    // Key records and TLSA have TTL 300, the zone's A/AAAA 3600: only the
    // first two are asked again.
    let later = r.resolve(HOST, at(T0 + 300)).await.unwrap();
    assert_eq!(later.lookups, 2);
    assert_eq!(p.queries(), 6);
    assert_eq!(ids(&later.keys), s.published);
}

#[tokio::test]
async fn cache_lifetime_is_bounded_by_key_validity() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    // 100 s before the key's not_after (T0 + 3600), with TTL 300.
    let got = r.resolve(HOST, at(T0 + 3500)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
    let got = r.resolve(HOST, at(T0 + 3599)).await.unwrap();
    assert_eq!((got.lookups, got.keys.len()), (0, 1));
    // At not_after the HTTPS entry is gone although its TTL is not; the
    // server (clock stuck at T0) still serves the key, which is refused.
    let got = r.resolve(HOST, at(T0 + 3600)).await.unwrap();
    assert_eq!(got.lookups, 1);
    assert!(got.keys.is_empty());
    assert!(matches!(
        got.refused[0].reason,
        RefusalReason::Record(RecordError::Expired { .. })
    ));
}

#[tokio::test]
async fn expired_and_future_keys_are_refused_with_reason() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let got = resolver(p.addr).resolve(HOST, at(T0 + 3601)).await.unwrap();
    assert!(got.keys.is_empty());
    assert_eq!(got.refused.len(), 1, "{:?}", got.refused);
    let f = &got.refused[0];
    assert_eq!(
        f.what,
        Refused::Key {
            key_id: s.published[0],
            encoding: Encoding::Https
        }
    );
    assert!(matches!(
        f.reason,
        RefusalReason::Record(RecordError::Expired { .. })
    ));
    assert!(f.to_string().contains("expired"), "{f}");
    // Addresses are still there: the client falls back to TLS.
    assert_eq!(got.addrs.len(), 2);

    let got = resolver(p.addr).resolve(HOST, at(T0 - 5)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(matches!(
        got.refused[0].reason,
        RefusalReason::Record(RecordError::NotYetValid { .. })
    ));
}

#[tokio::test]
async fn certificate_not_chaining_to_the_roots_is_refused() {
    // The ECDSA certificate is from another CA than the configured one.
    let s = start_server("ecdsa");
    let p = start_proxy(s.addr, Misbehave::default());
    let got = resolver(p.addr).resolve(HOST, at(T0 + 10)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(got.cert_der.is_none());
    let chain = got
        .refused
        .iter()
        .find(|f| matches!(f.what, Refused::Certificate(_)))
        .expect("certificate refusal");
    assert!(
        matches!(&chain.reason, RefusalReason::Chain(m) if m.contains("chain check failed")),
        "{chain}"
    );
    let key = got
        .refused
        .iter()
        .find(|f| matches!(f.what, Refused::Key { .. }))
        .expect("key refusal");
    assert!(matches!(key.reason, RefusalReason::Untrusted(_)), "{key}");

    // Without any CA roots nothing from TLSA is trusted either.
    let r = Resolver::new(ResolverConfig::new(p.addr), Trust::none());
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(got
        .refused
        .iter()
        .any(|f| f.to_string().contains("no CA roots")));
}

#[tokio::test]
async fn record_signed_by_another_certificate_is_refused() {
    // Pinned: the Ed25519 certificate. Served: records signed with the ECDSA one.
    let s = start_server("ecdsa");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    r.pin_cert(HOST, cert("ed25519-cert.pem"));
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert!(got.keys.is_empty());
    assert_eq!(got.lookups, 3, "TLSA is not asked for a pinned host");
    assert_eq!(got.refused.len(), 1);
    assert!(matches!(
        got.refused[0].reason,
        RefusalReason::NoCertificate(_)
    ));

    // Pinned the right one: accepted without TLSA and without roots.
    let r = Resolver::new(ResolverConfig::new(p.addr), Trust::none());
    r.pin_cert(HOST, cert("ecdsa-cert.pem"));
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
}

#[tokio::test]
async fn forged_signature_is_refused() {
    let s = start_server("ed25519");
    let p = start_proxy(
        s.addr,
        Misbehave {
            tamper: true,
            ..Default::default()
        },
    );
    let got = resolver(p.addr).resolve(HOST, at(T0 + 10)).await.unwrap();
    assert!(got.keys.is_empty());
    assert_eq!(got.refused.len(), 1, "{:?}", got.refused);
    assert!(matches!(
        got.refused[0].reason,
        RefusalReason::Record(RecordError::BadSignature)
    ));
}

#[tokio::test]
async fn record_for_another_name_is_refused() {
    let s = start_server("ed25519");
    let p = start_proxy(
        s.addr,
        Misbehave {
            rename: Some(("www2.example.com".into(), HOST.into())),
            ..Default::default()
        },
    );
    // www's records and certificate served as www2's.
    let got = resolver(p.addr)
        .resolve("www2.example.com", at(T0 + 10))
        .await
        .unwrap();
    assert_eq!(got.addrs.len(), 2, "the rename works for addresses");
    assert!(got.keys.is_empty());
    assert!(
        got.refused
            .iter()
            .any(|f| matches!(&f.reason, RefusalReason::Chain(m) if m.contains("does not cover"))),
        "{:?}",
        got.refused
    );
    // Even with that certificate pinned for www2, the record names www.
    let r = resolver(p.addr);
    r.pin_cert("www2.example.com", cert("ed25519-cert.pem"));
    let got = r.resolve("www2.example.com", at(T0 + 10)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(matches!(
        &got.refused[0].reason,
        RefusalReason::Record(RecordError::WrongName { found, .. }) if found == HOST
    ));
}

#[tokio::test]
async fn stripped_svcparam_falls_back_to_txt() {
    let s = start_server("ed25519");
    let p = start_proxy(
        s.addr,
        Misbehave {
            strip_key: true,
            ..Default::default()
        },
    );
    let r = resolver(p.addr);
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!(got.key_encoding, Some(Encoding::Txt));
    // The SPF record beside it is ignored, not refused.
    assert!(got.refused.is_empty(), "{:?}", got.refused);
    // HTTPS, A, AAAA, TLSA, then TXT and the AAAA tunnel.
    assert_eq!(got.lookups, 6);
    assert_eq!(p.queries(), 6);
    // The fallback is cached too.
    let again = r.resolve(HOST, at(T0 + 20)).await.unwrap();
    assert_eq!((again.lookups, again.keys.len()), (0, 1));
    assert_eq!(again.key_encoding, Some(Encoding::Txt));
}

#[tokio::test]
async fn forged_copy_under_a_genuine_key_id_does_not_shadow_it() {
    let s = start_server("ed25519");
    let p = start_proxy(
        s.addr,
        Misbehave {
            strip_key: true,
            forged_txt_first: true,
            ..Default::default()
        },
    );
    let got = resolver(p.addr).resolve(HOST, at(T0 + 10)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!(got.key_encoding, Some(Encoding::Txt));
    assert_eq!(got.refused.len(), 1, "{:?}", got.refused);
    assert_eq!(
        got.refused[0].what,
        Refused::Key {
            key_id: s.published[0],
            encoding: Encoding::Txt
        }
    );
    assert_eq!(
        got.refused[0].reason,
        RefusalReason::Record(RecordError::BadSignature)
    );
}

#[tokio::test]
async fn truncated_udp_answers_are_retried_over_tcp() {
    let s = start_server("ed25519");
    let p = start_proxy(
        s.addr,
        Misbehave {
            tc_on_udp: true,
            ..Default::default()
        },
    );
    let got = resolver(p.addr).resolve(HOST, at(T0 + 10)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!(got.addrs.len(), 2);
    assert_eq!(p.udp.load(Ordering::SeqCst), 4);
    assert_eq!(p.tcp.load(Ordering::SeqCst), 4);
    assert_eq!(got.lookups, 8);
}

#[tokio::test]
async fn negative_answers_are_cached_for_the_soa_minimum() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    let got = r.resolve("nope.example.com", at(T0)).await.unwrap();
    assert!(got.addrs.is_empty() && got.keys.is_empty());
    assert!(got.failed.is_empty(), "{:?}", got.failed);
    // HTTPS, A, AAAA, TLSA, and the fallbacks TXT and tunnel: all NXDOMAIN.
    assert_eq!(got.lookups, 6);
    assert_eq!(p.queries(), 6);
    // The zone's SOA: TTL 3600, minimum 300 → cached for 300 s (RFC 2308).
    let got = r.resolve("nope.example.com", at(T0 + 299)).await.unwrap();
    assert_eq!(got.lookups, 0);
    assert_eq!(p.queries(), 6);
    let got = r.resolve("nope.example.com", at(T0 + 300)).await.unwrap();
    assert_eq!(got.lookups, 6);
    assert_eq!(p.queries(), 12);
}

#[tokio::test]
async fn prefetch_refreshes_entries_before_they_expire() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let r = resolver(p.addr);
    r.resolve(HOST, at(T0)).await.unwrap();
    assert!(r.expiring(at(T0 + 200), Duration::from_secs(60)).is_empty());
    let soon = r.expiring(at(T0 + 250), Duration::from_secs(60));
    let mut types: Vec<RecordType> = soon.iter().map(|e| e.1).collect();
    types.sort_by_key(|t| u16::from(*t));
    assert_eq!(types, vec![RecordType::TLSA, RecordType::HTTPS]);
    assert!(soon
        .iter()
        .all(|e| e.0 == "www.example.com." && e.2 == T0 + 300));
    let done = r.prefetch(at(T0 + 250), Duration::from_secs(60)).await;
    assert_eq!(done.len(), 1);
    let (host, res) = &done[0];
    assert_eq!(host, HOST);
    assert_eq!(res.as_ref().unwrap().lookups, 2);
    assert_eq!(p.queries(), 6);
    // Past the old expiry: served from the refreshed cache.
    let got = r.resolve(HOST, at(T0 + 320)).await.unwrap();
    assert_eq!((got.lookups, got.keys.len()), (0, 1));
    assert_eq!(p.queries(), 6);
}

#[tokio::test]
async fn a_silent_server_costs_a_bounded_time() {
    // A socket that never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cfg = ResolverConfig::new(silent.local_addr().unwrap());
    cfg.timeout = Duration::from_millis(150);
    cfg.udp_attempts = 2;
    let r = Resolver::new(cfg, trust());
    let t = Instant::now();
    let e = r.resolve(HOST, at(T0)).await.unwrap_err();
    let took = t.elapsed();
    assert!(
        matches!(
            e,
            ResolveError::Lookup {
                error: LookupError::Timeout { attempts: 2, .. },
                ..
            }
        ),
        "{e}"
    );
    // One parallel batch of two 150 ms attempts; no fallback queries to a
    // server that answered nothing.
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn invalid_host_names_are_refused() {
    let r = Resolver::new(
        ResolverConfig::new("127.0.0.1:9".parse().unwrap()),
        Trust::none(),
    );
    for bad in ["", "exa mple.com", "a..b", &"x".repeat(64)] {
        assert!(matches!(
            r.resolve(bad, at(T0)).await,
            Err(ResolveError::BadName { .. })
        ));
    }
}

/// Datagrams waiting on `sock`, read and dropped.
fn drain(sock: &UdpSocket) -> usize {
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while sock.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

fn servers(list: &[SocketAddr], timeout_ms: u64, attempts: u32) -> ResolverConfig {
    let mut cfg = ResolverConfig::with_servers(list.to_vec());
    cfg.timeout = Duration::from_millis(timeout_ms);
    cfg.udp_attempts = attempts;
    cfg
}

#[tokio::test]
async fn a_silent_first_server_is_passed_over_for_the_second() {
    let s = start_server("ed25519");
    let p = start_proxy(s.addr, Misbehave::default());
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let cfg = servers(&[silent.local_addr().unwrap(), p.addr], 300, 2);
    let r = Resolver::new(cfg, trust());
    let t = Instant::now();
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!(got.addrs.len(), 2);
    assert!(got.failed.is_empty(), "{:?}", got.failed);
    // HTTPS, A, AAAA and TLSA: each asked of the silent server once, then
    // answered by the second.
    assert_eq!(drain(&silent), 4);
    assert_eq!(p.queries(), 4);
    assert_eq!(got.lookups, 8);
}

#[tokio::test]
async fn servfail_moves_to_the_next_server_and_is_not_asked_again() {
    let s = start_server("ed25519");
    let bad = start_proxy(
        s.addr,
        Misbehave {
            servfail: true,
            ..Default::default()
        },
    );
    let good = start_proxy(s.addr, Misbehave::default());
    let r = Resolver::new(servers(&[bad.addr, good.addr], 2000, 2), trust());
    let got = r.resolve(HOST, at(T0 + 10)).await.unwrap();
    assert_eq!(ids(&got.keys), s.published);
    assert_eq!((bad.queries(), good.queries(), got.lookups), (4, 4, 8));
    // Alone, a SERVFAIL server fails the lookup after one query per type.
    let r = Resolver::new(servers(&[bad.addr], 2000, 2), trust());
    let e = r.resolve(HOST, at(T0 + 10)).await.unwrap_err();
    assert!(
        matches!(
            e,
            ResolveError::Lookup {
                error: LookupError::Rcode {
                    rcode: ResponseCode::ServFail,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(bad.queries(), 8);
}

#[tokio::test]
async fn attempts_bound_the_tries_at_every_server() {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let list = [a.local_addr().unwrap(), b.local_addr().unwrap()];
    let r = Resolver::new(servers(&list, 100, 3), trust());
    // Pinned: only the TXT question goes out.
    r.pin_cert(HOST, cert("ed25519-cert.pem"));
    let t = Instant::now();
    let e = r.resolve_verifier(HOST, at(T0)).await.unwrap_err();
    let took = t.elapsed();
    // Three rounds over both servers, 100 ms per try, one after the other.
    assert!(took >= Duration::from_millis(590), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!((drain(&a), drain(&b)), (3, 3));
    let ResolveError::Lookup {
        error: LookupError::EveryServer(errors),
        ..
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!(errors.len(), 2);
    for (err, server) in errors.iter().zip(list) {
        assert_eq!(
            err,
            &LookupError::Timeout {
                server,
                attempts: 3,
                timeout: Duration::from_millis(100),
            }
        );
    }
    assert!(e.to_string().contains(&list[1].to_string()), "{e}");
}
