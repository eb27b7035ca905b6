//! Provenance verifiers on loopback: `zrtt verifier` servers issue certificates, a
//! gateway trusting a quorum answers early, everything else takes the gated
//! path with its reason counted; refresh doubles; overload gates.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use zrtt_net::verifier::{self, ProvenanceStore, VerifierMetrics};
use zrtt_proto::provenance::{IssuePolicy, TrustPolicy, VerifierKey, VerifierKeys, VerifierSigner};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn start_pv() -> (
    SocketAddr,
    VerifierKey,
    Arc<VerifierMetrics>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (signer, _) = VerifierSigner::generate(&ring::rand::SystemRandom::new()).unwrap();
    let key = signer.key();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(VerifierMetrics::default());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(verifier::serve(
        listener,
        Arc::new(signer),
        IssuePolicy::default(),
        zrtt_net::client::system_clock,
        stats.clone(),
        64,
        async move {
            let _ = rx.await;
        },
    ));
    (addr, key, stats, tx)
}

fn pv_config(keys: &[VerifierKey], quorum: usize, checks_per_sec: f64) -> Pv {
    Pv::new(
        TrustPolicy {
            keys: keys.iter().map(|&k| k.into()).collect(),
            quorum,
            skew_secs: 5,
        },
        checks_per_sec,
    )
}

async fn store_from(verifiers: &[SocketAddr]) -> Arc<ProvenanceStore> {
    let store = Arc::new(ProvenanceStore::new());
    let report = store
        .refresh(
            LOCAL,
            verifiers,
            86400,
            Duration::from_secs(5),
            &ring::rand::SystemRandom::new(),
        )
        .await
        .unwrap();
    assert!(report.iter().all(|(_, r)| r.is_ok()), "{report:?}");
    store
}

