//! `zrtt dns` in-process on 127.0.0.1:0, queried with a real DNS client over
//! UDP and TCP: the key records decode with zrtt-proto's decoders, verify
//! against the certificate, fit 1232 bytes with two keys, change on
//! rotation; zone errors name the line.

use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use ring::rand::SystemRandom;
use zrtt_dns::client::{self, DnsTransport};
use zrtt_dns::server::{self, HostConfig, Listener, ZoneState};
use zrtt_dns::{KeyStore, Policy};
use zrtt_proto::record::encodings::{self, SvcbRdata};
use zrtt_proto::record::KeyRecord;
use zrtt_proto::UnixTime;

const T0: u64 = 1_800_000_000;
const HOST: &str = "www.example.com";
const TIMEOUT: Duration = Duration::from_secs(3);

const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 2024010101 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\nwww IN TXT \"v=spf1 -all\"\nzq.www 86400 IN NS ns.zq.www\nns.zq.www 86400 IN A 192.0.2.53\n";

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../zrtt-proto/tests/data")
        .join(f)
}

struct Running {
    addr: SocketAddr,
    clock: Arc<AtomicU64>,
    trigger: server::shutdown::Trigger,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.trigger.fire();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn setup(rotate_in_server: bool) -> Running {
    setup_with(rotate_in_server, &[])
}

fn setup_with(rotate_in_server: bool, regions: &[server::RegionConfig]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("example.com.zone");
    std::fs::write(&zone, ZONE).unwrap();
    let ks_dir = dir.path().join("ks");
    let mut ks = KeyStore::init(
        &ks_dir,
        HOST,
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        Policy::default(),
    )
    .unwrap();
    ks.rotate(UnixTime::from_secs(T0), &SystemRandom::new())
        .unwrap();
    let hosts = vec![HostConfig {
        keystore: ks_dir,
        alpn: vec!["h2".into(), "http/1.1".into()],
        port: None,
    }];
    let mut state = ZoneState::new(&zone, None, &hosts, rotate_in_server).unwrap();
    state.set_regions(regions).unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let (trigger, shutdown) = server::shutdown::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let c = clock.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = Listener::bind("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            tx.send(l.udp.local_addr().unwrap()).unwrap();
            let rng = SystemRandom::new();
            server::serve(
                state,
                vec![l],
                move || UnixTime::from_secs(c.load(Ordering::SeqCst)),
                &rng,
                Duration::from_millis(20),
                shutdown,
            )
            .await
            .unwrap();
        });
    });
    let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Running {
        addr,
        clock,
        trigger,
        thread: Some(thread),
        dir,
    }
}

fn ask(addr: SocketAddr, name: &str, rt: RecordType, t: DnsTransport) -> (Message, usize) {
    client::query(addr, name, rt, t, TIMEOUT).unwrap()
}

/// [`ask`] over UDP from the source address `from` (any of 127/8 works on loopback).
fn ask_from(from: &str, addr: SocketAddr, name: &str, rt: RecordType) -> Message {
    let sock = std::net::UdpSocket::bind(format!("{from}:0")).unwrap();
    sock.set_read_timeout(Some(TIMEOUT)).unwrap();
    let q = client::query_message(name, rt).unwrap();
    sock.send_to(&q.to_bytes().unwrap(), addr).unwrap();
    let mut buf = [0u8; 1232];
    let n = sock.recv(&mut buf).unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.metadata.id, q.metadata.id);
    m
}

fn cert() -> Vec<u8> {
    zrtt_dns::keyfile::load_cert(&data("ecdsa-cert.pem")).unwrap()
}

fn https_records(m: &Message) -> Vec<KeyRecord> {
    let svcb: Vec<SvcbRdata> = m
        .answers
        .iter()
        .filter(|r| r.record_type() == RecordType::HTTPS)
        .map(|r| SvcbRdata::decode(&r.data.to_bytes().unwrap()).unwrap())
        .collect();
    assert_eq!(svcb.len(), 1);
    svcb[0].zrtt_records().unwrap().unwrap()
}

fn key_ids(v: &[KeyRecord]) -> Vec<u32> {
    let mut ids: Vec<u32> = v.iter().map(|r| r.body.key_id).collect();
    ids.sort_unstable();
    ids
}

