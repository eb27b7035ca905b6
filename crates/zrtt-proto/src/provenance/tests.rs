#![allow(clippy::disallowed_methods)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

const T0: u64 = 1_800_000_000;

fn now() -> UnixTime {
    UnixTime::from_secs(T0)
}

fn signer() -> VerifierSigner {
    VerifierSigner::generate(&ring::rand::SystemRandom::new())
        .unwrap()
        .0
}

const CLIENT: [u8; 32] = [7; 32];
const ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));

fn policy(verifiers: &[&VerifierSigner], quorum: usize) -> TrustPolicy {
    TrustPolicy {
        verifiers: verifiers.iter().map(|v| v.key()).collect(),
        quorum,
        skew_secs: 5,
    }
}

#[test]
fn issued_certificate_verifies_and_round_trips() {
    let pv = signer();
    let c = pv.issue(&IssuePolicy::default(), &CLIENT, ADDR, 3600, None, now());
    assert_eq!(c.duration, 1800, "first certificate lasts d0");
    let wire = encode_certificates(std::slice::from_ref(&c));
    assert_eq!(wire.len(), 1 + 86, "compact: 86 bytes per IPv4 certificate");
    assert_eq!(decode_certificates(&wire).unwrap(), vec![c.clone()]);
    let mut cache = VerifiedCache::new(100);
    let ok = policy(&[&pv], 1)
        .verify(&[c], ADDR, Some(&CLIENT), now(), &mut cache)
        .unwrap();
    assert_eq!(ok.verifiers, vec![pv.key().id]);
    assert_eq!(ok.signatures_checked, 1);
}

#[test]
fn refresh_doubles_up_to_the_cap_and_stays_stateless() {
    let pv = signer();
    let p = IssuePolicy::default();
    let mut c = pv.issue(&p, &CLIENT, ADDR, u32::MAX, None, now());
    let mut seq = vec![c.duration];
    let mut t = T0;
    for _ in 0..8 {
        t += u64::from(c.duration) / 2; // refresh half-way through
        c = pv.issue(
            &p,
            &CLIENT,
            ADDR,
            u32::MAX,
            Some(&c),
            UnixTime::from_secs(t),
        );
        seq.push(c.duration);
    }
    assert_eq!(
        seq,
        vec![1800, 3600, 7200, 14400, 28800, 57600, 86400, 86400, 86400]
    );
    // An expired previous certificate starts over.
    let late = UnixTime::from_secs(c.end() + 1);
    assert_eq!(
        pv.issue(&p, &CLIENT, ADDR, u32::MAX, Some(&c), late)
            .duration,
        1800
    );
    // A previous certificate for another address (the client moved) starts over.
    let moved = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9));
    let c2 = pv.issue(
        &p,
        &CLIENT,
        moved,
        u32::MAX,
        Some(&c),
        UnixTime::from_secs(t),
    );
    assert_eq!(c2.duration, 1800);
    // One from another verifier does not double either.
    let other = signer();
    let foreign = other.issue(&p, &CLIENT, ADDR, u32::MAX, None, now());
    assert_eq!(
        pv.issue(&p, &CLIENT, ADDR, u32::MAX, Some(&foreign), now())
            .duration,
        1800
    );
    // Requested durations cap the result.
    assert_eq!(pv.issue(&p, &CLIENT, ADDR, 60, None, now()).duration, 60);
}

