use core::time::Duration;

use proptest::prelude::*;

use crate::crypto::X25519KeyPair;
use crate::handshake::*;
use crate::record::{RecordFlags, VerifiedKeyRecord};
use crate::replay::{BloomReplayFilter, ReplayConfig, ReplayFilter};
use crate::testing::{self, rng, T0};
use crate::{Error, HandshakeError, ReplayError, UnixTime};

const REQ: &[u8] = b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n";

fn now() -> UnixTime {
    UnixTime::from_secs(T0 + 100)
}

fn filter() -> BloomReplayFilter {
    BloomReplayFilter::new(ReplayConfig::default(), [9; 32], UnixTime::from_secs(T0))
}

fn verified() -> VerifiedKeyRecord {
    testing::vector_record()
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap()
}

fn first_flight(params: &ClientParams, early: &[u8], seed: u8) -> (ClientHandshake, Vec<u8>) {
    ClientHandshake::start(&verified(), params, early, now(), &rng(seed)).unwrap()
}

fn accept(
    server: &ServerConfig,
    bytes: &[u8],
    f: &mut dyn ReplayFilter,
) -> Result<Accepted, Refusal> {
    let (frame, used) = read_frame(bytes, Expect::FirstFlight).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    server.accept(&frame, Transport::Tcp, now(), f, &rng(200))
}

#[test]
fn nk_round_trip_with_channel_both_ways() {
    let server = testing::vector_server();
    let mut f = filter();
    let (client, flight) = first_flight(&ClientParams::default(), REQ, 1);
    assert_eq!(flight[0], FRAME_FIRST_FLIGHT);
    let accepted = accept(&server, &flight, &mut f).unwrap();
    assert_eq!(accepted.early_data, REQ);
    assert_eq!(accepted.client_static, None);
    assert_eq!(accepted.timestamp, now());

    let mut exts = Extensions::new();
    exts.set(ext::ALPN, b"http/1.1".to_vec());
    let (mut s_chan, reply) = accepted.reply(&exts, b"HTTP/1.1 200 OK\r\n").unwrap();
    let (frame, used) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    assert_eq!(used, reply.len());
    let got = client.handle_reply(&frame).unwrap();
    assert_eq!(got.data, b"HTTP/1.1 200 OK\r\n");
    assert_eq!(got.extensions.get(ext::ALPN), Some(&b"http/1.1"[..]));
    let mut c_chan = got.channel;

    // Both directions, several records, then an authenticated close.
    let mut wire = Vec::new();
    c_chan
        .seal(RecordKind::Data, b"second request", &mut wire)
        .unwrap();
    c_chan.seal(RecordKind::Close, b"", &mut wire).unwrap();
    let mut off = 0;
    let mut got = Vec::new();
    while off < wire.len() {
        let (Frame::Transport(ct), used) = read_frame(&wire[off..], Expect::Transport)
            .unwrap()
            .unwrap()
        else {
            panic!("transport frame expected")
        };
        got.push(s_chan.open(ct).unwrap());
        off += used;
    }
    assert_eq!(
        got[0],
        ChannelRecord {
            kind: RecordKind::Data,
            body: b"second request".to_vec()
        }
    );
    assert_eq!(got[1].kind, RecordKind::Close);

    let big = vec![0xabu8; 200_000];
    let mut wire = Vec::new();
    s_chan.seal_data(&big, &mut wire).unwrap();
    let mut off = 0;
    let mut out = Vec::new();
    while let Some((Frame::Transport(ct), used)) =
        read_frame(&wire[off..], Expect::Transport).unwrap()
    {
        out.extend(c_chan.open(ct).unwrap().body);
        off += used;
    }
    assert_eq!(out, big);
    assert_eq!(
        s_chan.sent(),
        4,
        "200 KB needs four records of at most 65518 bytes"
    );
}

