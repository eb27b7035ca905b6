//! Verifier key records (docs/PROTOCOL.md §11.1): the same checks as key
//! records, each refusal with its own error.

use proptest::prelude::*;

use crate::error::{InvalidMessage, RecordError};
use crate::provenance::{verifier_id_for, VerifierSigner};
use crate::record::encodings::*;
use crate::record::*;
use crate::testing::{self, NAME, T0};
use crate::UnixTime;

fn now() -> UnixTime {
    UnixTime::from_secs(T0 + 10)
}

fn sys_rng() -> ring::rand::SystemRandom {
    ring::rand::SystemRandom::new()
}

fn verifier_public() -> [u8; 32] {
    VerifierSigner::generate(&sys_rng()).unwrap().0.key().public
}

fn signed(body: VerifierKeyBody) -> VerifierKeyRecord {
    body.sign(&testing::ecdsa_signer(), &sys_rng()).unwrap()
}

#[test]
fn signed_records_verify_round_trip_and_name_the_certificate_key() {
    let public = verifier_public();
    for (cert, signer, alg) in [
        (
            testing::ecdsa_cert(),
            testing::ecdsa_signer(),
            SignatureAlgorithm::EcdsaP256Sha256,
        ),
        (
            testing::ed25519_cert(),
            testing::ed25519_signer(),
            SignatureAlgorithm::Ed25519,
        ),
    ] {
        let rec = testing::verifier_body(public, &cert)
            .sign(&signer, &sys_rng())
            .unwrap();
        assert_eq!(rec.sig_alg, alg);
        assert_eq!(rec.encode()[0], VERIFIER_RECORD_FORMAT);
        let decoded = VerifierKeyRecord::decode(&rec.encode()).unwrap();
        assert_eq!(decoded, rec);
        let v = decoded.verify(&cert, "WWW.Example.COM.", now()).unwrap();
        let key = v.body().verifier_key();
        assert_eq!(key.public, public);
        assert_eq!(key.id, verifier_id_for(&public));
        // TXT round trip, through any split into character-strings.
        let text = verifier_txt_text(&rec);
        assert!(text.starts_with("v=zrttpv1 id="), "{text}");
        let rdata = verifier_txt_rdata(&rec);
        assert!(txt_is_zrtt_verifier(&rdata));
        assert!(verifier_txt_strings(&rec).iter().all(|s| s.len() <= 255));
        assert_eq!(decode_verifier_txt_rdata(&rdata).unwrap(), rec);
        let mut other_split = Vec::new();
        for chunk in text.as_bytes().chunks(9) {
            other_split.push(chunk.len() as u8);
            other_split.extend_from_slice(chunk);
        }
        assert_eq!(decode_verifier_txt_rdata(&other_split).unwrap(), rec);
    }
    assert_eq!(
        verifier_owner("PV1.Example.com."),
        "_zrttpv.pv1.example.com"
    );
}

