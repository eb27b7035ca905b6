//! Fuzz entry points (issue 11): one per parser of untrusted input, each
//! also run under proptest in `cargo test` (docs/RELIABILITY.md, Fuzzing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

//
// Each takes arbitrary bytes, never panics on them, and asserts what must
// hold whatever they are. Those behind an AEAD encrypt the fuzz input with
// the fixed test keys, so the parsers of the plaintext are reached.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::admission::{
    canonical_ip, Admission, AdmissionConfig, FlightEvidence, TokenKey, TokenKeyRing, TokenKeys,
};
use crate::handshake::{
    decode_reject_records, ClientHandshake, ClientParams, Extensions, Pattern, RecordKind,
};
use crate::provenance::{
    decode_certificates, decode_verifier_response, encode_verifier_response, Certificate,
    IssuePolicy, TrustPolicy, TrustedKey, VerifiedCache, VerifierRequest, VerifierSigner,
};
use crate::record::VerifiedKeyRecord;
use crate::replay::{BloomReplayFilter, ReplayConfig};

/// The address every fuzzed flight comes from.
pub const FUZZ_PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 1));

/// Fixed keys of the fuzz entry points, built once per process.
pub struct FuzzFixture {
    /// The vector server.
    pub server: ServerConfig,
    /// The vector record, as a client holds it.
    pub record: VerifiedKeyRecord,
    /// The IK client key ("zrtt fuzz client").
    pub client_static: X25519KeyPair,
    /// Token keys: `[1; 32]` seals, `[2; 32]` only opens; one hour.
    pub tokens: TokenKeys,
    /// Verifier signers from seeds `[1; 32]`..`[4; 32]`; the first two are
    /// keys of one verifier, the third is trusted from T0 for an hour, the
    /// fourth is not trusted.
    pub verifiers: Vec<VerifierSigner>,
    /// The trust policy over them, quorum 2.
    pub policy: TrustPolicy,
}

/// An Ed25519 signer from a 32-byte seed (PKCS#8 v1 around the seed).
pub fn verifier_signer(seed: [u8; 32]) -> VerifierSigner {
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(&seed);
    VerifierSigner::from_pkcs8(&der).unwrap()
}

/// The token keys of the fixture.
pub fn fuzz_token_keys() -> TokenKeys {
    TokenKeys::new(
        std::sync::Arc::new(TokenKey::new(&[1; 32], Duration::from_secs(3600))),
        vec![std::sync::Arc::new(TokenKey::new(
            &[2; 32],
            Duration::from_secs(3600),
        ))],
    )
}

/// The fixture (built on first use).
pub fn fuzz_fixture() -> &'static FuzzFixture {
    static F: OnceLock<FuzzFixture> = OnceLock::new();
    F.get_or_init(|| {
        let verifiers: Vec<VerifierSigner> = (1..=4u8).map(|i| verifier_signer([i; 32])).collect();
        let keys = vec![
            TrustedKey {
                verifier: 10,
                ..TrustedKey::from(verifiers[0].key())
            },
            TrustedKey {
                verifier: 10,
                ..TrustedKey::from(verifiers[1].key())
            },
            TrustedKey {
                key: verifiers[2].key(),
                verifier: 20,
                not_before: T0,
                not_after: T0 + 3600,
            },
        ];
        FuzzFixture {
            server: vector_server(),
            record: VerifiedKeyRecord::dangerous_assume_verified(vector_record()),
            client_static: semi_static("zrtt fuzz client"),
            tokens: fuzz_token_keys(),
            verifiers,
            policy: TrustPolicy {
                keys,
                quorum: 2,
                skew_secs: 2,
            },
        }
    })
}

/// The time every handshake entry point runs at.
pub fn fuzz_now() -> UnixTime {
    UnixTime::from_secs(T0 + 100)
}

fn small_filter() -> BloomReplayFilter {
    BloomReplayFilter::new(
        ReplayConfig {
            capacity: 64,
            ..ReplayConfig::default()
        },
        [7; 32],
        UnixTime::from_secs(T0),
    )
}

