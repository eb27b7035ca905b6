//! The DNS shortcut's bounds and parsers: exact name budget, decoders that
//! never panic, the answer cache's bounds, and answer streams that must be
//! whole and untouched.

use core::time::Duration;
use std::sync::Arc;

use proptest::prelude::*;

use crate::handshake::*;
use crate::record::VerifiedKeyRecord;
use crate::replay::{BloomReplayFilter, ReplayConfig};
use crate::shortcut::*;
use crate::testing::{self, rng, T0};
use crate::{Error, UnixTime};

fn now() -> UnixTime {
    UnixTime::from_secs(T0 + 100)
}

fn verified() -> VerifiedKeyRecord {
    testing::vector_record()
        .verify(&testing::ed25519_cert(), testing::NAME, now())
        .unwrap()
}

fn flight(target: &str, seed: u8) -> (ClientHandshake, Vec<u8>) {
    let req = CompactRequest::new(Method::Head, target).unwrap();
    ClientHandshake::start_shortcut(&verified(), &req, None, None, now(), &rng(seed)).unwrap()
}

fn padded(target: &str, site: &str, seed: u8) -> Result<Vec<u8>, Error> {
    let req = CompactRequest::new(Method::Head, target).unwrap();
    ClientHandshake::start_shortcut(&verified(), &req, None, Some(site), now(), &rng(seed))
        .map(|(_, tcp)| tcp)
}

/// Sites of several lengths (labels of at most 63 characters).
fn sites() -> Vec<String> {
    let label = |n: usize| "a".repeat(n);
    vec![
        "a.io".to_owned(),
        testing::NAME.to_owned(),
        format!("{}.example.com", label(40)),
        format!("{}.{}.example.org", label(63), label(30)),
        format!("{}.{}.net", label(63), label(20)),
    ]
}

#[test]
fn max_target_len_is_exact() {
    // www.example.com: 253 = 231 base32 characters in 4 labels (3 dots)
    // + ".zq.www.example.com" (19); 231 characters carry 144 bytes of DNS
    // form = 66 bytes of overhead + 4 of padding extension + a target of 74.
    assert_eq!(padded_dns_form_len(testing::NAME), 144);
    assert_eq!(max_target_len(testing::NAME), 74);
    for (i, site) in sites().iter().enumerate() {
        let max = max_target_len(site);
        assert!(max > 0, "{site}");
        let fits = format!("/{}", "x".repeat(max - 1));
        let tcp = padded(&fits, site, i as u8).unwrap();
        let name = query_name(&tcp, site).unwrap();
        assert!(name.len() <= MAX_NAME_LEN, "{site}: {}", name.len());
        assert_eq!(parse_query_name(&name, site), NameMatch::Flight(tcp));
        let over = format!("/{}", "x".repeat(max));
        assert!(
            matches!(
                padded(&over, site, i as u8),
                Err(Error::Shortcut(ShortcutError::TooLong { max: 253, .. }))
            ),
            "{site}: a target of {} fits",
            max + 1
        );
        // One byte more of DNS form than the padded length does not fit.
        let (_, tcp) = flight(&fits, i as u8);
        assert_eq!(
            dns_form(&tcp).unwrap().len() + PADDING_OVERHEAD,
            padded_dns_form_len(site)
        );
    }
    let huge = format!(
        "{}.{}.{}.{}.com",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(30)
    );
    assert_eq!(max_target_len(&huge), 0);
}

/// Padding makes every flight's name under a site as long as the longest
/// one, whatever its target's length (same answer room, the length
/// hidden), and the name still decodes to the flight.
#[test]
fn every_padded_name_under_a_site_has_the_same_length() {
    for (i, site) in sites().iter().enumerate() {
        let mut lens = std::collections::BTreeSet::new();
        for n in 1..=max_target_len(site) {
            let target = format!("/{}", "p".repeat(n - 1));
            let tcp = padded(&target, site, i as u8).unwrap();
            assert_eq!(dns_form(&tcp).unwrap().len(), padded_dns_form_len(site));
            let name = query_name(&tcp, site).unwrap();
            assert_eq!(parse_query_name(&name, site), NameMatch::Flight(tcp));
            lens.insert(name.len());
        }
        assert_eq!(lens.len(), 1, "{site}: {lens:?}");
        let longest = lens.first().copied().unwrap_or_default();
        assert!(
            longest <= MAX_NAME_LEN && longest + 8 > MAX_NAME_LEN,
            "{site}: {longest}"
        );
    }
}