#[test]
fn every_refusal_has_its_own_error() {
    let public = verifier_public();
    let cert = testing::ecdsa_cert();
    let rec = signed(testing::verifier_body(public, &cert));
    let na = T0 + 50 * 3600;
    let mut errors = Vec::new();

    // Wrong name: the record is for www.example.com.
    let e = rec.verify(&cert, "pv.example.com", now()).unwrap_err();
    assert_eq!(
        e,
        RecordError::WrongName {
            expected: "pv.example.com".into(),
            found: NAME.into()
        }
    );
    errors.push(e);
    // Expired (not_after is exclusive) and not yet valid.
    let e = rec
        .verify(&cert, NAME, UnixTime::from_secs(na))
        .unwrap_err();
    assert_eq!(
        e,
        RecordError::Expired {
            not_after: na,
            now: na
        }
    );
    errors.push(e);
    let e = rec
        .verify(&cert, NAME, UnixTime::from_secs(T0 - 1))
        .unwrap_err();
    assert_eq!(
        e,
        RecordError::NotYetValid {
            not_before: T0,
            now: T0 - 1
        }
    );
    errors.push(e);
    // Forged: signed by a key that is not the named certificate's.
    let forged = testing::verifier_body(public, &cert)
        .sign(&testing::other_signer(), &sys_rng())
        .unwrap();
    let e = forged.verify(&cert, NAME, now()).unwrap_err();
    assert_eq!(e, RecordError::BadSignature);
    errors.push(e);
    // Altered after signing: another key under the genuine signature.
    let mut swapped = rec.clone();
    swapped.body = testing::verifier_body(verifier_public(), &cert);
    assert_eq!(
        swapped.verify(&cert, NAME, now()),
        Err(RecordError::BadSignature)
    );
    // Lifetime beyond the bound, even when properly signed.
    let mut long = testing::verifier_body(public, &cert);
    long.not_after = long.not_before + MAX_VERIFIER_RECORD_LIFETIME_SECS + 1;
    let e = signed(long).verify(&cert, NAME, now()).unwrap_err();
    assert_eq!(
        e,
        RecordError::LifetimeTooLong {
            lifetime: MAX_VERIFIER_RECORD_LIFETIME_SECS + 1,
            max: MAX_VERIFIER_RECORD_LIFETIME_SECS
        }
    );
    errors.push(e);
    let mut longest = testing::verifier_body(public, &cert);
    longest.not_after = longest.not_before + MAX_VERIFIER_RECORD_LIFETIME_SECS;
    assert!(signed(longest).verify(&cert, NAME, now()).is_ok());
    // Outside the certificate's validity (it starts in 1975).
    let mut early = testing::verifier_body(public, &cert);
    early.not_before = 0;
    early.not_after = 100;
    let e = signed(early)
        .verify(&cert, NAME, UnixTime::from_secs(50))
        .unwrap_err();
    assert!(
        matches!(e, RecordError::OutlivesCertificate { .. }),
        "{e:?}"
    );
    errors.push(e);
    // Another certificate than the one the record names.
    let e = rec
        .verify(&testing::ed25519_cert(), NAME, now())
        .unwrap_err();
    assert_eq!(e, RecordError::CertificateMismatch);
    errors.push(e);
    // A certificate for another name cannot vouch for this one.
    let other = testing::other_cert();
    let e = testing::verifier_body(public, &other)
        .sign(&testing::other_signer(), &sys_rng())
        .unwrap()
        .verify(&other, NAME, now())
        .unwrap_err();
    assert!(matches!(e, RecordError::BadCertificate(_)), "{e:?}");
    errors.push(e);
    // Malformed bytes.
    let e = VerifierKeyRecord::decode(&rec.encode()[..40]).unwrap_err();
    assert!(matches!(
        e,
        RecordError::Malformed(InvalidMessage::Truncated { .. })
    ));
    errors.push(e);
    let d = |e: &RecordError| std::mem::discriminant(e);
    for (i, a) in errors.iter().enumerate() {
        for b in &errors[..i] {
            assert_ne!(d(a), d(b), "{a} and {b} share a variant");
        }
    }
    // And the error text says what it is about.
    assert_eq!(
        RecordError::BadSignature.to_string(),
        "bad signature",
        "messages are stable"
    );
}

#[test]
fn malformed_bytes_are_typed() {
    let rec = testing::vector_verifier_record();
    let bytes = rec.encode();
    for cut in 0..bytes.len() {
        assert!(
            matches!(
                VerifierKeyRecord::decode(&bytes[..cut]),
                Err(RecordError::Malformed(_))
            ),
            "cut at {cut}"
        );
    }
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(
        VerifierKeyRecord::decode(&long),
        Err(RecordError::Malformed(InvalidMessage::TrailingBytes(1)))
    );
    // A key record is not a verifier key record, and the reverse.
    let other_kind =
        RecordError::Malformed(InvalidMessage::InvalidField("a record of another kind"));
    assert_eq!(
        VerifierKeyRecord::decode(&testing::vector_record().encode()),
        Err(other_kind.clone())
    );
    assert_eq!(KeyRecord::decode(&bytes), Err(other_kind));
    let mut v2 = bytes.clone();
    v2[0] = 0x12;
    assert_eq!(
        VerifierKeyRecord::decode(&v2),
        Err(RecordError::Malformed(InvalidMessage::UnsupportedVersion(
            0x12
        )))
    );
    // The verifier id must be derived from the key.
    let mut bad_id = bytes.clone();
    bad_id[1] ^= 1;
    assert_eq!(
        VerifierKeyRecord::decode(&bad_id),
        Err(RecordError::Malformed(InvalidMessage::InvalidField(
            "verifier_id is not the first 4 bytes of SHA-256(public key)"
        )))
    );
    // not_after must follow not_before.
    let mut body = rec.body.clone();
    body.not_after = body.not_before;
    assert!(matches!(
        body.sign(&testing::ed25519_signer(), &sys_rng()),
        Err(RecordError::Malformed(InvalidMessage::InvalidField(_)))
    ));
}