#[test]
fn ik_round_trip_reveals_client_static_to_server_only() {
    let server = testing::vector_server();
    let mut f = filter();
    let client_key = X25519KeyPair::from_private([5; 32]);
    let params = ClientParams {
        static_key: Some(client_key.clone()),
        ..ClientParams::default()
    };
    let (client, flight) = first_flight(&params, REQ, 2);
    assert_eq!(flight[2], Pattern::Ik as u8);
    assert!(
        !flight.windows(32).any(|w| w == client_key.public()),
        "the client static key must not appear in clear"
    );
    let accepted = accept(&server, &flight, &mut f).unwrap();
    assert_eq!(accepted.client_static, Some(*client_key.public()));
    let (_, reply) = accepted.reply(&Extensions::new(), b"ok").unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    assert_eq!(client.handle_reply(&frame).unwrap().data, b"ok");
}

#[test]
fn replay_refusals_after_accept_answer_as_accept_does() {
    // A check made after `accept` (a fleet's shared store) refuses with the
    // frame `accept` would have sent for the same replay error.
    let server = testing::vector_server();
    let now = now();
    for (err, want) in [
        (ReplayError::Replayed, RejectReason::Replay),
        (ReplayError::StoreUnavailable, RejectReason::Busy),
        (ReplayError::Full, RejectReason::Busy),
        (ReplayError::BeforeFilterStart, RejectReason::Busy),
        (ReplayError::TooOld, RejectReason::TimestampSkew),
    ] {
        let refusal = server.replay_refusal(err, now);
        assert_eq!(refusal.error, Error::Replay(err));
        let reply = refusal.reply.unwrap();
        let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
        match frame {
            Frame::Reject { reason, records } => {
                assert_eq!(reason, want, "{err:?}");
                assert!(records.is_empty(), "no retry records for {err:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The same bytes as `accept`'s own refusal of a replay.
    let mut f = filter();
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 9);
    assert!(accept(&server, &flight, &mut f).is_ok());
    let refusal = accept(&server, &flight, &mut f).unwrap_err();
    assert_eq!(
        refusal.reply,
        server.replay_refusal(ReplayError::Replayed, now).reply
    );
}

#[test]
fn replayed_first_flight_is_refused() {
    let server = testing::vector_server();
    let mut f = filter();
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 3);
    assert!(accept(&server, &flight, &mut f).is_ok());
    let refusal = accept(&server, &flight, &mut f).unwrap_err();
    assert_eq!(refusal.error, Error::Replay(ReplayError::Replayed));
    let reply = refusal.reply.unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    assert!(matches!(
        frame,
        Frame::Reject {
            reason: RejectReason::Replay,
            ..
        }
    ));
}

#[test]
fn tampered_flight_gets_no_answer_and_records_nothing() {
    let server = testing::vector_server();
    let mut f = filter();
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 4);
    // Flip one bit in every position of the Noise message after the
    // ephemeral key, and in the clear header: nothing may be accepted.
    for i in (FIRST_FLIGHT_HEADER_LEN + 2 + 32)..flight.len() {
        let mut bad = flight.clone();
        bad[i] ^= 0x01;
        let refusal = accept(&server, &bad, &mut f).unwrap_err();
        assert_eq!(
            refusal.error,
            Error::Handshake(HandshakeError::DecryptFailed),
            "byte {i}"
        );
        assert!(refusal.reply.is_none(), "no answer to a forged flight");
    }
    // Header byte 3 (AEAD): another valid AEAD changes the prologue.
    let mut bad = flight.clone();
    bad[3] = crate::record::Aead::AesGcm as u8;
    assert!(accept(&server, &bad, &mut f).unwrap_err().reply.is_none());
    // The genuine flight is still fresh: forgeries recorded nothing.
    assert!(accept(&server, &flight, &mut f).is_ok());
}

#[test]
fn flight_bound_to_transport_and_name() {
    let server = testing::vector_server();
    let (_, flight) = first_flight(
        &ClientParams {
            transport: Transport::Udp,
            ..ClientParams::default()
        },
        REQ,
        5,
    );
    let refusal = accept(&server, &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::DecryptFailed)
    );

    // A record for another name but the same key: the server's prologue
    // uses its own record's name, so decryption fails.
    let key = testing::semi_static("zrtt vector key 1");
    let mut body = testing::body(&key, &testing::other_cert());
    body.name = "other.example.com".into();
    let rec = body
        .sign(&testing::other_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let v = rec
        .verify(&testing::other_cert(), "other.example.com", now())
        .unwrap();
    let (_, flight) =
        ClientHandshake::start(&v, &ClientParams::default(), REQ, now(), &rng(6)).unwrap();
    let refusal = accept(&server, &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::DecryptFailed)
    );
}

