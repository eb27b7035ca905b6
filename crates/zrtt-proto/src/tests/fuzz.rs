//! The fuzz entry points (crate::testing, fuzz/fuzz_targets) under
//! proptest: arbitrary bytes and mutated seeds. `ZRTT_WRITE_FUZZ_SEEDS=DIR`
//! writes the seed corpora (scripts/fuzz.sh does).

use proptest::prelude::*;

use crate::testing;

type Entry = fn(&[u8]);

const ENTRIES: &[(&str, Entry)] = &[
    ("first_flight_plaintext", testing::first_flight_plaintext),
    ("client_reply", testing::client_reply),
    ("channel", testing::channel),
    ("token", testing::token),
    ("ticket", testing::ticket),
    ("shortcut", testing::shortcut),
    ("provenance", testing::provenance),
    ("der_validity", testing::der_validity),
    ("verifier_wire", testing::verifier_wire),
    ("replay_snapshot", testing::replay_snapshot),
];

fn entry(name: &str) -> Entry {
    ENTRIES.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Every seed runs, every target has one, and with the variable set the
/// seeds are written to `DIR/<target>/seed-<name>`.
#[test]
fn fuzz_seeds_run_and_are_written() {
    let seeds = testing::fuzz_seeds();
    for (name, _) in ENTRIES {
        assert!(
            seeds.iter().any(|(t, _, _)| t == name),
            "no seed for {name}"
        );
    }
    for (target, _, data) in &seeds {
        entry(target)(data);
    }
    if let Some(dir) = std::env::var_os("ZRTT_WRITE_FUZZ_SEEDS") {
        for (target, name, data) in &seeds {
            let d = std::path::Path::new(&dir).join(target);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("seed-{name}")), data).unwrap();
        }
    }
}

/// The seeds reach what they were made for: an accepted flight, a reply
/// that decodes, a token that opens, a quorum.
#[test]
fn seeds_reach_the_parsers_behind_the_crypto() {
    use crate::handshake::{read_frame, Expect};
    let f = testing::fuzz_fixture();
    let seeds = testing::fuzz_seeds();
    let full = &seeds
        .iter()
        .find(|(t, n, _)| *t == "first_flight_plaintext" && *n == "full")
        .unwrap()
        .2;
    let (params_mode, payload) = full.split_first().unwrap();
    assert_eq!(*params_mode, 0);
    let (_, flight) = crate::handshake::ClientHandshake::start_with_payload(
        &f.record,
        &Default::default(),
        crate::record::Aead::ChaChaPoly,
        crate::handshake::Pattern::Nk,
        payload,
        &testing::rng(1),
    )
    .unwrap();
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = f
        .server
        .accept(
            &frame,
            crate::handshake::Transport::Tcp,
            testing::fuzz_now(),
            &mut testing::NoReplayFilter,
            &testing::rng(2),
        )
        .unwrap();
    assert_eq!(acc.early_data, b"GET / HTTP/1.1\r\n\r\n");
    let tok = acc
        .extensions
        .get(crate::handshake::ext::ADDRESS_TOKEN)
        .unwrap();
    f.tokens
        .verify(
            tok,
            testing::FUZZ_PEER,
            Some(f.client_static.public()),
            testing::fuzz_now(),
        )
        .unwrap();
    let certs = crate::provenance::decode_certificates(
        acc.extensions
            .get(crate::handshake::ext::PROVENANCE)
            .unwrap(),
    )
    .unwrap();
    let q = f
        .policy
        .verify(
            &certs,
            testing::FUZZ_PEER,
            Some(f.client_static.public()),
            testing::fuzz_now(),
            &mut crate::provenance::VerifiedCache::new(8),
        )
        .unwrap();
    assert_eq!(q.verifiers.len(), 2);
}

fn seeds_of(name: &'static str) -> Vec<Vec<u8>> {
    testing::fuzz_seeds()
        .into_iter()
        .filter(|(t, _, _)| *t == name)
        .map(|(_, _, d)| d)
        .collect()
}

fn mutate(mut seed: Vec<u8>, edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    for &(pos, val) in edits {
        if !seed.is_empty() {
            let i = pos % seed.len();
            seed[i] = val;
        }
    }
    let keep = seed.len().saturating_sub(cut % 4);
    seed.truncate(keep);
    seed
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn entry_points_never_panic_on_arbitrary_bytes(
        which in 0..ENTRIES.len(),
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        (ENTRIES[which].1)(&data);
    }

    #[test]
    fn entry_points_never_panic_on_mutated_seeds(
        which in 0..ENTRIES.len(),
        seed in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        let (name, run) = ENTRIES[which];
        let seeds = seeds_of(name);
        let data = mutate(seed.get(&seeds).clone(), &edits, cut);
        run(&data);
    }
}
