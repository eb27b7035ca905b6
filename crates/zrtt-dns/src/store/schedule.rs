//! The rotation schedule both stores follow, as pure arithmetic on times
//! (seconds since the epoch): when a key is due, which keys DNS serves and
//! for how long, what expires. No files, no clock; the stores apply what it
//! says to their directory.
//!
//! With lifetime `L`, period `R` and publication margin `G`: key *i* is
//! created at `c_i` with `not_before = c_i` and `not_after = c_i + L` (cut
//! to the certificate's end); key *i+1* is due at `c_i + R`. A key is
//! published while `not_before <= now < not_after - G`; its private key is
//! deleted at `not_after` and its record one lifetime later. The key store
//! uses `G = 2T` (a key stays usable for `2T` after it leaves DNS) and the
//! verifier store `G = 0` (keys stay published, hence trusted, for as long
//! as certificates they signed can be valid).

use zrtt_proto::record::MAX_RECORDS_PER_LIST;

/// A key as the schedule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyTimes {
    /// Key id.
    pub(crate) id: u32,
    /// Start of validity.
    pub(crate) not_before: u64,
    /// End of validity (exclusive).
    pub(crate) not_after: u64,
    /// Whether the private key is held.
    pub(crate) held: bool,
}

/// What one rotation does to the stored keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Keys whose private key is deleted (they expired).
    pub(crate) delete_private: Vec<u32>,
    /// Keys whose record is removed (one lifetime after expiry).
    pub(crate) remove_record: Vec<u32>,
    /// Whether a new key is due.
    pub(crate) create: bool,
}

/// The schedule of one store's policy.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Validity of a new key.
    pub(crate) lifetime: u64,
    /// Time between two new keys.
    pub(crate) period: u64,
    /// `T`: the TTL of the records carrying the keys.
    pub(crate) record_ttl: u64,
    /// `G`: publication ends this long before `not_after`.
    pub(crate) publish_margin: u64,
    /// A new key must have more validity left than this (else the
    /// certificate is too near its end).
    pub(crate) min_new_life: u64,
    /// Whether a record stays published without its private key (verifier
    /// keys: the certificates they signed stay valid).
    pub(crate) publish_without_private: bool,
    /// A key is used (serves first flights, signs certificates) until this
    /// long before `not_after`.
    pub(crate) use_margin: u64,
    /// Whether a key is used only from its `not_before` (verifier keys:
    /// gateways do not trust them before).
    pub(crate) use_from_start: bool,
}

impl Schedule {
    /// When the next key is due: the newest `not_before` + period (0
    /// without keys).
    pub(crate) fn next_rotation(&self, keys: &[KeyTimes]) -> u64 {
        keys.iter()
            .map(|k| k.not_before)
            .max()
            .map_or(0, |nb| nb.saturating_add(self.period))
    }

    /// Whether `k` can be used at `now`: held, not too near its end, and
    /// (if the kind says so) valid already. Rotation makes a key when none
    /// can.
    pub(crate) fn usable(&self, k: &KeyTimes, now: u64) -> bool {
        k.held
            && (!self.use_from_start || k.not_before <= now)
            && now < k.not_after.saturating_sub(self.use_margin)
    }

    /// End of `k`'s publication window.
    pub(crate) fn publish_until(&self, k: &KeyTimes) -> u64 {
        k.not_after.saturating_sub(self.publish_margin)
    }

    /// The keys DNS serves at `now`, oldest first (`keys` sorted by
    /// `not_before`): those inside their publication window, at most
    /// [`MAX_RECORDS_PER_LIST`] (the newest). If rotation fell behind and
    /// none is, the newest key still valid for 2 s whose private key is
    /// held, rather than nothing.
    pub(crate) fn published(&self, keys: &[KeyTimes], now: u64) -> Vec<KeyTimes> {
        let mut v: Vec<KeyTimes> = keys
            .iter()
            .filter(|k| {
                (k.held || self.publish_without_private)
                    && k.not_before <= now
                    && now < self.publish_until(k)
            })
            .copied()
            .collect();
        if v.is_empty() {
            v.extend(
                keys.iter()
                    .filter(|k| {
                        k.held && k.not_before <= now && now.saturating_add(2) <= k.not_after
                    })
                    .max_by_key(|k| k.not_after),
            );
        }
        let skip = v.len().saturating_sub(MAX_RECORDS_PER_LIST);
        v.drain(..skip);
        v
    }

