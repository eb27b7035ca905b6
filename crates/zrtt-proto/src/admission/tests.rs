//! Every branch of the admission decision, without sockets or root.
// Tests need an Instant to start from; the policy never reads the clock.
#![allow(clippy::disallowed_methods)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::crypto::SeededRandomForTestingOnly;
use crate::provenance::{encode_certificates, IssuePolicy, TrustPolicy, VerifierSigner};

const T0: u64 = 1_800_000_000;
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9));
const CLIENT: [u8; 32] = [7; 32];
const FLIGHT: usize = 240;

fn now() -> UnixTime {
    UnixTime::from_secs(T0)
}

fn rng() -> SeededRandomForTestingOnly {
    SeededRandomForTestingOnly::new([5; 32])
}

fn token_key() -> Arc<TokenKey> {
    Arc::new(TokenKey::new(&[9; 32], Duration::from_secs(3600)))
}

fn config() -> AdmissionConfig {
    AdmissionConfig {
        tokens: Some(TokenKeyRing::new(TokenKeys::single(TokenKey::new(
            &[9; 32],
            Duration::from_secs(3600),
        )))),
        ..AdmissionConfig::default()
    }
}

fn evidence<'a>(token: Option<&'a [u8]>, certs: Option<&'a [u8]>) -> FlightEvidence<'a> {
    FlightEvidence {
        peer: PEER,
        received: FLIGHT,
        client_static: Some(&CLIENT),
        token,
        provenance: certs,
    }
}

const EARLY: Intake = Intake {
    busy: false,
    may_answer_early: true,
};
const GATED: Intake = Intake {
    busy: false,
    may_answer_early: false,
};

fn decide(a: &Admission, ev: &FlightEvidence<'_>, pv: Option<&TrustPolicy>) -> Decision {
    a.decide(EARLY, ev, pv, now(), Instant::now())
}

fn verifier() -> VerifierSigner {
    VerifierSigner::generate(&ring::rand::SystemRandom::new())
        .unwrap()
        .0
}

fn policy(vs: &[&VerifierSigner], quorum: usize) -> TrustPolicy {
    TrustPolicy {
        keys: vs.iter().map(|v| v.key().into()).collect(),
        quorum,
        skew_secs: 5,
    }
}

fn certs_for(vs: &[&VerifierSigner], addr: IpAddr) -> Vec<u8> {
    certs_at(vs, addr, 0)
}

/// Certificates issued `ago` seconds before now (distinct bytes per `ago`).
fn certs_at(vs: &[&VerifierSigner], addr: IpAddr, ago: u64) -> Vec<u8> {
    let at = UnixTime::from_secs(T0 - ago);
    let certs: Vec<_> = vs
        .iter()
        .map(|v| v.issue(&IssuePolicy::default(), &CLIENT, addr, 3600, None, at))
        .collect();
    encode_certificates(&certs)
}

#[test]
fn no_proof_waits_for_the_handshake() {
    let a = Admission::new(config(), Instant::now());
    let d = decide(&a, &evidence(None, None), None);
    assert_eq!(d.proof, None);
    assert_eq!(d.budget, None);
    assert!(!d.answers_early());
    assert_eq!(d.token, None);
    assert_eq!(d.provenance, None);
    assert!(!d.forced_gating);
}

#[test]
fn trusted_network_proves_without_crypto_also_for_mapped_v6() {
    let mut cfg = AdmissionConfig::default();
    cfg.strict_amplification();
    cfg.dangerous()
        .set_trusted_networks(vec!["198.18.0.0/24".parse().unwrap()]);
    let a = Admission::new(cfg, Instant::now());
    let mut ev = evidence(None, None);
    ev.client_static = None; // NK is enough
    let d = decide(&a, &ev, None);
    assert_eq!(d.proof, Some(Proof::TrustedNetwork));
    assert_eq!(d.budget, Some(AmplificationBudget::new(3 * FLIGHT)));
    ev.peer = "::ffff:198.18.0.7".parse().unwrap();
    assert_eq!(decide(&a, &ev, None).proof, Some(Proof::TrustedNetwork));
    ev.peer = "198.18.1.1".parse().unwrap();
    assert_eq!(decide(&a, &ev, None).proof, None);
}

