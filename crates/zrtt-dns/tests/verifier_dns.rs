//! Verifier keys in DNS: `zrtt dns` (in-process, loopback) publishes a
//! verifier key store's records at `_zrttpv.<name>`, and the resolver
//! fetches and verifies them: TLSA chained to the roots or a pinned
//! certificate, refusals with reasons, caching.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use ring::rand::SystemRandom;
use zrtt_dns::client::{self, DnsTransport};
use zrtt_dns::resolver::{RefusalReason, Refused, Resolver, ResolverConfig, Trust};
use zrtt_dns::server::{self, Listener, VerifierConfig, ZoneState};
use zrtt_dns::{VerifierPolicy, VerifierStore};
use zrtt_proto::{RecordError, UnixTime};

const T0: u64 = 1_800_000_000;
const NAME: &str = "www.example.com";

const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 2024010101 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\n";

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../zrtt-proto/tests/data")
        .join(f)
}

fn at(s: u64) -> UnixTime {
    UnixTime::from_secs(s)
}

struct Running {
    addr: SocketAddr,
    ids: Vec<u32>,
    not_after: u64,
    trigger: server::shutdown::Trigger,
    thread: Option<std::thread::JoinHandle<()>>,
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

/// `zrtt dns` for example.com publishing a verifier store for www (signed
/// by the Ed25519 certificate, issued by `ed25519-ca.pem`) with two keys:
/// the current one and the next.
fn start() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("example.com.zone");
    std::fs::write(&zone, ZONE).unwrap();
    let pv_dir = dir.path().join("pv");
    let mut pv = VerifierStore::init(
        &pv_dir,
        NAME,
        &data("ed25519-cert.pem"),
        &data("ed25519-cert.key"),
        VerifierPolicy::default(),
    )
    .unwrap();
    let rng = SystemRandom::new();
    pv.rotate(at(T0 - 86400), &rng).unwrap();
    pv.rotate(at(T0), &rng).unwrap();
    let published = pv.published_records(at(T0));
    assert_eq!(published.len(), 2);
    let ids = published.iter().map(|r| r.body.verifier_id).collect();
    let not_after = published.iter().map(|r| r.body.not_after).min().unwrap();
    let mut state = ZoneState::new(&zone, None, &[], false).unwrap();
    state
        .add_verifiers(&[VerifierConfig { keystore: pv_dir }])
        .unwrap();
    let (trigger, shutdown) = server::shutdown::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = Listener::bind("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            tx.send(l.udp.local_addr().unwrap()).unwrap();
            server::serve(
                state,
                vec![l],
                || at(T0),
                &SystemRandom::new(),
                Duration::from_millis(50),
                shutdown,
            )
            .await
            .unwrap();
        });
    });
    let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (m, _) = client::query(
            addr,
            "_zrttpv.www.example.com",
            RecordType::TXT,
            DnsTransport::Udp,
            Duration::from_secs(2),
        )
        .unwrap();
        if m.answers.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no verifier TXT served");
        std::thread::sleep(Duration::from_millis(20));
    }
    Running {
        addr,
        ids,
        not_after,
        trigger,
        thread: Some(thread),
        _dir: dir,
    }
}

fn resolver(addr: SocketAddr, trust: Trust) -> Arc<Resolver> {
    Arc::new(Resolver::new(ResolverConfig::new(addr), trust))
}

fn ids(r: &zrtt_dns::resolver::ResolvedVerifier) -> Vec<u32> {
    let mut v: Vec<u32> = r.keys.iter().map(|k| k.body().verifier_id).collect();
    v.sort_unstable();
    v
}

#[tokio::test]
async fn published_verifier_keys_resolve_verified_and_refusals_say_why() {
    let s = start();
    let mut want = s.ids.clone();
    want.sort_unstable();

    // TLSA chained to the CA: both keys, TXT and TLSA in one batch.
    let r = resolver(
        s.addr,
        Trust::from_pem_file(&data("ed25519-ca.pem")).unwrap(),
    );
    let got = r
        .resolve_verifier("WWW.example.com.", at(T0))
        .await
        .unwrap();
    assert_eq!(ids(&got), want);
    assert!(got.refused.is_empty(), "{:?}", got.refused);
    assert_eq!(got.lookups, 2);
    assert_eq!(got.name, NAME);
    // From the cache: nothing on the wire, still re-verified at `now`.
    let again = r.resolve_verifier(NAME, at(T0 + 10)).await.unwrap();
    assert_eq!((again.lookups, ids(&again)), (0, want.clone()));

    // Past the first key's end it is refused as expired (the cache entry
    // ends there too, so the answer is fetched again).
    let later = r.resolve_verifier(NAME, at(s.not_after)).await.unwrap();
    assert_eq!(later.keys.len(), 1);
    assert!(later.lookups > 0);
    assert!(later
        .refused
        .iter()
        .any(|f| matches!(f.reason, RefusalReason::Record(RecordError::Expired { .. }))));

    // Roots that did not issue the certificate: nothing is trusted.
    let r = resolver(
        s.addr,
        Trust::from_pem_file(&data("ecdsa-cert.pem")).unwrap(),
    );
    let got = r.resolve_verifier(NAME, at(T0)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(got
        .refused
        .iter()
        .any(|f| matches!(f.what, Refused::Certificate(_))));
    assert!(got
        .refused
        .iter()
        .any(|f| matches!(f.what, Refused::VerifierKey { .. })
            && matches!(f.reason, RefusalReason::Untrusted(_))));

    // A pinned certificate is trusted without TLSA (one query); a pinned
    // certificate that did not sign the records vouches for nothing.
    let r = resolver(s.addr, Trust::none());
    r.pin_cert(
        NAME,
        zrtt_dns::keyfile::load_cert(&data("ed25519-cert.pem")).unwrap(),
    );
    let got = r.resolve_verifier(NAME, at(T0)).await.unwrap();
    assert_eq!((got.lookups, ids(&got)), (1, want));
    let r = resolver(s.addr, Trust::none());
    r.pin_cert(
        NAME,
        zrtt_dns::keyfile::load_cert(&data("ecdsa-cert.pem")).unwrap(),
    );
    let got = r.resolve_verifier(NAME, at(T0)).await.unwrap();
    assert!(got.keys.is_empty());
    assert!(got
        .refused
        .iter()
        .all(|f| matches!(f.reason, RefusalReason::NoCertificate(_))));

    // A name without a verifier: no keys, no error.
    let r = resolver(s.addr, Trust::none());
    let got = r.resolve_verifier("ns1.example.com", at(T0)).await.unwrap();
    assert!(got.keys.is_empty() && got.refused.is_empty());
}

#[tokio::test]
async fn a_silent_server_is_an_error_not_a_hang() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut cfg = ResolverConfig::new(silent.local_addr().unwrap());
    cfg.timeout = Duration::from_millis(200);
    cfg.udp_attempts = 1;
    let r = Resolver::new(cfg, Trust::none());
    let t = Instant::now();
    assert!(r.resolve_verifier(NAME, at(T0)).await.is_err());
    assert!(t.elapsed() < Duration::from_secs(3));
}
