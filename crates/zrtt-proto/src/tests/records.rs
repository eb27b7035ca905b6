use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::error::{InvalidMessage, RecordError};
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

#[test]
fn ecdsa_and_ed25519_records_verify() {
    let key = testing::semi_static("k");
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
        (
            testing::p384_cert(),
            testing::p384_signer(),
            SignatureAlgorithm::EcdsaP384Sha384,
        ),
        (
            testing::rsa_cert(),
            testing::rsa_signer(),
            SignatureAlgorithm::RsaPssSha256,
        ),
    ] {
        let rec = testing::body(&key, &cert)
            .sign(&signer, &sys_rng())
            .unwrap();
        assert_eq!(rec.sig_alg, alg);
        let decoded = KeyRecord::decode(&rec.encode()).unwrap();
        assert_eq!(decoded, rec);
        let v = decoded.verify(&cert, "WWW.Example.COM.", now()).unwrap();
        assert_eq!(v.body().public_key, *key.public());
        // Every encoding carries it.
        let txt = crate::record::encodings::decode_txt_text(
            crate::record::encodings::txt_text(&rec).as_bytes(),
        )
        .unwrap();
        assert_eq!(txt, rec);
        // A signature from another key, or over other bytes, is refused.
        let mut forged = rec.clone();
        let last = forged.signature.len() - 1;
        forged.signature[last] ^= 1;
        assert!(matches!(
            forged.verify(&cert, "www.example.com", now()),
            Err(RecordError::BadSignature)
        ));
        let other = if alg == SignatureAlgorithm::RsaPssSha256 {
            testing::p384_cert()
        } else {
            testing::rsa_cert()
        };
        let mut body = testing::body(&key, &other);
        body.cert_sha256 = crate::record::sha256(&other);
        let wrong = KeyRecord {
            body,
            sig_alg: alg,
            signature: rec.signature.clone(),
        };
        assert!(wrong.verify(&other, "www.example.com", now()).is_err());
    }
}

#[test]
fn every_refusal_has_its_own_error() {
    let key = testing::semi_static("k");
    let cert = testing::ecdsa_cert();
    let rec = testing::body(&key, &cert)
        .sign(&testing::ecdsa_signer(), &sys_rng())
        .unwrap();

    assert!(matches!(
        rec.verify(&cert, "other.example.com", now()),
        Err(RecordError::WrongName { .. })
    ));
    assert_eq!(
        rec.verify(&cert, NAME, UnixTime::from_secs(T0 + 3600)),
        Err(RecordError::Expired {
            not_after: T0 + 3600,
            now: T0 + 3600
        })
    );
    assert_eq!(
        rec.verify(&cert, NAME, UnixTime::from_secs(T0 - 1)),
        Err(RecordError::NotYetValid {
            not_before: T0,
            now: T0 - 1
        })
    );
    // Another certificate than the one the record names.
    assert_eq!(
        rec.verify(&testing::ed25519_cert(), NAME, now()),
        Err(RecordError::CertificateMismatch)
    );
    // Signed by a key that is not the named certificate's.
    let forged = testing::body(&key, &cert)
        .sign(&testing::other_signer(), &sys_rng())
        .unwrap();
    assert_eq!(
        forged.verify(&cert, NAME, now()),
        Err(RecordError::BadSignature)
    );
    // A certificate for another name cannot vouch for www.example.com.
    let other = testing::other_cert();
    let rec_other = testing::body(&key, &other)
        .sign(&testing::other_signer(), &sys_rng())
        .unwrap();
    assert!(matches!(
        rec_other.verify(&other, NAME, now()),
        Err(RecordError::BadCertificate(_))
    ));
}

#[test]
fn long_lived_records_are_refused_even_when_signed() {
    // A stolen certificate key must not mint records that outlive revocation.
    let key = testing::semi_static("k");
    let cert = testing::ecdsa_cert();
    let mut body = testing::body(&key, &cert);
    body.not_after = body.not_before + MAX_RECORD_LIFETIME_SECS + 1;
    let rec = body.sign(&testing::ecdsa_signer(), &sys_rng()).unwrap();
    assert_eq!(
        rec.verify(&cert, NAME, now()),
        Err(RecordError::LifetimeTooLong {
            lifetime: MAX_RECORD_LIFETIME_SECS + 1,
            max: MAX_RECORD_LIFETIME_SECS
        })
    );
    let mut body = testing::body(&key, &cert);
    body.not_after = body.not_before + MAX_RECORD_LIFETIME_SECS;
    let rec = body.sign(&testing::ecdsa_signer(), &sys_rng()).unwrap();
    assert!(rec.verify(&cert, NAME, now()).is_ok());
}

