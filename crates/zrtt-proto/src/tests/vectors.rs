//! Byte-exact test vectors from fixed keys (docs/PROTOCOL.md §9). Set
//! `ZRTT_WRITE_VECTORS=1` to rewrite tests/vectors/vectors.txt after an
//! intentional format change; the test then also checks PROTOCOL.md.

use std::net::Ipv4Addr;

use crate::crypto::X25519KeyPair;
use crate::handshake::*;
use crate::record::encodings::*;
use crate::record::hex;
use crate::replay::{BloomReplayFilter, ReplayConfig};
use crate::testing::{self, rng, T0};
use crate::UnixTime;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/vectors.txt");
const PROTOCOL_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");

pub const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n";
pub const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
pub const SHORTCUT_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

fn compute() -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    let key = testing::semi_static("zrtt vector key 1");
    let cert = testing::ed25519_cert();
    let rec = testing::vector_record();
    v.push(("semi_static_private", hex(key.private())));
    v.push(("semi_static_public", hex(key.public())));
    v.push(("cert_sha256", hex(&crate::record::sha256(&cert))));
    v.push(("record", hex(&rec.encode())));
    v.push(("record_signed_bytes", hex(&rec.signed_bytes())));
    v.push((
        "svc_param_value",
        hex(&svc_param_value(std::slice::from_ref(&rec))),
    ));
    let svcb = SvcbRdata::service(
        &["http/1.1"],
        &[Ipv4Addr::new(198, 18, 0, 2)],
        &[],
        std::slice::from_ref(&rec),
    );
    v.push(("https_rdata", hex(&svcb.encode())));
    v.push(("txt_text", txt_text(&rec)));
    v.push(("txt_rdata", hex(&txt_rdata(&rec))));
    let addrs: Vec<String> = aaaa_tunnel(std::slice::from_ref(&rec))
        .iter()
        .map(|a| a.to_string())
        .collect();
    v.push(("aaaa_tunnel", addrs.join(" ")));
    v.push(("tlsa_rdata_prefix", hex(&tlsa_rdata(&cert)[..8])));

    let now = UnixTime::from_millis(T0 * 1000 + 100_000);
    let verified = rec.verify(&cert, testing::NAME, now).unwrap();
    let mut filter =
        BloomReplayFilter::new(ReplayConfig::default(), [0; 32], UnixTime::from_secs(T0));
    let server = testing::vector_server();

    // NK: client ephemeral from rng(1), server ephemeral from rng(2).
    let (client, flight) =
        ClientHandshake::start(&verified, &ClientParams::default(), REQUEST, now, &rng(1)).unwrap();
    v.push(("nk_first_flight", hex(&flight)));
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let accepted = server
        .accept(&frame, Transport::Tcp, now, &mut filter, &rng(2))
        .unwrap();
    assert_eq!(accepted.early_data, REQUEST);
    let (mut s_chan, reply) = accepted.reply(&Extensions::new(), RESPONSE).unwrap();
    v.push(("nk_reply", hex(&reply)));
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let got = client.handle_reply(&frame).unwrap();
    assert_eq!(got.data, RESPONSE);
    let mut c_chan = got.channel;
    let mut t = Vec::new();
    c_chan.seal(RecordKind::Data, b"ping", &mut t).unwrap();
    v.push(("nk_client_transport_0", hex(&t)));
    let mut t2 = Vec::new();
    s_chan.seal(RecordKind::Close, b"", &mut t2).unwrap();
    v.push(("nk_server_close_0", hex(&t2)));

    // IK: client static from the label "zrtt vector client static".
    let client_static =
        X25519KeyPair::from_private(crate::record::sha256(b"zrtt vector client static"));
    v.push(("ik_client_static_public", hex(client_static.public())));
    let params = ClientParams {
        static_key: Some(client_static),
        ..ClientParams::default()
    };
    let (_, flight) = ClientHandshake::start(&verified, &params, REQUEST, now, &rng(3)).unwrap();
    v.push(("ik_first_flight", hex(&flight)));
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let (_, reply) = server
        .accept(&frame, Transport::Tcp, now, &mut filter, &rng(4))
        .unwrap()
        .reply(&Extensions::new(), RESPONSE)
        .unwrap();
    v.push(("ik_reply", hex(&reply)));

    // Resumption (§12): token key SHA-256("zrtt vector token key"), its
    // ticket key; an NK flight asking for a ticket (client rng(5), server
    // rng(6)), the grant to 198.51.100.7 (rng(7)), then the resumed flight
    // (rng(8)) and its reply (rng(9)).
    let token_secret = crate::record::sha256(b"zrtt vector token key");
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&token_secret);
    let mut ticket_key = [0u8; 32];
    prk.expand(
        &[crate::handshake::resume::TICKET_KEY_LABEL],
        ring::hkdf::HKDF_SHA256,
    )
    .unwrap()
    .fill(&mut ticket_key)
    .unwrap();
    v.push(("resumption_ticket_key", hex(&ticket_key)));
    let mut resuming = testing::vector_server();
    resuming.resumption = Some(crate::admission::TokenKeyRing::new(
        crate::admission::TokenKeys::single(crate::admission::TokenKey::new(
            &token_secret,
            std::time::Duration::from_secs(3600),
        )),
    ));
    let mut params = ClientParams::default();
    params.request_ticket();
    let (client, flight) =
        ClientHandshake::start(&verified, &params, REQUEST, now, &rng(5)).unwrap();
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let accepted = resuming
        .accept(&frame, Transport::Tcp, now, &mut filter, &rng(6))
        .unwrap();
    let peer: std::net::IpAddr = "198.51.100.7".parse().unwrap();
    let grant = resuming
        .grant_ticket(&accepted, peer, now, &rng(7))
        .unwrap()
        .unwrap();
    v.push(("resumption_grant", hex(&grant)));
    let mut exts = Extensions::new();
    exts.set(ext::RESUMPTION, grant);
    let (_, reply) = accepted.reply(&exts, RESPONSE).unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let ticket = client.handle_reply(&frame).unwrap().ticket.unwrap();
    let (client, flight) = ClientHandshake::resume(
        &verified,
        ticket,
        &ClientParams::default(),
        REQUEST,
        now,
        &rng(8),
    )
    .unwrap();
    v.push(("resumed_first_flight", hex(&flight)));
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let accepted = resuming
        .accept(&frame, Transport::Tcp, now, &mut filter, &rng(9))
        .unwrap();
    assert_eq!(accepted.early_data, REQUEST);
    assert_eq!(accepted.resumed.as_ref().unwrap().address, peer);
    let (_, reply) = accepted.reply(&Extensions::new(), RESPONSE).unwrap();
    v.push(("resumed_reply", hex(&reply)));
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    assert_eq!(client.handle_reply(&frame).unwrap().data, RESPONSE);
    v.push((
        "reject_ticket_refused",
        hex(&encode_reject(RejectReason::TicketRefused, &[])),
    ));

    v.push((
        "reject_unknown_key",
        hex(&encode_reject(
            RejectReason::UnknownKey,
            std::slice::from_ref(&rec),
        )),
    ));

    // Verifier key record (§11.1): the vector verifier's key for NAME.
    let pv = testing::vector_verifier_record();
    v.push(("verifier_public", hex(&pv.body.public_key)));
    v.push(("verifier_key_record", hex(&pv.encode())));
    v.push(("verifier_key_record_signed_bytes", hex(&pv.signed_bytes())));
    v.push(("verifier_txt_text", verifier_txt_text(&pv)));

    // DNS shortcut (§13): GET /index.html (client rng(10)), its query name
    // under www.example.com, its flight hash, and the TXT RDATA of the
    // answer (server rng(11)) carrying SHORTCUT_RESPONSE.
    use crate::shortcut::{flight_hash, query_name, CompactRequest, Method, TxtAnswer};
    let req = CompactRequest::new(Method::Get, "/index.html").unwrap();
    let (client, flight) =
        ClientHandshake::start_shortcut(&verified, &req, None, None, now, &rng(10)).unwrap();
    v.push(("shortcut_first_flight", hex(&flight)));
    v.push((
        "shortcut_query_name",
        query_name(&flight, testing::NAME).unwrap(),
    ));
    v.push(("shortcut_flight_hash", hex(&flight_hash(&flight).unwrap())));
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let accepted = server
        .accept(&frame, Transport::Shortcut, now, &mut filter, &rng(11))
        .unwrap();
    assert_eq!(accepted.shortcut_request().unwrap(), req);
    let stream = accepted.shortcut_answer(SHORTCUT_RESPONSE).unwrap();
    let answer = TxtAnswer::Answer(stream.clone());
    let rdata: Vec<u8> = answer
        .to_strings()
        .iter()
        .flat_map(|s| std::iter::once(s.len() as u8).chain(s.iter().copied()))
        .collect();
    assert_eq!(rdata.len(), answer.rdata_len());
    v.push(("shortcut_txt_rdata", hex(&rdata)));
    assert_eq!(
        client.open_shortcut_answer(&stream).unwrap(),
        SHORTCUT_RESPONSE
    );
    v
}

#[test]
fn vectors_match_byte_for_byte() {
    let computed = compute();
    let text: String = computed
        .iter()
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect();
    if std::env::var_os("ZRTT_WRITE_VECTORS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(VECTORS).parent().unwrap()).unwrap();
        std::fs::write(VECTORS, &text).unwrap();
    }
    let stored = std::fs::read_to_string(VECTORS).expect("tests/vectors/vectors.txt");
    for ((k, v), line) in computed.iter().zip(stored.lines()) {
        assert_eq!(line, format!("{k} = {v}"), "vector {k} changed");
    }
    assert_eq!(stored.lines().count(), computed.len());
}

#[test]
fn protocol_md_quotes_the_vectors() {
    let doc = std::fs::read_to_string(PROTOCOL_MD).expect("docs/PROTOCOL.md");
    // Markdown wraps long hex at 64 characters: compare with whitespace removed.
    let flat: String = doc.split_whitespace().collect();
    for (k, v) in compute() {
        let vv: String = v.split_whitespace().collect();
        assert!(flat.contains(&vv), "docs/PROTOCOL.md lacks vector {k}");
    }
}

#[test]
fn vectors_are_deterministic() {
    assert_eq!(compute(), compute());
}