fn client_params(mode: u8) -> (ClientParams, Aead, Pattern) {
    let f = fuzz_fixture();
    let ik = mode & 1 != 0;
    let params = ClientParams {
        transport: if mode & 4 != 0 {
            Transport::Udp
        } else {
            Transport::Tcp
        },
        aead: None,
        static_key: ik.then(|| f.client_static.clone()),
        extensions: Extensions::new(),
    };
    let aead = if mode & 2 != 0 {
        Aead::AesGcm
    } else {
        Aead::ChaChaPoly
    };
    (params, aead, if ik { Pattern::Ik } else { Pattern::Nk })
}

/// The plaintext of a first flight: `data[0]` picks NK/IK, the AEAD and
/// the transport; the rest is the payload (u64 timestamp ms, extension
/// block, early data), encrypted to the vector key so that decryption
/// succeeds and the server's payload, extension, token and provenance
/// parsers see arbitrary bytes. An accepted flight must decode to exactly
/// its payload, and its reply must complete the client's handshake.
pub fn first_flight_plaintext(data: &[u8]) {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    let f = fuzz_fixture();
    let (params, aead, pattern) = client_params(mode);
    let Ok((client, flight)) =
        ClientHandshake::start_with_payload(&f.record, &params, aead, pattern, payload, &rng(1))
    else {
        return; // larger than a Noise message
    };
    let (frame, used) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    assert_eq!(used, flight.len());
    let mut replay = small_filter();
    let now = fuzz_now();
    match f
        .server
        .accept(&frame, params.transport, now, &mut replay, &rng(2))
    {
        Ok(acc) => {
            let mut again = acc.timestamp.as_millis().to_be_bytes().to_vec();
            acc.extensions.encode(&mut again).unwrap();
            again.extend_from_slice(&acc.early_data);
            assert_eq!(again, payload, "an accepted payload decodes to itself");
            assert!(acc.early_data.len() <= 16384);
            assert_eq!(acc.client_static.is_some(), pattern == Pattern::Ik);
            // What the gateway does with the extensions.
            let mut config = AdmissionConfig::default();
            config.tokens = Some(TokenKeyRing::new(fuzz_token_keys()));
            let admission = Admission::new(config, Instant::now());
            let mono = Instant::now();
            let intake = admission.intake(1, mono);
            let ev = FlightEvidence::of(&acc, FUZZ_PEER, flight.len());
            let d = admission.decide(intake, &ev, Some(&f.policy), now, mono);
            if d.proof.is_some() {
                assert!(acc.client_static.is_some(), "proofs need the IK key");
            }
            let (_, reply) = acc.reply(&Extensions::new(), b"ok").unwrap();
            let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
            let got = client.handle_reply(&frame).unwrap();
            assert_eq!(got.data, b"ok");
        }
        Err(refusal) => {
            if let Some(reply) = refusal.reply {
                let (frame, used) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
                assert_eq!(used, reply.len());
                assert!(matches!(frame, Frame::Reject { .. }));
            }
        }
    }
}

/// The client's handling of a server's answer. `data[0]` even: the rest
/// is a raw reply or refusal frame. Odd: the rest is the reply's plaintext
/// (extension block, response bytes), encrypted by the server of a real
/// handshake, so the client's parser is reached; an accepted reply must
/// decode to exactly that plaintext and yield a working channel.
pub fn client_reply(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let f = fuzz_fixture();
    let (mut params, _, _) = client_params(mode >> 1);
    params.aead = None;
    let (client, flight) =
        ClientHandshake::start(&f.record, &params, b"GET", fuzz_now(), &rng(3)).unwrap();
    if mode & 1 == 0 {
        if let Ok(Some((frame, used))) = read_frame(rest, Expect::ReplyOrReject) {
            assert!(used <= rest.len());
            if let Frame::Reject { records, .. } = &frame {
                if let Ok(recs) = decode_reject_records(records) {
                    for r in recs {
                        let _ = r.verify(&ed25519_cert(), NAME, fuzz_now());
                    }
                }
            }
            // Forged replies never decrypt.
            assert!(client.handle_reply(&frame).is_err());
        }
        return;
    }
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = f
        .server
        .accept(
            &frame,
            params.transport,
            fuzz_now(),
            &mut NoReplayFilter,
            &rng(4),
        )
        .unwrap();
    let Ok((mut s_chan, reply)) = acc.reply_with_payload(rest) else {
        return; // larger than a Noise message
    };
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    if let Ok(mut got) = client.handle_reply(&frame) {
        let mut again = Vec::new();
        got.extensions.encode(&mut again).unwrap();
        again.extend_from_slice(&got.data);
        assert_eq!(again, rest, "an accepted reply decodes to itself");
        let mut out = Vec::new();
        s_chan.seal(RecordKind::Data, b"more", &mut out).unwrap();
        let (Frame::Transport(ct), _) = read_frame(&out, Expect::Transport).unwrap().unwrap()
        else {
            unreachable!()
        };
        assert_eq!(got.channel.open(ct).unwrap().body, b"more");
    }
}

