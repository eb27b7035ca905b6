//! The gateway's answer cache for shortcut flights, keyed by flight hash and
//! looked up before decryption: a replayed flight or a resolver's retry gets
//! the same answer stream bytes, never a second run of the request.
//!
//! Sans-IO: times are passed in. Bounded in entries and in answer bytes;
//! Done entries are evicted oldest first and expire `lifetime` after they
//! were stored; Running entries are neither evicted nor expired: the caller
//! ends each run with [`AnswerCache::finish`] or [`AnswerCache::abandon`].

use core::time::Duration;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::time::UnixTime;

/// What the cache holds for a flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing: decrypt and accept it (the replay filter decides).
    Miss,
    /// Accepted and being answered: wait (TCP) or stay silent (UDP).
    Running,
    /// Answered: these answer stream bytes, again.
    Done(Arc<[u8]>),
}

/// The cache holds as many entries as it may and all of them are Running:
/// refuse the flight (Reject 7, busy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shortcut answer cache full of running flights")]
pub struct CacheFull;

#[derive(Debug)]
enum Entry {
    Running,
    Done {
        answer: Arc<[u8]>,
        expires: UnixTime,
        seq: u64,
    },
}

/// Answers of shortcut flights by flight hash ([`super::flight_hash`]).
#[derive(Debug)]
pub struct AnswerCache {
    max_entries: usize,
    max_bytes: usize,
    lifetime: Duration,
    entries: HashMap<[u8; 32], Entry>,
    /// Done entries in the order they were stored.
    done: BTreeMap<u64, [u8; 32]>,
    next_seq: u64,
    bytes: usize,
}

impl AnswerCache {
    /// A cache of at most `max_entries` flights and `max_bytes` answer bytes,
    /// keeping answers `lifetime` (at least the replay filter's window).
    pub fn new(max_entries: usize, max_bytes: usize, lifetime: Duration) -> Self {
        Self {
            max_entries,
            max_bytes,
            lifetime,
            entries: HashMap::new(),
            done: BTreeMap::new(),
            next_seq: 0,
            bytes: 0,
        }
    }

    /// What the cache holds for `hash` at `now`.
    pub fn lookup(&mut self, hash: &[u8; 32], now: UnixTime) -> Lookup {
        self.expire(now);
        match self.entries.get(hash) {
            None => Lookup::Miss,
            Some(Entry::Running) => Lookup::Running,
            Some(Entry::Done {
                answer, expires, ..
            }) => {
                if *expires <= now {
                    self.remove(hash);
                    Lookup::Miss
                } else {
                    Lookup::Done(answer.clone())
                }
            }
        }
    }

    /// Mark `hash` Running (a flight accepted, its request about to run),
    /// evicting the oldest Done entry when the cache is full. An entry
    /// already there is left as it is.
    pub fn begin(&mut self, hash: [u8; 32], now: UnixTime) -> Result<(), CacheFull> {
        self.expire(now);
        if self.entries.contains_key(&hash) {
            return Ok(());
        }
        if self.entries.len() >= self.max_entries && !self.evict_oldest() {
            return Err(CacheFull);
        }
        self.entries.insert(hash, Entry::Running);
        Ok(())
    }

    /// Store the answer stream of `hash`'s run (Running -> Done), evicting
    /// the oldest Done entries to stay within the byte bound. An answer
    /// larger than the whole bound is not kept (the entry goes). A Done
    /// entry is never replaced.
    pub fn finish(&mut self, hash: &[u8; 32], answer: Arc<[u8]>, now: UnixTime) {
        self.expire(now);
        match self.entries.get(hash) {
            Some(Entry::Done { .. }) => return,
            Some(Entry::Running) => {}
            None => {
                if self.entries.len() >= self.max_entries && !self.evict_oldest() {
                    return;
                }
            }
        }
        if answer.len() > self.max_bytes {
            self.entries.remove(hash);
            return;
        }
        while self.bytes + answer.len() > self.max_bytes && self.evict_oldest() {}
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += answer.len();
        self.done.insert(seq, *hash);
        let expires = now.saturating_add(self.lifetime);
        self.entries.insert(
            *hash,
            Entry::Done {
                answer,
                expires,
                seq,
            },
        );
    }

    /// Forget a Running entry whose run failed (its flight may be retried
    /// and is then refused by the replay filter).
    pub fn abandon(&mut self, hash: &[u8; 32]) {
        if matches!(self.entries.get(hash), Some(Entry::Running)) {
            self.entries.remove(hash);
        }
    }

    /// Entries held (Running and Done).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Answer bytes held by Done entries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drop expired Done entries from the oldest end.
    fn expire(&mut self, now: UnixTime) {
        while let Some((_, hash)) = self.done.first_key_value() {
            let hash = *hash;
            match self.entries.get(&hash) {
                Some(Entry::Done { expires, .. }) if *expires <= now => self.remove(&hash),
                _ => break,
            }
        }
    }

    /// Evict the oldest Done entry; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        match self.done.first_key_value() {
            Some((_, hash)) => {
                let hash = *hash;
                self.remove(&hash);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, hash: &[u8; 32]) {
        if let Some(Entry::Done { answer, seq, .. }) = self.entries.remove(hash) {
            self.done.remove(&seq);
            self.bytes -= answer.len();
        }
    }
}