#[test]
fn txt_with_an_overlong_name_is_an_error_not_a_panic() {
    // Found in review: a 300-byte name used to overflow the binary length byte.
    let text = txt_text(&testing::vector_record())
        .replace("n=www.example.com", &format!("n={}", "a".repeat(300)));
    assert!(matches!(
        decode_txt_text(text.as_bytes()),
        Err(RecordError::Malformed(_))
    ));
}

#[test]
fn tampering_with_any_byte_is_refused() {
    let rec = testing::vector_record();
    let bytes = rec.encode();
    let cert = testing::ed25519_cert();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            let result = KeyRecord::decode(&bad).and_then(|r| r.verify(&cert, NAME, now()));
            assert!(
                result.is_err(),
                "flipping bit {bit:#x} of byte {i} was accepted"
            );
        }
    }
}

#[test]
fn truncated_oversized_and_wrong_version_are_typed() {
    let bytes = testing::vector_record().encode();
    for cut in 0..bytes.len() {
        match KeyRecord::decode(&bytes[..cut]) {
            Err(RecordError::Malformed(_)) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(
        KeyRecord::decode(&long),
        Err(RecordError::Malformed(InvalidMessage::TrailingBytes(1)))
    );
    assert!(matches!(
        KeyRecord::decode(&vec![1u8; MAX_RECORD_LEN + 1]),
        Err(RecordError::Malformed(InvalidMessage::Oversized { .. }))
    ));
    let mut v2 = bytes.clone();
    v2[0] = 2;
    assert_eq!(
        KeyRecord::decode(&v2),
        Err(RecordError::Malformed(InvalidMessage::UnsupportedVersion(
            2
        )))
    );
}

#[test]
fn record_lists_refuse_duplicates_and_excess() {
    let r = testing::vector_record();
    let two = encode_record_list(&[r.clone(), r.clone()]);
    assert_eq!(
        decode_record_list(&two),
        Err(RecordError::DuplicateKeyId(r.body.key_id))
    );
    assert!(decode_record_list(&[]).is_err());
    let mut many = Vec::new();
    for i in 0..9u32 {
        let mut x = r.clone();
        x.body.key_id = i;
        many.extend_from_slice(&encode_record_list(&[x]));
    }
    assert!(matches!(
        decode_record_list(&many),
        Err(RecordError::Malformed(InvalidMessage::Oversized { .. }))
    ));
}

#[test]
fn svcb_carries_hints_and_records_and_survives_stripping() {
    let r = testing::vector_record();
    let rdata = SvcbRdata::service(
        &["http/1.1"],
        &[Ipv4Addr::new(198, 18, 0, 2)],
        &[],
        std::slice::from_ref(&r),
    );
    let wire = rdata.encode();
    let back = SvcbRdata::decode(&wire).unwrap();
    assert_eq!(back, rdata);
    assert_eq!(back.ipv4_hints(), vec![Ipv4Addr::new(198, 18, 0, 2)]);
    assert_eq!(back.zrtt_records().unwrap(), Some(vec![r]));
    // A resolver that strips unknown keys: no records, no error, so the client falls back.
    let mut stripped = back.clone();
    stripped.params.retain(|(k, _)| *k != SVC_PARAM_KEY);
    assert_eq!(stripped.zrtt_records().unwrap(), None);
    // Keys out of order are refused.
    let mut bad = rdata.clone();
    bad.params.reverse();
    assert!(SvcbRdata::decode(&bad.encode()).is_err());
    assert!(rdata
        .to_presentation()
        .starts_with("1 . alpn=\"http/1.1\" ipv4hint=198.18.0.2 key65380=\""));
}

#[test]
fn txt_splits_into_255_byte_strings_and_is_strict() {
    let r = testing::vector_record();
    let strings = txt_strings(&r);
    assert!(strings.len() >= 2 && strings.iter().all(|s| s.len() <= 255));
    let rdata = txt_rdata(&r);
    assert!(txt_is_zrtt(&rdata));
    assert_eq!(decode_txt_rdata(&rdata).unwrap(), r);
    let text = txt_text(&r);
    // Any split of the text decodes the same.
    let mut other_split = Vec::new();
    for chunk in text.as_bytes().chunks(7) {
        other_split.push(chunk.len() as u8);
        other_split.extend_from_slice(chunk);
    }
    assert_eq!(decode_txt_rdata(&other_split).unwrap(), r);
    for bad in [
        text.replace("v=zrtt1", "v=zrtt2"),
        text.replace(" ed=16384", " ed=016384"),
        text.replace(" fl=2", " fl=8"),
        format!("{text} x=1"),
        text.replace(" q=0", ""),
        text.replace("v=zrtt1 ", "v=spf1 "),
    ] {
        assert!(decode_txt_text(bad.as_bytes()).is_err(), "{bad}");
    }
    assert_eq!(
        decode_txt_text(text.replace("v=zrtt1", "v=zrtt2").as_bytes()),
        Err(RecordError::Malformed(InvalidMessage::UnsupportedVersion(
            2
        )))
    );
}

#[test]
fn aaaa_tunnel_is_order_independent_and_strict() {
    let r = testing::vector_record();
    let mut addrs = aaaa_tunnel(std::slice::from_ref(&r));
    addrs.reverse();
    assert_eq!(decode_aaaa_tunnel(&addrs).unwrap(), vec![r]);
    let mut missing = addrs.clone();
    missing.remove(3);
    assert!(decode_aaaa_tunnel(&missing).is_err());
    let mut dup = addrs.clone();
    dup.push(addrs[0]);
    assert!(decode_aaaa_tunnel(&dup).is_err());
    let mut extra = addrs.clone();
    let mut o = [0u8; 16];
    o[1] = addrs.len() as u8;
    extra.push(Ipv6Addr::from(o));
    assert!(
        decode_aaaa_tunnel(&extra).is_err(),
        "an extra all-zero chunk is not allowed"
    );
    assert_eq!(
        aaaa_tunnel_owner("WWW.example.com."),
        "zrtt-tunnel.www.example.com"
    );
}

#[test]
fn tlsa_only_3_0_0_with_a_certificate() {
    let cert = testing::ed25519_cert();
    let rdata = tlsa_rdata(&cert);
    assert_eq!(decode_tlsa_rdata(&rdata).unwrap(), cert.as_slice());
    let mut other = rdata.clone();
    other[1] = 1;
    assert!(decode_tlsa_rdata(&other).is_err());
    assert!(decode_tlsa_rdata(&[3, 0, 0, 0x30, 0x03, 1, 2, 3]).is_err());
    assert!(decode_tlsa_rdata(&[3, 0]).is_err());
}

fn arb_body() -> impl Strategy<Value = RecordBody> {
    (
        any::<u32>(),
        any::<[u8; 32]>(),
        0u64..u64::MAX / 2,
        1u64..1_000_000,
        any::<u32>(),
        prop_oneof![
            Just(vec![Aead::ChaChaPoly]),
            Just(vec![Aead::AesGcm]),
            Just(vec![Aead::AesGcm, Aead::ChaChaPoly])
        ],
        0u16..4,
        any::<u8>(),
        "[a-z0-9]{1,20}(\\.[a-z0-9_-]{1,30}){0,4}",
        any::<[u8; 32]>(),
        prop::collection::vec("[a-z0-9]{1,10}\\.[a-z]{2,5}", 0..=4),
    )
        .prop_map(
            |(key_id, public_key, nb, life, ed, aeads, fl, q, name, cs, mut verifiers)| {
                verifiers.sort();
                verifiers.dedup();
                if q == 0 {
                    verifiers.clear();
                }
                RecordBody {
                    key_id,
                    public_key,
                    not_before: nb,
                    not_after: nb + life,
                    max_early_data_bytes: ed,
                    aeads,
                    flags: RecordFlags::from_bits(fl).unwrap(),
                    provenance_quorum: q,
                    verifiers,
                    name,
                    cert_sha256: cs,
                }
            },
        )
}

fn arb_record() -> impl Strategy<Value = KeyRecord> {
    (
        arb_body(),
        prop::bool::ANY,
        proptest::collection::vec(any::<u8>(), 1..=64),
    )
        .prop_map(|(body, ec, signature)| KeyRecord {
            body,
            sig_alg: if ec {
                SignatureAlgorithm::EcdsaP256Sha256
            } else {
                SignatureAlgorithm::Ed25519
            },
            signature,
        })
}

proptest! {
    #[test]
    fn every_encoding_round_trips(recs in proptest::collection::vec(arb_record(), 1..4)) {
        let mut recs = recs;
        for (i, r) in recs.iter_mut().enumerate() {
            r.body.key_id = i as u32;
        }
        for r in &recs {
            prop_assert_eq!(&KeyRecord::decode(&r.encode()).unwrap(), r);
            prop_assert_eq!(&decode_txt_rdata(&txt_rdata(r)).unwrap(), r);
        }
        prop_assert_eq!(&decode_svc_param_value(&svc_param_value(&recs)).unwrap(), &recs);
        prop_assert_eq!(&decode_aaaa_tunnel(&aaaa_tunnel(&recs)).unwrap(), &recs);
        let svcb = SvcbRdata::service(&["h2"], &[], &[Ipv6Addr::LOCALHOST], &recs);
        prop_assert_eq!(SvcbRdata::decode(&svcb.encode()).unwrap().zrtt_records().unwrap(), Some(recs.clone()));
    }

    #[test]
    fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..700)) {
        testing::record(&data);
        testing::encodings(&data);
    }
}