#[test]
fn unknown_key_refusal_carries_fresh_records_that_verify() {
    let other_key = testing::semi_static("zrtt vector key 2");
    let rec = testing::body(&other_key, &testing::ed25519_cert())
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let stale = rec
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap();
    let (client, flight) =
        ClientHandshake::start(&stale, &ClientParams::default(), REQ, now(), &rng(7)).unwrap();
    let server = testing::vector_server();
    let refusal = accept(&server, &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::UnknownKeyId(rec.body.key_id))
    );
    let reply = refusal.reply.unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let Frame::Reject { reason, records } = frame else {
        panic!()
    };
    assert_eq!(reason, RejectReason::UnknownKey);
    let retry = decode_reject_records(records).unwrap();
    assert_eq!(retry, vec![testing::vector_record()]);
    // The client verifies them like DNS records and retries at once.
    let v = retry[0]
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap();
    assert_eq!(
        client.handle_reply(&frame).unwrap_err(),
        Error::Handshake(HandshakeError::Rejected(RejectReason::UnknownKey))
    );
    let (_, flight) =
        ClientHandshake::start(&v, &ClientParams::default(), REQ, now(), &rng(8)).unwrap();
    assert!(accept(&server, &flight, &mut filter()).is_ok());
}

#[test]
fn expired_key_and_skewed_timestamp_are_refused() {
    let server = testing::vector_server();
    let rec = verified();
    // Client clock 1 minute ahead, still inside the record's window.
    let ahead = now().saturating_add(Duration::from_secs(60));
    let (_, flight) =
        ClientHandshake::start(&rec, &ClientParams::default(), REQ, ahead, &rng(9)).unwrap();
    let refusal = accept(&server, &flight, &mut filter()).unwrap_err();
    assert_eq!(refusal.error, Error::Replay(ReplayError::InFuture));
    let (frame, _) = read_frame(refusal.reply.as_ref().unwrap(), Expect::ReplyOrReject)
        .unwrap()
        .unwrap();
    assert!(matches!(
        frame,
        Frame::Reject {
            reason: RejectReason::TimestampSkew,
            ..
        }
    ));

    // Server time past the key's end (plus grace).
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 10);
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let late = UnixTime::from_secs(T0 + 3600 + 31);
    let refusal = server
        .accept(&frame, Transport::Tcp, late, &mut filter(), &rng(1))
        .unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::KeyNotValidNow(rec.body().key_id))
    );

    // The client refuses to use an expired record at all.
    let err =
        ClientHandshake::start(&rec, &ClientParams::default(), REQ, late, &rng(1)).unwrap_err();
    assert!(matches!(
        err,
        Error::Record(crate::RecordError::Expired { .. })
    ));
}

/// A first flight built without the client's checks, as a malicious client would.
fn raw_flight(early: &[u8]) -> Vec<u8> {
    use crate::codec::Put;
    let rec = testing::vector_record();
    let header = FirstFlightHeader {
        version: PROTOCOL_VERSION,
        pattern: Pattern::Nk,
        aead: crate::record::Aead::ChaChaPoly as u8,
        key_id: rec.body.key_id,
    };
    let prologue = prologue(
        &crate::record::sha256(&rec.encode()),
        Transport::Tcp,
        &header,
    );
    let resolver = crate::crypto::ZrttResolver::new(&rng(77), None).unwrap();
    let mut noise = snow::Builder::with_resolver(
        "Noise_NK_25519_ChaChaPoly_SHA256".parse().unwrap(),
        Box::new(resolver),
    )
    .prologue(&prologue)
    .unwrap()
    .remote_public_key(&rec.body.public_key)
    .unwrap()
    .build_initiator()
    .unwrap();
    let mut payload = Vec::new();
    payload.put_u64(now().as_millis());
    payload.put_u16(0);
    payload.extend_from_slice(early);
    let mut msg = vec![0u8; payload.len() + 48];
    let n = noise.write_message(&payload, &mut msg).unwrap();
    let mut frame = header.encode().to_vec();
    frame.put_vec_u16(&msg[..n]);
    frame
}

