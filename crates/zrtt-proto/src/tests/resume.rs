//! Resumption (docs/PROTOCOL.md §12): tickets granted in a Reply, resumed
//! flights (Noise NNpsk0) accepted once, and every way a ticket is refused.

use core::time::Duration;
use std::net::IpAddr;
use std::sync::Arc;

use crate::admission::{TokenKey, TokenKeyRing, TokenKeys};
use crate::handshake::*;
use crate::record::VerifiedKeyRecord;
use crate::replay::{BloomReplayFilter, ReplayConfig, ReplayFilter};
use crate::testing::{self, rng, T0};
use crate::{Error, HandshakeError, UnixTime};

const REQ: &[u8] = b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n";
const PEER: &str = "198.18.0.7";

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

fn token_key(seed: u8) -> TokenKey {
    TokenKey::new(&[seed; 32], Duration::from_secs(3600))
}

/// The vector server whose token key `seed` gives tickets `lifetime`.
fn server_lifetime(seed: u8, lifetime: Duration) -> ServerConfig {
    let mut s = testing::vector_server();
    s.resumption = Some(TokenKeyRing::new(TokenKeys::single(TokenKey::new(
        &[seed; 32],
        lifetime,
    ))));
    s
}

/// The vector server with the token key `seed` (and `older` keys that only open).
fn server_with(seed: u8, older: &[u8]) -> ServerConfig {
    let mut s = testing::vector_server();
    s.resumption = Some(TokenKeyRing::new(TokenKeys::new(
        Arc::new(token_key(seed)),
        older.iter().map(|o| Arc::new(token_key(*o))).collect(),
    )));
    s
}

fn peer() -> IpAddr {
    PEER.parse().unwrap()
}

fn accept_at(
    server: &ServerConfig,
    bytes: &[u8],
    f: &mut dyn ReplayFilter,
    at: UnixTime,
) -> Result<Accepted, Refusal> {
    let (frame, used) = read_frame(bytes, Expect::FirstFlight).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    server.accept(&frame, Transport::Tcp, at, f, &rng(200))
}

/// Answer `accepted` with a grant when asked; the client's view of it.
fn answer(
    server: &ServerConfig,
    client: ClientHandshake,
    accepted: Accepted,
    at: UnixTime,
    seed: u8,
) -> (ServerReply, Channel) {
    let mut exts = Extensions::new();
    if let Some(grant) = server
        .grant_ticket(&accepted, peer(), at, &rng(seed.wrapping_add(100)))
        .unwrap()
    {
        exts.set(ext::RESUMPTION, grant);
    }
    let (chan, reply) = accepted.reply(&exts, b"HTTP/1.1 200 OK\r\n").unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    (client.handle_reply(&frame).unwrap(), chan)
}

/// A first contact (NK, asking for a ticket) and the ticket it got.
fn first_contact(server: &ServerConfig, f: &mut dyn ReplayFilter, seed: u8) -> ResumptionTicket {
    let mut params = ClientParams::default();
    params.request_ticket();
    let (client, flight) =
        ClientHandshake::start(&verified(), &params, REQ, now(), &rng(seed)).unwrap();
    let accepted = accept_at(server, &flight, f, now()).unwrap();
    assert!(accepted.ticket_requested());
    assert!(accepted.resumed.is_none());
    let (reply, _) = answer(server, client, accepted, now(), seed);
    reply.ticket.expect("a ticket was granted")
}

fn resumed_flight(ticket: ResumptionTicket, seed: u8, at: UnixTime) -> (ClientHandshake, Vec<u8>) {
    let mut params = ClientParams::default();
    params.request_ticket();
    ClientHandshake::resume(&verified(), ticket, &params, REQ, at, &rng(seed)).unwrap()
}

fn refused_with(r: Result<Accepted, Refusal>) -> (Error, Option<Vec<u8>>) {
    let refusal = r.expect_err("refused");
    (refusal.error, refusal.reply)
}