#[test]
fn small_order_keys_are_refused_even_when_signed() {
    let cert = testing::ecdsa_cert();
    let key = testing::semi_static("k");
    // 0, 1, the two points of order 8, and p - 1 (order 2).
    let mut order8 = [0u8; 32];
    order8.copy_from_slice(
        &crate::record::unhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")
            .unwrap(),
    );
    let mut order8b = [0u8; 32];
    order8b.copy_from_slice(
        &crate::record::unhex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157")
            .unwrap(),
    );
    let mut p_minus_1 = [0xff; 32];
    p_minus_1[0] = 0xec;
    p_minus_1[31] = 0x7f;
    let mut one = [0u8; 32];
    one[0] = 1;
    for weak in [[0u8; 32], one, order8, order8b, p_minus_1] {
        let mut body = testing::body(&key, &cert);
        body.public_key = weak;
        body.key_id = crate::record::key_id_for(&weak);
        let rec = body.sign(&testing::ecdsa_signer(), &sys_rng()).unwrap();
        assert_eq!(rec.verify(&cert, NAME, now()), Err(RecordError::WeakKey));
    }
    // An ordinary key passes.
    let rec = testing::body(&key, &cert)
        .sign(&testing::ecdsa_signer(), &sys_rng())
        .unwrap();
    assert!(rec.verify(&cert, NAME, now()).is_ok());
}