#[test]
fn cache_bounds_entries_oldest_done_first() {
    let t = now();
    let mut c = AnswerCache::new(3, 1 << 20, Duration::from_secs(60));
    for i in 0..3u8 {
        c.begin([i; 32], t).unwrap();
        c.finish(&[i; 32], Arc::from(vec![i; 10]), t);
    }
    c.begin([9; 32], t).unwrap();
    assert_eq!(c.len(), 3);
    assert_eq!(c.lookup(&[0; 32], t), Lookup::Miss, "the oldest Done went");
    assert_eq!(c.lookup(&[1; 32], t), Lookup::Done(Arc::from(vec![1; 10])));
    assert_eq!(c.lookup(&[9; 32], t), Lookup::Running);
}

#[test]
fn cache_bounds_bytes() {
    let t = now();
    let mut c = AnswerCache::new(100, 100, Duration::from_secs(60));
    for i in 0..3u8 {
        c.begin([i; 32], t).unwrap();
        c.finish(&[i; 32], Arc::from(vec![i; 40]), t);
    }
    assert!(c.bytes() <= 100);
    assert_eq!(c.lookup(&[0; 32], t), Lookup::Miss);
    assert_eq!(c.bytes(), 80);
    // Larger than the whole bound: not kept, nothing else evicted.
    c.begin([7; 32], t).unwrap();
    c.finish(&[7; 32], Arc::from(vec![7; 101]), t);
    assert_eq!(c.lookup(&[7; 32], t), Lookup::Miss);
    assert_eq!(c.bytes(), 80);
    assert_eq!(c.len(), 2);
    // A Done entry is never replaced.
    c.finish(&[1; 32], Arc::from(vec![0; 5]), t);
    assert_eq!(c.lookup(&[1; 32], t), Lookup::Done(Arc::from(vec![1; 40])));
}

#[test]
fn cache_lifetime() {
    let t = now();
    let life = Duration::from_secs(20);
    let mut c = AnswerCache::new(10, 1000, life);
    c.begin([1; 32], t).unwrap();
    c.finish(&[1; 32], Arc::from(&b"a"[..]), t);
    let edge = t.saturating_add(life);
    assert_eq!(
        c.lookup(&[1; 32], edge.saturating_sub(Duration::from_millis(1))),
        Lookup::Done(Arc::from(&b"a"[..]))
    );
    assert_eq!(c.lookup(&[1; 32], edge), Lookup::Miss);
    assert!(c.is_empty());
    // Running entries do not expire: the caller ends each run.
    c.begin([2; 32], t).unwrap();
    assert_eq!(
        c.lookup(&[2; 32], t.saturating_add(Duration::from_secs(3600))),
        Lookup::Running
    );
    c.abandon(&[2; 32]);
    assert_eq!(c.lookup(&[2; 32], t), Lookup::Miss);
}

#[test]
fn cache_never_evicts_running_and_is_full_of_them() {
    let t = now();
    let mut c = AnswerCache::new(3, 1000, Duration::from_secs(60));
    c.begin([1; 32], t).unwrap();
    c.begin([2; 32], t).unwrap();
    c.begin([3; 32], t).unwrap();
    c.finish(&[3; 32], Arc::from(&b"done"[..]), t);
    // Full: the Done entry goes, the Running ones stay.
    c.begin([4; 32], t).unwrap();
    assert_eq!(c.lookup(&[3; 32], t), Lookup::Miss);
    // Full of Running entries: refused, nothing evicted.
    assert_eq!(c.begin([5; 32], t), Err(CacheFull));
    for h in [1u8, 2, 4] {
        assert_eq!(c.lookup(&[h; 32], t), Lookup::Running, "{h}");
    }
    // Begin on an entry already there changes nothing.
    assert_eq!(c.begin([1; 32], t), Ok(()));
    assert_eq!(c.len(), 3);
    // A run that ends frees its place.
    c.abandon(&[1; 32]);
    c.begin([5; 32], t).unwrap();
}

/// An answer stream of a response that needs data records after the Reply.
fn answered(seed: u8) -> (ClientHandshake, Vec<u8>, Vec<u8>) {
    let server = testing::vector_server();
    let mut f = BloomReplayFilter::new(ReplayConfig::default(), [9; 32], UnixTime::from_secs(T0));
    let (client, tcp) = flight("/big", seed);
    let (frame, _) = read_frame(&tcp, Expect::FirstFlight).unwrap().unwrap();
    let accepted = server
        .accept(&frame, Transport::Shortcut, now(), &mut f, &rng(200))
        .unwrap();
    let response: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    let stream = accepted.shortcut_answer(&response).unwrap();
    (client, stream, response)
}