#[test]
fn valid_token_proves() {
    let a = Admission::new(config(), Instant::now());
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let d = decide(&a, &evidence(Some(&t), None), None);
    assert_eq!(d.proof, Some(Proof::Token));
    assert_eq!(d.token, Some(Ok(())));
    assert_eq!(d.budget.map(|b| b.limit()), Some(INITIAL_WINDOW));
    // Presented from the IPv4-mapped form of the same address.
    let mut ev = evidence(Some(&t), None);
    ev.peer = "::ffff:198.18.0.1".parse().unwrap();
    assert_eq!(decide(&a, &ev, None).proof, Some(Proof::Token));
}

#[test]
fn refused_tokens_say_why_and_prove_nothing() {
    let a = Admission::new(config(), Instant::now());
    let key = token_key();
    let expired = key
        .issue(PEER, &CLIENT, UnixTime::from_secs(T0 - 7200), &rng())
        .unwrap();
    let other_addr = key.issue(OTHER, &CLIENT, now(), &rng()).unwrap();
    let other_key = key.issue(PEER, &[8; 32], now(), &rng()).unwrap();
    let foreign = TokenKey::new(&[1; 32], Duration::from_secs(3600))
        .issue(PEER, &CLIENT, now(), &rng())
        .unwrap();
    for (t, why) in [
        (expired, TokenError::Expired),
        (other_addr, TokenError::WrongAddress),
        (other_key, TokenError::WrongKey),
        (foreign, TokenError::UnknownKey),
        (vec![1, 2, 3], TokenError::Invalid),
    ] {
        let d = decide(&a, &evidence(Some(&t), None), None);
        assert_eq!(d.token, Some(Err(why)));
        assert_eq!(d.proof, None);
        assert_eq!(d.budget, None);
    }
    // NK flights cannot use tokens.
    let t = key.issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let mut ev = evidence(Some(&t), None);
    ev.client_static = None;
    assert_eq!(decide(&a, &ev, None).token, Some(Err(TokenError::WrongKey)));
}

#[test]
fn tokens_off_ignores_tokens() {
    let a = Admission::new(AdmissionConfig::default(), Instant::now());
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let d = decide(&a, &evidence(Some(&t), None), None);
    assert_eq!(d.token, None);
    assert_eq!(d.proof, None);
}

#[test]
fn provenance_quorum_met_then_cached() {
    let (v1, v2) = (verifier(), verifier());
    let pol = policy(&[&v1, &v2], 2);
    let certs = certs_for(&[&v1, &v2], PEER);
    let a = Admission::new(AdmissionConfig::default(), Instant::now());
    let d = decide(&a, &evidence(None, Some(&certs)), Some(&pol));
    assert_eq!(
        d.provenance,
        Some(ProvenanceOutcome::Accepted {
            signatures_checked: 2
        })
    );
    assert!(
        matches!(d.proof, Some(Proof::Provenance { ref verifiers, .. }) if verifiers.len() == 2)
    );
    assert!(d.answers_early());
    // The same certificates again: from the cache, no signature check.
    let d = decide(&a, &evidence(None, Some(&certs)), Some(&pol));
    assert_eq!(
        d.provenance,
        Some(ProvenanceOutcome::Accepted {
            signatures_checked: 0
        })
    );
}

#[test]
fn provenance_quorum_not_met_or_wrong_address() {
    let (v1, v2) = (verifier(), verifier());
    let pol = policy(&[&v1, &v2], 2);
    let a = Admission::new(AdmissionConfig::default(), Instant::now());
    let one = certs_for(&[&v1], PEER);
    let d = decide(&a, &evidence(None, Some(&one)), Some(&pol));
    assert_eq!(
        d.provenance,
        Some(ProvenanceOutcome::Refused(ProvenanceError::QuorumNotMet {
            valid: 1,
            needed: 2
        }))
    );
    assert_eq!(d.budget, None);
    let elsewhere = certs_for(&[&v1, &v2], OTHER);
    let d = decide(&a, &evidence(None, Some(&elsewhere)), Some(&pol));
    assert!(matches!(
        d.provenance,
        Some(ProvenanceOutcome::Refused(
            ProvenanceError::AddressMismatch { .. }
        ))
    ));
    assert_eq!(d.proof, None);
    // Certificates without a policy are not looked at.
    let d = decide(&a, &evidence(None, Some(&one)), None);
    assert_eq!(d.provenance, None);
}

