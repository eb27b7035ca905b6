//! Key store: schedule, deletion of expired private keys, atomic writes,
//! permissions, bad configs and corrupted files.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ring::rand::SystemRandom;
use zrtt_dns::keystore::{KeyState, CONFIG_FILE, KEYS_DIR};
use zrtt_dns::{KeyStore, KeyStoreError, Policy};
use zrtt_proto::handshake::ServerConfig;
use zrtt_proto::record::RecordFlags;
use zrtt_proto::UnixTime;

const T0: u64 = 1_800_000_000;
const NAME: &str = "www.example.com";

fn data(f: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../zrtt-proto/tests/data")
        .join(f)
}

fn at(s: u64) -> UnixTime {
    UnixTime::from_secs(s)
}

fn init(dir: &Path, policy: Policy) -> KeyStore {
    KeyStore::init(
        dir,
        NAME,
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        policy,
    )
    .unwrap()
}

fn ids(v: &[zrtt_proto::record::KeyRecord]) -> Vec<u32> {
    v.iter().map(|r| r.body.key_id).collect()
}

fn key_file(dir: &Path, id: u32) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{id:08x}.key"))
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn schedule_over_two_rotations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ks");
    let mut ks = init(&dir, Policy::default()); // L 3600, T 300, R 2400
    let rng = SystemRandom::new();
    assert!(ks.published_records(at(T0)).is_empty());

    let r = ks.rotate(at(T0), &rng).unwrap();
    assert_eq!(r.created.len(), 1);
    let k1 = r.created[0];
    assert_eq!(r.next_rotation, T0 + 2400);
    // Idempotent: nothing more to do at the same instant or just before R.
    assert!(!ks.rotate(at(T0), &rng).unwrap().changed());
    assert!(!ks.rotate(at(T0 + 2399), &rng).unwrap().changed());
    assert_eq!(ids(&ks.published_records(at(T0 + 2399))), vec![k1]);

    // At p1 + R the second key appears: two keys published (overlap 2T).
    let k2 = ks.rotate(at(T0 + 2400), &rng).unwrap().created[0];
    assert_ne!(k1, k2);
    assert_eq!(ids(&ks.published_records(at(T0 + 2400))), vec![k1, k2]);
    assert_eq!(ids(&ks.published_records(at(T0 + 2999))), vec![k1, k2]);
    // k1 stops being published 2T before it expires, but stays usable.
    assert_eq!(ids(&ks.published_records(at(T0 + 3000))), vec![k2]);
    let held: Vec<u32> = ks
        .server_keys(at(T0 + 3000))
        .iter()
        .map(|k| k.record.body.key_id)
        .collect();
    assert_eq!(held, vec![k1, k2]);
    let st = ks.status(at(T0 + 3000));
    assert_eq!(st.keys[0].state, KeyState::Retired);
    assert_eq!(st.keys[1].state, KeyState::Published);
    assert!(st.to_string().contains("retired"), "{st}");

    // At k1's not_after its private key is deleted from disk.
    assert!(key_file(&dir, k1).exists());
    let r = ks.rotate(at(T0 + 3600), &rng).unwrap();
    assert_eq!(r.deleted_private_keys, vec![k1]);
    assert!(!key_file(&dir, k1).exists());
    assert!(key_file(&dir, k2).exists());
    let held: Vec<u32> = ks
        .server_keys(at(T0 + 3600))
        .iter()
        .map(|k| k.record.body.key_id)
        .collect();
    assert_eq!(held, vec![k2]);
    let st = ks.status(at(T0 + 3600));
    assert_eq!(st.keys[0].state, KeyState::Expired);
    assert!(!st.keys[0].private_key_held);
    // A fresh open agrees (the key is gone from disk, not just from memory).
    let reopened = KeyStore::open(&dir).unwrap();
    assert_eq!(reopened.server_keys(at(T0 + 3600)).len(), 1);

    // Third key at p2 + R; k1's record goes one lifetime after expiry.
    let k3 = ks.rotate(at(T0 + 4800), &rng).unwrap().created[0];
    assert_eq!(ids(&ks.published_records(at(T0 + 4800))), vec![k2, k3]);
    let r = ks.rotate(at(T0 + 7200), &rng).unwrap();
    assert_eq!(r.removed_records, vec![k1]);
    assert_eq!(r.deleted_private_keys, vec![k2]);

    // TTL is T and below the remaining validity of every published record.
    for t in (T0..T0 + 7200).step_by(60) {
        let ttl = u64::from(ks.record_ttl(at(t)));
        for rec in ks.published_records(at(t)) {
            assert!(ttl < rec.body.not_after - t, "t={t}");
        }
    }
    assert_eq!(ks.record_ttl(at(T0 + 4800)), 300);
}