/// The client's and the server's channels after a real NK handshake with
/// the fixture's keys (the same every call).
pub fn fuzz_channels() -> (crate::handshake::Channel, crate::handshake::Channel) {
    let f = fuzz_fixture();
    let params = ClientParams::default();
    let (client, flight) =
        ClientHandshake::start(&f.record, &params, b"GET", fuzz_now(), &rng(5)).unwrap();
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = f
        .server
        .accept(
            &frame,
            Transport::Tcp,
            fuzz_now(),
            &mut NoReplayFilter,
            &rng(6),
        )
        .unwrap();
    let (server, reply) = acc.reply(&Extensions::new(), b"").unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    (client.handle_reply(&frame).unwrap().channel, server)
}

/// The channel after a real handshake, driven by a list of operations
/// (`u8 op || u16 len || bytes`): the server seals arbitrary plaintexts
/// (kind byte and body) for the client to open; raw bytes go to the
/// client's frame reader and `open`; the client seals records of every
/// kind for the server; tampered records must never open, and a failed
/// channel must stay failed.
pub fn channel(data: &[u8]) {
    let (mut client, mut server) = fuzz_channels();
    let mut client_failed = false;
    let mut r = crate::codec::Reader::new(data);
    while let (Ok(op), Ok(len)) = (r.u8(), r.u16()) {
        let bytes = r.take(usize::from(len).min(r.remaining())).unwrap();
        let mut out = Vec::new();
        match op % 4 {
            0 => {
                if server.seal_plaintext(bytes, &mut out).is_err() {
                    continue;
                }
                let opened = match read_frame(&out, Expect::Transport) {
                    Ok(Some((Frame::Transport(ct), _))) => client.open(ct),
                    _ => continue, // shorter than a tag plus a kind byte
                };
                match opened {
                    Ok(rec) => {
                        assert!(!client_failed, "a failed channel stays failed");
                        assert_eq!(rec.kind as u8, bytes[0]);
                        assert_eq!(rec.body, bytes[1..]);
                    }
                    Err(crate::Error::Handshake(crate::HandshakeError::DecryptFailed)) => {
                        client_failed = true;
                    }
                    Err(_) => {}
                }
            }
            1 => {
                let mut buf = bytes;
                while let Ok(Some((Frame::Transport(ct), used))) =
                    read_frame(buf, Expect::Transport)
                {
                    // Nothing forged opens (the peer never sealed these).
                    if client.open(ct).is_ok() {
                        panic!("a forged record opened");
                    }
                    client_failed = true;
                    buf = &buf[used..];
                }
            }
            2 => {
                let kind = match bytes.first().map(|b| b % 4) {
                    Some(1) => RecordKind::Close,
                    Some(2) => RecordKind::Token,
                    Some(3) => RecordKind::Confirm,
                    _ => RecordKind::Data,
                };
                let body = if kind == RecordKind::Confirm {
                    &[][..]
                } else {
                    bytes.get(1..).unwrap_or(&[])
                };
                client.seal(kind, body, &mut out).unwrap();
                let Ok(Some((Frame::Transport(ct), _))) = read_frame(&out, Expect::Transport)
                else {
                    unreachable!("a sealed record is one frame")
                };
                if let Ok(rec) = server.open(ct) {
                    assert_eq!((rec.kind, &rec.body[..]), (kind, body));
                }
            }
            _ => {
                server.seal(RecordKind::Data, bytes, &mut out).unwrap();
                let i = 2 + usize::from(len) % (out.len() - 2);
                out[i] ^= 1 << (len % 8);
                if let Ok(Some((Frame::Transport(ct), _))) = read_frame(&out, Expect::Transport) {
                    assert!(client.open(ct).is_err(), "a tampered record opened");
                    client_failed = true;
                }
            }
        }
    }
}