#[test]
fn client_lying_about_the_record_cannot_decrypt() {
    // The prologue binds the record's hash: a client that altered any field
    // (here the early-data limit) derives different keys.
    let mut r = testing::vector_record();
    r.body.max_early_data_bytes = 60_000;
    let liar = VerifiedKeyRecord::dangerous_assume_verified(r);
    let (_, flight) =
        ClientHandshake::start(&liar, &ClientParams::default(), REQ, now(), &rng(1)).unwrap();
    let refusal = accept(&testing::vector_server(), &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::DecryptFailed)
    );
    assert!(refusal.reply.is_none());
}

#[test]
fn early_data_limit_is_enforced_on_both_sides() {
    let rec = verified();
    let too_big = vec![b'x'; 16385];
    let err = ClientHandshake::start(&rec, &ClientParams::default(), &too_big, now(), &rng(1))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Handshake(HandshakeError::EarlyDataTooLarge {
            len: 16385,
            max: 16384
        })
    );

    // A client that ignores the limit (it builds its flight by hand): the
    // server refuses before decrypting when the message is clearly too big...
    let flight = raw_flight(&vec![b'x'; 30_000]);
    let refusal = accept(&testing::vector_server(), &flight, &mut filter()).unwrap_err();
    assert!(matches!(
        refusal.error,
        Error::Handshake(HandshakeError::EarlyDataTooLarge { .. })
    ));
    // ...and after decrypting when it is between the exact limit and the
    // pre-decryption bound.
    let flight = raw_flight(&vec![b'x'; 16_400]);
    let refusal = accept(&testing::vector_server(), &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::EarlyDataTooLarge {
            len: 16_400,
            max: 16_384
        })
    );
}

#[test]
fn client_auth_required_refuses_nk() {
    let key = testing::semi_static("zrtt vector key 1");
    let mut body = testing::body(&key, &testing::ed25519_cert());
    body.flags = RecordFlags::from_bits(RecordFlags::CLIENT_AUTH_REQUIRED).unwrap();
    let rec = body
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let server = ServerConfig::new(vec![ServerKey::new(rec.clone(), key).unwrap()]).unwrap();
    let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    assert_eq!(
        ClientHandshake::start(&v, &ClientParams::default(), REQ, now(), &rng(1)).unwrap_err(),
        Error::Handshake(HandshakeError::ClientAuthRequired)
    );
    // A client ignoring the flag is refused by the server.
    let mut lax = rec;
    lax.body.flags = RecordFlags::default();
    let (_, flight) = ClientHandshake::start(
        &VerifiedKeyRecord::dangerous_assume_verified(lax),
        &ClientParams::default(),
        REQ,
        now(),
        &rng(1),
    )
    .unwrap();
    let refusal = accept(&server, &flight, &mut filter()).unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::ClientAuthRequired)
    );
    // With a static key it works.
    let params = ClientParams {
        static_key: Some(X25519KeyPair::from_private([3; 32])),
        ..ClientParams::default()
    };
    let (_, flight) = ClientHandshake::start(&v, &params, REQ, now(), &rng(2)).unwrap();
    assert!(accept(&server, &flight, &mut filter()).is_ok());
}

