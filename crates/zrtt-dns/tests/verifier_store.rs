//! Verifier key store: the rotation schedule with an injected clock (a new
//! key is published before it signs; an old key stays published, and
//! trusted, while certificates it signed are valid), refresh across a
//! rotation, policy rules, permissions and corrupted files.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ring::rand::SystemRandom;
use zrtt_dns::keystore::KEYS_DIR;
use zrtt_dns::verifier_store::{VerifierKeyState, CLOCK_MARGIN_SECS, VERIFIER_CONFIG_FILE};
use zrtt_dns::{KeyStoreError, VerifierPolicy, VerifierStore};
use zrtt_proto::provenance::{IssuePolicy, TrustPolicy, TrustedKey, VerifiedCache};
use zrtt_proto::record::VerifierKeyRecord;
use zrtt_proto::UnixTime;

const T0: u64 = 1_800_000_000;
const NAME: &str = "www.example.com";
const DAY: u64 = 86400;
const HOUR: u64 = 3600;
const CLIENT: [u8; 32] = [7; 32];
const ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../zrtt-proto/tests/data")
        .join(f)
}

fn at(s: u64) -> UnixTime {
    UnixTime::from_secs(s)
}

fn init(dir: &Path, policy: VerifierPolicy) -> VerifierStore {
    VerifierStore::init(
        dir,
        NAME,
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        policy,
    )
    .unwrap()
}

fn ids(v: &[VerifierKeyRecord]) -> Vec<u32> {
    v.iter().map(|r| r.body.verifier_id).collect()
}

/// What a gateway that fetched the published records at `fetched` trusts
/// (one verifier, quorum 1), checked at `now`.
fn gateway_accepts(
    ks: &VerifierStore,
    fetched: u64,
    cert: &zrtt_proto::provenance::Certificate,
    now: u64,
) -> bool {
    let keys = ks
        .published_records(at(fetched))
        .iter()
        .map(|r| {
            let v = r.verify(ks.cert_der(), NAME, at(fetched)).unwrap();
            TrustedKey::published(&v, 1)
        })
        .collect();
    let pol = TrustPolicy {
        keys,
        quorum: 1,
        skew_secs: 5,
    };
    pol.verify(
        std::slice::from_ref(cert),
        ADDR,
        Some(&CLIENT),
        at(now),
        &mut VerifiedCache::new(10),
    )
    .is_ok()
}