fn ip_from(b: &[u8]) -> IpAddr {
    match b.len() {
        16 => <[u8; 16]>::try_from(b).unwrap().into(),
        _ => {
            let mut a = [0u8; 4];
            a[..b.len().min(4)].copy_from_slice(&b[..b.len().min(4)]);
            a.into()
        }
    }
}

/// Address tokens with the fixture's keys. `data[0] % 3`: 0, the rest is a
/// token; 1, the rest is a plaintext sealed under the current key (with
/// `nonce`), so the parser behind the AEAD is reached and must agree with
/// a model of the format; 2, a real token issued and checked against
/// another address, key and time must be accepted exactly when all three match.
pub fn token(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let keys = &fuzz_fixture().tokens;
    let now = fuzz_now();
    let stat = [7u8; 32];
    match mode % 3 {
        0 => {
            let _ = keys.verify(rest, FUZZ_PEER, Some(&stat), now);
            let _ = keys.verify(rest, FUZZ_PEER, None, now);
        }
        1 => {
            use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
            if rest.len() < 12 {
                return;
            }
            let (nonce, pt) = rest.split_at(12);
            let id = keys.current().id();
            let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[1; 32]).unwrap());
            let mut aad = b"zrtt token v2".to_vec();
            aad.extend_from_slice(&id.to_be_bytes());
            let mut sealed = pt.to_vec();
            key.seal_in_place_append_tag(
                Nonce::try_assume_unique_for_key(nonce).unwrap(),
                Aad::from(&aad),
                &mut sealed,
            )
            .unwrap();
            let mut tok = vec![2u8];
            tok.extend_from_slice(&id.to_be_bytes());
            tok.extend_from_slice(nonce);
            tok.extend_from_slice(&sealed);
            let got = keys.verify(&tok, FUZZ_PEER, Some(&stat), now);
            // The model: expiry ms, static key, 4 or 16 address bytes.
            let want = if pt.len() < 8 + 32 + 4 {
                Err(crate::admission::TokenError::Invalid)
            } else if now.as_millis() >= u64::from_be_bytes(pt[..8].try_into().unwrap()) {
                Err(crate::admission::TokenError::Expired)
            } else if !matches!(pt.len() - 40, 4 | 16) {
                Err(crate::admission::TokenError::Invalid)
            } else if ip_from(&pt[40..]) != FUZZ_PEER {
                // Tokens hold canonical addresses: a mapped one matches nothing.
                Err(crate::admission::TokenError::WrongAddress)
            } else if pt[8..40] != stat {
                Err(crate::admission::TokenError::WrongKey)
            } else {
                Ok(())
            };
            assert_eq!(got, want, "token plaintext {}", crate::record::hex(pt));
        }
        _ => {
            let mut r = crate::codec::Reader::new(rest);
            let parsed = (|| {
                let la = if r.u8()? & 1 == 0 { 4 } else { 16 };
                let a = r.take(la)?;
                let lb = if r.u8()? & 1 == 0 { 4 } else { 16 };
                let b = r.take(lb)?;
                let same_key = r.u8()? & 1 == 0;
                let issued = r.u32()?;
                let checked = r.u32()?;
                Ok::<_, crate::InvalidMessage>((ip_from(a), ip_from(b), same_key, issued, checked))
            })();
            let Ok((a, b, same_key, issued, checked)) = parsed else {
                return;
            };
            let at = |s: u32| UnixTime::from_millis(T0 * 1000 + u64::from(s));
            let tok = keys.current().issue(a, &stat, at(issued), &rng(8)).unwrap();
            let other = [8u8; 32];
            let got = keys.verify(
                &tok,
                b,
                Some(if same_key { &stat } else { &other }),
                at(checked),
            );
            let fresh = u64::from(checked) < u64::from(issued) + 3_600_000;
            let want_ok = fresh && canonical_ip(a) == canonical_ip(b) && same_key;
            assert_eq!(
                got.is_ok(),
                want_ok,
                "{a} {b} {same_key} {issued} {checked}"
            );
        }
    }
}

