//! The gateway's SDNS and the TCP path of shortcut flights (docs/DNS.md
//! §8), on loopback: a flight in a TXT query name is run once on a
//! recording backend and answered in the DNS answer (or FETCH, then its
//! TCP form on the gateway's port); other names NXDOMAIN; through a real
//! unbound with QNAME minimisation on and off when it is installed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::shortcut::*;
use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use zrtt_net::gateway::ShortcutConfig;
use zrtt_proto::handshake::RejectReason;
use zrtt_proto::record::KeyRecord;
use zrtt_proto::shortcut::{self, Method, TxtAnswer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txt_query_runs_the_flight_once_and_answers_the_same_bytes() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    let (hs, frame) = flight(&env.records[0], Method::Get, "/hello?x=1");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let q = query(&name, RecordType::TXT, 0x1234);
    let first = ask_sdns(sdns, &q).await;
    assert!(
        first.len() <= 3 * q.len(),
        "{} > 3 x {}",
        first.len(),
        q.len()
    );
    let TxtAnswer::Answer(stream) = txt_answer(&first) else {
        panic!("not ANSWER")
    };
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let text = String::from_utf8_lossy(&response).to_lowercase();
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("\r\ncontent-length: 17\r\n"), "{text}");
    assert_eq!(body_of(&response), b"hello from /hello");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let line = seen[0].to_lowercase();
        assert!(line.starts_with("get /hello?x=1"), "{line}");
        assert!(line.contains("\nearly-data: 1"), "{line}");
        assert!(line.contains("\nhost: www.example.com"), "{line}");
        assert!(
            line.contains("\nforwarded: for=unknown;proto=https"),
            "{line}"
        );
        // Never the resolver's address (127.0.0.1 here, trusted by
        // `Require local`): the marker (tests/sdns_bounds.rs has more).
        assert!(line.contains("\nx-forwarded-for: 192.0.2.1"), "{line}");
        assert!(!line.contains("127.0.0.1"), "{line}");
    }
    // A resolver's retry (or a replay): the same bytes, no second run.
    let again = ask_sdns(sdns, &q).await;
    assert_eq!(again, first);
    // Over DNS-over-TCP too.
    let over_tcp = ask_tcp(sdns, &q).await;
    assert_eq!(txt_answer(&over_tcp), TxtAnswer::Answer(stream));
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(env.metric("shortcut_runs"), 1);
    assert_eq!(env.metric("shortcut_cache_hits"), 2);
    assert_eq!(env.metric("shortcut_answers"), 3);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_is_fetched_over_tcp_with_the_same_flight() {
    let (env, seen) = start().await;
    let (hs, frame) = flight(&env.records[0], Method::Get, "/big");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let q = query(&name, RecordType::TXT, 7);
    let a = ask_sdns(env.sdns[0], &q).await;
    assert!(a.len() <= 3 * q.len());
    assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    let stream = fetch_tcp(env.addr, &frame).await;
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert_eq!(body_of(&response), "b".repeat(5000).as_bytes());
    assert_eq!(seen.lock().unwrap().len(), 1, "the backend ran it once");
    assert_eq!(env.metric("shortcut_fetch"), 1);
    assert_eq!(env.metric("shortcut_tcp_answers"), 1);
    assert_eq!(env.metric("shortcut_cache_hits"), 1);
    // A flight that comes over TCP first runs there, with the client's address.
    let (hs, frame) = flight(&env.records[0], Method::Head, "/first-tcp");
    let stream = fetch_tcp(env.addr, &frame).await;
    let response = hs.open_shortcut_answer(&stream).unwrap();
    assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(body_of(&response).is_empty(), "HEAD");
    let line = seen.lock().unwrap()[1].to_lowercase();
    assert!(line.starts_with("head /first-tcp"), "{line}");
    assert!(
        line.contains("\nforwarded: for=127.0.0.1;proto=https"),
        "{line}"
    );
    assert!(line.contains("\nearly-data: 1"), "{line}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_names_nxdomain_apex_soa_ns_outside_refused() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    let (_, frame) = flight(&env.records[0], Method::Get, "/x");
    let name = shortcut::query_name(&frame, HOST).unwrap();
    let rcode = |a: &[u8]| Message::from_vec(a).unwrap().metadata.response_code;
    // QNAME minimisation's probes: one label, then two, under the zone.
    let labels: Vec<&str> = name.split('.').collect();
    let n = labels.len();
    for k in 1..n - 4 {
        let partial = labels[n - 4 - k..].join(".");
        let a = ask_sdns(sdns, &query(&partial, RecordType::A, 1)).await;
        assert_eq!(rcode(&a), ResponseCode::NXDomain, "{partial}");
        let m = Message::from_vec(&a).unwrap();
        assert!(matches!(m.authorities[0].data, RData::SOA(_)), "{m:?}");
        assert_eq!(m.authorities[0].ttl, shortcut::NEGATIVE_TTL);
    }
    // The whole name, another type.
    let a = ask_sdns(sdns, &query(&name, RecordType::A, 2)).await;
    assert_eq!(rcode(&a), ResponseCode::NXDomain);
    // dns-0x20: the case of the name does not matter, and comes back as sent.
    let mixed: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let a = ask_sdns(sdns, &query(&mixed, RecordType::TXT, 3)).await;
    let m = Message::from_vec(&a).unwrap();
    assert_eq!(m.queries[0].name().to_ascii().trim_end_matches('.'), mixed);
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    let a = ask_sdns(sdns, &query("zq.www.example.com.", RecordType::SOA, 4)).await;
    let m = Message::from_vec(&a).unwrap();
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(matches!(m.answers[0].data, RData::SOA(_)));
    let a = ask_sdns(sdns, &query("zq.www.example.com.", RecordType::NS, 5)).await;
    let m = Message::from_vec(&a).unwrap();
    assert!(
        matches!(&m.answers[0].data, RData::NS(ns) if ns.0.to_ascii() == "ns.zq.www.example.com.")
    );
    assert!(matches!(m.additionals[0].data, RData::A(a) if a.0 == std::net::Ipv4Addr::LOCALHOST));
    let a = ask_sdns(sdns, &query("www.example.org.", RecordType::A, 6)).await;
    assert_eq!(rcode(&a), ResponseCode::Refused);
    assert_eq!(seen.lock().unwrap().len(), 1, "only the TXT query ran");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_and_huge_responses_are_rejected() {
    let (env, seen) = start().await;
    let sdns = env.sdns[0];
    // A key this gateway does not hold: REJECT 1 (its records only if they fit).
    let (other, _) = record("zrtt test key not served", 16384);
    let (_, frame) = flight(&other, Method::Get, "/x");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        9,
    );
    let a = ask_sdns(sdns, &q).await;
    assert!(a.len() <= 3 * q.len());
    let TxtAnswer::Reject(r) = txt_answer(&a) else {
        panic!("not REJECT")
    };
    assert_eq!(reject_reason(&r), RejectReason::UnknownKey);
    // Over 1 MiB: REJECT 7, the client takes the normal path.
    let (_, frame) = flight(&env.records[0], Method::Get, "/huge");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        10,
    );
    let TxtAnswer::Reject(r) = txt_answer(&ask_sdns(sdns, &q).await) else {
        panic!("not REJECT")
    };
    assert_eq!(reject_reason(&r), RejectReason::Busy);
    // The same flight again: the same refusal, no second run.
    let TxtAnswer::Reject(r2) = txt_answer(&ask_sdns(sdns, &q).await) else {
        panic!("not REJECT")
    };
    assert_eq!(r, r2);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(env.metric("shortcut_too_large"), 1);
    env.stop().await;
}