#[test]
fn unknown_advisory_flag_bits_are_ignored_and_unknown_critical_ones_refused() {
    let key = testing::semi_static("k");
    let cert = testing::ed25519_cert();
    let signer = testing::ed25519_signer();
    // Bit 15, which no version defines yet: advisory, so the record
    // decodes, verifies and re-encodes with it (the signature covers it).
    let mut body = testing::body(&key, &cert);
    let bits = RecordFlags::ISSUES_TOKENS | RecordFlags::HTTP2 | 0x8000;
    body.flags = RecordFlags::from_bits(bits).unwrap();
    let rec = body.sign(&signer, &sys_rng()).unwrap();
    let decoded = KeyRecord::decode(&rec.encode()).unwrap();
    assert_eq!(decoded.encode(), rec.encode());
    let v = decoded.verify(&cert, NAME, now()).unwrap();
    assert_eq!(v.body().flags.bits(), bits);
    assert!(v.body().flags.http2() && v.body().flags.issues_tokens());
    let txt = decode_txt_text(txt_text(&rec).as_bytes()).unwrap();
    assert_eq!(txt, rec);
    // HTTP/2 is advisory (bit 8): a client that knew only bits 0 and 1
    // under this rule reads such a record.
    assert_eq!(RecordFlags::HTTP2 & RecordFlags::CRITICAL, 0);
    // Bit 7 (or bit 2, where HTTP/2 was before this rule): critical and
    // unknown, refused in every encoding.
    for bad in [0x0080u16, 0x0004] {
        assert_eq!(RecordFlags::from_bits(bad), None);
        let mut b = testing::body(&key, &cert);
        b.flags = RecordFlags::default();
        let rec = b.sign(&signer, &sys_rng()).unwrap();
        let mut wire = rec.encode();
        // version, key id, key, validity, max early data, n_aeads, aeads.
        let at = 1 + 4 + 32 + 8 + 8 + 4 + 1 + rec.body.aeads.len();
        assert_eq!(&wire[at..at + 2], &[0, 0]);
        wire[at..at + 2].copy_from_slice(&bad.to_be_bytes());
        assert!(KeyRecord::decode(&wire).is_err(), "{bad:#06x}");
        let text = txt_text(&rec).replace(" fl=0 ", &format!(" fl={bad} "));
        assert!(decode_txt_text(text.as_bytes()).is_err(), "{bad:#06x}");
    }
}