#[test]
fn rotation_publishes_ahead_and_keeps_old_keys_while_their_certificates_live() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pv");
    // Defaults: S = 1 day, P = 1 hour, C = 1 day, T = 300 s.
    let mut ks = init(&dir, VerifierPolicy::default());
    let rng = SystemRandom::new();
    let issue = IssuePolicy::default(); // 30 min doubling up to one day
    assert!(ks.signing_keys(at(T0)).is_none(), "no key yet");

    // The first key signs at once: nothing to overlap with.
    let k1 = ks.rotate(at(T0), &rng).unwrap().created[0];
    assert_eq!(ks.current_key(at(T0)).unwrap().id, k1);
    assert_eq!(ids(&ks.published_records(at(T0))), vec![k1]);
    let rec1 = ks.published_records(at(T0))[0].clone();
    assert_eq!(
        rec1.body.not_after,
        T0 + HOUR + DAY + DAY + CLOCK_MARGIN_SECS,
        "P + S + C + M"
    );
    rec1.verify(ks.cert_der(), NAME, at(T0)).unwrap();
    assert!(!ks.rotate(at(T0 + DAY - 1), &rng).unwrap().changed());

    // At S the next key appears in DNS, but does not sign for another P.
    let k2 = ks.rotate(at(T0 + DAY), &rng).unwrap().created[0];
    assert_ne!(k1, k2);
    assert_eq!(ids(&ks.published_records(at(T0 + DAY))), vec![k1, k2]);
    assert_eq!(ks.current_key(at(T0 + DAY)).unwrap().id, k1);
    assert_eq!(ks.current_key(at(T0 + DAY + HOUR - 1)).unwrap().id, k1);
    let st = ks.status(at(T0 + DAY + 60));
    assert_eq!(st.keys[0].state, VerifierKeyState::Current);
    assert_eq!(st.keys[1].state, VerifierKeyState::Next);
    assert!(st.to_string().contains("next"), "{st}");
    // A gateway that refreshed when the key appeared already trusts what it
    // will sign.
    let first_by_k2 = ks
        .signing_keys(at(T0 + DAY + HOUR))
        .unwrap()
        .issue(&issue, &CLIENT, ADDR, u32::MAX, None, at(T0 + DAY + HOUR))
        .unwrap();
    assert_eq!(first_by_k2.verifier_id, k2);
    assert!(gateway_accepts(
        &ks,
        T0 + DAY + 1,
        &first_by_k2,
        T0 + DAY + HOUR
    ));

    // The last certificate k1 signs, just before k2 takes over, refreshed
    // up to the one-day cap.
    let last = T0 + DAY + HOUR - 1;
    let keys = ks.signing_keys(at(last)).unwrap();
    assert_eq!(keys.current().id, k1);
    let mut cert = keys
        .issue(&issue, &CLIENT, ADDR, u32::MAX, None, at(last))
        .unwrap();
    for _ in 0..8 {
        cert = keys
            .issue(&issue, &CLIENT, ADDR, u32::MAX, Some(&cert), at(last))
            .unwrap();
    }
    assert_eq!(cert.verifier_id, k1);
    assert_eq!(u64::from(cert.duration), DAY, "the cap");
    let cert_end = cert.end();
    assert!(cert_end <= rec1.body.not_after - CLOCK_MARGIN_SECS);
    // k2 signs from P after it appeared.
    assert_eq!(ks.current_key(at(T0 + DAY + HOUR)).unwrap().id, k2);
    // Rotations in between remove nothing of k1: it stays published, and a
    // gateway refreshing at any time still accepts k1's last certificate
    // until that certificate ends.
    for t in [
        T0 + DAY + HOUR,
        T0 + 2 * DAY,
        T0 + 2 * DAY + HOUR,
        cert_end - 1,
    ] {
        let r = ks.rotate(at(t), &rng).unwrap();
        assert!(r.deleted_private_keys.is_empty(), "{t}: {r}");
        assert!(ids(&ks.published_records(at(t))).contains(&k1), "{t}");
        assert!(gateway_accepts(&ks, t, &cert, cert_end - 1), "{t}");
    }
    let st = ks.status(at(T0 + 2 * DAY + 60));
    assert_eq!(st.keys[0].state, VerifierKeyState::Retired);
    assert_eq!(st.keys[1].state, VerifierKeyState::Current);
    assert_eq!(st.keys[2].state, VerifierKeyState::Next);

    // A refresh across the rotation keeps doubling: k2 signs, k1's
    // certificate counts as the previous one.
    let t = T0 + DAY + HOUR + 600;
    let mut short = ks
        .signing_keys(at(last))
        .unwrap()
        .issue(&issue, &CLIENT, ADDR, u32::MAX, None, at(last))
        .unwrap();
    assert_eq!(short.verifier_id, k1);
    short = ks
        .signing_keys(at(t))
        .unwrap()
        .issue(&issue, &CLIENT, ADDR, u32::MAX, Some(&short), at(t))
        .unwrap();
    assert_eq!((short.verifier_id, short.duration), (k2, 3600));

    // At k1's not_after: out of DNS, its private key deleted on rotation.
    let na1 = rec1.body.not_after;
    assert!(!ids(&ks.published_records(at(na1))).contains(&k1));
    let r = ks.rotate(at(na1), &rng).unwrap();
    assert_eq!(r.deleted_private_keys, vec![k1]);
    assert!(!dir.join(KEYS_DIR).join(format!("{k1:08x}.key")).exists());
    let st = ks.status(at(na1));
    assert_eq!(st.keys[0].state, VerifierKeyState::Expired);
    assert!(!st.keys[0].private_key_held);
    // A gateway does not accept certificates under an expired key, even
    // one it fetched while the key was valid.
    assert!(!gateway_accepts(&ks, na1 - 1, &cert, na1));

    // TTL is T and below the remaining validity of every published record.
    for t in (T0..T0 + 4 * DAY).step_by(600) {
        let ttl = u64::from(ks.record_ttl(at(t)));
        assert!(ttl <= 300);
        for rec in ks.published_records(at(t)) {
            assert!(ttl < rec.body.not_after - t, "t={t}");
        }
    }
    // A fresh open agrees with what rotation left on disk.
    let reopened = VerifierStore::open(&dir).unwrap();
    assert_eq!(
        ids(&reopened.published_records(at(na1))),
        ids(&ks.published_records(at(na1)))
    );
}

