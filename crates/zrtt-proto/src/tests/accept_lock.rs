//! The replay filter's lock discipline in `ServerConfig::accept` (a filter
//! shared as `&Mutex<_>` is locked per call, never across decryption), and
//! ring's single-use ephemeral key in the NK reply.

use std::sync::{Barrier, Mutex};

use crate::crypto::{SecureRandom, X25519KeyPair};
use crate::handshake::*;
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

fn flight(params: &ClientParams, seed: u8) -> (ClientHandshake, Vec<u8>) {
    let record = testing::vector_record()
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap();
    ClientHandshake::start(&record, params, REQ, now(), &rng(seed)).unwrap()
}

fn accept_shared(
    server: &ServerConfig,
    bytes: &[u8],
    shared: &Mutex<dyn ReplayFilter>,
    rng: &dyn SecureRandom,
) -> Result<Accepted, Refusal> {
    let (frame, _) = read_frame(bytes, Expect::FirstFlight).unwrap().unwrap();
    let mut replay = shared;
    server.accept(&frame, Transport::Tcp, now(), &mut replay, rng)
}

/// Copies of one flight accepted at once on several threads, each through
/// its own per-call lock of one shared filter: exactly one is accepted,
/// every other one is refused as a replay with the Replay frame. Forgeries
/// carrying the same ephemeral key, raced in between, are dropped silently
/// and record nothing.
#[test]
fn concurrent_copies_of_one_flight_accept_exactly_one() {
    const THREADS: usize = 8;
    let server = testing::vector_server();
    for round in 0..20u8 {
        let shared: Mutex<BloomReplayFilter> = Mutex::new(filter());
        let shared: &Mutex<dyn ReplayFilter> = &shared;
        let (_, genuine) = flight(&ClientParams::default(), round);
        let mut forged = genuine.clone();
        let last = forged.len() - 1;
        forged[last] ^= 0x80;
        let barrier = Barrier::new(THREADS);
        let results: Vec<(bool, Result<Accepted, Refusal>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (server, barrier) = (&server, &barrier);
                    let bytes = if i % 2 == 0 { &genuine } else { &forged };
                    s.spawn(move || {
                        let r = rng(100 + i as u8);
                        barrier.wait();
                        (i % 2 == 0, accept_shared(server, bytes, shared, &r))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let replay_frame = server.replay_refusal(ReplayError::Replayed, now()).reply;
        let mut accepted = 0;
        for (is_genuine, r) in results {
            match (is_genuine, r) {
                (true, Ok(a)) => {
                    assert_eq!(a.early_data, REQ);
                    accepted += 1;
                }
                (true, Err(refusal)) => {
                    assert_eq!(refusal.error, Error::Replay(ReplayError::Replayed));
                    assert_eq!(refusal.reply, replay_frame);
                }
                (false, Ok(_)) => panic!("a forged flight was accepted"),
                (false, Err(refusal)) => {
                    // Before the genuine copy is recorded the forgery fails
                    // to decrypt; after, the pre-check refuses it as a
                    // replay of the recorded ephemeral key (no decryption).
                    match refusal.error {
                        Error::Handshake(HandshakeError::DecryptFailed) => {
                            assert!(refusal.reply.is_none(), "no answer to a forgery")
                        }
                        Error::Replay(ReplayError::Replayed) => {
                            assert_eq!(refusal.reply, replay_frame)
                        }
                        e => panic!("unexpected refusal {e:?}"),
                    }
                }
            }
        }
        assert_eq!(accepted, 1, "round {round}: exactly one copy accepted");
    }
}

/// Calls into the filter, in order, and whether its lock was free when the
/// handshake drew randomness (between the pre-check and decryption).
#[derive(Default)]
struct Probe {
    calls: Vec<&'static str>,
    inner: Option<BloomReplayFilter>,
}

impl ReplayFilter for Probe {
    fn seen(&self, key_id: u32, ephemeral: &[u8; 32]) -> bool {
        self.inner.as_ref().unwrap().seen(key_id, ephemeral)
    }
    fn check_and_insert(
        &mut self,
        key_id: u32,
        ephemeral: &[u8; 32],
        timestamp: UnixTime,
        now: UnixTime,
    ) -> Result<(), ReplayError> {
        self.calls.push("check_and_insert");
        self.inner
            .as_mut()
            .unwrap()
            .check_and_insert(key_id, ephemeral, timestamp, now)
    }
}

/// A seeded generator that notes whether the shared filter's lock is free
/// each time the handshake draws from it.
struct LockWitness<'a> {
    shared: &'a Mutex<Probe>,
    inner: crate::crypto::SeededRandomForTestingOnly,
    lock_free: Mutex<Vec<bool>>,
}

impl SecureRandom for LockWitness<'_> {
    fn fill(&self, dest: &mut [u8]) -> Result<(), Error> {
        let free = self.shared.try_lock().is_ok();
        self.lock_free.lock().unwrap().push(free);
        self.inner.fill(dest)
    }
}

#[test]
fn the_shared_filter_is_unlocked_while_the_flight_is_decrypted() {
    let server = testing::vector_server();
    let shared = Mutex::new(Probe {
        calls: Vec::new(),
        inner: Some(filter()),
    });
    let witness = LockWitness {
        shared: &shared,
        inner: rng(7),
        lock_free: Mutex::new(Vec::new()),
    };
    let (_, genuine) = flight(&ClientParams::default(), 40);
    let (frame, _) = read_frame(&genuine, Expect::FirstFlight).unwrap().unwrap();
    let mut replay: &Mutex<Probe> = &shared;
    let accepted = server
        .accept(&frame, Transport::Tcp, now(), &mut replay, &witness)
        .unwrap();
    assert_eq!(accepted.early_data, REQ);
    assert_eq!(*witness.lock_free.lock().unwrap(), [true]);
    assert_eq!(shared.lock().unwrap().calls, ["check_and_insert"]);
    assert!(shared.try_lock().is_ok(), "released after accept");

    // A flight that fails to authenticate never reaches check_and_insert.
    let (_, other) = flight(&ClientParams::default(), 41);
    let mut bad = other.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let (frame, _) = read_frame(&bad, Expect::FirstFlight).unwrap().unwrap();
    let refusal = server
        .accept(&frame, Transport::Tcp, now(), &mut replay, &witness)
        .unwrap_err();
    assert_eq!(
        refusal.error,
        Error::Handshake(HandshakeError::DecryptFailed)
    );
    assert_eq!(shared.lock().unwrap().calls, ["check_and_insert"]);
    assert!(accept_shared(&server, &other, &Mutex::new(filter()), &rng(8)).is_ok());
}

/// With the OS generator the NK reply's ephemeral key is ring's (one DH);
/// the client opens the reply and the channel works both ways. IK needs
/// the key twice and keeps curve25519-dalek: it works too.
#[test]
fn replies_with_the_os_generator_open_on_the_client() {
    let server = testing::vector_server();
    let os = ring::rand::SystemRandom::new();
    let client_key = X25519KeyPair::from_private([5; 32]);
    let ik = ClientParams {
        static_key: Some(client_key),
        ..ClientParams::default()
    };
    let mut replies = Vec::new();
    for (seed, params) in [(50, ClientParams::default()), (51, ik)] {
        let shared: Mutex<BloomReplayFilter> = Mutex::new(filter());
        let (client, bytes) = flight(&params, seed);
        let accepted = accept_shared(&server, &bytes, &shared, &os).unwrap();
        let (mut s_chan, reply) = accepted.reply(&Extensions::new(), b"ok").unwrap();
        let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
        let got = client.handle_reply(&frame).unwrap();
        assert_eq!(got.data, b"ok");
        let mut c_chan = got.channel;
        let mut wire = Vec::new();
        c_chan.seal(RecordKind::Data, b"more", &mut wire).unwrap();
        let (Frame::Transport(ct), _) = read_frame(&wire, Expect::Transport).unwrap().unwrap()
        else {
            panic!("transport frame expected")
        };
        assert_eq!(s_chan.open(ct).unwrap().body, b"more");
        replies.push(reply);
    }
    assert_ne!(replies[0][3..35], replies[1][3..35]);
}