#[test]
fn provenance_for_an_ipv4_client_on_a_dual_stack_listener() {
    let v1 = verifier();
    let pol = policy(&[&v1], 1);
    let certs = certs_for(&[&v1], PEER);
    let a = Admission::new(AdmissionConfig::default(), Instant::now());
    let mut ev = evidence(None, Some(&certs));
    ev.peer = "::ffff:198.18.0.1".parse().unwrap();
    let d = decide(&a, &ev, Some(&pol));
    assert!(d.answers_early(), "{:?}", d.provenance);
}

#[test]
fn provenance_check_rate_counts_signatures_not_flights() {
    let (v1, v2) = (verifier(), verifier());
    let pol = policy(&[&v1, &v2], 2);
    let mut cfg = AdmissionConfig::default();
    cfg.limits.provenance_checks_per_sec = 3.0;
    let t0 = Instant::now();
    let a = Admission::new(cfg, t0);
    let first = certs_for(&[&v1, &v2], PEER);
    // Two signatures: within the burst of 3.
    let d = a.decide(EARLY, &evidence(None, Some(&first)), Some(&pol), now(), t0);
    assert!(d.answers_early());
    // Cached: costs nothing, however often (each handshake completes).
    for _ in 0..10 {
        a.early_answer_completed(PEER, INITIAL_WINDOW, t0);
        let d = a.decide(EARLY, &evidence(None, Some(&first)), Some(&pol), now(), t0);
        assert!(d.answers_early());
    }
    a.early_answer_completed(PEER, INITIAL_WINDOW, t0);
    // New certificates need two more checks, one is left: overload, served
    // as unproven, never refused.
    let second = certs_at(&[&v1, &v2], PEER, 1);
    let d = a.decide(EARLY, &evidence(None, Some(&second)), Some(&pol), now(), t0);
    assert_eq!(d.provenance, Some(ProvenanceOutcome::Overloaded));
    assert_eq!(d.budget, None);
    // A second later the bucket has refilled.
    let later = t0 + Duration::from_secs(1);
    let third = certs_at(&[&v1, &v2], PEER, 2);
    let d = a.decide(
        EARLY,
        &evidence(None, Some(&third)),
        Some(&pol),
        now(),
        later,
    );
    assert!(d.answers_early(), "{:?}", d.provenance);
}

#[test]
fn token_wins_before_provenance_is_checked() {
    let v1 = verifier();
    let pol = policy(&[&v1], 1);
    let certs = certs_for(&[&v1], PEER);
    let a = Admission::new(config(), Instant::now());
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let d = decide(&a, &evidence(Some(&t), Some(&certs)), Some(&pol));
    assert_eq!(d.proof, Some(Proof::Token));
    assert_eq!(d.provenance, None, "no signature check when a token proves");
}

#[test]
fn soft_limit_forces_the_gated_path_whatever_the_proof() {
    let a = Admission::new(config(), Instant::now());
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let gated = GATED;
    let d = a.decide(
        gated,
        &evidence(Some(&t), None),
        None,
        now(),
        Instant::now(),
    );
    assert_eq!(d.token, Some(Ok(())));
    assert_eq!(d.proof, None);
    assert_eq!(d.budget, None);
    assert!(d.forced_gating);
    // Certificates are not even checked then.
    let v1 = verifier();
    let pol = policy(&[&v1], 1);
    let certs = certs_for(&[&v1], PEER);
    let d = a.decide(
        gated,
        &evidence(None, Some(&certs)),
        Some(&pol),
        now(),
        Instant::now(),
    );
    assert_eq!(d.provenance, Some(ProvenanceOutcome::SkippedUnderLoad));
    assert!(!d.forced_gating, "nothing was proven");
    assert_eq!(d.budget, None);
}

#[test]
fn intake_hard_and_soft_limits() {
    let mut cfg = AdmissionConfig::default();
    cfg.limits.max_connections = 10;
    cfg.limits.hard_max_connections = 20;
    cfg.limits.decrypts_per_sec = 2.0;
    cfg.limits.hard_decrypts_per_sec = 4.0;
    let t0 = Instant::now();
    let a = Admission::new(cfg, t0);
    assert!(a.intake(21, t0).is_busy(), "over the hard connection limit");
    assert_eq!(a.intake(11, t0), GATED, "over the soft connection limit");
    // The busy verdict above took no decryption token; the soft one took
    // one hard token. Three hard tokens left, two soft.
    assert!(a.intake(1, t0).may_answer_early());
    assert!(a.intake(1, t0).may_answer_early());
    assert_eq!(a.intake(1, t0), GATED, "soft decryption rate used up");
    assert!(a.intake(1, t0).is_busy(), "hard decryption rate used up");
    assert!(a.intake(1, t0 + Duration::from_secs(1)).may_answer_early());
}