#[test]
fn records_verify_and_keys_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ks = init(tmp.path(), Policy::default());
    let rng = SystemRandom::new();
    ks.rotate(at(T0), &rng).unwrap();
    ks.rotate(at(T0 + 2400), &rng).unwrap();
    for r in ks.published_records(at(T0 + 2500)) {
        r.verify(ks.cert_der(), NAME, at(T0 + 2500)).unwrap();
    }
    ServerConfig::new(ks.server_keys(at(T0 + 2500))).unwrap();
    assert_eq!(ks.cert_pem_path(), tmp.path().join("cert.pem"));
    assert_eq!(ks.cert_key_path(), tmp.path().join("cert.key"));
}

#[test]
fn late_rotation_still_serves_a_valid_key_with_a_short_ttl() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ks = init(tmp.path(), Policy::default());
    ks.rotate(at(T0), &SystemRandom::new()).unwrap();
    // Nobody rotated: past the publication window, still valid.
    let t = T0 + 3500;
    assert_eq!(ks.published_records(at(t)).len(), 1);
    let ttl = ks.record_ttl(at(t));
    assert!(u64::from(ttl) < 100, "{ttl}");
    assert!(ks.status(at(t)).to_string().contains("rotation is late"));
    // Expired: nothing published, and rotate creates a key at once.
    assert!(ks.published_records(at(T0 + 3600)).is_empty());
}

#[test]
fn private_files_are_0600_and_exposed_ones_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ks = init(dir, Policy::default());
    let id = ks.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    assert_eq!(mode(&dir.join("cert.key")), 0o600);
    assert_eq!(mode(&key_file(dir, id)), 0o600);
    assert_eq!(mode(&dir.join(KEYS_DIR)), 0o700);

    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(key_file(dir, id), fs::Permissions::from_mode(0o644)).unwrap();
    let e = KeyStore::open(dir).unwrap_err();
    assert!(matches!(e, KeyStoreError::Permissions { .. }), "{e}");
    assert!(e.to_string().contains(&format!("{id:08x}.key")), "{e}");
    fs::set_permissions(key_file(dir, id), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(dir.join("cert.key"), fs::Permissions::from_mode(0o640)).unwrap();
    let e = KeyStore::open(dir).unwrap_err().to_string();
    assert!(e.contains("cert.key") && e.contains("chmod 600"), "{e}");
}

#[test]
fn corrupted_record_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ks = init(dir, Policy::default());
    let id = ks.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    let rec = dir.join(KEYS_DIR).join(format!("{id:08x}.record"));
    let mut bytes = fs::read(&rec).unwrap();
    bytes.truncate(bytes.len() - 5);
    fs::write(&rec, &bytes).unwrap();
    let e = KeyStore::open(dir).unwrap_err();
    assert!(matches!(e, KeyStoreError::BadRecord { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("{id:08x}.record: bad key record")),
        "{e}"
    );

    // A record stored under another key's id.
    let mut ks = init(&dir.join("b"), Policy::default());
    let id = ks.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    let kd = dir.join("b").join(KEYS_DIR);
    fs::copy(
        kd.join(format!("{id:08x}.record")),
        kd.join("00000001.record"),
    )
    .unwrap();
    let e = KeyStore::open(&dir.join("b")).unwrap_err().to_string();
    assert!(
        e.contains("00000001.record") && e.contains("not the one in its file name"),
        "{e}"
    );

    // A private key that does not match its record.
    fs::remove_file(kd.join("00000001.record")).unwrap();
    fs::write(
        kd.join(format!("{id:08x}.key")),
        zrtt_dns::keyfile::pem_encode(zrtt_dns::keyfile::KEY_PEM_LABEL, &[9; 32]),
    )
    .unwrap();
    let e = KeyStore::open(&dir.join("b")).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{id:08x}.key")) && e.contains("does not match"),
        "{e}"
    );
}

