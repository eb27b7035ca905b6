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
        keys: verifiers.iter().map(|v| v.key().into()).collect(),
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
    // A full cache still verifies; it keeps the newest entries, never more
    // than its capacity.
    let mut tiny = VerifiedCache::new(1);
    for _ in 0..3 {
        let ok = pol
            .verify(&certs, ADDR, Some(&CLIENT), now(), &mut tiny)
            .unwrap();
        assert!(ok.signatures_checked >= 1);
        assert_eq!(tiny.len(), 1);
    }
    let mut small = VerifiedCache::new(4);
    for _ in 0..3 {
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut small)
            .unwrap();
        assert!(small.len() <= 4);
    }
    assert_eq!(
        pol.verify(&certs, ADDR, Some(&CLIENT), now(), &mut small)
            .unwrap()
            .signatures_checked,
        0
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

fn trusted(v: &VerifierSigner, verifier: u32, not_before: u64, not_after: u64) -> TrustedKey {
    TrustedKey {
        key: v.key(),
        verifier,
        not_before,
        not_after,
    }
}

#[test]
fn keys_of_one_verifier_count_once_and_only_while_valid() {
    // Verifier 1 is rotating: an old key (valid until T0 + 100) and a new one.
    let (old, new, b) = (signer(), signer(), signer());
    let ip = IssuePolicy::default();
    let c_old = old.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let c_new = new.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let c_b = b.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let pol = TrustPolicy {
        keys: vec![
            trusted(&old, 1, T0 - 10, T0 + 100),
            trusted(&new, 1, T0 - 10, T0 + 10_000),
            trusted(&b, 2, 0, u64::MAX),
        ],
        quorum: 2,
        skew_secs: 5,
    };
    let mut cache = VerifiedCache::new(100);
    // Two keys of one verifier are one verifier: the quorum of two is not met.
    assert_eq!(
        pol.verify(
            &[c_old.clone(), c_new.clone()],
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
    // Either key of verifier 1 plus verifier 2 meets it; the second key of
    // verifier 1 is skipped, not checked.
    for certs in [
        vec![c_old.clone(), c_b.clone()],
        vec![c_new.clone(), c_old.clone(), c_b.clone()],
    ] {
        let ok = pol
            .verify(
                &certs,
                ADDR,
                Some(&CLIENT),
                now(),
                &mut VerifiedCache::new(10),
            )
            .unwrap();
        assert_eq!(ok.verifiers.len(), 2);
        assert_eq!(ok.signatures_checked, 2);
    }
    // Past the old key's validity its certificates no longer count (even
    // though the certificate itself is still valid and cached), the new
    // key's do.
    let later = UnixTime::from_secs(T0 + 100);
    assert_eq!(
        pol.verify(
            &[c_old.clone(), c_b.clone()],
            ADDR,
            Some(&CLIENT),
            later,
            &mut cache
        ),
        Err(ProvenanceError::VerifierKeyNotValid(old.key().id))
    );
    assert!(pol
        .verify(&[c_old, c_new, c_b], ADDR, Some(&CLIENT), later, &mut cache)
        .is_ok());
    // Not valid yet either.
    let early = TrustPolicy {
        keys: vec![trusted(&b, 2, T0 + 60, T0 + 120)],
        quorum: 1,
        skew_secs: 5,
    };
    let c = b.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    assert_eq!(
        early.verify(&[c], ADDR, Some(&CLIENT), now(), &mut cache),
        Err(ProvenanceError::VerifierKeyNotValid(b.key().id))
    );
    // A configured key is its own verifier and valid at all times.
    let k: TrustedKey = b.key().into();
    assert_eq!(
        (k.verifier, k.not_before, k.not_after),
        (b.key().id, 0, u64::MAX)
    );
}

#[test]
fn rotation_keeps_doubling_and_no_certificate_outlives_its_key() {
    let ip = IssuePolicy::default();
    let old = signer();
    let new = signer();
    let new_key = new.key();
    let first = old.issue(&ip, &CLIENT, ADDR, u32::MAX, None, now());
    assert_eq!(first.duration, 1800);
    // The new key is current; the old one is still the verifier's.
    let until = T0 + 100_000;
    let keys = VerifierKeys::new(new, Some(until), vec![old.key()]);
    assert_eq!(keys.current(), new_key);
    let t = UnixTime::from_secs(T0 + 900);
    let c = keys
        .issue(&ip, &CLIENT, ADDR, u32::MAX, Some(&first), t)
        .unwrap();
    assert_eq!(c.verifier_id, new_key.id, "signed with the current key");
    assert_eq!(c.duration, 3600, "the old key's certificate still doubles");
    // A certificate from an unrelated key does not.
    let stranger = signer().issue(&ip, &CLIENT, ADDR, u32::MAX, None, now());
    assert_eq!(
        keys.issue(&ip, &CLIENT, ADDR, u32::MAX, Some(&stranger), t)
            .unwrap()
            .duration,
        1800
    );
    // Near the end of the key's validity certificates get shorter ...
    let near = UnixTime::from_secs(until - 600);
    let c = keys
        .issue(&ip, &CLIENT, ADDR, u32::MAX, None, near)
        .unwrap();
    assert_eq!(c.end(), until);
    assert_eq!(c.duration, 600);
    // ... and at the end there are none.
    assert!(keys
        .issue(
            &ip,
            &CLIENT,
            ADDR,
            u32::MAX,
            None,
            UnixTime::from_secs(until)
        )
        .is_none());
    // Without a bound it behaves as the plain signer.
    let plain = VerifierKeys::new(signer(), None, Vec::new());
    assert_eq!(
        plain
            .issue(&ip, &CLIENT, ADDR, u32::MAX, None, now())
            .unwrap()
            .duration,
        1800
    );
}

#[test]
fn a_forged_certificate_costs_one_check_and_cached_ones_count_first() {
    let (a, b, c) = (signer(), signer(), signer());
    let ip = IssuePolicy::default();
    let pol = policy(&[&a, &b, &c], 2);
    let good_a = a.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let good_b = b.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let mut forged_c = c.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    forged_c.signature[0] ^= 1;
    let mut forged_a = good_a.clone();
    forged_a.signature[0] ^= 1;
    let mut cache = VerifiedCache::new(100);
    let mut checks = 0;
    // Forged first: one check, then the flight is refused.
    let r = pol.verify_shared(
        &[forged_a.clone(), forged_c.clone(), good_b.clone()],
        ADDR,
        Some(&CLIENT),
        now(),
        &std::sync::Mutex::new(VerifiedCache::new(100)),
        &mut || {
            checks += 1;
            true
        },
    );
    assert!(matches!(r, Err(ProvenanceError::BadSignature(_))));
    assert_eq!(checks, 1);
    // A quorum that cannot be met costs no check at all.
    let mut checks = 0;
    let r = pol.verify_shared(
        std::slice::from_ref(&good_a),
        ADDR,
        Some(&CLIENT),
        now(),
        &std::sync::Mutex::new(VerifiedCache::new(100)),
        &mut || {
            checks += 1;
            true
        },
    );
    assert_eq!(
        r,
        Err(ProvenanceError::QuorumNotMet {
            valid: 1,
            needed: 2
        })
    );
    assert_eq!(checks, 0);
    // Cached certificates count before any uncached one is looked at: with
    // no checks left, [fresh, cached, cached] still meets the quorum.
    pol.verify(
        &[good_a.clone(), good_b.clone()],
        ADDR,
        Some(&CLIENT),
        now(),
        &mut cache,
    )
    .unwrap();
    let fresh_c = c.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let shared = std::sync::Mutex::new(cache);
    let ok = pol
        .verify_shared(
            &[fresh_c, good_a, good_b],
            ADDR,
            Some(&CLIENT),
            now(),
            &shared,
            &mut || false,
        )
        .unwrap();
    assert_eq!(ok.signatures_checked, 0);
}

#[test]
fn a_certificate_cached_under_one_key_does_not_count_under_another_with_its_id() {
    // A verifier that ground a key with another verifier's id cannot make
    // its cached certificates count for that verifier.
    let (honest, evil) = (signer(), signer());
    let ip = IssuePolicy::default();
    let cert = evil.issue(&ip, &CLIENT, ADDR, 3600, None, now());
    let mut cache = VerifiedCache::new(100);
    let evil_only = policy(&[&evil], 1);
    evil_only
        .verify(
            std::slice::from_ref(&cert),
            ADDR,
            Some(&CLIENT),
            now(),
            &mut cache,
        )
        .unwrap();
    // The same id now names the honest key.
    let mut collided = TrustedKey::from(honest.key());
    collided.key.id = evil.key().id;
    let honest_only = TrustPolicy {
        keys: vec![collided],
        quorum: 1,
        skew_secs: 5,
    };
    assert!(matches!(
        honest_only.verify(&[cert], ADDR, Some(&CLIENT), now(), &mut cache),
        Err(ProvenanceError::BadSignature(_))
    ));
}

#[test]
fn a_forged_certificate_is_refused_every_time_never_cached() {
    let a = signer();
    let pol = policy(&[&a], 1);
    let mut forged = a.issue(&IssuePolicy::default(), &CLIENT, ADDR, 3600, None, now());
    forged.signature[5] ^= 1;
    let mut cache = VerifiedCache::new(100);
    for _ in 0..3 {
        assert!(matches!(
            pol.verify(
                std::slice::from_ref(&forged),
                ADDR,
                Some(&CLIENT),
                now(),
                &mut cache
            ),
            Err(ProvenanceError::BadSignature(_))
        ));
    }
    assert!(cache.is_empty());
}