/// A shortcut flight (pattern 0x04) whose early data is `early`, built
/// with snow by hand: the client API only makes valid compact requests.
fn raw_flight(rec: &KeyRecord, early: &[u8]) -> Vec<u8> {
    use zrtt_proto::handshake::{prologue, FirstFlightHeader, Pattern, Transport};
    let now = zrtt_net::client::system_clock();
    let verified = rec.verify(&cert_der(), HOST, now).unwrap();
    let body = verified.body();
    let aead = body.aeads[0];
    let header = FirstFlightHeader {
        version: 1,
        pattern: Pattern::Shortcut,
        aead: aead as u8,
        key_id: body.key_id,
    };
    let record_hash: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &rec.encode())
        .as_ref()
        .try_into()
        .unwrap();
    let params = format!("Noise_NK_25519_{}_SHA256", aead.noise_name())
        .parse()
        .unwrap();
    let mut noise = snow::Builder::new(params)
        .prologue(&prologue(&record_hash, Transport::Shortcut, &header))
        .unwrap()
        .remote_public_key(&body.public_key)
        .unwrap()
        .build_initiator()
        .unwrap();
    let mut payload = now.as_millis().to_be_bytes().to_vec();
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(early);
    let mut msg = vec![0u8; payload.len() + 64];
    let n = noise.write_message(&payload, &mut msg).unwrap();
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&(n as u16).to_be_bytes());
    frame.extend_from_slice(&msg[..n]);
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_and_malformed_requests_are_rejected() {
    let (env, seen) = start().await;
    // The hand-made flight is sound: a valid compact request runs.
    let mut get = vec![1u8];
    get.extend_from_slice(b"/raw");
    let frame = raw_flight(&env.records[0], &get);
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        11,
    );
    assert!(matches!(
        txt_answer(&ask_sdns(env.sdns[0], &q).await),
        TxtAnswer::Answer(_)
    ));
    for (i, early) in [
        b"\x03/post".to_vec(),
        b"\x01no-slash".to_vec(),
        b"\x01/sp ace".to_vec(),
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![1u8],
    ]
    .iter()
    .enumerate()
    {
        let frame = raw_flight(&env.records[0], early);
        let q = query(
            &shortcut::query_name(&frame, HOST).unwrap(),
            RecordType::TXT,
            12 + i as u16,
        );
        let TxtAnswer::Reject(r) = txt_answer(&ask_sdns(env.sdns[0], &q).await) else {
            panic!("not REJECT for {early:?}")
        };
        assert_eq!(reject_reason(&r), RejectReason::Unsupported);
        // And its TCP form on the gateway's port: the Reject frame.
        let got = fetch_tcp(env.addr, &frame).await;
        assert_eq!(reject_reason(&got), RejectReason::Unsupported);
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "only the GET ran");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_flight_is_waited_for_over_tcp_and_bounded_per_prefix() {
    let mut sc = ShortcutConfig::default();
    sc.max_running_per_prefix = 1;
    let (env, seen) = start_with(sc).await;
    let (hs, frame) = flight(&env.records[0], Method::Get, "/hold");
    let q = query(
        &shortcut::query_name(&frame, HOST).unwrap(),
        RecordType::TXT,
        30,
    );
    let sdns = env.sdns[0];
    let first = tokio::spawn(async move { ask_sdns(sdns, &q).await });
    // Running once the backend has the request (polled, bounded).
    for _ in 0..500 {
        if !seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Another flight from the same resolver address, and one from another
    // address of its /24: over the prefix's bound, FETCH without a run
    // (the client's TCP form runs it), never REFUSED.
    let (hs2, other) = flight(&env.records[0], Method::Get, "/other");
    let q2 = query(
        &shortcut::query_name(&other, HOST).unwrap(),
        RecordType::TXT,
        31,
    );
    assert_eq!(txt_answer(&ask_sdns(sdns, &q2).await), TxtAnswer::Fetch);
    let (_, third) = flight(&env.records[0], Method::Get, "/third");
    let q3 = query(
        &shortcut::query_name(&third, HOST).unwrap(),
        RecordType::TXT,
        32,
    );
    let a = ask_udp_from("127.0.0.2", sdns, &q3).await;
    assert!(a.len() <= 3 * q3.len());
    assert_eq!(txt_answer(&a), TxtAnswer::Fetch);
    assert_eq!(env.metric("shortcut_deferred"), 2);
    assert_eq!(seen.lock().unwrap().len(), 1, "FETCH ran nothing");
    // The TCP form of the running flight waits for it, then gets its stream.
    let addr = env.addr;
    let fetch = tokio::spawn(async move { fetch_tcp(addr, &frame).await });
    for _ in 0..500 {
        if env.metric("shortcut_flights") >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    HOLD.notify_one();
    let TxtAnswer::Answer(stream) = txt_answer(&first.await.unwrap()) else {
        panic!("not ANSWER")
    };
    assert_eq!(fetch.await.unwrap(), stream, "the same answer stream");
    assert_eq!(
        body_of(&hs.open_shortcut_answer(&stream).unwrap()),
        b"hello from /hold"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "run once");
    // The deferred flight's TCP form runs it (a proven address).
    let got = fetch_tcp(env.addr, &other).await;
    assert_eq!(
        body_of(&hs2.open_shortcut_answer(&got).unwrap()),
        b"hello from /other"
    );
    // The bound frees with the run.
    let (_, fourth) = flight(&env.records[0], Method::Get, "/fourth");
    let q4 = query(
        &shortcut::query_name(&fourth, HOST).unwrap(),
        RecordType::TXT,
        33,
    );
    let a = ask_sdns(sdns, &q4).await;
    assert!(matches!(txt_answer(&a), TxtAnswer::Answer(_)));
    env.stop().await;
}