#[test]
fn a_stalled_store_signs_shorter_and_never_past_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ks = init(tmp.path(), VerifierPolicy::default());
    let k1 = ks.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    let na = ks.published_records(at(T0))[0].body.not_after;
    let issue = IssuePolicy {
        initial_secs: DAY as u32,
        max_secs: DAY as u32,
    };
    // Nobody rotated for two days: the key still signs, cut at its end.
    let t = na - CLOCK_MARGIN_SECS - 600;
    let c = ks
        .signing_keys(at(t))
        .unwrap()
        .issue(&issue, &[1; 32], ADDR, u32::MAX, None, at(t))
        .unwrap();
    assert_eq!((c.verifier_id, c.duration), (k1, 600));
    assert!(ks.status(at(t)).to_string().contains("rotation is late"));
    // Past the margin it cannot sign at all: rotation makes a key that
    // signs at once.
    assert!(ks.signing_keys(at(na - CLOCK_MARGIN_SECS)).is_none());
    assert!(ks
        .status(at(na - CLOCK_MARGIN_SECS))
        .warnings
        .iter()
        .any(|w| w.contains("no key can sign")));
    let k2 = ks
        .rotate(at(na - CLOCK_MARGIN_SECS), &SystemRandom::new())
        .unwrap()
        .created[0];
    assert_eq!(ks.current_key(at(na - CLOCK_MARGIN_SECS)).unwrap().id, k2);
}

#[test]
fn policies_that_break_the_rules_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = [
        VerifierPolicy {
            prepublish: Duration::from_secs(599),
            ..Default::default()
        },
        VerifierPolicy {
            rotation: Duration::from_secs(13 * DAY),
            ..Default::default()
        },
        VerifierPolicy {
            record_ttl: Duration::ZERO,
            ..Default::default()
        },
        VerifierPolicy {
            max_certificate: Duration::ZERO,
            ..Default::default()
        },
    ];
    for (i, p) in bad.into_iter().enumerate() {
        let e = VerifierStore::init(
            &tmp.path().join(i.to_string()),
            NAME,
            &data("ecdsa-cert.pem"),
            &data("ecdsa-cert.key"),
            p,
        )
        .unwrap_err();
        assert!(matches!(e, KeyStoreError::Policy(_)), "{e}");
    }
    // The same rules hold in the config file, named.
    let dir = tmp.path().join("ok");
    init(&dir, VerifierPolicy::default());
    fs::write(
        dir.join(VERIFIER_CONFIG_FILE),
        format!("name = \"{NAME}\"\nprepublish = \"1m\"\n"),
    )
    .unwrap();
    let e = VerifierStore::open(&dir).unwrap_err().to_string();
    assert!(
        e.contains("verifier.toml") && e.contains("prepublish"),
        "{e}"
    );
    // A certificate that does not cover the name.
    let e = VerifierStore::init(
        &tmp.path().join("other"),
        "pv.example.net",
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        VerifierPolicy::default(),
    )
    .unwrap_err();
    assert!(matches!(e, KeyStoreError::Certificate { .. }), "{e}");
}

#[test]
fn private_keys_are_0600_and_damage_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ks = init(dir, VerifierPolicy::default());
    let id = ks.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    let key = dir.join(KEYS_DIR).join(format!("{id:08x}.key"));
    assert_eq!(
        fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The key file is what `zrtt verifier keygen` writes: PKCS#8 PEM.
    assert!(fs::read_to_string(&key)
        .unwrap()
        .starts_with("-----BEGIN PRIVATE KEY-----"));
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let e = VerifierStore::open(dir).unwrap_err();
    assert!(matches!(e, KeyStoreError::Permissions { .. }), "{e}");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let rec = dir.join(KEYS_DIR).join(format!("{id:08x}.record"));
    let mut bytes = fs::read(&rec).unwrap();
    bytes.truncate(bytes.len() - 3);
    fs::write(&rec, &bytes).unwrap();
    let e = VerifierStore::open(dir).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{id:08x}.record: bad key record")),
        "{e}"
    );
}

#[test]
fn another_process_rotation_is_seen_by_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = init(tmp.path(), VerifierPolicy::default());
    let mut b = VerifierStore::open(tmp.path()).unwrap();
    assert!(!b.reload_if_changed().unwrap());
    let id = a.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    // Directory mtimes have a coarse resolution on some file systems.
    std::thread::sleep(Duration::from_millis(20));
    assert!(b.reload_if_changed().unwrap() || !b.published_records(at(T0)).is_empty());
    assert_eq!(ids(&b.published_records(at(T0))), vec![id]);
    // Rotating from the second handle sees the first's key: no second key.
    assert!(b
        .rotate(at(T0 + 10), &SystemRandom::new())
        .unwrap()
        .created
        .is_empty());
}
