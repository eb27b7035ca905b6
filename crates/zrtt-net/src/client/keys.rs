//! Where verified key records come from: the [`KeySource`] trait and
//! [`CertKeySource`] (records checked against one trusted certificate).
//! The DNS-backed source is [`super::DnsKeySource`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

/// A boxed future returned by [`KeySource::prefetch`].
pub type PrefetchFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a client gets verified key records for a host.
///
/// Implementations decide how the signing certificate is trusted (a pinned
/// certificate, DANE, web PKI) and where records come from (files, DNS).
/// The records are [`VerifiedKeyRecord`]s: an implementation cannot hand
/// out a key it did not verify.
pub trait KeySource: Send + Sync {
    /// A verified record valid at `now` for `host`, or `None` (→ TLS).
    /// Called once per connection, possibly on the runtime's thread: it
    /// should not block on the network (see [`KeySource::prefetch`]).
    fn lookup(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord>;
    /// Verify records a server sent in a refusal with the same trust as
    /// [`KeySource::lookup`]; returns one to retry with, or `None`.
    fn verify_retry(
        &self,
        host: &str,
        records: &[KeyRecord],
        now: UnixTime,
    ) -> Option<VerifiedKeyRecord>;
    /// Fetch what [`KeySource::lookup`] needs for `host` (a DNS query, for
    /// example), before it is called; the caller bounds the wait and goes
    /// on (to TLS, if nothing was found) when it runs out. The default has
    /// nothing to fetch and costs one small allocation.
    fn prefetch(&self, host: &str, now: UnixTime) -> PrefetchFuture {
        let _ = (host, now);
        Box::pin(std::future::ready(()))
    }
}

/// Records checked against one certificate the caller trusts (e.g. from a
/// file, or from DNS with TLSA). Records from refusals that verify are kept.
/// Each lookup verifies the records' signatures again (about 60 µs each).
#[derive(Debug)]
pub struct CertKeySource {
    cert_der: Vec<u8>,
    records: Mutex<Vec<KeyRecord>>,
}

impl CertKeySource {
    /// Records signed by the key of the DER certificate `cert_der`.
    pub fn new(cert_der: Vec<u8>, records: Vec<KeyRecord>) -> Self {
        Self {
            cert_der,
            records: Mutex::new(records),
        }
    }

    fn best(&self, host: &str, records: &[KeyRecord], now: UnixTime) -> Option<VerifiedKeyRecord> {
        records
            .iter()
            .filter_map(|r| match r.verify(&self.cert_der, host, now) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::debug!("record {:#010x} refused: {e}", r.body.key_id);
                    None
                }
            })
            .max_by_key(|v| v.body().not_after)
    }
}

impl KeySource for CertKeySource {
    fn lookup(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord> {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        self.best(host, &records, now)
    }

    fn verify_retry(
        &self,
        host: &str,
        records: &[KeyRecord],
        now: UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        let found = self.best(host, records, now)?;
        let mut mine = self.records.lock().unwrap_or_else(|p| p.into_inner());
        mine.retain(|r| r.body.key_id != found.body().key_id);
        mine.push(found.record().clone());
        Some(found)
    }
}