#[test]
fn truncated_frames_wait_for_more_and_truncated_messages_fail() {
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 11);
    for cut in 0..flight.len() {
        assert_eq!(
            read_frame(&flight[..cut], Expect::FirstFlight),
            Ok(None),
            "cut at {cut}"
        );
    }
    // A frame whose length field was shortened: authenticates nothing.
    let server = testing::vector_server();
    let mut short = flight.clone();
    let n = u16::from_be_bytes([short[8], short[9]]) - 1;
    short[8..10].copy_from_slice(&n.to_be_bytes());
    short.pop();
    let refusal = accept(&server, &short, &mut filter()).unwrap_err();
    assert!(refusal.reply.is_none());
    // Not a zrtt stream at all: TLS and HTTP are told apart by the first byte.
    assert_eq!(
        read_frame(&[0x16, 3, 1], Expect::FirstFlight),
        Err(crate::InvalidMessage::UnknownFrameType(0x16))
    );
    assert_eq!(
        read_frame(b"GET / HTTP/1.1", Expect::FirstFlight),
        Err(crate::InvalidMessage::UnknownFrameType(b'G'))
    );
}

#[test]
fn channel_refuses_tampered_reordered_and_replayed_records() {
    let server = testing::vector_server();
    let (client, flight) = first_flight(&ClientParams::default(), REQ, 12);
    let (mut s_chan, reply) = accept(&server, &flight, &mut filter())
        .unwrap()
        .reply(&Extensions::new(), b"")
        .unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let mut c_chan = client.handle_reply(&frame).unwrap().channel;
    let mut a = Vec::new();
    let mut b = Vec::new();
    c_chan.seal(RecordKind::Data, b"one", &mut a).unwrap();
    c_chan.seal(RecordKind::Data, b"two", &mut b).unwrap();
    // In order, each record opens once; a replayed record fails.
    assert_eq!(s_chan.open(&a[2..]).unwrap().body, b"one");
    assert_eq!(
        s_chan.open(&a[2..]).unwrap_err(),
        Error::Handshake(HandshakeError::DecryptFailed)
    );
    // The failure is fatal: even the genuine next record is refused now.
    assert_eq!(
        s_chan.open(&b[2..]).unwrap_err(),
        Error::Handshake(HandshakeError::DecryptFailed)
    );

    // Reordered on a fresh channel: record 1 before record 0 fails.
    let (client, flight) = first_flight(&ClientParams::default(), REQ, 15);
    let (mut s_chan, reply) = accept(&server, &flight, &mut filter())
        .unwrap()
        .reply(&Extensions::new(), b"")
        .unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let mut c_chan = client.handle_reply(&frame).unwrap().channel;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    c_chan.seal(RecordKind::Data, b"one", &mut a).unwrap();
    c_chan.seal(RecordKind::Data, b"two", &mut b).unwrap();
    assert_eq!(
        s_chan.open(&b[2..]).unwrap_err(),
        Error::Handshake(HandshakeError::DecryptFailed)
    );
    // A flipped bit in a record fails too (fresh channel).
    let (client, flight) = first_flight(&ClientParams::default(), REQ, 16);
    let (mut s_chan, reply) = accept(&server, &flight, &mut filter())
        .unwrap()
        .reply(&Extensions::new(), b"")
        .unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let mut c_chan = client.handle_reply(&frame).unwrap().channel;
    let mut a = Vec::new();
    c_chan.seal(RecordKind::Data, b"one", &mut a).unwrap();
    a[5] ^= 0x80;
    assert_eq!(
        s_chan.open(&a[2..]).unwrap_err(),
        Error::Handshake(HandshakeError::DecryptFailed)
    );
}

#[test]
fn reply_under_ephemeral_keys_differs_per_connection() {
    // Two connections with the same request: different client and server
    // ephemerals, so neither first flights nor replies repeat.
    let server = testing::vector_server();
    let mut f = filter();
    let (_, f1) = first_flight(&ClientParams::default(), REQ, 13);
    let (_, f2) = first_flight(&ClientParams::default(), REQ, 14);
    assert_ne!(f1, f2);
    let (frame, _) = read_frame(&f1, Expect::FirstFlight).unwrap().unwrap();
    let (_, r1) = server
        .accept(&frame, Transport::Tcp, now(), &mut f, &rng(50))
        .unwrap()
        .reply(&Extensions::new(), b"x")
        .unwrap();
    let (frame, _) = read_frame(&f2, Expect::FirstFlight).unwrap().unwrap();
    let (_, r2) = server
        .accept(&frame, Transport::Tcp, now(), &mut f, &rng(51))
        .unwrap()
        .reply(&Extensions::new(), b"x")
        .unwrap();
    assert_ne!(r1[3..35], r2[3..35], "fresh server ephemeral per reply");
}

