//! Fuzz entry point of the DNS shortcut (docs/PROTOCOL.md §13): query
//! names, TXT answers, the two forms of a flight, the compact request, the
//! server's parser behind the AEAD, answer streams and the answer cache.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::handshake::{ClientHandshake, ClientParams, Extensions, Pattern};
use crate::shortcut::{
    dns_form, parse_query_name, query_name, tcp_form, AnswerCache, CacheFull, CompactRequest,
    Lookup, NameMatch, TxtAnswer,
};

/// Mode byte, then: 0 a query name under `NAME`; 1 TXT strings (u8 length
/// prefixed); 2 a flight's DNS or TCP form and a compact request; 3 a
/// shortcut flight's plaintext (timestamp, extensions, early data) sealed
/// with the test keys, accepted by the server; 4 an answer stream opened
/// by the client, then the input as a response round-tripped; 5 a program
/// of answer cache operations checked against its bounds.
pub fn shortcut(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 6 {
        0 => names(rest),
        1 => txt(rest),
        2 => forms(rest),
        3 => server_plaintext(rest),
        4 => answer_stream(rest),
        _ => cache_program(rest),
    }
}

fn names(rest: &[u8]) {
    let q = String::from_utf8_lossy(rest);
    if let NameMatch::Flight(tcp) = parse_query_name(&q, NAME) {
        let again = query_name(&tcp, NAME).unwrap();
        assert!(again.eq_ignore_ascii_case(q.trim_end_matches('.')));
    }
}

fn txt(mut rest: &[u8]) {
    let mut strings = Vec::new();
    while let Some((&n, tail)) = rest.split_first() {
        let (s, tail) = tail.split_at(usize::from(n).min(tail.len()));
        strings.push(s);
        rest = tail;
    }
    if let Ok(answer) = TxtAnswer::from_strings(strings.iter().copied()) {
        let again = answer.to_strings();
        assert!(again.iter().all(|s| s.len() <= 255));
        let total: usize = again.iter().map(|s| 1 + s.len()).sum();
        assert_eq!(answer.rdata_len(), total);
        assert_eq!(
            TxtAnswer::from_strings(again.iter().map(Vec::as_slice)).unwrap(),
            answer
        );
    }
}

fn forms(rest: &[u8]) {
    if let Ok(tcp) = tcp_form(rest) {
        assert_eq!(dns_form(&tcp).unwrap(), rest);
    }
    if let Ok(dns) = dns_form(rest) {
        assert_eq!(tcp_form(&dns).unwrap(), rest);
    }
    if let Ok(req) = CompactRequest::decode(rest) {
        assert_eq!(req.encode(), rest);
    }
}

fn server_plaintext(payload: &[u8]) {
    let f = fuzz_fixture();
    let params = ClientParams {
        transport: Transport::Shortcut,
        aead: None,
        static_key: None,
        extensions: Extensions::new(),
    };
    let Ok((_, flight)) = ClientHandshake::start_with_payload(
        &f.record,
        &params,
        Aead::ChaChaPoly,
        Pattern::Shortcut,
        payload,
        &rng(4),
    ) else {
        return;
    };
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = f.server.accept(
        &frame,
        Transport::Shortcut,
        fuzz_now(),
        &mut NoReplayFilter,
        &rng(5),
    );
    if let Ok(acc) = acc {
        // Accepted: the early data is a compact request, nothing else rides.
        let req = acc.shortcut_request().unwrap();
        assert_eq!(req.encode(), acc.early_data);
        assert!(acc.extensions.iter().next().is_none());
        assert!(!acc.ticket_requested());
    }
}

fn answer_stream(rest: &[u8]) {
    let f = fuzz_fixture();
    let req = CompactRequest::new(crate::shortcut::Method::Get, "/").unwrap();
    let (client, flight) =
        ClientHandshake::start_shortcut(&f.record, &req, None, None, fuzz_now(), &rng(6)).unwrap();
    // Arbitrary bytes as a stream: never a response (they do not decrypt).
    if !rest.is_empty() {
        let (c, _) =
            ClientHandshake::start_shortcut(&f.record, &req, None, None, fuzz_now(), &rng(6))
                .unwrap();
        assert!(c.open_shortcut_answer(rest).is_err());
    }
    // The input as a response: what the server sends, the client reads.
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = f
        .server
        .accept(
            &frame,
            Transport::Shortcut,
            fuzz_now(),
            &mut NoReplayFilter,
            &rng(7),
        )
        .unwrap();
    let stream = acc.shortcut_answer(rest).unwrap();
    assert_eq!(client.open_shortcut_answer(&stream).unwrap(), rest);
}

/// Operations of 3 bytes: op, hash id, argument; bounds 4 entries, 64 bytes.
fn cache_program(rest: &[u8]) {
    let (max_entries, max_bytes) = (4, 64);
    let mut cache = AnswerCache::new(max_entries, max_bytes, Duration::from_secs(10));
    let mut now = fuzz_now();
    for op in rest.chunks_exact(3) {
        let hash = [op[1] % 8; 32];
        match op[0] % 5 {
            0 => match cache.begin(hash, now) {
                Ok(()) => assert_ne!(cache.lookup(&hash, now), Lookup::Miss),
                Err(CacheFull) => assert_eq!(cache.len(), max_entries),
            },
            1 => {
                let answer: Arc<[u8]> = Arc::from(vec![op[1]; usize::from(op[2] % 80)]);
                let was = cache.lookup(&hash, now);
                cache.finish(&hash, answer.clone(), now);
                match was {
                    Lookup::Done(a) => assert_eq!(cache.lookup(&hash, now), Lookup::Done(a)),
                    Lookup::Running if answer.len() <= max_bytes => {
                        assert_eq!(cache.lookup(&hash, now), Lookup::Done(answer))
                    }
                    _ => {}
                }
            }
            2 => cache.abandon(&hash),
            3 => now = now.saturating_add(Duration::from_secs(u64::from(op[2] % 16))),
            _ => {
                let _ = cache.lookup(&hash, now);
            }
        }
        assert!(cache.len() <= max_entries);
        assert!(cache.bytes() <= max_bytes);
    }
}