#[test]
fn unproven_intake_over_the_soft_limit_takes_no_hard_token() {
    let mut cfg = AdmissionConfig::default();
    cfg.limits.max_connections = 10;
    cfg.limits.decrypts_per_sec = 2.0;
    cfg.limits.hard_decrypts_per_sec = 3.0;
    let t0 = Instant::now();
    let a = Admission::new(cfg, t0);
    assert_eq!(
        a.intake_unproven(11, t0),
        GATED,
        "over the soft connections"
    );
    assert!(a.intake_unproven(1, t0).may_answer_early());
    assert!(a.intake_unproven(1, t0).may_answer_early());
    // A flood over the soft rate: gated, and the last hard token is left
    // for a first flight on the port.
    for _ in 0..100 {
        assert_eq!(a.intake_unproven(1, t0), GATED);
    }
    assert_eq!(a.intake(1, t0), GATED, "soft used up, one hard token left");
    assert!(a.intake(1, t0).is_busy());
}

#[test]
fn proven_window_by_default_strict_three_times_on_request() {
    let cfg = config();
    assert_eq!(cfg.proven_window, INITIAL_WINDOW, "the default");
    let a = Admission::new(cfg, Instant::now());
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let d = decide(&a, &evidence(Some(&t), None), None);
    assert_eq!(d.budget.map(|b| b.limit()), Some(INITIAL_WINDOW));
    assert_eq!(decide(&a, &evidence(None, None), None).budget, None);
    let mut strict = config();
    strict.strict_amplification();
    let a = Admission::new(strict, Instant::now());
    let d = decide(&a, &evidence(Some(&t), None), None);
    assert_eq!(d.budget.map(|b| b.limit()), Some(3 * FLIGHT));
}

#[test]
fn connections_are_capped_per_source() {
    let mut cfg = AdmissionConfig::default();
    cfg.limits.max_connections_per_address = 2;
    cfg.limits.max_connections_per_prefix = 3;
    let a = Admission::new(cfg, Instant::now());
    assert!(a.open_connection(PEER));
    assert!(a.open_connection(PEER));
    assert!(!a.open_connection(PEER));
    assert!(a.open_connection(OTHER));
    assert!(
        !a.open_connection("198.18.0.77".parse().unwrap()),
        "same /24"
    );
    assert!(a.open_connection("198.18.1.77".parse().unwrap()));
    a.close_connection(PEER);
    assert!(a.open_connection(PEER));
}

#[test]
fn a_destination_that_does_not_complete_handshakes_cools_down_whatever_its_proof() {
    let cfg = config();
    let t0 = Instant::now();
    let a = Admission::new(cfg, t0);
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let ev = evidence(Some(&t), None);
    let d = a.decide(EARLY, &ev, None, now(), t0);
    assert_eq!(d.budget.map(|b| b.limit()), Some(INITIAL_WINDOW));
    a.early_answer_failed(PEER, t0);
    let d = a.decide(EARLY, &ev, None, now(), t0);
    assert_eq!(d.token, Some(Ok(())), "the proof is still valid");
    assert_eq!(d.withheld, Some(Withheld::CoolingDown));
    assert_eq!(d.budget, None);
    assert_eq!(d.proof, None);
    // Another address is not affected; after the cool-down the victim's is
    // answered early again.
    let later = t0 + Duration::from_secs(10);
    assert!(a.decide(EARLY, &ev, None, now(), later).answers_early());
}

#[test]
fn the_destination_budget_shrinks_the_window_down_to_the_strict_bound_then_gates() {
    let mut cfg = config();
    cfg.destinations.address_burst = (INITIAL_WINDOW + 3 * FLIGHT) as f64;
    cfg.destinations.address_rate = 1.0;
    let t0 = Instant::now();
    let a = Admission::new(cfg, t0);
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let ev = evidence(Some(&t), None);
    let limit = |d: Decision| d.budget.map(|b| b.limit());
    assert_eq!(
        limit(a.decide(EARLY, &ev, None, now(), t0)),
        Some(INITIAL_WINDOW)
    );
    assert_eq!(
        limit(a.decide(EARLY, &ev, None, now(), t0)),
        Some(3 * FLIGHT)
    );
    let d = a.decide(EARLY, &ev, None, now(), t0);
    assert_eq!(d.withheld, Some(Withheld::OverBudget));
    // Completed handshakes give the unused bytes back.
    a.early_answer_completed(PEER, 3 * FLIGHT, t0);
    assert_eq!(
        limit(a.decide(EARLY, &ev, None, now(), t0)),
        Some(3 * FLIGHT)
    );
}

