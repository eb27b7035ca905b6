//! The answer cache: per (name, type), for the answer's TTL shortened to
//! the validity of the key records or certificates it carries; negative
//! answers for the SOA minimum (RFC 2308) or the configured negative TTL.
//! Bounded in entries; the clock is passed in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use zrtt_proto::record;
use zrtt_proto::record::encodings::{self, SvcbRdata};
use zrtt_proto::UnixTime;

use super::{lock, rdata_bytes, LookupError, ResolverConfig};

/// An answer as cached.
#[derive(Clone, Debug)]
pub(super) enum Answer {
    /// The RRset's RDATA (CNAMEs followed).
    Records(Vec<RData>),
    /// NXDOMAIN or NODATA.
    Negative,
}

/// One type's answer in a resolution, or why there is none.
pub(super) type Fetched = Result<Answer, LookupError>;

#[derive(Clone, Debug)]
struct Entry {
    answer: Answer,
    /// Unix seconds; usable while `now < expires`.
    expires: u64,
}

type CacheKey = (String, RecordType);

/// The cache of one resolver.
#[derive(Debug)]
pub(super) struct Cache {
    entries: Mutex<HashMap<CacheKey, Entry>>,
    negative_ttl: u32,
    max_ttl: u32,
    max_entries: usize,
}

impl Cache {
    /// An empty cache with the limits of `cfg`.
    pub(super) fn new(cfg: &ResolverConfig) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            negative_ttl: cfg.negative_ttl,
            max_ttl: cfg.max_ttl,
            max_entries: cfg.max_entries,
        }
    }

    /// A cached answer usable at `now` that does not expire within
    /// `refresh_within` seconds.
    pub(super) fn get(
        &self,
        name: &Name,
        t: RecordType,
        now: u64,
        refresh_within: u64,
    ) -> Option<Answer> {
        let entries = lock(&self.entries);
        let e = entries.get(&key(name, t))?;
        (e.expires > now.saturating_add(refresh_within)).then(|| e.answer.clone())
    }

    /// The answer `msg` carries for `name`/`t`, cached at `now` until it
    /// expires.
    pub(super) fn insert(&self, msg: &Message, name: &Name, t: RecordType, now: u64) -> Answer {
        let (answer, ttl) = self.interpret(msg, name, t);
        let expires = self.expiry(&answer, ttl, now);
        self.store(name, t, answer.clone(), expires, now);
        answer
    }

    /// Entries (name, type, expiry in Unix seconds) with data that expire
    /// within `within` of `now`, soonest first.
    pub(super) fn expiring(
        &self,
        now: UnixTime,
        within: Duration,
    ) -> Vec<(String, RecordType, u64)> {
        let limit = now.as_secs().saturating_add(within.as_secs());
        let mut v: Vec<_> = lock(&self.entries)
            .iter()
            .filter(|(_, e)| matches!(e.answer, Answer::Records(_)) && e.expires <= limit)
            .map(|((n, t), e)| (n.clone(), *t, e.expires))
            .collect();
        v.sort_by_key(|x| x.2);
        v
    }

    /// Drop everything.
    pub(super) fn clear(&self) {
        lock(&self.entries).clear();
    }

    /// The answer's RRset for `name`/`t` (following CNAMEs) and its TTL, or
    /// a negative answer and its negative TTL.
    fn interpret(&self, msg: &Message, name: &Name, t: RecordType) -> (Answer, u32) {
        let mut owners = vec![name.clone()];
        // CNAME chains, bounded.
        for _ in 0..8 {
            let Some(last) = owners.last().cloned() else {
                break;
            };
            let next = msg.answers.iter().find_map(|r| match &r.data {
                RData::CNAME(c) if r.name == last && t != RecordType::CNAME => Some(c.0.clone()),
                _ => None,
            });
            match next {
                Some(n) if !owners.contains(&n) => owners.push(n),
                _ => break,
            }
        }
        let rrs: Vec<&Record> = msg
            .answers
            .iter()
            .filter(|r| r.record_type() == t && owners.contains(&r.name))
            .collect();
        if rrs.is_empty() {
            let ttl = msg
                .authorities
                .iter()
                .find_map(|r| match &r.data {
                    RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                    _ => None,
                })
                .unwrap_or(self.negative_ttl);
            return (Answer::Negative, ttl);
        }
        let ttl = rrs.iter().map(|r| r.ttl).min().unwrap_or(0);
        (
            Answer::Records(rrs.iter().map(|r| r.data.clone()).collect()),
            ttl,
        )
    }

    /// Expiry: TTL, shortened to the validity of key records and
    /// certificates carried.
    fn expiry(&self, answer: &Answer, ttl: u32, now: u64) -> u64 {
        let mut exp = now.saturating_add(u64::from(ttl.min(self.max_ttl)));
        if let Answer::Records(rds) = answer {
            for rd in rds {
                if let Some(na) = validity_end(rd) {
                    exp = exp.min(na);
                }
            }
        }
        exp
    }

    fn store(&self, name: &Name, t: RecordType, answer: Answer, expires: u64, now: u64) {
        if expires <= now {
            return;
        }
        let mut entries = lock(&self.entries);
        if entries.len() >= self.max_entries {
            entries.retain(|_, e| e.expires > now);
            while entries.len() >= self.max_entries {
                let Some(k) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                entries.remove(&k);
            }
        }
        entries.insert(key(name, t), Entry { answer, expires });
    }
}

fn key(name: &Name, t: RecordType) -> CacheKey {
    (name.to_lowercase().to_ascii(), t)
}

/// The earliest end of validity among key records or TLSA certificates in
/// one RDATA, if it carries any.
fn validity_end(rd: &RData) -> Option<u64> {
    let bytes = rdata_bytes(rd)?;
    let list = match rd {
        RData::HTTPS(_) | RData::SVCB(_) => {
            SvcbRdata::decode(&bytes).ok()?.zrtt_records().ok()??
        }
        RData::TXT(_) if encodings::txt_is_zrtt_verifier(&bytes) => {
            return encodings::decode_verifier_txt_rdata(&bytes)
                .ok()
                .map(|r| r.body.not_after);
        }
        RData::TXT(_) if encodings::txt_is_zrtt(&bytes) => {
            vec![encodings::decode_txt_rdata(&bytes).ok()?]
        }
        RData::TLSA(_) => {
            let der = encodings::decode_tlsa_rdata(&bytes).ok()?;
            return record::cert::validity(der).ok().map(|(_, na)| na);
        }
        _ => return None,
    };
    list.iter().map(|r| r.body.not_after).min()
}