fn ticket_refusal(r: Result<Accepted, Refusal>) -> TicketError {
    let (error, reply) = refused_with(r);
    let reply = reply.expect("Reject 9 is sent");
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    let Frame::Reject { reason, records } = frame else {
        panic!("a Reject")
    };
    assert_eq!(reason, RejectReason::TicketRefused);
    assert!(
        !decode_reject_records(records).unwrap().is_empty(),
        "Reject 9 carries the current records so the client can retry at once"
    );
    match error {
        Error::Handshake(HandshakeError::TicketRefused(e)) => e,
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn resumed_round_trip_and_fresh_ticket_each_time() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    assert_eq!(ticket.binding(), &SiteBinding::of(&verified()));
    assert_eq!(
        ticket.expires(),
        now().saturating_add(Duration::from_secs(3600))
    );
    let first_bytes = ticket.ticket().to_vec();

    let (client, flight) = resumed_flight(ticket, 2, now());
    assert_eq!(flight[2], Pattern::Resumed as u8);
    assert!(client.resumed());
    let accepted = accept_at(&server, &flight, &mut f, now()).unwrap();
    assert_eq!(accepted.early_data, REQ);
    assert_eq!(accepted.client_static, None);
    let resumed = accepted.resumed.clone().unwrap();
    assert_eq!(resumed.address, peer());
    assert_eq!(resumed.binding.name, testing::NAME);
    assert_eq!(resumed.issued_secs, now().as_secs());
    let (reply, mut s_chan) = answer(&server, client, accepted, now(), 2);
    assert_eq!(reply.data, b"HTTP/1.1 200 OK\r\n");
    let next = reply.ticket.expect("a resumed reply grants a fresh ticket");
    assert_ne!(
        next.ticket(),
        &first_bytes[..],
        "never the same ticket twice"
    );

    // The channel works both ways (keys from psk and ee).
    let mut c_chan = reply.channel;
    let mut wire = Vec::new();
    c_chan.seal(RecordKind::Confirm, b"", &mut wire).unwrap();
    let (Frame::Transport(ct), _) = read_frame(&wire, Expect::Transport).unwrap().unwrap() else {
        panic!("transport")
    };
    assert_eq!(s_chan.open(ct).unwrap().kind, RecordKind::Confirm);
    let mut wire = Vec::new();
    s_chan.seal(RecordKind::Data, b"body", &mut wire).unwrap();
    let (Frame::Transport(ct), _) = read_frame(&wire, Expect::Transport).unwrap().unwrap() else {
        panic!("transport")
    };
    assert_eq!(c_chan.open(ct).unwrap().body, b"body");

    // The next ticket resumes too.
    let (_, flight) = resumed_flight(next, 3, now());
    assert!(accept_at(&server, &flight, &mut f, now()).is_ok());
}

#[test]
fn no_ticket_unless_asked_or_without_token_keys() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let (client, flight) =
        ClientHandshake::start(&verified(), &ClientParams::default(), REQ, now(), &rng(1)).unwrap();
    let accepted = accept_at(&server, &flight, &mut f, now()).unwrap();
    assert!(!accepted.ticket_requested());
    assert!(answer(&server, client, accepted, now(), 1)
        .0
        .ticket
        .is_none());

    let plain = testing::vector_server();
    let mut params = ClientParams::default();
    params.request_ticket();
    let (client, flight) =
        ClientHandshake::start(&verified(), &params, REQ, now(), &rng(2)).unwrap();
    let accepted = accept_at(&plain, &flight, &mut f, now()).unwrap();
    assert!(answer(&plain, client, accepted, now(), 2)
        .0
        .ticket
        .is_none());
}

#[test]
fn replayed_resumed_flight_is_refused_and_nk_from_same_client_is_fine() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, flight) = resumed_flight(ticket, 2, now());
    assert!(accept_at(&server, &flight, &mut f, now()).is_ok());
    let (error, reply) = refused_with(accept_at(&server, &flight, &mut f, now()));
    assert!(
        matches!(error, Error::Replay(crate::ReplayError::Replayed)),
        "{error:?}"
    );
    let reply = reply.unwrap();
    assert_eq!(reply[0], FRAME_REJECT);
    assert_eq!(reply[1], RejectReason::Replay as u8);
    // A later NK flight from the same client is a flight like any other.
    let (_, nk) =
        ClientHandshake::start(&verified(), &ClientParams::default(), REQ, now(), &rng(4)).unwrap();
    assert!(accept_at(&server, &nk, &mut f, now()).is_ok());
}