    /// The TTL for the records at `now`: `T`, lowered so that it stays
    /// below half the remaining validity of every published record (always
    /// strictly below it), at least 1.
    pub(crate) fn ttl(&self, published: &[KeyTimes], now: u64) -> u32 {
        let min_left = published
            .iter()
            .map(|k| k.not_after.saturating_sub(now))
            .min();
        let ttl = match min_left {
            Some(left) => self.record_ttl.min(left.saturating_sub(1) / 2),
            None => self.record_ttl,
        };
        u32::try_from(ttl.max(1)).unwrap_or(u32::MAX)
    }

    /// What rotating at `now` does: delete the private keys of expired
    /// keys, remove records one lifetime after expiry, and create a key
    /// when the newest is a period old or none left is usable.
    pub(crate) fn plan(&self, keys: &[KeyTimes], now: u64) -> Plan {
        let mut plan = Plan::default();
        let mut kept = Vec::with_capacity(keys.len());
        for k in keys {
            let mut k = *k;
            if now >= k.not_after && k.held {
                plan.delete_private.push(k.id);
                k.held = false;
            }
            if now >= k.not_after.saturating_add(self.lifetime) {
                plan.remove_record.push(k.id);
                continue;
            }
            kept.push(k);
        }
        plan.create = !kept.iter().any(|k| self.usable(k, now)) || now >= self.next_rotation(&kept);
        plan
    }