proptest! {
    #[test]
    fn server_never_panics_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let server = testing::vector_server();
        testing::server_first_flight(&server, now(), &data);
        testing::frames(&data);
    }

    #[test]
    fn server_never_panics_on_mutated_flights(seed in any::<u8>(), pos in any::<usize>(), val in any::<u8>()) {
        let server = testing::vector_server();
        let (_, mut flight) = first_flight(&ClientParams::default(), REQ, seed);
        let i = pos % flight.len();
        flight[i] = val;
        testing::server_first_flight(&server, now(), &flight);
    }
}

/// The duplicate check on peer extensions stays correct at the largest
/// block a flight can carry (1024 empty extensions, 4096 bytes), with the
/// duplicate far from its twin.
#[test]
fn a_full_extension_block_with_one_duplicate_is_refused() {
    use crate::codec::{Put, Reader};
    use crate::error::InvalidMessage;
    let block = |types: &mut dyn Iterator<Item = u16>| {
        let mut b = Vec::new();
        for t in types {
            b.put_u16(t);
            b.put_u16(0);
        }
        let mut wire = Vec::new();
        wire.put_vec_u16(&b);
        wire
    };
    let distinct = block(&mut (0..1024u16).map(|t| t.wrapping_mul(7919)));
    let exts = Extensions::decode(&mut Reader::new(&distinct)).unwrap();
    assert_eq!(exts.iter().count(), 1024);
    let dup = block(&mut (0..1023u16).map(|t| t.wrapping_mul(7919)).chain([0]));
    assert_eq!(
        Extensions::decode(&mut Reader::new(&dup)),
        Err(InvalidMessage::InvalidField("duplicate extension"))
    );
}

// ----------------------------------------------- re-signed records

/// How long a previous record is kept in these tests.
const KEEP: Duration = Duration::from_secs(600);

/// The vector key's record re-signed by another certificate (a renewal),
/// with `edit` applied to its terms first.
fn resigned(edit: impl FnOnce(&mut crate::record::RecordBody)) -> ServerConfig {
    let key = testing::semi_static("zrtt vector key 1");
    let mut body = testing::body(&key, &testing::other_cert());
    edit(&mut body);
    let record = body
        .sign(&testing::other_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    ServerConfig::new(vec![ServerKey::new(record, key).unwrap()]).unwrap()
}

#[test]
fn a_flight_on_the_previous_record_decrypts_after_a_renewal() {
    let before = testing::vector_server();
    let (client, flight) = first_flight(&ClientParams::default(), REQ, 41);

    // Without the previous record: no answer at all (PROTOCOL.md §4.4).
    let plain = resigned(|_| {});
    let refused = accept(&plain, &flight, &mut filter()).unwrap_err();
    assert!(refused.reply.is_none());

    // Kept: accepted, and the reply opens at the client.
    let mut after = resigned(|_| {});
    after.keep_previous_records(&before, now(), KEEP);
    assert!(after.keys()[0].accepts_previous_record(now()));
    let mut f = filter();
    let accepted = accept(&after, &flight, &mut f).unwrap();
    assert_eq!(accepted.early_data, REQ);
    assert!(accepted.on_previous_record);
    let (_, reply) = accepted
        .reply(&Extensions::new(), b"HTTP/1.1 200 OK\r\n")
        .unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    assert_eq!(
        client.handle_reply(&frame).unwrap().data,
        b"HTTP/1.1 200 OK\r\n"
    );

    // Still one acceptance per flight.
    let again = accept(&after, &flight, &mut f).unwrap_err();
    assert_eq!(again.error, Error::Replay(ReplayError::Replayed));

    // The next refresh (the same new record, read again) keeps carrying it.
    let key = testing::semi_static("zrtt vector key 1");
    let same = after.keys()[0].record.clone();
    let mut later = ServerConfig::new(vec![ServerKey::new(same, key).unwrap()]).unwrap();
    later.keep_previous_records(&after, now(), KEEP);
    assert!(later.keys()[0].accepts_previous_record(now()));
    let (_, flight2) = first_flight(&ClientParams::default(), REQ, 42);
    accept(&later, &flight2, &mut filter()).unwrap();
}

#[test]
fn a_record_with_new_terms_does_not_carry_the_previous_one() {
    let before = testing::vector_server();
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 43);
    let mut after = resigned(|b| b.max_early_data_bytes = 1024);
    after.keep_previous_records(&before, now(), KEEP);
    assert!(!after.keys()[0].accepts_previous_record(now()));
    let refused = accept(&after, &flight, &mut filter()).unwrap_err();
    assert!(refused.reply.is_none());
}