/// Provenance certificates and the quorum check. `data[0]` even: the rest
/// is a PROVENANCE extension value, checked against the fixture's policy
/// for the client key and address of its first certificate. Odd: the
/// rest is a program of certificates signed by the fixture's verifiers
/// (signer, address, start, duration, a flipped signature bit); the
/// policy may accept only if the certificates that are genuinely valid
/// come from at least `quorum` distinct verifiers, and a second check
/// through the cache must agree.
pub fn provenance(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let f = fuzz_fixture();
    let stat = [7u8; 32];
    let mut cache = VerifiedCache::new(usize::from(mode >> 4));
    if mode & 1 == 0 {
        if let Ok(certs) = decode_certificates(rest) {
            assert_eq!(crate::provenance::encode_certificates(&certs), rest);
            let now = UnixTime::from_secs(certs[0].start.saturating_add(1));
            let _ = f
                .policy
                .verify(&certs, certs[0].address, Some(&stat), now, &mut cache);
        }
        return;
    }
    let mut r = crate::codec::Reader::new(rest);
    let Ok(q) = r.u8() else { return };
    let policy = TrustPolicy {
        quorum: usize::from(q % 4),
        ..f.policy.clone()
    };
    let Ok(when) = r.u16() else { return };
    let now = UnixTime::from_secs(T0 + u64::from(when));
    let mut certs = Vec::new();
    let mut genuine = Vec::new(); // verifier group of each genuinely valid certificate
    while certs.len() < 8 {
        let Ok(c) =
            (|| Ok::<_, crate::InvalidMessage>((r.u8()?, r.u8()?, r.u16()?, r.u16()?, r.u8()?)))()
        else {
            break;
        };
        let (signer, addr, start, dur, flip) = c;
        let signer_i = usize::from(signer % 4);
        let address = match addr % 3 {
            0 => FUZZ_PEER,
            1 => IpAddr::V6(std::net::Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped()),
            _ => IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 2)),
        };
        let dur = u32::from(dur).max(1);
        let issued_at = UnixTime::from_secs(T0 + u64::from(start));
        let mut c = issue_cached(signer_i, address, dur, issued_at);
        let tampered = flip & 0x80 != 0;
        if tampered {
            c.signature[usize::from(flip % 64)] ^= 1;
        }
        let trusted = policy.keys.iter().find(|k| k.key.id == c.verifier_id);
        let now_s = now.as_secs();
        if let Some(k) = trusted {
            if !tampered
                && canonical_ip(address) == FUZZ_PEER
                && k.not_before <= now_s
                && now_s < k.not_after
                && now_s + policy.skew_secs >= c.start
                && now_s < c.end() + policy.skew_secs
            {
                genuine.push(k.verifier);
            }
        }
        certs.push(c);
    }
    let wire = crate::provenance::encode_certificates(&certs);
    if certs.is_empty() {
        return;
    }
    assert_eq!(decode_certificates(&wire).unwrap(), certs);
    genuine.sort_unstable();
    genuine.dedup();
    let first = policy.verify(&certs, FUZZ_PEER, Some(&stat), now, &mut cache);
    if let Ok(ok) = &first {
        assert!(
            genuine.len() >= policy.quorum.max(1),
            "quorum from forged or invalid certificates"
        );
        assert!(ok.verifiers.len() >= policy.quorum.max(1));
    }
    let second = policy.verify(&certs, FUZZ_PEER, Some(&stat), now, &mut cache);
    assert_eq!(
        first.is_ok(),
        second.is_ok(),
        "the cache changes no verdict"
    );
    // Another client key or address never counts.
    assert!(policy
        .verify(&certs, FUZZ_PEER, Some(&[8; 32]), now, &mut cache)
        .is_err());
}