#[test]
fn timestamp_window_applies_to_resumed_flights() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, flight) = resumed_flight(ticket, 2, now());
    let late = now().saturating_add(Duration::from_secs(60));
    let (error, _) = refused_with(accept_at(&server, &flight, &mut f, late));
    assert!(
        matches!(error, Error::Replay(crate::ReplayError::TooOld)),
        "{error:?}"
    );
}

#[test]
fn tampered_ticket_is_refused_with_reject_9() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let len = ticket.ticket().len();
    let (_, mut flight) = resumed_flight(ticket, 2, now());
    // header (8) || u16 len || ticket: flip the ticket's last byte (its tag).
    flight[8 + 2 + len - 1] ^= 1;
    assert_eq!(
        ticket_refusal(accept_at(&server, &flight, &mut f, now())),
        TicketError::Invalid
    );
}

#[test]
fn expired_ticket_is_refused_and_not_used_by_the_client() {
    let server = server_lifetime(9, Duration::from_secs(600));
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let later = now().saturating_add(Duration::from_secs(600));
    assert!(!ticket.usable(&verified(), later));
    // A client whose clock is behind still sends it; the server refuses.
    let (_, flight) = resumed_flight(ticket.clone(), 2, now());
    assert_eq!(
        ticket_refusal(accept_at(&server, &flight, &mut f, later)),
        TicketError::Expired
    );
    let err = ClientHandshake::resume(
        &verified(),
        ticket,
        &ClientParams::default(),
        REQ,
        later,
        &rng(3),
    )
    .unwrap_err();
    assert!(matches!(err, Error::ApiMisuse(_)), "{err:?}");
}

#[test]
fn another_sites_ticket_is_refused() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, flight) = resumed_flight(ticket, 2, now());

    // Same fleet (token key), another site: a record for another name.
    let key = testing::semi_static("zrtt vector key 1");
    let mut body = testing::body(&key, &testing::ed25519_cert());
    body.name = "other.example.com".to_owned();
    let record = body
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let mut other = ServerConfig::new(vec![ServerKey::new(record, key).unwrap()]).unwrap();
    other.resumption = server.resumption.clone();
    assert_eq!(
        ticket_refusal(accept_at(&other, &flight, &mut filter(), now())),
        TicketError::WrongSite
    );

    // The same name under another certificate (the site changed it).
    let key = testing::semi_static("zrtt vector key 1");
    let record = testing::body(&key, &testing::other_cert())
        .sign(&testing::other_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let mut renewed = ServerConfig::new(vec![ServerKey::new(record, key).unwrap()]).unwrap();
    renewed.resumption = server.resumption.clone();
    assert_eq!(
        ticket_refusal(accept_at(&renewed, &flight, &mut filter(), now())),
        TicketError::WrongSite
    );

    // A certificate renewal that keeps the previous record (same terms):
    // the ticket bound to the previous certificate is still accepted while
    // that record is kept, and not after.
    renewed.keep_previous_records(&server, now(), Duration::from_secs(600));
    let accepted = accept_at(&renewed, &flight, &mut filter(), now()).unwrap();
    assert_eq!(
        accepted.resumed.unwrap().binding,
        SiteBinding::of(&verified())
    );
    let later = now().saturating_add(Duration::from_secs(601));
    let ticket = first_contact(&server, &mut filter(), 3);
    let (_, flight) = resumed_flight(ticket, 4, later);
    assert_eq!(
        ticket_refusal(accept_at(&renewed, &flight, &mut filter(), later)),
        TicketError::WrongSite
    );
}