#[test]
fn tampering_with_any_byte_is_refused() {
    let rec = testing::vector_verifier_record();
    let bytes = rec.encode();
    let cert = testing::ed25519_cert();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            let result = VerifierKeyRecord::decode(&bad).and_then(|r| r.verify(&cert, NAME, now()));
            assert!(
                result.is_err(),
                "flipping bit {bit:#x} of byte {i} was accepted"
            );
        }
    }
}

#[test]
fn signatures_are_bound_to_the_record_kind() {
    // The contexts differ, so a certificate key's signature over one kind
    // never verifies as the other.
    let rec = testing::vector_verifier_record();
    assert!(rec.signed_bytes().starts_with(VERIFIER_SIGNATURE_CONTEXT));
    assert!(testing::vector_record()
        .signed_bytes()
        .starts_with(SIGNATURE_CONTEXT));
    assert_ne!(VERIFIER_SIGNATURE_CONTEXT, SIGNATURE_CONTEXT);
}

#[test]
fn txt_is_strict() {
    let rec = testing::vector_verifier_record();
    let text = verifier_txt_text(&rec);
    assert_eq!(
        decode_verifier_txt_text(text.replace("v=zrttpv1", "v=zrttpv2").as_bytes()),
        Err(RecordError::Malformed(InvalidMessage::UnsupportedVersion(
            2
        )))
    );
    for bad in [
        text.replace("v=zrttpv1 ", "v=zrtt1 "),
        text.replace(" nb=", " nb=0"),
        format!("{text} x=1"),
        text.replace(" n=www.example.com", ""),
        text.replace("id=", "ID="),
        text.replace(&format!("n={NAME}"), &format!("n={}", "a".repeat(300))),
    ] {
        assert!(
            matches!(
                decode_verifier_txt_text(bad.as_bytes()),
                Err(RecordError::Malformed(_))
            ),
            "{bad}"
        );
    }
    // A key record's TXT decoder does not take a verifier key record.
    assert!(decode_txt_text(text.as_bytes()).is_err());
    assert!(!txt_is_zrtt_verifier(&txt_rdata(&testing::vector_record())));
}

fn arb_body() -> impl Strategy<Value = VerifierKeyBody> {
    (
        any::<[u8; 32]>(),
        0u64..u64::MAX / 2,
        1u64..10_000_000,
        "[a-z0-9]{1,20}(\\.[a-z0-9_-]{1,30}){0,4}",
        any::<[u8; 32]>(),
    )
        .prop_map(|(public_key, nb, life, name, cs)| VerifierKeyBody {
            verifier_id: verifier_id_for(&public_key),
            public_key,
            not_before: nb,
            not_after: nb + life,
            name,
            cert_sha256: cs,
        })
}

proptest! {
    #[test]
    fn encodings_round_trip(
        body in arb_body(),
        ec in any::<bool>(),
        signature in proptest::collection::vec(any::<u8>(), 1..=64),
    ) {
        let rec = VerifierKeyRecord {
            body,
            sig_alg: if ec { SignatureAlgorithm::EcdsaP256Sha256 } else { SignatureAlgorithm::Ed25519 },
            signature,
        };
        prop_assert_eq!(&VerifierKeyRecord::decode(&rec.encode()).unwrap(), &rec);
        prop_assert_eq!(&decode_verifier_txt_rdata(&verifier_txt_rdata(&rec)).unwrap(), &rec);
    }

    #[test]
    fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(r) = VerifierKeyRecord::decode(&data) {
            prop_assert_eq!(r.encode(), data.clone());
        }
        let _ = decode_verifier_txt_rdata(&data);
        let _ = decode_verifier_txt_text(&data);
    }
}

#[test]
fn small_order_verifier_keys_are_refused_even_when_signed() {
    let cert = testing::ecdsa_cert();
    let mut identity = [0u8; 32];
    identity[0] = 1; // the Edwards identity point
    for weak in [identity, [0u8; 32]] {
        let mut body = testing::verifier_body(weak, &cert);
        body.verifier_id = crate::provenance::verifier_id_for(&weak);
        let rec = signed(body);
        assert_eq!(rec.verify(&cert, NAME, now()), Err(RecordError::WeakKey));
    }
}
