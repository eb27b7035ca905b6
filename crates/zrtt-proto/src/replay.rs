//! Replay filter for first flights (docs/PROTOCOL.md §7).
//!
//! A first flight is accepted at time `now` only if its authenticated
//! timestamp `ts` satisfies `now - max_age <= ts <= now + max_future`, its
//! timestamp is not older than `start + max_future` (so a restart cannot
//! reopen what the previous process accepted), and its client ephemeral key
//! (with the key id) was not seen before. A flight can therefore be replayed
//! only while its timestamp is inside the window, and the filter remembers
//! every flight at least that long: flights are bucketed by
//! `epoch = ts / (max_age + max_future)`, the acceptance window at any `now`
//! touches at most two epochs, and a bucket is dropped only when its whole
//! epoch has left the window.
//!
//! Each bucket is a Bloom filter sized for `capacity` flights at false
//! positive rate `fp_rate` (a false positive refuses a fresh flight as a
//! replay; the client then falls back, losing speed, never safety). There
//! are no false negatives. When a bucket holds `capacity` flights it refuses
//! further flights for that epoch ([`ReplayError::Full`]) instead of letting
//! the rate rise. Memory is fixed: two buckets of
//! `ceil(-capacity * ln(fp_rate) / ln(2)^2)` bits.

use core::time::Duration;

use crate::error::ReplayError;
use crate::time::UnixTime;

/// Remembers first flights; shared through the server config.
pub trait ReplayFilter: Send {
    /// Cheap pre-check before decryption: `true` if this ephemeral key was
    /// (probably) seen for `key_id`. Records nothing.
    fn seen(&self, key_id: u32, ephemeral: &[u8; 32]) -> bool;

    /// After the flight authenticated: check its timestamp window and record
    /// it. Fails if it is outside the window or already recorded.
    fn check_and_insert(
        &mut self,
        key_id: u32,
        ephemeral: &[u8; 32],
        timestamp: UnixTime,
        now: UnixTime,
    ) -> Result<(), ReplayError>;

    /// How long a copy of a flight can pass the time check (`max_age +
    /// max_future`), if the filter says (the shortcut's answer cache).
    fn window(&self) -> Option<Duration> {
        None
    }
}

/// A filter shared between threads, locked for each call only. Passed to
/// `ServerConfig::accept` (as `&mut &mutex`), it is locked for the pre-check
/// [`ReplayFilter::seen`] and again for [`ReplayFilter::check_and_insert`],
/// never in between, where the flight is decrypted and authenticated (most
/// of `accept`'s cost): accepts on several threads decrypt in parallel.
/// Sound because `check_and_insert` checks and records in one step under
/// the lock: of copies of one flight decrypted at once, exactly one is
/// recorded and every other one is refused as a replay; `seen` records
/// nothing, and a flight that does not authenticate never reaches
/// `check_and_insert`. A poisoned lock is taken over, as the gateway does
/// with all its locks.
impl<F: ReplayFilter + ?Sized> ReplayFilter for &std::sync::Mutex<F> {
    fn seen(&self, key_id: u32, ephemeral: &[u8; 32]) -> bool {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen(key_id, ephemeral)
    }

    fn check_and_insert(
        &mut self,
        key_id: u32,
        ephemeral: &[u8; 32],
        timestamp: UnixTime,
        now: UnixTime,
    ) -> Result<(), ReplayError> {
        self.lock()
            .unwrap_or_else(|p| p.into_inner())
            .check_and_insert(key_id, ephemeral, timestamp, now)
    }
}

/// Settings of a [`BloomReplayFilter`].
#[derive(Clone, Copy, Debug)]
pub struct ReplayConfig {
    /// How far in the past a flight's timestamp may be.
    pub max_age: Duration,
    /// How far in the future a flight's timestamp may be.
    pub max_future: Duration,
    /// Flights remembered per epoch before the filter refuses more.
    pub capacity: usize,
    /// False-positive rate at full capacity.
    pub fp_rate: f64,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(10),
            max_future: Duration::from_secs(2),
            capacity: 1 << 20,
            fp_rate: 1e-6,
        }
    }
}