#[test]
fn bad_configs_are_refused() {
    let bad = |p: Policy| {
        let tmp = tempfile::tempdir().unwrap();
        KeyStore::init(
            tmp.path(),
            NAME,
            &data("ecdsa-cert.pem"),
            &data("ecdsa-cert.key"),
            p,
        )
        .unwrap_err()
        .to_string()
    };
    let d = Policy::default();
    let e = bad(Policy {
        lifetime: Duration::from_secs(1200),
        ..d.clone()
    });
    assert!(e.contains("must exceed 4 x ttl"), "{e}");
    let e = bad(Policy {
        rotation_period: Some(Duration::from_secs(2401)),
        ..d.clone()
    });
    assert!(
        e.contains("rotation period 2401 s must be in 1..=2400"),
        "{e}"
    );
    let e = bad(Policy {
        record_ttl: Duration::ZERO,
        ..d.clone()
    });
    assert!(e.contains("ttl"), "{e}");
    // Certificate for another name, or a key that is not the certificate's.
    let tmp = tempfile::tempdir().unwrap();
    let e = KeyStore::init(
        tmp.path(),
        "other.example.net",
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        d.clone(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ecdsa-cert.pem"), "{e}");
    let e = KeyStore::init(
        tmp.path(),
        NAME,
        &data("ecdsa-cert.pem"),
        &data("other-cert.key"),
        d.clone(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("other-cert.key") && e.contains("is not the key of"),
        "{e}"
    );

    // keystore.toml: every field optional but the name; typos refused.
    let tmp = tempfile::tempdir().unwrap();
    init(tmp.path(), d);
    let cfg = tmp.path().join(CONFIG_FILE);
    fs::write(
        &cfg,
        "name = \"www.example.com\"\nlifetime = \"30m\"\nttl = 120\n",
    )
    .unwrap();
    let ks = KeyStore::open(tmp.path()).unwrap();
    assert_eq!(ks.policy().rotation(), Duration::from_secs(1800 - 480));
    for (text, want) in [
        (
            "name = \"www.example.com\"\nlifetim = 3600\n",
            "unknown field",
        ),
        ("lifetime = 3600\n", "`name`"),
        (
            "name = \"www.example.com\"\nlifetime = \"1x\"\n",
            "invalid duration",
        ),
        (
            "name = \"www.example.com\"\nttl = 1000\n",
            "must exceed 4 x ttl",
        ),
        ("name = \"www.example.com\"\naeads = [\"rc4\"]\n", "aeads"),
        ("name = \"www.example.com\"\nflags = [\"fast\"]\n", "flags"),
    ] {
        fs::write(&cfg, text).unwrap();
        let e = KeyStore::open(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("keystore.toml") && e.contains(want),
            "{text:?}: {e}"
        );
    }
    // init refuses an existing store.
    fs::write(&cfg, "name = \"www.example.com\"\n").unwrap();
    let e = KeyStore::init(
        tmp.path(),
        NAME,
        &data("ecdsa-cert.pem"),
        &data("ecdsa-cert.key"),
        Policy::default(),
    )
    .unwrap_err();
    assert!(matches!(e, KeyStoreError::AlreadyExists(_)), "{e}");
}

#[test]
fn writes_are_atomic_and_leave_no_temporary_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ks = init(dir, Policy::default());
    let rng = SystemRandom::new();
    for i in 0..5 {
        ks.rotate(at(T0 + i * 2400), &rng).unwrap();
    }
    let names: Vec<String> = fs::read_dir(dir.join(KEYS_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == ".rotate.lock" || n.ends_with(".key") || n.ends_with(".record")),
        "{names:?}"
    );
    // A failed write (target is a directory) leaves the old state and no temp file.
    let target = dir.join("occupied");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("x"), b"x").unwrap();
    assert!(zrtt_dns::fsutil::write_atomic(&target, b"new", true).is_err());
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !left.iter().any(|n| n.to_string_lossy().contains(".tmp")),
        "{left:?}"
    );
    // Every record on disk decodes completely.
    for n in names.iter().filter(|n| n.ends_with(".record")) {
        zrtt_proto::record::KeyRecord::decode(&fs::read(dir.join(KEYS_DIR).join(n)).unwrap())
            .unwrap();
    }
}

#[test]
fn another_process_rotation_is_seen_by_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut a = init(dir, Policy::default());
    let mut b = KeyStore::open(dir).unwrap();
    assert!(!b.reload_if_changed().unwrap());
    let id = a.rotate(at(T0), &SystemRandom::new()).unwrap().created[0];
    assert!(b.reload_if_changed().unwrap());
    assert_eq!(ids(&b.published_records(at(T0))), vec![id]);
    // b rotating does not create a second key: it re-reads under the lock.
    assert!(!b
        .rotate(at(T0 + 1), &SystemRandom::new())
        .unwrap()
        .changed());
}

#[test]
fn certificate_change_re_signs_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ks = init(dir, Policy::default());
    let rng = SystemRandom::new();
    let id = ks.rotate(at(T0), &rng).unwrap().created[0];
    fs::copy(data("ed25519-cert.pem"), dir.join("cert.pem")).unwrap();
    zrtt_dns::fsutil::write_atomic(
        &dir.join("cert.key"),
        &fs::read(data("ed25519-cert.key")).unwrap(),
        true,
    )
    .unwrap();
    ks.reload_if_changed().unwrap();
    assert!(ks
        .status(at(T0 + 10))
        .to_string()
        .contains("another certificate"));
    let r = ks.rotate(at(T0 + 10), &rng).unwrap();
    assert_eq!(r.resigned, vec![id]);
    for rec in ks.published_records(at(T0 + 10)) {
        rec.verify(ks.cert_der(), NAME, at(T0 + 10)).unwrap();
    }
}

#[test]
fn the_h2_flag_round_trips_through_keystore_toml_into_records() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = Policy {
        flags: RecordFlags::from_bits(RecordFlags::HTTP2 | RecordFlags::ISSUES_TOKENS).unwrap(),
        ..Policy::default()
    };
    drop(init(tmp.path(), policy));
    let toml = fs::read_to_string(tmp.path().join(CONFIG_FILE)).unwrap();
    assert!(toml.contains("\"h2\""), "{toml}");
    let mut ks = KeyStore::open(tmp.path()).unwrap();
    assert!(ks.policy().flags.http2());
    ks.rotate(at(T0), &ring::rand::SystemRandom::new()).unwrap();
    let recs = ks.published_records(at(T0));
    assert!(!recs.is_empty() && recs.iter().all(|r| r.body.flags.http2()));
}