    /// The validity `(not_before, not_after)` of a key created at `now`
    /// under a certificate valid `cert`: a lifetime, cut to the
    /// certificate's end. `None` when the certificate is not valid yet or
    /// leaves too little.
    pub(crate) fn new_key(&self, now: u64, cert: (u64, u64)) -> Option<(u64, u64)> {
        let not_after = now.saturating_add(self.lifetime).min(cert.1);
        (now >= cert.0 && not_after > now.saturating_add(self.min_new_life))
            .then_some((now, not_after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Engine;
    use proptest::prelude::*;
    use std::time::Duration;

    /// A key store's schedule: `L`, `T`, `R` with `T >= 1`, `L > 4T`,
    /// `0 < R <= L - 4T`, as `Policy::validate` accepts them.
    fn key_store() -> impl Strategy<Value = Schedule> {
        (1u64..600, 1u64..5000).prop_flat_map(|(t, extra)| {
            let l = 4 * t + extra;
            (1..=l - 4 * t).prop_map(move |r| {
                let p = crate::Policy {
                    lifetime: Duration::from_secs(l),
                    record_ttl: Duration::from_secs(t),
                    rotation_period: Some(Duration::from_secs(r)),
                    ..Default::default()
                };
                p.validate().unwrap();
                p.schedule()
            })
        })
    }

    /// A verifier store's schedule, and its prepublication `P`.
    fn verifier_store() -> impl Strategy<Value = (Schedule, u64)> {
        (1u64..600, 1u64..500_000, 0u64..10_000, 61u64..500_000).prop_map(|(t, s, extra, c)| {
            let p = crate::VerifierPolicy {
                rotation: Duration::from_secs(s),
                prepublish: Duration::from_secs(2 * t + extra),
                max_certificate: Duration::from_secs(c),
                record_ttl: Duration::from_secs(t),
            };
            p.validate().unwrap();
            (p.schedule(), 2 * t + extra)
        })
    }

    fn either_store() -> impl Strategy<Value = Schedule> {
        prop_oneof![key_store(), verifier_store().prop_map(|(s, _)| s)]
    }

    /// Apply `plan` at `now` to `keys`, creating a key as the stores do.
    fn apply(s: &Schedule, keys: &mut Vec<KeyTimes>, plan: &Plan, now: u64) {
        for k in keys.iter_mut() {
            if plan.delete_private.contains(&k.id) {
                k.held = false;
            }
        }
        keys.retain(|k| !plan.remove_record.contains(&k.id));
        if plan.create {
            let (nb, na) = s.new_key(now, (0, u64::MAX)).unwrap();
            let id = keys.iter().map(|k| k.id + 1).max().unwrap_or(0);
            keys.push(KeyTimes {
                id,
                not_before: nb,
                not_after: na,
                held: true,
            });
        }
    }

    /// Rotate at `t0` and then at each of `gaps` after the previous call.
    fn run(s: &Schedule, t0: u64, gaps: &[u64], mut check: impl FnMut(&[KeyTimes], u64)) {
        let mut keys: Vec<KeyTimes> = Vec::new();
        let mut now = t0;
        for gap in std::iter::once(&0).chain(gaps) {
            now += gap;
            let plan = s.plan(&keys, now);
            apply(s, &mut keys, &plan, now);
            check(&keys, now);
        }
    }

    /// A schedule for the arithmetic alone: period 1, no margins.
    fn arithmetic(lifetime: u64, record_ttl: u64, min_new_life: u64) -> Schedule {
        Schedule {
            lifetime,
            period: 1,
            record_ttl,
            publish_margin: 0,
            min_new_life,
            publish_without_private: true,
            use_margin: 0,
            use_from_start: false,
        }
    }

    /// Rotate `n` times, each exactly when the next key is due.
    fn rotate_when_due(s: &Schedule, n: usize) -> Vec<KeyTimes> {
        let mut keys: Vec<KeyTimes> = Vec::new();
        let mut now = 1_800_000_000;
        for _ in 0..n {
            let plan = s.plan(&keys, now);
            apply(s, &mut keys, &plan, now);
            now = s.next_rotation(&keys);
        }
        keys
    }

    proptest! {
        #[test]
        fn a_rotation_leaves_nothing_to_do_at_the_same_instant(
            s in either_store(),
            gaps in proptest::collection::vec(0u64..20_000, 1..30),
        ) {
            run(&s, 1_800_000_000, &gaps, |keys, now| {
                let again = s.plan(keys, now);
                assert_eq!(again, Plan::default(), "{keys:?} at {now}");
            });
        }

        #[test]
        fn after_a_rotation_a_key_is_usable_and_served_and_nothing_expired_is_held(
            s in either_store(),
            gaps in proptest::collection::vec(0u64..20_000, 1..30),
        ) {
            run(&s, 1_800_000_000, &gaps, |keys, now| {
                assert!(keys.iter().any(|k| s.usable(k, now)));
                assert!(!keys.iter().any(|k| k.held && now >= k.not_after));
                assert!(!keys.iter().any(|k| now >= k.not_after + s.lifetime));
                assert!(!s.published(keys, now).is_empty());
                assert!(s.next_rotation(keys) > now);
                // Keys are removed in time: at most two lifetimes' worth.
                assert!(keys.len() as u64 <= 2 * s.lifetime / s.period + 2);
            });
        }

        #[test]
        fn rotating_when_due_publishes_each_key_two_ttls_before_the_last_leaves(
            s in key_store(),
            n in 2usize..12,
        ) {
            for w in rotate_when_due(&s, n).windows(2) {
                // HTTPCrypt's rule: the next key is in DNS 2T before the
                // previous one leaves, which stays usable 2T after that.
                assert!(w[1].not_before + 2 * s.record_ttl <= s.publish_until(&w[0]));
                assert!(s.publish_until(&w[0]) + 2 * s.record_ttl <= w[0].not_after);
            }
        }

        #[test]
        fn rotating_when_due_a_verifier_key_signs_p_after_its_successor_is_published(
            (s, p) in verifier_store(),
            n in 2usize..12,
        ) {
            for w in rotate_when_due(&s, n).windows(2) {
                // Gateways learn the new key for P while the old one still
                // signs (its private key goes only at its end), and the old
                // one stays published, hence trusted, until then.
                let old = KeyTimes { held: true, ..w[0] };
                let t = w[1].not_before + p;
                assert!(s.usable(&old, t));
                assert!(s.published(&[old], t).contains(&old));
            }
        }

        #[test]
        fn the_ttl_stays_below_the_remaining_validity(
            ttl in 1u64..10_000,
            left in proptest::collection::vec(2u64..100_000, 0..8),
        ) {
            let s = arithmetic(1, ttl, 0);
            let now = 1_000;
            let keys: Vec<KeyTimes> = left
                .iter()
                .map(|l| KeyTimes { id: 0, not_before: now, not_after: now + l, held: true })
                .collect();
            let got = u64::from(s.ttl(&keys, now));
            assert!((1..=ttl).contains(&got));
            for l in &left {
                assert!(got < *l);
                if *l >= 3 {
                    assert!(2 * got < *l);
                }
            }
        }

        #[test]
        fn a_new_key_never_outlives_its_certificate(
            lifetime in 1u64..100_000,
            min_new_life in 0u64..10_000,
            now in 0u64..1_000_000,
            cert_nb in 0u64..1_000_000,
            cert_len in 0u64..1_000_000,
        ) {
            let s = arithmetic(lifetime, 1, min_new_life);
            let cert = (cert_nb, cert_nb + cert_len);
            match s.new_key(now, cert) {
                Some((nb, na)) => {
                    assert_eq!(nb, now);
                    assert!(na <= cert.1 && na <= now + lifetime);
                    assert!(na > now + min_new_life && now >= cert.0);
                }
                None => assert!(
                    now < cert.0 || now.saturating_add(lifetime).min(cert.1) <= now + min_new_life
                ),
            }
        }
    }
}