/// A certificate from the fixture's verifier `signer` for the client key
/// `[7; 32]`, memoized per thread (Ed25519 signing would dominate the
/// provenance entry point otherwise).
fn issue_cached(signer: usize, address: IpAddr, dur: u32, at: UnixTime) -> Certificate {
    use std::cell::RefCell;
    use std::collections::HashMap;
    type Memo = HashMap<(usize, IpAddr, u32, UnixTime), Certificate>;
    thread_local!(static MEMO: RefCell<Memo> = RefCell::new(HashMap::new()));
    let key = (signer, address, dur, at);
    if let Some(c) = MEMO.with(|m| m.borrow().get(&key).cloned()) {
        return c;
    }
    let c = fuzz_fixture().verifiers[signer].issue(
        &IssuePolicy {
            initial_secs: dur,
            max_secs: dur,
        },
        &[7; 32],
        address,
        dur,
        None,
        at,
    );
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= 65536 {
            m.clear();
        }
        m.insert(key, c.clone());
    });
    c
}

/// The DER walk to a certificate's validity.
pub fn der_validity(data: &[u8]) {
    if let Ok((nb, na)) = crate::record::cert::validity(data) {
        // Both times come from 4-digit years at most.
        assert!(nb < 253_402_300_800 && na < 253_402_300_800);
    }
}

/// The verifier protocol's request and response decoders. A complete
/// request re-encodes to its bytes, and no shorter prefix is complete; a
/// decoded response re-encodes to itself.
pub fn verifier_wire(data: &[u8]) {
    if let Ok(Some(req)) = VerifierRequest::decode(data) {
        let enc = req.encode();
        assert_eq!(enc, data[..enc.len()]);
        for cut in 0..enc.len() {
            assert_eq!(
                VerifierRequest::decode(&data[..cut]),
                Ok(None),
                "prefix {cut}"
            );
        }
    }
    if let Ok(c) = decode_verifier_response(data) {
        assert_eq!(encode_verifier_response(&c), data);
        let _: Certificate = c;
    }
}

/// The replay filter snapshot of a predecessor. The fuzz input is the
/// snapshot without its checksum (the entry point appends it, so the
/// parser behind it is reached); an accepted snapshot re-encodes to a
/// snapshot that restores to the same state, and the restored filter
/// takes flights without panicking and without forgetting one.
pub fn replay_snapshot(data: &[u8]) {
    let _ = BloomReplayFilter::from_snapshot(fuzz_replay_config(), data);
    let mut snap = data.to_vec();
    snap.extend_from_slice(&sha256(data));
    let Ok(mut filter) = BloomReplayFilter::from_snapshot(fuzz_replay_config(), &snap) else {
        return;
    };
    let again = filter.to_snapshot();
    let restored = BloomReplayFilter::from_snapshot(fuzz_replay_config(), &again).unwrap();
    assert_eq!(restored.to_snapshot(), again);
    let latest = filter.latest();
    for i in 0..4u8 {
        let eph = [i; 32];
        let ts = latest.saturating_add(Duration::from_millis(u64::from(i) * 700));
        let now = ts;
        if filter.check_and_insert(1, &eph, ts, now).is_ok() {
            assert!(filter.seen(1, &eph));
            assert!(filter.check_and_insert(1, &eph, ts, now).is_err());
        }
    }
}

/// The replay settings of [`replay_snapshot`] (small, so snapshots are short).
pub fn fuzz_replay_config() -> ReplayConfig {
    ReplayConfig {
        capacity: 4,
        fp_rate: 0.01,
        ..ReplayConfig::default()
    }
}

/// The fuzz entry point (fuzz/fuzz_targets/http2_early.rs): both walkers
/// on arbitrary bytes, and their agreement: the early part of a first
/// flight is whole frames with at least one HEADERS frame started, within
/// the limit, and itself an early part.
pub fn http2_walkers(data: &[u8]) {
    use crate::http2::{first_request, walk_early, FirstRequest, FRAME_HEADER_LEN};
    if let Some(w) = walk_early(data) {
        assert!(w.headers_started <= data.len() / FRAME_HEADER_LEN + 1);
    }
    let max = usize::from(data.first().copied().unwrap_or(0)) * 64;
    for limit in [usize::MAX, max] {
        if let FirstRequest::Ready { early: Some(n) } = first_request(data, limit) {
            assert!(n <= limit && n <= data.len());
            let w = walk_early(&data[..n]).expect("an h2 connection start");
            assert!(w.whole_frames && w.headers_started >= 1, "{w:?}");
            assert_eq!(
                first_request(&data[..n], limit),
                FirstRequest::Ready { early: Some(n) }
            );
        }
    }
}