/// Poll (bounded) until the HTTPS answer carries `n` keys.
fn wait_for_keys(addr: SocketAddr, n: usize) -> (Message, usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (m, len) = ask(addr, HOST, RecordType::HTTPS, DnsTransport::Udp);
        if https_records(&m).len() == n {
            return (m, len);
        }
        assert!(Instant::now() < deadline, "never saw {n} keys");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn key_records_decode_verify_and_fit_1232_bytes() {
    let s = setup(true);
    let cert = cert();
    // Two live keys: the overlap.
    s.clock.store(T0 + 2400, Ordering::SeqCst);
    let (m, len) = wait_for_keys(s.addr, 2);
    let now = UnixTime::from_secs(T0 + 2400);
    assert!(m.metadata.authoritative);
    assert!(!m.metadata.truncation);
    assert!(len <= 1232, "{len}");
    assert_eq!(m.edns.as_ref().unwrap().max_payload(), 1232);
    let recs = https_records(&m);
    for r in &recs {
        r.verify(&cert, HOST, now).unwrap();
    }
    let ttl = m.answers[0].ttl;
    assert_eq!(ttl, 300);
    for r in &recs {
        assert!(u64::from(ttl) < r.body.not_after - now.as_secs());
    }
    // Hints come from the zone's A/AAAA records.
    let svcb = SvcbRdata::decode(&m.answers[0].data.to_bytes().unwrap()).unwrap();
    assert_eq!(
        svcb.ipv4_hints(),
        vec!["192.0.2.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert!(svcb.to_presentation().contains("alpn=\"h2,http/1.1\""));

    // TXT: one per key, plus the zone's SPF record, untouched.
    let (m, len) = ask(s.addr, HOST, RecordType::TXT, DnsTransport::Udp);
    assert!(!m.metadata.truncation && len <= 1232, "{len}");
    let mut txt_keys = Vec::new();
    let mut spf = 0;
    for r in &m.answers {
        let rd = r.data.to_bytes().unwrap();
        if encodings::txt_is_zrtt(&rd) {
            txt_keys.push(encodings::decode_txt_rdata(&rd).unwrap());
        } else {
            spf += 1;
        }
    }
    assert_eq!(spf, 1);
    assert_eq!(key_ids(&txt_keys), key_ids(&recs));

    // AAAA tunnel at zrtt-tunnel.<host>.
    let (m, len) = ask(
        s.addr,
        &format!("zrtt-tunnel.{HOST}"),
        RecordType::AAAA,
        DnsTransport::Udp,
    );
    assert!(!m.metadata.truncation && len <= 1232, "{len}");
    let addrs: Vec<Ipv6Addr> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0),
            _ => None,
        })
        .collect();
    assert_eq!(
        key_ids(&encodings::decode_aaaa_tunnel(&addrs).unwrap()),
        key_ids(&recs)
    );

    // TLSA 3 0 0 carries the certificate that verifies them.
    let (m, _) = ask(s.addr, HOST, RecordType::TLSA, DnsTransport::Udp);
    let der = m.answers[0].data.to_bytes().unwrap();
    assert_eq!(encodings::decode_tlsa_rdata(&der).unwrap(), cert.as_slice());

    // The same over TCP; and ordinary zone data is served.
    let (m, _) = ask(s.addr, HOST, RecordType::HTTPS, DnsTransport::Tcp);
    assert_eq!(key_ids(&https_records(&m)), key_ids(&recs));
    let (m, _) = ask(s.addr, HOST, RecordType::A, DnsTransport::Udp);
    assert_eq!(m.answers.len(), 1);
    let (m, _) = ask(s.addr, "nope.example.com", RecordType::A, DnsTransport::Udp);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    let (m, _) = ask(s.addr, "www.example.org", RecordType::A, DnsTransport::Udp);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn answers_change_with_rotation() {
    let s = setup(true);
    let (m, _) = wait_for_keys(s.addr, 1);
    let k1 = key_ids(&https_records(&m));
    s.clock.store(T0 + 2400, Ordering::SeqCst);
    let (m, _) = wait_for_keys(s.addr, 2);
    let both = key_ids(&https_records(&m));
    assert!(both.contains(&k1[0]));
    // k1 leaves DNS 2T before it expires; only the new key is left.
    s.clock.store(T0 + 3000, Ordering::SeqCst);
    let (m, _) = wait_for_keys(s.addr, 1);
    let k2 = key_ids(&https_records(&m));
    assert_ne!(k1, k2);
    assert!(both.contains(&k2[0]));
    // The server deleted k1's private key at its expiry.
    s.clock.store(T0 + 3600, Ordering::SeqCst);
    let key1 = s
        .dir
        .path()
        .join("ks/keys")
        .join(format!("{:08x}.key", k1[0]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while key1.exists() {
        assert!(Instant::now() < deadline, "k1's private key still on disk");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn rotation_by_another_process_is_picked_up() {
    let s = setup(false);
    let (m, _) = wait_for_keys(s.addr, 1);
    let before = key_ids(&https_records(&m));
    // `zrtt keys rotate` from a timer, in effect.
    let mut ks = KeyStore::open(&s.dir.path().join("ks")).unwrap();
    ks.rotate(UnixTime::from_secs(T0 + 2400), &SystemRandom::new())
        .unwrap();
    s.clock.store(T0 + 2400, Ordering::SeqCst);
    let (m, _) = wait_for_keys(s.addr, 2);
    assert!(key_ids(&https_records(&m)).contains(&before[0]));
}

#[test]
fn malformed_zone_file_names_file_line_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("bad.zone");
    std::fs::write(
        &zone,
        ZONE.replace("www IN A 192.0.2.10", "www IN A 192.0.2.999"),
    )
    .unwrap();
    let e = match ZoneState::new(&zone, None, &[], true) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted a bad zone"),
    };
    assert!(e.starts_with(&format!("{}:6: ", zone.display())), "{e}");
}

#[test]
fn a_region_gets_its_own_addresses_and_hints_and_the_same_key_records() {
    let region = server::RegionConfig {
        name: "near".into(),
        sources: vec!["127.0.0.2/32".into()],
        addresses: [
            (HOST.to_owned(), vec!["198.51.100.7".parse().unwrap()]),
            (
                "ns.zq.www.example.com".to_owned(),
                vec!["198.51.100.8".parse().unwrap()],
            ),
        ]
        .into(),
    };
    let s = setup_with(true, &[region]);
    let addrs = |m: &Message| -> Vec<String> {
        m.answers
            .iter()
            .chain(&m.additionals)
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                RData::AAAA(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect()
    };
    let hints = |m: &Message| {
        let svcb = SvcbRdata::decode(&m.answers[0].data.to_bytes().unwrap()).unwrap();
        svcb.ipv4_hints()
    };
    // The default view: the zone as written.
    let m = ask_from("127.0.0.1", s.addr, HOST, RecordType::A);
    assert_eq!(addrs(&m), vec!["192.0.2.10"]);
    // The shortcut zone's referral carries each view's glue.
    let shortcut = "x.zq.www.example.com";
    let m = ask_from("127.0.0.1", s.addr, shortcut, RecordType::TXT);
    assert_eq!(addrs(&m), vec!["192.0.2.53"]);
    // The region: its addresses, no AAAA (only the families it lists), its
    // glue, and HTTPS hints that follow.
    let m = ask_from("127.0.0.2", s.addr, HOST, RecordType::A);
    assert_eq!(addrs(&m), vec!["198.51.100.7"]);
    assert_eq!(m.answers[0].ttl, 3600, "the zone's TTL for the name");
    let m = ask_from("127.0.0.2", s.addr, HOST, RecordType::AAAA);
    assert!(addrs(&m).is_empty());
    let m = ask_from("127.0.0.2", s.addr, shortcut, RecordType::TXT);
    assert_eq!(addrs(&m), vec!["198.51.100.8"]);
    assert!(!m.metadata.authoritative);
    // Key records: the same in both views, and a rotation reaches both.
    s.clock.store(T0 + 2400, Ordering::SeqCst);
    let (_, _) = wait_for_keys(s.addr, 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    let near = loop {
        let m = ask_from("127.0.0.2", s.addr, HOST, RecordType::HTTPS);
        if https_records(&m).len() == 2 {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the region never saw the rotation"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let far = ask_from("127.0.0.1", s.addr, HOST, RecordType::HTTPS);
    assert_eq!(
        key_ids(&https_records(&near)),
        key_ids(&https_records(&far))
    );
    assert_eq!(
        hints(&near),
        vec!["198.51.100.7".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(
        hints(&far),
        vec!["192.0.2.10".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    // Both views serve the bumped SOA serial.
    let serial = |m: &Message| match &m.answers[0].data {
        RData::SOA(soa) => soa.serial,
        other => panic!("{other:?}"),
    };
    let origin = "example.com";
    assert_eq!(
        serial(&ask_from("127.0.0.1", s.addr, origin, RecordType::SOA)),
        serial(&ask_from("127.0.0.2", s.addr, origin, RecordType::SOA))
    );
}

#[test]
fn names_below_a_delegation_get_a_referral_with_glue() {
    let s = setup(false);
    for (name, t) in [
        ("a.b.zq.www.example.com", DnsTransport::Udp),
        ("ns.zq.www.example.com", DnsTransport::Tcp),
    ] {
        let (m, _) = ask(s.addr, name, RecordType::TXT, t);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name}");
        assert!(
            !m.metadata.authoritative,
            "a referral is not authoritative: {name}"
        );
        assert!(m.answers.is_empty(), "{name}");
        let ns: Vec<String> = m.authorities.iter().map(|r| r.data.to_string()).collect();
        assert_eq!(ns, vec!["ns.zq.www.example.com."], "{name}");
        let glue: Vec<String> = m.additionals.iter().map(|r| r.data.to_string()).collect();
        assert_eq!(glue, vec!["192.0.2.53"], "{name}");
        assert_eq!(m.edns.as_ref().unwrap().max_payload(), 1232);
    }
    // Names beside the cut are the zone's own, answered authoritatively.
    let (m, _) = ask(s.addr, HOST, RecordType::A, DnsTransport::Udp);
    assert!(m.metadata.authoritative);
}