#[test]
fn answer_stream_must_be_whole_and_untouched() {
    let (client, stream, response) = answered(11);
    // Reply (65485 bytes of response) + one data record + close.
    assert_eq!(
        stream.len(),
        3 + 48 + 2 + 65_485 + (RECORD_OVERHEAD + 70_000 - 65_485) + RECORD_OVERHEAD
    );
    assert_eq!(client.open_shortcut_answer(&stream).unwrap(), response);

    // Without the close record, or cut anywhere: refused.
    for cut in [RECORD_OVERHEAD, RECORD_OVERHEAD + 1, 100, stream.len() - 10] {
        let (client, _, _) = answered(11);
        let err = client
            .open_shortcut_answer(&stream[..stream.len() - cut])
            .unwrap_err();
        assert!(
            matches!(err, Error::Shortcut(ShortcutError::BadAnswer(_))),
            "cut {cut}: {err:?}"
        );
    }
    // Trailing bytes after the close record.
    let (client, _, _) = answered(11);
    let mut long = stream.clone();
    long.push(0);
    assert_eq!(
        client.open_shortcut_answer(&long).unwrap_err(),
        crate::error::InvalidMessage::TrailingBytes(1).into()
    );
    // A tampered byte anywhere: refused.
    for pos in [
        0,
        1,
        2,
        3,
        40,
        3 + 48 + 2 + 100,
        stream.len() - 30,
        stream.len() - 1,
    ] {
        let (client, _, _) = answered(11);
        let mut bad = stream.clone();
        bad[pos] ^= 0x01;
        assert!(client.open_shortcut_answer(&bad).is_err(), "byte {pos}");
    }
}

fn target_strategy(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(0x21u8..=0x7E, 0..max).prop_map(|rest| {
        let mut t = vec![b'/'];
        t.extend(rest);
        String::from_utf8(t).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every target that fits has a name that decodes back to its flight,
    /// whatever case a resolver gives it (dns-0x20).
    #[test]
    fn names_round_trip_any_case(
        which in 0..5usize,
        target in target_strategy(200),
        seed in any::<u8>(),
        case in proptest::collection::vec(any::<bool>(), 253),
        dot in any::<bool>(),
    ) {
        let site = &sites()[which];
        let target = &target[..target.len().min(max_target_len(site))];
        let (_, tcp) = flight(target, seed);
        let name = query_name(&tcp, site).unwrap();
        prop_assert!(name.len() <= MAX_NAME_LEN);
        let mut mixed: String = name
            .chars()
            .zip(&case)
            .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
            .collect();
        if dot {
            mixed.push('.');
        }
        prop_assert_eq!(parse_query_name(&mixed, site), NameMatch::Flight(tcp.clone()));
        prop_assert_eq!(flight_hash(&tcp).unwrap(), crate::record::sha256(&dns_form(&tcp).unwrap()));
        let req = CompactRequest::new(Method::Head, target).unwrap();
        prop_assert_eq!(CompactRequest::decode(&req.encode()).unwrap(), req);
    }

    #[test]
    fn parse_query_name_never_panics(
        prefix in "[a-zA-Z2-7.é-]{0,260}",
        raw in proptest::collection::vec(any::<u8>(), 0..300),
        site in "[a-z.]{0,30}",
    ) {
        for q in [
            format!("{prefix}.zq.www.example.com"),
            format!("{prefix}.zq.{site}"),
            String::from_utf8_lossy(&raw).into_owned(),
        ] {
            if let NameMatch::Flight(tcp) = parse_query_name(&q, testing::NAME) {
                let again = query_name(&tcp, testing::NAME).unwrap();
                prop_assert!(again.eq_ignore_ascii_case(q.trim_end_matches('.')));
            }
            let _ = parse_query_name(&q, &site);
        }
    }

    #[test]
    fn decoders_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(0..300usize, 0..6),
    ) {
        if let Ok(tcp) = tcp_form(&data) {
            prop_assert_eq!(dns_form(&tcp).unwrap(), data.clone());
        }
        if let Ok(dns) = dns_form(&data) {
            prop_assert_eq!(tcp_form(&dns).unwrap(), data.clone());
        }
        if let Ok(req) = CompactRequest::decode(&data) {
            prop_assert_eq!(req.encode(), data.clone());
        }
        let mut strings = Vec::new();
        let mut rest = &data[..];
        for c in cuts {
            let (a, b) = rest.split_at(c.min(rest.len()).min(255));
            strings.push(a);
            rest = b;
        }
        if let Ok(answer) = TxtAnswer::from_strings(strings.iter().copied()) {
            let again = answer.to_strings();
            prop_assert_eq!(TxtAnswer::from_strings(again.iter().map(Vec::as_slice)).unwrap(), answer.clone());
            prop_assert_eq!(answer.rdata_len(), again.iter().map(|s| 1 + s.len()).sum::<usize>());
        }
    }

    #[test]
    fn udp_budget_bounds(q in 0..70_000usize, edns in proptest::option::of(any::<u16>())) {
        let b = udp_response_budget(q, edns);
        prop_assert!(b <= 1232 && b <= 3 * q);
        prop_assert!(b <= edns.map_or(512, |e| usize::from(e).max(512)));
    }
}