#[test]
fn at_most_six_early_answers_wait_for_handshakes_one_on_probation() {
    let a = Admission::new(config(), Instant::now());
    let t0 = Instant::now();
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let ev = evidence(Some(&t), None);
    for _ in 0..6 {
        assert!(a.decide(EARLY, &ev, None, now(), t0).answers_early());
    }
    let d = a.decide(EARLY, &ev, None, now(), t0);
    assert_eq!(d.withheld, Some(Withheld::OverBudget));
    // One fails: cool-down, then probation with one pending answer at most.
    a.early_answer_failed(PEER, t0);
    for _ in 0..5 {
        a.early_answer_completed(PEER, 0, t0);
    }
    let after = t0 + Duration::from_secs(10);
    // The completions above forgave the failure: six again.
    assert!(a.decide(EARLY, &ev, None, now(), after).answers_early());
    a.early_answer_failed(PEER, after);
    let later = after + Duration::from_secs(10);
    assert!(a.decide(EARLY, &ev, None, now(), later).answers_early());
    let d = a.decide(EARLY, &ev, None, now(), later);
    assert_eq!(
        d.withheld,
        Some(Withheld::OverBudget),
        "probation: one at a time"
    );
}

#[test]
fn nk_flights_prove_nothing_with_tokens_or_certificates() {
    // A real NK flight carrying a token and certificates for its source.
    let v1 = verifier();
    let pol = policy(&[&v1], 1);
    let certs = certs_for(&[&v1], PEER);
    let t = token_key().issue(PEER, &CLIENT, now(), &rng()).unwrap();
    let client_time = UnixTime::from_secs(crate::testing::T0 + 100);
    let rec = crate::testing::vector_record()
        .verify(
            &crate::testing::ed25519_cert(),
            crate::testing::NAME,
            client_time,
        )
        .unwrap();
    let mut params = crate::handshake::ClientParams::default();
    params
        .extensions
        .set(crate::handshake::ext::ADDRESS_TOKEN, t)
        .set(crate::handshake::ext::PROVENANCE, certs);
    let (_, flight) =
        crate::handshake::ClientHandshake::start(&rec, &params, b"GET /", client_time, &rng())
            .unwrap();
    let (frame, used) =
        crate::handshake::read_frame(&flight, crate::handshake::Expect::FirstFlight)
            .unwrap()
            .unwrap();
    let mut filter = crate::replay::BloomReplayFilter::new(
        crate::replay::ReplayConfig::default(),
        [1; 32],
        UnixTime::from_secs(crate::testing::T0),
    );
    let accepted = crate::testing::vector_server()
        .accept(
            &frame,
            crate::handshake::Transport::Tcp,
            client_time,
            &mut filter,
            &rng(),
        )
        .unwrap();
    let ev = FlightEvidence::of(&accepted, PEER, used);
    assert_eq!(ev.client_static, None);
    assert!(ev.token.is_some() && ev.provenance.is_some());
    let a = Admission::new(config(), Instant::now());
    let d = a.decide(EARLY, &ev, Some(&pol), now(), Instant::now());
    assert_eq!(d.token, Some(Err(TokenError::WrongKey)));
    assert_eq!(
        d.provenance,
        Some(ProvenanceOutcome::Refused(ProvenanceError::NoStaticKey))
    );
    assert!(!d.answers_early());
}

#[test]
fn settings_that_cannot_mean_what_they_say_are_refused() {
    assert!(AdmissionConfig::default().check().is_ok());
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        let mut c = AdmissionConfig::default();
        c.limits.decrypts_per_sec = bad;
        assert!(c.check().is_err(), "{bad}");
        let mut c = AdmissionConfig::default();
        c.destinations.address_rate = bad;
        assert!(c.check().is_err(), "{bad}");
    }
    let mut c = AdmissionConfig::default();
    c.limits.hard_max_connections = 10;
    assert!(c.check().is_err());
}