#[tokio::test]
async fn quorum_answers_early_and_everything_else_is_gated_with_a_reason() {
    let (a, ka, sa, _ta) = start_pv().await;
    let (b, kb, _sb, _tb) = start_pv().await;
    let (c, _kc, _sc, _tc) = start_pv().await;
    let env = start_gateway(GatewayOpts {
        provenance: Some(pv_config(&[ka, kb], 2, 0.0)),
        ..Default::default()
    })
    .await;
    let records = env.records.clone();
    let fetch_with = |store: Arc<ProvenanceStore>| {
        let mut cfg = client_config(records.clone());
        cfg.provenance = Some(store);
        fetch(Arc::new(cfg), env.addr, vec![get("/pv")])
    };

    // 2 of 2 trusted: answered early (on loopback the handshake is instant,
    // so the counters, not the clock, tell the paths apart).
    let store = store_from(&[a, b]).await;
    let (resp, _) = fetch_with(store.clone()).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(env.metric("provenance_accepted"), 1);
    assert_eq!(env.metric("zrtt_answered_early"), 1);
    assert_eq!(sa.issued_total(), 1);

    // The same certificates again: served from the verified cache.
    fetch_with(store.clone()).await.unwrap();
    assert_eq!(env.metric("provenance_accepted"), 2);
    assert_eq!(env.metric("provenance_cache_hits"), 1);

    // One trusted plus one untrusted verifier: quorum not met, gated.
    let store = store_from(&[a, c]).await;
    let (resp, _) = fetch_with(store).await.unwrap();
    assert_eq!(resp[0].0, 200);
    assert_eq!(env.metric("provenance_refused"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    env.stop().await;
}

#[tokio::test]
async fn refresh_through_the_service_doubles_and_a_new_address_gets_a_new_key() {
    let (a, _ka, sa, _ta) = start_pv().await;
    let store = ProvenanceStore::new();
    let rng = ring::rand::SystemRandom::new();
    let first = store
        .refresh(LOCAL, &[a], 86400, Duration::from_secs(5), &rng)
        .await
        .unwrap();
    assert_eq!(first[0].1.as_ref().unwrap(), &1800);
    let second = store
        .refresh(LOCAL, &[a], 86400, Duration::from_secs(5), &rng)
        .await
        .unwrap();
    assert_eq!(second[0].1.as_ref().unwrap(), &3600);
    assert_eq!(sa.refreshed_total(), 1);
    let now = zrtt_net::client::system_clock();
    let (key1, _) = store.for_local(LOCAL, now).unwrap();
    // The client moved: the old address's certificates and key are dropped.
    let moved: IpAddr = Ipv4Addr::new(127, 0, 0, 2).into();
    store
        .refresh(moved, &[a], 86400, Duration::from_secs(5), &rng)
        .await
        .unwrap();
    assert!(store.for_local(LOCAL, now).is_none());
    let (key2, certs) = store.for_local(moved, now).unwrap();
    assert_ne!(
        key1.public(),
        key2.public(),
        "a fresh static key per address"
    );
    assert_eq!(certs[0], 1, "one certificate");
    // Fresh certificates need no refresh; half-way through they do; a new
    // address always does.
    assert!(!store.needs_refresh(moved, now));
    let half = zrtt_proto::UnixTime::from_secs(now.as_secs() + 900);
    assert!(store.needs_refresh(moved, half));
    assert!(store.needs_refresh(LOCAL, now));
    // Save and load keep it.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pv.state");
    store.save(&f).unwrap();
    let loaded = ProvenanceStore::load(&f).unwrap();
    assert_eq!(loaded.for_local(moved, now).unwrap().1, certs);
}

#[tokio::test]
async fn an_unreachable_verifier_delays_nothing_and_overload_gates() {
    let (a, ka, _sa, _ta) = start_pv().await;
    // A port with nothing listening: the refresh reports it, keeps the rest.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = Arc::new(ProvenanceStore::new());
    let report = store
        .refresh(
            LOCAL,
            &[a, dead],
            86400,
            Duration::from_secs(2),
            &ring::rand::SystemRandom::new(),
        )
        .await
        .unwrap();
    assert!(report.iter().any(|(v, r)| *v == dead && r.is_err()));
    assert!(store
        .for_local(LOCAL, zrtt_net::client::system_clock())
        .is_some());

    // Checks limited to one per second: the first flight is checked, the
    // next one (new certificates, so no cache) is gated, and still served.
    let env = start_gateway(GatewayOpts {
        provenance: Some(pv_config(&[ka], 1, 1.0)),
        ..Default::default()
    })
    .await;
    for _ in 0..2 {
        let store = store_from(&[a]).await;
        let mut cfg = client_config(env.records.clone());
        cfg.provenance = Some(store);
        let (resp, _) = fetch(Arc::new(cfg), env.addr, vec![get("/x")])
            .await
            .unwrap();
        assert_eq!(resp[0].0, 200);
    }
    assert_eq!(env.metric("provenance_accepted"), 1);
    assert_eq!(env.metric("provenance_overload"), 1);
    assert_eq!(env.metric("zrtt_answered_gated"), 1);
    env.stop().await;
}

#[tokio::test]
async fn verifier_rotation_keeps_doubling_and_the_gateway_trusts_what_it_is_given() {
    let rng = ring::rand::SystemRandom::new();
    let (old, _) = VerifierSigner::generate(&rng).unwrap();
    let (new, _) = VerifierSigner::generate(&rng).unwrap();
    let (old_key, new_key) = (old.key(), new.key());
    let issuer = Arc::new(verifier::SharedIssuer::new(Some(VerifierKeys::new(
        old,
        None,
        Vec::new(),
    ))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap();
    let (_stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(verifier::serve(
        listener,
        issuer.clone(),
        IssuePolicy::default(),
        zrtt_net::client::system_clock,
        Arc::new(VerifierMetrics::default()),
        64,
        async move {
            let _ = rx.await;
        },
    ));
    // A second, plain verifier: each verifier must get its own certificate
    // back to double it.
    let (b, kb, _sb, _tb) = start_pv().await;
    let store = Arc::new(ProvenanceStore::new());
    let both = [a, b];
    let refresh = || store.refresh(LOCAL, &both, 86400, Duration::from_secs(5), &rng);
    let durations = |r: Vec<(SocketAddr, zrtt_net::Result<u32>)>| -> Vec<u32> {
        r.into_iter().map(|(_, d)| *d.as_ref().unwrap()).collect()
    };
    assert_eq!(durations(refresh().await.unwrap()), vec![1800, 1800]);
    assert_eq!(durations(refresh().await.unwrap()), vec![3600, 3600]);

    // The verifier rotates: the new key signs, the old one is still its own.
    issuer.set(Some(VerifierKeys::new(new, None, vec![old_key])));
    assert_eq!(durations(refresh().await.unwrap()), vec![7200, 7200]);
    let now = zrtt_net::client::system_clock();
    let (_, ext) = store.for_local(LOCAL, now).unwrap();
    let certs = zrtt_proto::provenance::decode_certificates(&ext).unwrap();
    let mut ids: Vec<u32> = certs.iter().map(|c| c.verifier_id).collect();
    ids.sort_unstable();
    let mut want = vec![new_key.id, kb.id];
    want.sort_unstable();
    assert_eq!(ids, want, "the old key's certificate was replaced");
    // The issuer mapping survives a save and load.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pv.state");
    store.save(&f).unwrap();
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(
        text.contains(&format!("#zrtt-issuer {a} {:08x}", new_key.id)),
        "{text}"
    );

    // A gateway whose trusted keys change while it serves: with only the
    // old key of verifier a trusted, certificates from the new key are
    // refused; once the policy in force trusts the new key, accepted.
    let cfg = pv_config(&[old_key], 1, 0.0);
    let live = cfg.policy.clone();
    let env = start_gateway(GatewayOpts {
        provenance: Some(cfg),
        ..Default::default()
    })
    .await;
    let fetch_now = || {
        let mut c = client_config(env.records.clone());
        c.provenance = Some(store.clone());
        fetch(Arc::new(c), env.addr, vec![get("/r")])
    };
    assert_eq!(fetch_now().await.unwrap().0[0].0, 200);
    assert_eq!(env.metric("provenance_refused"), 1);
    *live.write().unwrap() = Arc::new(TrustPolicy {
        keys: vec![old_key.into(), new_key.into()],
        quorum: 1,
        skew_secs: 5,
    });
    assert_eq!(fetch_now().await.unwrap().0[0].0, 200);
    assert_eq!(env.metric("provenance_accepted"), 1);
    assert_eq!(env.metric("zrtt_answered_early"), 1);
    env.stop().await;
}