#[test]
fn every_refusal_has_its_reason() {
    let (a, b, c) = (signer(), signer(), signer());
    let ip = IssuePolicy::default();
    let ca = a.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let cb = b.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let cc = c.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let pol = policy(&[&a, &b], 2);
    let mut cache = VerifiedCache::new(100);
    // Quorum of two trusted: ok; one trusted plus an untrusted: refused.
    assert!(pol
        .verify(
            &[ca.clone(), cb.clone()],
            ADDR,
            Some(&CLIENT),
            now(),
            &mut cache
        )
        .is_ok());
    assert_eq!(
        pol.verify(
            &[ca.clone(), cc.clone()],
            ADDR,
            Some(&CLIENT),
            now(),
            &mut cache
        ),
        Err(ProvenanceError::UntrustedVerifier(c.key().id))
    );
    assert_eq!(
        pol.verify(
            std::slice::from_ref(&ca),
            ADDR,
            Some(&CLIENT),
            now(),
            &mut cache
        ),
        Err(ProvenanceError::QuorumNotMet {
            valid: 1,
            needed: 2
        })
    );
    // Address mismatch.
    let other_ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert!(matches!(
        pol.verify(
            &[ca.clone(), cb.clone()],
            other_ip,
            Some(&CLIENT),
            now(),
            &mut VerifiedCache::new(10)
        ),
        Err(ProvenanceError::AddressMismatch { .. })
    ));
    // Expired and not yet valid (beyond the 5 s skew).
    let later = UnixTime::from_secs(ca.end() + 5);
    assert_eq!(
        pol.verify(
            &[ca.clone(), cb.clone()],
            ADDR,
            Some(&CLIENT),
            later,
            &mut cache
        ),
        Err(ProvenanceError::Expired(a.key().id))
    );
    let earlier = UnixTime::from_secs(T0 - 6);
    assert_eq!(
        pol.verify(
            &[ca.clone(), cb.clone()],
            ADDR,
            Some(&CLIENT),
            earlier,
            &mut cache
        ),
        Err(ProvenanceError::NotYetValid(a.key().id))
    );
    // Forged signature, and a certificate for another client key (an
    // eavesdropper reusing it with its own static key).
    let mut forged = cb.clone();
    forged.signature[0] ^= 1;
    let mut fresh = VerifiedCache::new(10);
    assert_eq!(
        pol.verify(
            &[ca.clone(), forged],
            ADDR,
            Some(&CLIENT),
            now(),
            &mut fresh
        ),
        Err(ProvenanceError::BadSignature(b.key().id))
    );
    assert_eq!(
        pol.verify(
            &[ca.clone(), cb.clone()],
            ADDR,
            Some(&[8; 32]),
            now(),
            &mut VerifiedCache::new(10)
        ),
        Err(ProvenanceError::BadSignature(a.key().id))
    );
    // No static key (an NK flight) and duplicates.
    assert_eq!(
        pol.verify(std::slice::from_ref(&ca), ADDR, None, now(), &mut cache),
        Err(ProvenanceError::NoStaticKey)
    );
    assert_eq!(
        pol.verify(
            &[ca.clone(), ca.clone()],
            ADDR,
            Some(&CLIENT),
            now(),
            &mut cache
        ),
        Err(ProvenanceError::DuplicateVerifier(a.key().id))
    );
}

#[test]
fn cache_skips_rechecking_and_expires() {
    let (a, b) = (signer(), signer());
    let ip = IssuePolicy::default();
    let certs = [
        a.issue(&ip, &CLIENT, ADDR, 3600, None, now()),
        b.issue(&ip, &CLIENT, ADDR, 3600, None, now()),
    ];
    let pol = policy(&[&a, &b], 2);
    let mut cache = VerifiedCache::new(100);
    assert_eq!(
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut cache)
            .unwrap()
            .signatures_checked,
        2
    );
    assert_eq!(
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut cache)
            .unwrap()
            .signatures_checked,
        0
    );
    assert_eq!(cache.len(), 2);
    // The cache is keyed by client key too: another key is checked (and fails).
    assert!(pol
        .verify(&certs, ADDR, Some(&[1; 32]), now(), &mut cache)
        .is_err());
    // A full cache still verifies, it just does not remember.
    let mut tiny = VerifiedCache::new(1);
    assert_eq!(
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut tiny)
            .unwrap()
            .signatures_checked,
        2
    );
    assert_eq!(
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut tiny)
            .unwrap()
            .signatures_checked,
        1
    );
}

#[test]
fn decoding_is_strict() {
    let pv = signer();
    let c = pv.issue(&IssuePolicy::default(), &CLIENT, ADDR, 3600, None, now());
    let wire = encode_certificates(&[c]);
    for cut in 0..wire.len() {
        assert!(decode_certificates(&wire[..cut]).is_err(), "cut {cut}");
    }
    let mut extra = wire.clone();
    extra.push(0);
    assert!(decode_certificates(&extra).is_err());
    let mut fam = wire.clone();
    fam[6] = 5;
    assert!(decode_certificates(&fam).is_err());
    assert!(decode_certificates(&[0]).is_err());
}

proptest! {
    #[test]
    fn decoder_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(certs) = decode_certificates(&data) {
            prop_assert_eq!(encode_certificates(&certs), data);
        }
    }
}