/// Gateways sharing token keys but not semi-static keys (so not a replay
/// filter, PROTOCOL.md §7) do not accept each other's tickets: a resumed
/// flight accepted at A is not accepted again at B (review M2). A server
/// holding the issuing key beside a newer one (rotation overlap) still
/// accepts; once it retired that key, Reject 9.
#[test]
fn a_ticket_is_accepted_only_where_its_semi_static_key_is_held() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, flight) = resumed_flight(ticket, 2, now());

    let other_key = || testing::semi_static("zrtt vector key 2");
    let other_record = || {
        testing::body(&other_key(), &testing::ed25519_cert())
            .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
            .unwrap()
    };
    // B: same site, same certificate, same token keys, its own key.
    let mut b =
        ServerConfig::new(vec![ServerKey::new(other_record(), other_key()).unwrap()]).unwrap();
    b.resumption = server.resumption.clone();
    assert_eq!(
        ticket_refusal(accept_at(&b, &flight, &mut filter(), now())),
        TicketError::WrongKey
    );

    // Overlap: the new key and the issuing one, one filter.
    let old = testing::semi_static("zrtt vector key 1");
    let mut both = ServerConfig::new(vec![
        ServerKey::new(other_record(), other_key()).unwrap(),
        ServerKey::new(testing::vector_record(), old).unwrap(),
    ])
    .unwrap();
    both.resumption = server.resumption.clone();
    let accepted = accept_at(&both, &flight, &mut f, now()).unwrap();
    assert_eq!(
        accepted.resumed.as_ref().unwrap().key.public_key,
        *testing::semi_static("zrtt vector key 1").public()
    );
    // Its fresh ticket stays bound to the key the flight was accepted under.
    let grant = both
        .grant_ticket(&accepted, peer(), now(), &rng(50))
        .unwrap()
        .unwrap();
    let token = token_key(9);
    let contents = token.ticket_key().open(&grant[36..]).unwrap();
    assert_eq!(contents.key, accepted.resumed.as_ref().unwrap().key);
    // The same flight at the server that first issued it: one filter, once.
    assert_eq!(
        refused_with(accept_at(&server, &flight, &mut f, now())).0,
        Error::Replay(crate::ReplayError::Replayed)
    );
}

#[test]
fn unknown_ticket_key_is_refused_rotation_keeps_old_tickets() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, flight) = resumed_flight(ticket, 2, now());
    // Another fleet (or the key retired): Reject 9.
    assert_eq!(
        ticket_refusal(accept_at(
            &server_with(8, &[]),
            &flight,
            &mut filter(),
            now()
        )),
        TicketError::UnknownKey
    );
    // No resumption at all: Reject 9 too.
    assert_eq!(
        ticket_refusal(accept_at(
            &testing::vector_server(),
            &flight,
            &mut filter(),
            now()
        )),
        TicketError::Off
    );
    // After a rotation the old key still opens what it sealed.
    assert!(accept_at(&server_with(8, &[9]), &flight, &mut filter(), now()).is_ok());
}

#[test]
fn a_flight_cannot_be_moved_to_another_ticket() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let a = first_contact(&server, &mut f, 1);
    let b = first_contact(&server, &mut f, 2);
    assert_eq!(a.ticket().len(), b.ticket().len());
    let len = a.ticket().len();
    let other = b.ticket().to_vec();
    let (_, mut flight) = resumed_flight(a, 3, now());
    flight[10..10 + len].copy_from_slice(&other);
    // b's ticket opens, but the flight was bound to a's (prologue) and
    // encrypted under a's psk: no answer at all.
    let (error, reply) = refused_with(accept_at(&server, &flight, &mut f, now()));
    assert!(reply.is_none(), "{error:?}");
    assert!(matches!(
        error,
        Error::Handshake(HandshakeError::DecryptFailed)
    ));
}

#[test]
fn header_key_id_must_be_the_tickets() {
    let server = server_with(9, &[]);
    let mut f = filter();
    let ticket = first_contact(&server, &mut f, 1);
    let (_, mut flight) = resumed_flight(ticket, 2, now());
    flight[7] ^= 1;
    assert!(read_frame(&flight, Expect::FirstFlight).is_err());
    // Truncated anywhere: more bytes needed, never a panic.
    flight[7] ^= 1;
    for cut in 0..flight.len() {
        assert_eq!(read_frame(&flight[..cut], Expect::FirstFlight), Ok(None));
    }
}