#[test]
fn any_change_of_terms_stops_the_carry() {
    let before = testing::vector_server();
    type Edit = fn(&mut crate::record::RecordBody);
    let edits: Vec<(&str, Edit)> = vec![
        ("not_before", |b| b.not_before -= 1),
        ("not_after", |b| b.not_after += 1),
        ("max_early_data_bytes", |b| b.max_early_data_bytes += 1),
        ("aeads", |b| b.aeads.reverse()),
        ("flags", |b| {
            b.flags = RecordFlags::from_bits(
                RecordFlags::ISSUES_TOKENS | RecordFlags::CLIENT_AUTH_REQUIRED,
            )
            .unwrap()
        }),
        ("provenance_quorum", |b| b.provenance_quorum = 1),
        ("name", |b| b.name = "other.example.com".into()),
    ];
    for (field, edit) in edits {
        let mut after = resigned(edit);
        after.keep_previous_records(&before, now(), KEEP);
        assert!(!after.keys()[0].accepts_previous_record(now()), "{field}");
    }
}

#[test]
fn the_previous_record_is_kept_for_its_time_and_one_deep() {
    let before = testing::vector_server();
    let (_, flight) = first_flight(&ClientParams::default(), REQ, 44);
    let mut after = resigned(|_| {});
    after.keep_previous_records(&before, now(), KEEP);
    // Past `keep_for`: neither accepted nor carried by the next refresh.
    let late = UnixTime::from_secs(now().as_secs() + KEEP.as_secs());
    assert!(!after.keys()[0].accepts_previous_record(late));
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let refused = after
        .accept(&frame, Transport::Tcp, late, &mut filter(), &rng(200))
        .unwrap_err();
    assert!(refused.reply.is_none());
    let key = testing::semi_static("zrtt vector key 1");
    let same = after.keys()[0].record.clone();
    let mut later = ServerConfig::new(vec![ServerKey::new(same, key).unwrap()]).unwrap();
    later.keep_previous_records(&after, late, KEEP);
    assert!(!later.keys()[0].accepts_previous_record(late));
    // A second re-signing keeps only the record just before it.
    let mut third = resigned(|_| {});
    third.keep_previous_records(&after, now(), KEEP);
    assert!(third.keys()[0].accepts_previous_record(now()));
    let refused = accept(&third, &flight, &mut filter()).unwrap_err();
    assert!(refused.reply.is_none(), "a flight two records back");
}

#[test]
fn a_key_id_reused_with_another_key_carries_nothing() {
    let before = testing::vector_server();
    let other = testing::semi_static("another key");
    let mut body = testing::body(&other, &testing::other_cert());
    body.key_id = before.keys()[0].record.body.key_id;
    let record = body
        .sign(&testing::other_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let mut after = ServerConfig::new(vec![ServerKey::new(record, other).unwrap()]).unwrap();
    after.keep_previous_records(&before, now(), KEEP);
    assert!(!after.keys()[0].accepts_previous_record(now()));
}