struct Bucket {
    epoch: u64,
    bits: Vec<u64>,
    count: usize,
}

/// Two rotating Bloom filters keyed by timestamp epoch.
pub struct BloomReplayFilter {
    config: ReplayConfig,
    secret: [u8; 32],
    start: UnixTime,
    epoch_ms: u64,
    m_bits: u64,
    k: u32,
    buckets: Vec<Bucket>,
    /// Latest `now` seen. Windows and eviction use `max(now, max_now)`, so a
    /// caller's clock that steps back (NTP, or tasks reading the clock
    /// before taking the lock) can never make the filter forget early.
    max_now: UnixTime,
    /// Set by [`Self::hand_over`]: the state went to a successor, so this
    /// filter refuses every flight (a flight accepted here now would be
    /// unknown to the successor).
    sealed: bool,
}

impl core::fmt::Debug for BloomReplayFilter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BloomReplayFilter")
            .field("config", &self.config)
            .field("start", &self.start)
            .field("m_bits", &self.m_bits)
            .field("k", &self.k)
            .field(
                "live_epochs",
                &self
                    .buckets
                    .iter()
                    .map(|b| (b.epoch, b.count))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl BloomReplayFilter {
    /// A filter started at `start` (the process start), hashing with the
    /// 32-byte `secret` (from the RNG, so peers cannot aim collisions).
    pub fn new(config: ReplayConfig, secret: [u8; 32], start: UnixTime) -> Self {
        let fp = config.fp_rate.clamp(1e-15, 0.5);
        let n = config.capacity.max(1) as f64;
        let ln2 = core::f64::consts::LN_2;
        let m_bits = ((-n * fp.ln()) / (ln2 * ln2)).ceil().max(64.0) as u64;
        let k = ((m_bits as f64 / n) * ln2).round().clamp(1.0, 32.0) as u32;
        let epoch_ms = u64::try_from((config.max_age + config.max_future).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            config,
            secret,
            start,
            epoch_ms,
            m_bits,
            k,
            buckets: Vec::with_capacity(2),
            max_now: start,
            sealed: false,
        }
    }

    /// The snapshot a successor process continues from
    /// ([`Self::to_snapshot`]), taken and sealed in one step: from now on
    /// this filter refuses every flight with [`ReplayError::HandedOver`],
    /// so every flight it ever accepted is in the snapshot and none is
    /// accepted by both processes. [`Self::unseal`] undoes it only when the
    /// successor never used the snapshot (the hand-over was aborted before
    /// it started accepting).
    pub fn hand_over(&mut self) -> Vec<u8> {
        self.sealed = true;
        self.to_snapshot()
    }

    /// Accept flights again after an aborted [`Self::hand_over`]. Sound only
    /// if no process restored the snapshot and accepted a flight with it.
    pub fn unseal(&mut self) {
        self.sealed = false;
    }

    /// Whether [`Self::hand_over`] sealed this filter.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// The latest time the filter has seen (its start, or the latest
    /// `now` of a flight check).
    pub fn latest(&self) -> UnixTime {
        self.max_now
    }

    /// Bytes of memory the filter uses when both buckets are live.
    pub fn memory_bytes(&self) -> u64 {
        2 * self.m_bits.div_ceil(64) * 8
    }

    /// Number of hash functions.
    pub fn hashes(&self) -> u32 {
        self.k
    }

    /// Expected false-positive rate with `n` flights in one bucket.
    pub fn expected_fp_rate(&self, n: usize) -> f64 {
        let k = f64::from(self.k);
        (1.0 - (-k * n as f64 / self.m_bits as f64).exp()).powf(k)
    }

    fn indices(&self, key_id: u32, ephemeral: &[u8; 32]) -> impl Iterator<Item = u64> {
        let mut input = [0u8; 68];
        input[..32].copy_from_slice(&self.secret);
        input[32..36].copy_from_slice(&key_id.to_be_bytes());
        input[36..].copy_from_slice(ephemeral);
        let h = crate::record::sha256(&input);
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&h[..8]);
        b.copy_from_slice(&h[8..16]);
        let h1 = u64::from_le_bytes(a);
        let h2 = u64::from_le_bytes(b) | 1;
        let m = self.m_bits;
        (0..u64::from(self.k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % m)
    }

    fn bucket_contains(bits: &[u64], idx: &[u64]) -> bool {
        idx.iter()
            .all(|&i| bits[(i / 64) as usize] & (1 << (i % 64)) != 0)
    }
}

/// Why a [`BloomReplayFilter`] snapshot was not restored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Not a snapshot, truncated, or its checksum does not match.
    Malformed(&'static str),
    /// Taken with other settings (window, capacity or false-positive rate).
    SettingsChanged,
}

impl core::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SnapshotError::Malformed(why) => write!(f, "not a replay filter snapshot: {why}"),
            SnapshotError::SettingsChanged => {
                f.write_str("the replay filter snapshot was taken with other settings")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

const SNAPSHOT_MAGIC: &[u8; 8] = b"ZRTTRF1\0";

impl BloomReplayFilter {
    /// The filter's whole state (settings, hashing secret, start, latest
    /// time, both buckets) with a SHA-256 checksum, for a successor process
    /// ([`Self::from_snapshot`]): taken after this process stopped
    /// accepting flights, it lets the successor answer early at once
    /// instead of refusing flights stamped before its start. It holds the
    /// hashing secret: store it like a private key (docs/PROTOCOL.md §7).
    pub fn to_snapshot(&self) -> Vec<u8> {
        let words = self.m_bits.div_ceil(64) as usize;
        let mut out = Vec::with_capacity(128 + self.buckets.len() * (16 + 8 * words));
        out.extend_from_slice(SNAPSHOT_MAGIC);
        for v in [
            millis(self.config.max_age),
            millis(self.config.max_future),
            self.config.capacity as u64,
            self.config.fp_rate.to_bits(),
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.secret);
        out.extend_from_slice(&self.start.as_millis().to_be_bytes());
        out.extend_from_slice(&self.max_now.as_millis().to_be_bytes());
        out.push(self.buckets.len() as u8);
        for b in &self.buckets {
            out.extend_from_slice(&b.epoch.to_be_bytes());
            out.extend_from_slice(&(b.count as u64).to_be_bytes());
            for w in &b.bits {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        let sum = crate::record::sha256(&out);
        out.extend_from_slice(&sum);
        out
    }

    /// The filter a predecessor saved with [`Self::to_snapshot`], if it was
    /// taken with `config`. It keeps the predecessor's start and every
    /// flight it remembered, so no flight it accepted can be accepted again
    /// and no restart refusal is needed. Sound only if no other process
    /// accepted flights with these keys since the snapshot was taken: load
    /// a snapshot once (remove it when read) and never one a crashed
    /// process left behind.
    pub fn from_snapshot(config: ReplayConfig, bytes: &[u8]) -> Result<Self, SnapshotError> {
        let body_len = bytes
            .len()
            .checked_sub(32)
            .ok_or(SnapshotError::Malformed("too short"))?;
        let (body, sum) = bytes.split_at(body_len);
        if crate::record::sha256(body).as_slice() != sum {
            return Err(SnapshotError::Malformed("checksum"));
        }
        const SHORT: SnapshotError = SnapshotError::Malformed("truncated");
        let mut r = crate::codec::Reader::new(body);
        if r.take(8).map_err(|_| SHORT)? != SNAPSHOT_MAGIC {
            return Err(SnapshotError::Malformed("magic"));
        }
        let mut settings = [0u64; 4];
        for v in &mut settings {
            *v = r.u64().map_err(|_| SHORT)?;
        }
        let want = [
            millis(config.max_age),
            millis(config.max_future),
            config.capacity as u64,
            config.fp_rate.to_bits(),
        ];
        if settings != want {
            return Err(SnapshotError::SettingsChanged);
        }
        let secret: [u8; 32] = r.array().map_err(|_| SHORT)?;
        let start = UnixTime::from_millis(r.u64().map_err(|_| SHORT)?);
        let max_now = UnixTime::from_millis(r.u64().map_err(|_| SHORT)?);
        let mut f = Self::new(config, secret, start);
        f.max_now = max_now.max(start);
        let n = r.u8().map_err(|_| SHORT)?;
        if n > 2 {
            return Err(SnapshotError::Malformed("more than two buckets"));
        }
        let words = f.m_bits.div_ceil(64) as usize;
        for _ in 0..n {
            let epoch = r.u64().map_err(|_| SHORT)?;
            let count = usize::try_from(r.u64().map_err(|_| SHORT)?)
                .map_err(|_| SnapshotError::Malformed("count"))?;
            let raw = r.take(words * 8).map_err(|_| SHORT)?;
            let bits = raw
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    u64::from_le_bytes(a)
                })
                .collect();
            f.buckets.push(Bucket { epoch, bits, count });
        }
        if !r.is_empty() {
            return Err(SnapshotError::Malformed("trailing bytes"));
        }
        Ok(f)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ReplayFilter for BloomReplayFilter {
    fn window(&self) -> Option<Duration> {
        Some(self.config.max_age + self.config.max_future)
    }

    fn seen(&self, key_id: u32, ephemeral: &[u8; 32]) -> bool {
        let idx: Vec<u64> = self.indices(key_id, ephemeral).collect();
        self.buckets
            .iter()
            .any(|b| Self::bucket_contains(&b.bits, &idx))
    }

    fn check_and_insert(
        &mut self,
        key_id: u32,
        ephemeral: &[u8; 32],
        timestamp: UnixTime,
        now: UnixTime,
    ) -> Result<(), ReplayError> {
        if self.sealed {
            return Err(ReplayError::HandedOver);
        }
        let now = now.max(self.max_now);
        self.max_now = now;
        // The window first: a flight outside it is the client's clock (it
        // should fix it), whatever this process's age; only a flight inside
        // it that a predecessor could have accepted is refused for the restart.
        if timestamp < now.saturating_sub(self.config.max_age) {
            return Err(ReplayError::TooOld);
        }
        if timestamp > now.saturating_add(self.config.max_future) {
            return Err(ReplayError::InFuture);
        }
        if timestamp <= self.start.saturating_add(self.config.max_future) {
            return Err(ReplayError::BeforeFilterStart);
        }
        let idx: Vec<u64> = self.indices(key_id, ephemeral).collect();
        if self
            .buckets
            .iter()
            .any(|b| Self::bucket_contains(&b.bits, &idx))
        {
            return Err(ReplayError::Replayed);
        }
        let epoch = timestamp.as_millis() / self.epoch_ms;
        let oldest_live = now.saturating_sub(self.config.max_age).as_millis() / self.epoch_ms;
        let pos = match self.buckets.iter().position(|b| b.epoch == epoch) {
            Some(p) => p,
            None => {
                let words = self.m_bits.div_ceil(64) as usize;
                // Reuse a dead bucket's memory if there is one.
                if let Some(p) = self.buckets.iter().position(|b| b.epoch < oldest_live) {
                    let b = &mut self.buckets[p];
                    b.epoch = epoch;
                    b.bits.iter_mut().for_each(|w| *w = 0);
                    b.count = 0;
                    p
                } else if self.buckets.len() < 2 {
                    self.buckets.push(Bucket {
                        epoch,
                        bits: vec![0; words],
                        count: 0,
                    });
                    self.buckets.len() - 1
                } else {
                    // Two live epochs already: cannot happen while the window
                    // spans one epoch length; refuse rather than forget.
                    return Err(ReplayError::Full);
                }
            }
        };
        let b = &mut self.buckets[pos];
        if b.count >= self.config.capacity {
            return Err(ReplayError::Full);
        }
        for i in idx {
            b.bits[(i / 64) as usize] |= 1 << (i % 64);
        }
        b.count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const T0: u64 = 1_800_000_000_000;

    fn filter(capacity: usize) -> BloomReplayFilter {
        BloomReplayFilter::new(
            ReplayConfig {
                capacity,
                ..ReplayConfig::default()
            },
            [7; 32],
            UnixTime::from_millis(T0),
        )
    }

    fn e(i: u32) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        k
    }

    #[test]
    fn a_snapshot_carries_every_flight_and_skips_the_restart_refusal() {
        let mut f = filter(1000);
        let t = UnixTime::from_millis(T0 + 60_000);
        for i in 0..50 {
            assert_eq!(f.check_and_insert(1, &e(i), t, t), Ok(()));
        }
        let snap = f.to_snapshot();
        let cfg = ReplayConfig {
            capacity: 1000,
            ..ReplayConfig::default()
        };
        let mut g = BloomReplayFilter::from_snapshot(cfg, &snap).unwrap();
        let later = t.saturating_add(Duration::from_millis(500));
        for i in 0..50 {
            assert_eq!(
                g.check_and_insert(1, &e(i), t, later),
                Err(ReplayError::Replayed),
                "flight {i} was accepted before the restart"
            );
        }
        // A fresh flight stamped just now is accepted at once: a filter
        // started now would refuse it (BeforeFilterStart).
        assert_eq!(g.check_and_insert(1, &e(999), later, later), Ok(()));
        let mut fresh = BloomReplayFilter::new(cfg, [7; 32], later);
        assert_eq!(
            fresh.check_and_insert(1, &e(998), later, later),
            Err(ReplayError::BeforeFilterStart)
        );
        assert_eq!(g.to_snapshot().len(), snap.len(), "same layout");
    }

    #[test]
    fn a_handed_over_filter_refuses_everything_until_unsealed() {
        let mut f = filter(1000);
        let t = UnixTime::from_millis(T0 + 60_000);
        assert_eq!(f.check_and_insert(1, &e(1), t, t), Ok(()));
        let snap = f.hand_over();
        assert!(f.is_sealed());
        // Fresh flights and replays alike: nothing is recorded here any more.
        assert_eq!(
            f.check_and_insert(1, &e(2), t, t),
            Err(ReplayError::HandedOver)
        );
        assert_eq!(
            f.check_and_insert(1, &e(1), t, t),
            Err(ReplayError::HandedOver)
        );
        // The successor knows every flight accepted before the seal, and
        // is not sealed.
        let cfg = ReplayConfig {
            capacity: 1000,
            ..ReplayConfig::default()
        };
        let mut g = BloomReplayFilter::from_snapshot(cfg, &snap).unwrap();
        assert!(!g.is_sealed());
        assert_eq!(
            g.check_and_insert(1, &e(1), t, t),
            Err(ReplayError::Replayed)
        );
        assert_eq!(g.check_and_insert(1, &e(2), t, t), Ok(()));
        // An aborted hand-over: the predecessor serves on with its state.
        f.unseal();
        assert_eq!(f.check_and_insert(1, &e(3), t, t), Ok(()));
        assert_eq!(
            f.check_and_insert(1, &e(1), t, t),
            Err(ReplayError::Replayed)
        );
    }

    #[test]
    fn a_damaged_or_foreign_snapshot_is_refused() {
        let mut f = filter(1000);
        let t = UnixTime::from_millis(T0 + 60_000);
        f.check_and_insert(1, &e(1), t, t).unwrap();
        let snap = f.to_snapshot();
        let cfg = ReplayConfig {
            capacity: 1000,
            ..ReplayConfig::default()
        };
        let mut bad = snap.clone();
        bad[100] ^= 1;
        assert_eq!(
            BloomReplayFilter::from_snapshot(cfg, &bad).unwrap_err(),
            SnapshotError::Malformed("checksum")
        );
        assert!(BloomReplayFilter::from_snapshot(cfg, &snap[..snap.len() - 1]).is_err());
        assert!(BloomReplayFilter::from_snapshot(cfg, b"").is_err());
        let other = ReplayConfig {
            capacity: 2000,
            ..ReplayConfig::default()
        };
        assert_eq!(
            BloomReplayFilter::from_snapshot(other, &snap).unwrap_err(),
            SnapshotError::SettingsChanged
        );
    }

    #[test]
    fn replay_is_refused_and_fresh_accepted() {
        let mut f = filter(1000);
        let now = UnixTime::from_millis(T0 + 60_000);
        assert_eq!(f.check_and_insert(1, &e(1), now, now), Ok(()));
        assert!(f.seen(1, &e(1)));
        assert!(!f.seen(2, &e(1)), "key id is part of the identity");
        assert_eq!(
            f.check_and_insert(1, &e(1), now, now),
            Err(ReplayError::Replayed)
        );
        assert_eq!(f.check_and_insert(2, &e(1), now, now), Ok(()));
    }

    #[test]
    fn window_edges() {
        let mut f = filter(1000);
        let now = UnixTime::from_millis(T0 + 60_000);
        let old = now.saturating_sub(Duration::from_millis(10_001));
        let future = now.saturating_add(Duration::from_millis(2_001));
        assert_eq!(
            f.check_and_insert(1, &e(1), old, now),
            Err(ReplayError::TooOld)
        );
        assert_eq!(
            f.check_and_insert(1, &e(2), future, now),
            Err(ReplayError::InFuture)
        );
        let edge_old = now.saturating_sub(Duration::from_millis(10_000));
        let edge_new = now.saturating_add(Duration::from_millis(2_000));
        assert_eq!(f.check_and_insert(1, &e(3), edge_old, now), Ok(()));
        assert_eq!(f.check_and_insert(1, &e(4), edge_new, now), Ok(()));
    }

    #[test]
    fn restart_does_not_reopen_the_window() {
        // A previous process could have accepted flights stamped up to
        // start + max_future; the new filter refuses all of them.
        let mut f = filter(1000);
        let start = UnixTime::from_millis(T0);
        // Up to and including start + max_future: a process overlapping
        // this one in the same millisecond could have accepted it.
        let ts = start.saturating_add(Duration::from_millis(2_000));
        assert_eq!(
            f.check_and_insert(1, &e(1), ts, start),
            Err(ReplayError::BeforeFilterStart)
        );
        let ts = start.saturating_add(Duration::from_millis(2_001));
        assert_eq!(f.check_and_insert(1, &e(1), ts, ts), Ok(()));
    }

    #[test]
    fn a_flight_outside_the_window_is_the_clients_clock_even_after_a_restart() {
        // Stamped long before this process started: the client's clock is
        // wrong (Reject 4, fix the clock), not a restart (Reject 7, retry later).
        let mut f = filter(1000);
        let start = UnixTime::from_millis(T0);
        let old = UnixTime::from_millis(T0 - 60_000);
        assert_eq!(
            f.check_and_insert(1, &e(1), old, start),
            Err(ReplayError::TooOld)
        );
    }

    #[test]
    fn remembers_a_flight_as_long_as_it_can_be_accepted() {
        let mut f = filter(1000);
        let ts = UnixTime::from_millis(T0 + 100_000);
        assert_eq!(f.check_and_insert(1, &e(9), ts, ts), Ok(()));
        // Fill many later epochs with other flights while replaying e(9) at
        // every instant it would still pass the timestamp check.
        let mut t = ts;
        let mut i = 100;
        while t <= ts.saturating_add(Duration::from_millis(10_000)) {
            assert_eq!(
                f.check_and_insert(1, &e(9), ts, t),
                Err(ReplayError::Replayed),
                "at {t}"
            );
            let fresh_ts = t;
            assert_eq!(f.check_and_insert(1, &e(i), fresh_ts, t), Ok(()));
            i += 1;
            t = t.saturating_add(Duration::from_millis(250));
        }
    }

    #[test]
    fn a_clock_stepping_back_cannot_reopen_a_replay() {
        // Found in review: flight A near the end of epoch k is accepted; a
        // later `now` reuses A's bucket for epoch k+2; then a caller whose
        // clock is slightly behind presents A again.
        let mut f = filter(1000);
        let epoch = 12_000u64;
        let k = (T0 + 120_000) / epoch;
        let ts_a = UnixTime::from_millis((k + 1) * epoch - 1);
        assert_eq!(f.check_and_insert(1, &e(1), ts_a, ts_a), Ok(()));
        let later = UnixTime::from_millis((k + 1) * epoch + 10_000);
        assert_eq!(f.check_and_insert(1, &e(2), later, later), Ok(()));
        let behind = UnixTime::from_millis((k + 1) * epoch + 9_999);
        assert_ne!(f.check_and_insert(1, &e(1), ts_a, behind), Ok(()));
    }

    #[test]
    fn full_bucket_refuses_instead_of_degrading() {
        let mut f = filter(3);
        let now = UnixTime::from_millis(T0 + 60_000);
        for i in 0..3 {
            assert_eq!(f.check_and_insert(1, &e(i), now, now), Ok(()));
        }
        assert_eq!(
            f.check_and_insert(1, &e(99), now, now),
            Err(ReplayError::Full)
        );
    }

    #[test]
    fn sizing_matches_the_stated_rate() {
        let f = filter(1 << 20);
        assert!(
            f.expected_fp_rate(1 << 20) <= 1.1e-6,
            "{}",
            f.expected_fp_rate(1 << 20)
        );
        assert!(f.memory_bytes() < 8 << 20, "{}", f.memory_bytes());
    }

    #[test]
    fn measured_false_positive_rate_is_near_the_stated_one() {
        // Small filter at a loose rate so the test is fast: 20k flights at 1%.
        let mut f = BloomReplayFilter::new(
            ReplayConfig {
                capacity: 20_000,
                fp_rate: 0.01,
                ..ReplayConfig::default()
            },
            [3; 32],
            UnixTime::from_millis(T0),
        );
        let now = UnixTime::from_millis(T0 + 60_000);
        for i in 0..20_000 {
            f.check_and_insert(1, &e(i), now, now).unwrap_or(());
        }
        let fp = (1_000_000..1_020_000).filter(|&i| f.seen(1, &e(i))).count();
        let rate = fp as f64 / 20_000.0;
        assert!(rate < 0.02, "measured fp rate {rate}");
    }

    proptest! {
        /// Against a HashSet model: no false negatives; fresh flights are
        /// accepted except for rare false positives.
        #[test]
        fn matches_hashset_model(ops in proptest::collection::vec((0u32..3, 0u32..200, 0u64..30_000), 1..400)) {
            let mut f = filter(10_000);
            let mut model: HashSet<(u32, u32)> = HashSet::new();
            let mut now = UnixTime::from_millis(T0 + 10_000);
            let mut false_pos = 0;
            for (key, eph, dt) in ops {
                now = now.saturating_add(Duration::from_millis(dt % 50));
                let res = f.check_and_insert(key, &e(eph), now, now);
                if model.contains(&(key, eph)) {
                    prop_assert_eq!(res, Err(ReplayError::Replayed));
                } else if res.is_ok() {
                    model.insert((key, eph));
                } else {
                    prop_assert_eq!(res, Err(ReplayError::Replayed));
                    false_pos += 1;
                }
            }
            prop_assert!(false_pos <= 1);
        }
    }
}