#[test]
fn stored_ticket_round_trips_and_redacts() {
    let server = server_with(9, &[]);
    let ticket = first_contact(&server, &mut filter(), 1);
    let stored = ticket.encode();
    assert_eq!(ResumptionTicket::decode(&stored).unwrap(), ticket);
    let mut trailing = stored.to_vec();
    trailing.push(0);
    assert!(ResumptionTicket::decode(&trailing).is_err());
    let shown = format!("{ticket:?}");
    assert!(shown.contains("<redacted>"));
    let psk_hex = crate::record::hex(&stored[8 + 32 + 1 + testing::NAME.len()..][..32]);
    assert!(!shown.contains(&psk_hex));
}

#[test]
fn ticket_keys_are_independent_of_token_keys_and_per_secret() {
    let a = token_key(9);
    let b = token_key(8);
    assert_eq!(a.ticket_key().id(), a.id());
    let contents = resume::TicketContents {
        psk: zeroize::Zeroizing::new([5; 32]),
        issued_secs: T0,
        lifetime_secs: 60,
        binding: SiteBinding::of(&verified()),
        key: KeyBinding {
            key_id: 7,
            public_key: [3; 32],
        },
        address: peer(),
    };
    let sealed = a.ticket_key().seal(&contents, &rng(1)).unwrap();
    assert_eq!(a.ticket_key().open(&sealed).unwrap(), contents);
    // Each ticket has its own salt, so its own seal key; a changed salt
    // does not open.
    let again = a.ticket_key().seal(&contents, &rng(2)).unwrap();
    assert_ne!(sealed[4..20], again[4..20]);
    assert_eq!(a.ticket_key().open(&again).unwrap(), contents);
    let mut salted = sealed.clone();
    salted[4] ^= 1;
    assert_eq!(a.ticket_key().open(&salted), Err(TicketError::Invalid));
    // 129-byte v1 ticket + salt (4 more than the nonce) + key binding (36).
    assert_eq!(
        sealed.len(),
        4 + 16 + 32 + 8 + 4 + 36 + 32 + 1 + 15 + 1 + 4 + 16
    );
    assert_eq!(b.ticket_key().open(&sealed), Err(TicketError::UnknownKey));
    // A ticket is not a token, and a token key's own AEAD does not open it.
    assert!(a.verify(&sealed, peer(), Some(&[5; 32]), now()).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
    /// Whatever the order and repetition of NK and resumed flights (some
    /// resumed flights sharing a ticket), each is accepted exactly once:
    /// the first time it arrives, never again.
    #[test]
    fn every_flight_is_accepted_once_in_any_order(
        order in proptest::collection::vec(0usize..6, 1..24),
    ) {
        let server = server_with(9, &[]);
        let mut f = filter();
        let ticket = first_contact(&server, &mut f, 1);
        let flights: Vec<Vec<u8>> = (0..6u8)
            .map(|i| {
                if i % 2 == 0 {
                    ClientHandshake::start(&verified(), &ClientParams::default(), REQ, now(), &rng(10 + i))
                        .unwrap()
                        .1
                } else {
                    resumed_flight(ticket.clone(), 10 + i, now()).1
                }
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        for i in order {
            let ok = accept_at(&server, &flights[i], &mut f, now()).is_ok();
            proptest::prop_assert_eq!(ok, seen.insert(i), "flight {}", i);
        }
    }
}

/// The client keeps a ticket at most seven days (RFC 8446 §4.6.1),
/// whatever lifetime the grant states.
#[test]
fn the_client_caps_a_tickets_lifetime() {
    let server = server_lifetime(9, Duration::from_secs(30 * 24 * 3600));
    let ticket = first_contact(&server, &mut filter(), 1);
    assert_eq!(
        ticket.expires(),
        now().saturating_add(Duration::from_secs(7 * 24 * 3600))
    );
}
