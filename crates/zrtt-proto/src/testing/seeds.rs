//! Seed inputs for the fuzz entry points ([`super::fuzz`]), built from real
//! encodings (records, frames, tokens, certificates, snapshots).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::handshake::{ext, Extensions};
use crate::provenance::{encode_verifier_response, Certificate, IssuePolicy, VerifierRequest};
use crate::replay::BloomReplayFilter;

/// Seed inputs for every fuzz entry point, from real encodings.
pub fn fuzz_seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let f = fuzz_fixture();
    let mut out = Vec::new();
    let now = fuzz_now();
    // A first-flight payload: timestamp, ALPN, a token, certificates, request.
    let tok = f
        .tokens
        .current()
        .issue(FUZZ_PEER, f.client_static.public(), now, &rng(9))
        .unwrap();
    let certs: Vec<Certificate> = f.verifiers[..3]
        .iter()
        .map(|v| {
            v.issue(
                &IssuePolicy::default(),
                f.client_static.public(),
                FUZZ_PEER,
                3600,
                None,
                UnixTime::from_secs(T0 + 50),
            )
        })
        .collect();
    let pv = crate::provenance::encode_certificates(&certs);
    let mut exts = Extensions::new();
    exts.set(ext::ALPN, b"http/1.1".to_vec());
    exts.set(ext::ADDRESS_TOKEN, tok.clone());
    exts.set(ext::PROVENANCE, pv.clone());
    let mut payload = now.as_millis().to_be_bytes().to_vec();
    exts.encode(&mut payload).unwrap();
    payload.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    for mode in [0u8, 1, 3, 5] {
        let mut s = vec![mode];
        s.extend_from_slice(&payload);
        out.push(("first_flight_plaintext", "full", s));
    }
    let mut short = vec![0u8];
    short.extend_from_slice(&now.as_millis().to_be_bytes());
    short.extend_from_slice(&[0, 0]);
    out.push(("first_flight_plaintext", "empty", short));
    // Replies: a refusal with records, and a reply plaintext.
    let mut rej = vec![0u8];
    rej.extend_from_slice(&crate::handshake::encode_reject(
        crate::handshake::RejectReason::UnknownKey,
        &[vector_record()],
    ));
    out.push(("client_reply", "reject", rej));
    let mut rp = vec![1u8];
    exts.encode(&mut rp).unwrap();
    rp.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
    out.push(("client_reply", "reply", rp));
    // Channel: one of each operation.
    let mut ch = Vec::new();
    for (op, body) in [
        (0u8, &b"\x00data"[..]),
        (0, b"\x02token"),
        (0, b"\x03"),
        (2, b"\x01"),
        (3, b"tamper"),
        (0, b"\x01"),
    ] {
        ch.push(op);
        ch.extend_from_slice(&(body.len() as u16).to_be_bytes());
        ch.extend_from_slice(body);
    }
    out.push(("channel", "ops", ch));
    // Tokens.
    let mut t = vec![0u8];
    t.extend_from_slice(&tok);
    out.push(("token", "issued", t));
    let mut t = vec![1u8];
    t.extend_from_slice(&[3; 12]);
    t.extend_from_slice(&(now.as_millis() + 1000).to_be_bytes());
    t.extend_from_slice(&[7; 32]);
    t.extend_from_slice(&[198, 18, 0, 1]);
    out.push(("token", "plaintext", t));
    out.push((
        "token",
        "program",
        vec![
            2, 0, 198, 18, 0, 1, 0, 198, 18, 0, 1, 0, 0, 0, 0, 5, 0, 0, 0, 9,
        ],
    ));
    // Resumption tickets: stored, granted, plaintext, a resumed flight.
    let ticket = fuzz_ticket();
    let mut s = vec![0u8];
    s.extend_from_slice(&ticket.encode());
    out.push(("ticket", "stored", s));
    let mut s = vec![0u8];
    s.extend_from_slice(ticket.ticket());
    out.push(("ticket", "presented", s));
    let mut s = vec![1u8];
    s.extend_from_slice(&[3; 12]);
    s.extend_from_slice(&[5; 32]);
    s.extend_from_slice(&now.as_secs().to_be_bytes());
    s.extend_from_slice(&3600u32.to_be_bytes());
    s.extend_from_slice(&[6; 32]);
    s.push(NAME.len() as u8);
    s.extend_from_slice(NAME.as_bytes());
    s.extend_from_slice(&[4, 198, 18, 0, 1]);
    out.push(("ticket", "plaintext", s));
    out.push(("ticket", "flight", vec![2]));
    out.push(("ticket", "flight_edited", vec![2, 0, 12, 1]));
    // DNS shortcut: a flight's name, its forms, its plaintext, answers.
    let req =
        crate::shortcut::CompactRequest::new(crate::shortcut::Method::Get, "/index.html").unwrap();
    let (_, flight) = crate::handshake::ClientHandshake::start_shortcut(
        &f.record,
        &req,
        None,
        None,
        now,
        &rng(6),
    )
    .unwrap();
    let name = crate::shortcut::query_name(&flight, NAME).unwrap();
    out.push(("shortcut", "name", [&[0u8][..], name.as_bytes()].concat()));
    let dns = crate::shortcut::dns_form(&flight).unwrap();
    out.push(("shortcut", "dns_form", [&[2u8][..], &dns].concat()));
    out.push(("shortcut", "tcp_form", [&[2u8][..], &flight].concat()));
    let mut p = vec![3u8];
    p.extend_from_slice(&now.as_millis().to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&req.encode());
    out.push(("shortcut", "plaintext", p));
    let reject = crate::handshake::encode_reject(crate::handshake::RejectReason::Busy, &[]);
    for (label, answer) in [
        ("txt_fetch", crate::shortcut::TxtAnswer::Fetch),
        ("txt_reject", crate::shortcut::TxtAnswer::Reject(reject)),
        (
            "txt_answer",
            crate::shortcut::TxtAnswer::Answer(vec![0xd8; 300]),
        ),
    ] {
        let mut s = vec![1u8];
        for string in answer.to_strings() {
            s.push(string.len() as u8);
            s.extend_from_slice(&string);
        }
        out.push(("shortcut", label, s));
    }
    out.push((
        "shortcut",
        "response",
        [
            &[4u8][..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]
        .concat(),
    ));
    out.push((
        "shortcut",
        "cache",
        vec![
            0, 1, 0, 1, 1, 40, 0, 2, 0, 1, 2, 40, 3, 0, 15, 4, 1, 0, 2, 2, 0,
        ],
    ));
    // Provenance.
    let mut p = vec![0u8];
    p.extend_from_slice(&pv);
    out.push(("provenance", "certificates", p));
    out.push((
        "provenance",
        "program",
        vec![
            0x21, 2, 0, 100, 0, 0, 0, 0, 0, 200, 0, 2, 0, 0, 0, 0, 200, 0, 1, 0, 0, 0, 0, 200, 0,
        ],
    ));
    // DER.
    out.push(("der_validity", "ed25519", ed25519_cert()));
    out.push(("der_validity", "ecdsa", ecdsa_cert()));
    // Verifier protocol.
    let req = VerifierRequest {
        client_static: [7; 32],
        requested_secs: 3600,
        previous: Some(certs[0].clone()),
    };
    out.push(("verifier_wire", "request", req.encode()));
    out.push((
        "verifier_wire",
        "request-first",
        VerifierRequest {
            previous: None,
            ..req
        }
        .encode(),
    ));
    out.push((
        "verifier_wire",
        "response",
        encode_verifier_response(&certs[1]),
    ));
    // Replay snapshot, without its checksum.
    let mut filter = BloomReplayFilter::new(fuzz_replay_config(), [5; 32], UnixTime::from_secs(T0));
    for i in 0..3u8 {
        let ts = UnixTime::from_secs(T0 + 20 + u64::from(i) * 6);
        filter.check_and_insert(1, &[i; 32], ts, ts).unwrap();
    }
    let snap = filter.to_snapshot();
    out.push(("replay_snapshot", "three", snap[..snap.len() - 32].to_vec()));
    out
}
