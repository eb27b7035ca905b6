//! Costs of the core's hot paths next to their raw crypto floor.
//!
//! `cargo bench -p zrtt-proto --bench core` runs the criterion groups (each
//! operation beside its floor) and then prints a summary table of medians
//! and ratios measured in the same run. The floor of an operation is the
//! primitives it cannot avoid, run through the same implementations snow
//! uses (curve25519-dalek for X25519, ring for AEAD, SHA-256 and HMAC):
//!
//! - accept (server, NK): 1 X25519 DH + 1 HKDF + AEAD open of the payload + SHA-256 of the transcript;
//! - create (client, NK): X25519 key generation + 1 DH + 1 HKDF + AEAD seal + SHA-256 of the transcript;
//! - record verification: 1 signature verification.
//!
//! The summary also compares a first contact's server work (NK accept and
//! reply) with a resumed one's (NNpsk0 accept and reply, docs/PROTOCOL.md
//! §12), each with and without granting the next ticket.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use ring::{digest, hmac, signature};
use snow::params::{CipherChoice, DHChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver, RingResolver};
use zrtt_proto::admission::{TokenKey, TokenKeyRing, TokenKeys};
use zrtt_proto::handshake::{
    ext, read_frame, ClientHandshake, ClientParams, Expect, Extensions, ResumptionTicket, Transport,
};
use zrtt_proto::record::{KeyRecord, SignatureAlgorithm};
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
use zrtt_proto::testing::{self, T0};
use zrtt_proto::UnixTime;

const REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: zrtt-bench\r\nAccept: */*\r\n\r\n";

fn now() -> UnixTime {
    UnixTime::from_secs(T0 + 100)
}

struct Floor {
    dh: Box<dyn snow::types::Dh>,
    peer: [u8; 32],
    cipher: Box<dyn snow::types::Cipher>,
    ct: Vec<u8>,
    hmac_key: hmac::Key,
}

impl Floor {
    fn new() -> Self {
        let mut dh = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        dh.set(&[7u8; 32]);
        let mut peer_dh = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        peer_dh.set(&[9u8; 32]);
        let mut peer = [0u8; 32];
        peer.copy_from_slice(peer_dh.pubkey());
        let mut cipher = RingResolver
            .resolve_cipher(&CipherChoice::ChaChaPoly)
            .unwrap();
        cipher.set(&[1u8; 32]);
        let payload = payload();
        let mut ct = vec![0u8; payload.len() + 16];
        cipher.encrypt(0, &[0u8; 32], &payload, &mut ct);
        Self {
            dh,
            peer,
            cipher,
            ct,
            hmac_key: hmac::Key::new(hmac::HMAC_SHA256, &[2u8; 32]),
        }
    }

    fn hkdf(&self, ikm: &[u8]) -> [u8; 64] {
        // HKDF with two outputs, as Noise's MixKey: 3 HMAC-SHA256.
        let temp = hmac::sign(&self.hmac_key, ikm);
        let tk = hmac::Key::new(hmac::HMAC_SHA256, temp.as_ref());
        let o1 = hmac::sign(&tk, &[1]);
        let mut m = o1.as_ref().to_vec();
        m.push(2);
        let o2 = hmac::sign(&tk, &m);
        let mut out = [0u8; 64];
        out[..32].copy_from_slice(o1.as_ref());
        out[32..].copy_from_slice(o2.as_ref());
        out
    }

    fn transcript(&self) -> digest::Digest {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(&[0u8; 64]);
        ctx.update(&self.peer);
        ctx.update(&self.ct);
        ctx.finish()
    }

    /// Server side: DH + HKDF + AEAD open + transcript hash.
    fn accept(&self) -> usize {
        let mut shared = [0u8; 32];
        self.dh.dh(&self.peer, &mut shared).unwrap();
        black_box(self.hkdf(&shared));
        black_box(self.transcript());
        let mut pt = vec![0u8; self.ct.len()];
        self.cipher
            .decrypt(0, &[0u8; 32], &self.ct, &mut pt)
            .unwrap()
    }

    /// Client side: key generation + DH + HKDF + AEAD seal + transcript hash.
    fn create(&mut self) -> usize {
        let mut e = DefaultResolver.resolve_dh(&DHChoice::Curve25519).unwrap();
        e.set(&[black_box(3u8); 32]);
        black_box(e.pubkey());
        let mut shared = [0u8; 32];
        e.dh(&self.peer, &mut shared).unwrap();
        black_box(self.hkdf(&shared));
        black_box(self.transcript());
        let payload = payload();
        let mut ct = vec![0u8; payload.len() + 16];
        self.cipher.encrypt(0, &[0u8; 32], &payload, &mut ct)
    }
}

fn payload() -> Vec<u8> {
    let mut p = vec![0u8; 10];
    p.extend_from_slice(REQUEST);
    p
}

fn flights(n: usize) -> Vec<Vec<u8>> {
    let rec = testing::vector_record()
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap();
    let rng = ring::rand::SystemRandom::new();
    (0..n)
        .map(|_| {
            ClientHandshake::start(&rec, &ClientParams::default(), REQUEST, now(), &rng)
                .unwrap()
                .1
        })
        .collect()
}

fn filter() -> BloomReplayFilter {
    BloomReplayFilter::new(ReplayConfig::default(), [5; 32], UnixTime::from_secs(T0))
}

struct Ops {
    server: zrtt_proto::handshake::ServerConfig,
    record: zrtt_proto::record::VerifiedKeyRecord,
    rng: ring::rand::SystemRandom,
    ecdsa_bytes: Vec<u8>,
    ed_bytes: Vec<u8>,
    ecdsa_cert: Vec<u8>,
    ed_cert: Vec<u8>,
    ecdsa_pub: Vec<u8>,
    ed_pub: Vec<u8>,
    ecdsa_rec: KeyRecord,
    ed_rec: KeyRecord,
    ticket: ResumptionTicket,
}

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
const PEER: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 1));

impl Ops {
    fn new() -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = testing::semi_static("bench");
        let ecdsa_cert = testing::ecdsa_cert();
        let ed_cert = testing::ed25519_cert();
        let ecdsa_signer = testing::ecdsa_signer();
        let ed_signer = testing::ed25519_signer();
        let ecdsa_rec = testing::body(&key, &ecdsa_cert)
            .sign(&ecdsa_signer, &rng)
            .unwrap();
        let ed_rec = testing::body(&key, &ed_cert)
            .sign(&ed_signer, &rng)
            .unwrap();
        assert_eq!(ecdsa_rec.sig_alg, SignatureAlgorithm::EcdsaP256Sha256);
        let mut server = testing::vector_server();
        server.resumption = Some(TokenKeyRing::new(TokenKeys::single(TokenKey::new(
            &[3; 32],
            Duration::from_secs(3600),
        ))));
        let record = testing::vector_record()
            .verify(&ed_cert, testing::NAME, now())
            .unwrap();
        // One ticket for every resumed flight of the bench (the server does
        // not enforce single use; each flight has its own ephemeral key).
        let mut params = ClientParams::default();
        params.request_ticket();
        let (client, flight) =
            ClientHandshake::start(&record, &params, REQUEST, now(), &rng).unwrap();
        let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
        let a = server
            .accept(&frame, Transport::Tcp, now(), &mut filter(), &rng)
            .unwrap();
        let mut exts = Extensions::new();
        exts.set(
            ext::RESUMPTION,
            server.grant_ticket(&a, PEER, now(), &rng).unwrap().unwrap(),
        );
        let (_, reply) = a.reply(&exts, RESPONSE).unwrap();
        let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
        let ticket = client.handle_reply(&frame).unwrap().ticket.unwrap();
        Self {
            server,
            record,
            ticket,
            ecdsa_bytes: ecdsa_rec.encode(),
            ed_bytes: ed_rec.encode(),
            ecdsa_pub: ecdsa_signer.public_key().to_vec(),
            ed_pub: ed_signer.public_key().to_vec(),
            ecdsa_cert,
            ed_cert,
            ecdsa_rec,
            ed_rec,
            rng,
        }
    }

    fn verify_ecdsa(&self) {
        let r = KeyRecord::decode(&self.ecdsa_bytes).unwrap();
        black_box(r.verify(&self.ecdsa_cert, testing::NAME, now()).unwrap());
    }
    fn floor_ecdsa(&self) {
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, &self.ecdsa_pub)
            .verify(&self.ecdsa_rec.signed_bytes(), &self.ecdsa_rec.signature)
            .unwrap();
    }
    fn verify_ed(&self) {
        let r = KeyRecord::decode(&self.ed_bytes).unwrap();
        black_box(r.verify(&self.ed_cert, testing::NAME, now()).unwrap());
    }
    fn floor_ed(&self) {
        signature::UnparsedPublicKey::new(&signature::ED25519, &self.ed_pub)
            .verify(&self.ed_rec.signed_bytes(), &self.ed_rec.signature)
            .unwrap();
    }
    fn create(&self) -> Vec<u8> {
        ClientHandshake::start(
            &self.record,
            &ClientParams::default(),
            REQUEST,
            now(),
            &self.rng,
        )
        .unwrap()
        .1
    }
    fn accept(&self, flight: &[u8], f: &mut BloomReplayFilter) {
        let (frame, _) = read_frame(flight, Expect::FirstFlight).unwrap().unwrap();
        black_box(
            self.server
                .accept(&frame, Transport::Tcp, now(), f, &self.rng)
                .unwrap(),
        );
    }
    fn accept_and_reply(&self, flight: &[u8], f: &mut BloomReplayFilter) {
        let (frame, _) = read_frame(flight, Expect::FirstFlight).unwrap().unwrap();
        let a = self
            .server
            .accept(&frame, Transport::Tcp, now(), f, &self.rng)
            .unwrap();
        let mut exts = Extensions::new();
        if let Some(grant) = self
            .server
            .grant_ticket(&a, PEER, now(), &self.rng)
            .unwrap()
        {
            exts.set(ext::RESUMPTION, grant);
        }
        black_box(a.reply(&exts, RESPONSE).unwrap());
    }
    /// A first flight: NK, or resumed with the bench's ticket; asking for
    /// a ticket or not.
    fn flight(&self, resumed: bool, ask: bool) -> Vec<u8> {
        let mut params = ClientParams::default();
        if ask {
            params.request_ticket();
        }
        if resumed {
            ClientHandshake::resume(
                &self.record,
                self.ticket.clone(),
                &params,
                REQUEST,
                now(),
                &self.rng,
            )
            .unwrap()
            .1
        } else {
            ClientHandshake::start(&self.record, &params, REQUEST, now(), &self.rng)
                .unwrap()
                .1
        }
    }
}

fn criterion_groups(c: &mut Criterion, ops: &Ops) {
    let mut floor = Floor::new();
    let mut g = c.benchmark_group("record_verify");
    g.bench_function("ecdsa_p256/zrtt", |b| b.iter(|| ops.verify_ecdsa()));
    g.bench_function("ecdsa_p256/floor_signature_verify", |b| {
        b.iter(|| ops.floor_ecdsa())
    });
    g.bench_function("ed25519/zrtt", |b| b.iter(|| ops.verify_ed()));
    g.bench_function("ed25519/floor_signature_verify", |b| {
        b.iter(|| ops.floor_ed())
    });
    g.finish();

    let mut g = c.benchmark_group("first_flight");
    g.bench_function("create_nk/zrtt", |b| b.iter(|| black_box(ops.create())));
    g.bench_function("create_nk/floor", |b| b.iter(|| black_box(floor.create())));
    let mut f = filter();
    g.bench_function("accept_nk/zrtt", |b| {
        b.iter_batched(
            || ops.create(),
            |fl| ops.accept(&fl, &mut f),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("accept_nk/floor", |b| b.iter(|| black_box(floor.accept())));
    let mut f = filter();
    g.bench_function("accept_and_reply_nk/zrtt", |b| {
        b.iter_batched(
            || ops.create(),
            |fl| ops.accept_and_reply(&fl, &mut f),
            BatchSize::SmallInput,
        )
    });
    let mut f = filter();
    g.bench_function("accept_and_reply_resumed/zrtt", |b| {
        b.iter_batched(
            || ops.flight(true, false),
            |fl| ops.accept_and_reply(&fl, &mut f),
            BatchSize::SmallInput,
        )
    });
    let mut f = filter();
    g.bench_function("accept_and_reply_resumed_new_ticket/zrtt", |b| {
        b.iter_batched(
            || ops.flight(true, true),
            |fl| ops.accept_and_reply(&fl, &mut f),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Median per-op time of `f` over `rounds` rounds of `n` calls.
fn median_ns(rounds: usize, n: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut v: Vec<f64> = (0..rounds)
        .map(|r| {
            let t = Instant::now();
            for i in 0..n {
                f(r * n + i);
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn summary(ops: &Ops) {
    const ROUNDS: usize = 15;
    const N: usize = 400;
    let mut floor = Floor::new();
    let pre = flights(ROUNDS * N);
    let mut f = filter();
    let rows = [
        (
            "record verify, ECDSA P-256",
            median_ns(ROUNDS, N, |_| ops.verify_ecdsa()),
            median_ns(ROUNDS, N, |_| ops.floor_ecdsa()),
            "signature verify",
        ),
        (
            "record verify, Ed25519",
            median_ns(ROUNDS, N, |_| ops.verify_ed()),
            median_ns(ROUNDS, N, |_| ops.floor_ed()),
            "signature verify",
        ),
        (
            "first flight create (NK)",
            median_ns(ROUNDS, N, |_| {
                black_box(ops.create());
            }),
            median_ns(ROUNDS, N, |_| {
                black_box(floor.create());
            }),
            "keygen + DH + HKDF + AEAD + SHA-256",
        ),
        (
            "first flight accept (NK)",
            median_ns(ROUNDS, N, |i| ops.accept(&pre[i], &mut f)),
            median_ns(ROUNDS, N, |_| {
                black_box(floor.accept());
            }),
            "DH + HKDF + AEAD + SHA-256",
        ),
    ];
    // Provenance: issuing (ASAP's verifier took up to 0.8 ms with RSA-1024;
    // target >= 20,000 per second per core) and a gateway's quorum check.
    use zrtt_proto::provenance::{IssuePolicy, TrustPolicy, VerifiedCache, VerifierSigner};
    let rng = ring::rand::SystemRandom::new();
    let (pv_a, _) = VerifierSigner::generate(&rng).unwrap();
    let (pv_b, _) = VerifierSigner::generate(&rng).unwrap();
    let addr: std::net::IpAddr = [198, 18, 0, 1].into();
    let ip = IssuePolicy::default();
    let issue = median_ns(ROUNDS, N, |i| {
        let mut k = [7u8; 32];
        k[..8].copy_from_slice(&(i as u64).to_be_bytes());
        black_box(pv_a.issue(&ip, &k, addr, 3600, None, now()));
    });
    let certs = [
        pv_a.issue(&ip, &[7; 32], addr, 3600, None, now()),
        pv_b.issue(&ip, &[7; 32], addr, 3600, None, now()),
    ];
    let pol = TrustPolicy {
        keys: vec![pv_a.key().into(), pv_b.key().into()],
        quorum: 2,
        skew_secs: 5,
    };
    let uncached = median_ns(ROUNDS, N, |_| {
        black_box(
            pol.verify(
                &certs,
                addr,
                Some(&[7; 32]),
                now(),
                &mut VerifiedCache::new(4),
            )
            .unwrap(),
        );
    });
    let mut cache = VerifiedCache::new(1024);
    let cached = median_ns(ROUNDS, N, |_| {
        black_box(
            pol.verify(&certs, addr, Some(&[7; 32]), now(), &mut cache)
                .unwrap(),
        );
    });
    let ed_verify = median_ns(ROUNDS, N, |_| ops.floor_ed());
    // Resumption: a server's whole per-connection core work (accept and
    // reply), first contact against resumed, with and without a new ticket.
    let cases = [
        ("NK first contact", false, false),
        ("NK first contact, ticket granted", false, true),
        ("resumed", true, false),
        ("resumed, next ticket granted", true, true),
    ];
    let mut resumption = Vec::new();
    for (name, resumed, ask) in cases {
        let pre: Vec<Vec<u8>> = (0..ROUNDS * N).map(|_| ops.flight(resumed, ask)).collect();
        let mut f = filter();
        resumption.push((
            name,
            median_ns(ROUNDS, N, |i| ops.accept_and_reply(&pre[i], &mut f)),
        ));
    }

    println!(
        "\nzrtt-proto cost against crypto floor (median of {ROUNDS} rounds x {N} ops, same run)\n"
    );
    println!("| operation | zrtt (us) | floor (us) | ratio | floor is |");
    println!("|---|---|---|---|---|");
    for (name, z, fl, what) in rows {
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} | {what} |",
            z / 1e3,
            fl / 1e3,
            z / fl
        );
    }
    println!("\nprovenance (same run)\n");
    println!("| operation | us | per second per core |");
    println!("|---|---|---|");
    println!(
        "| issue a certificate (Ed25519 sign) | {:.1} | {:.0} |",
        issue / 1e3,
        1e9 / issue
    );
    println!(
        "| verify a 2-of-2 quorum, no cache | {:.1} | {:.0} |",
        uncached / 1e3,
        1e9 / uncached
    );
    println!(
        "| verify a 2-of-2 quorum, cached | {:.1} | {:.0} |",
        cached / 1e3,
        1e9 / cached
    );
    println!(
        "| (one Ed25519 verify, for scale) | {:.1} | {:.0} |",
        ed_verify / 1e3,
        1e9 / ed_verify
    );
    println!("\nresumption: server accept + reply per connection (same run)\n");
    println!("| case | us | vs NK first contact |");
    println!("|---|---|---|");
    let base = resumption[0].1;
    for (name, ns) in &resumption {
        println!("| {name} | {:.1} | {:.2} |", ns / 1e3, ns / base);
    }
}

fn main() {
    let ops = Ops::new();
    let quick = std::env::args().any(|a| a == "--quick-summary");
    if !quick {
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .configure_from_args();
        criterion_groups(&mut c, &ops);
        c.final_summary();
    }
    summary(&ops);
}
