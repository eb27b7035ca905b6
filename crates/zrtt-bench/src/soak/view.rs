//! What the soak's clients know of the server, as they would from DNS: the
//! certificate and the key records the key store publishes now, re-read
//! after each rotation or certificate replacement. Records are verified
//! once per update, not per connection (as a client holds them after a
//! lookup), and a refusal's fresh records are checked against the
//! certificate in force.

use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::{Context, Result};
use zrtt_dns::KeyStore;
use zrtt_net::client::{system_clock, KeySource};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

/// One published state of the key store.
#[derive(Clone, Debug)]
pub(crate) struct Published {
    pub(crate) cert_der: Vec<u8>,
    pub(crate) records: Vec<KeyRecord>,
}

impl Published {
    /// What `ks` publishes now (opened read-only, nothing rotated).
    pub(crate) fn read(ks: &Path) -> Result<Published> {
        let store = KeyStore::open(ks)
            .with_context(|| format!("opening the key store {}", ks.display()))?;
        Ok(Published {
            cert_der: store.cert_der().to_vec(),
            records: store.published_records(system_clock()),
        })
    }

    /// The record a client uses: the valid one that lives longest (the
    /// newest key).
    pub(crate) fn best(&self, host: &str, now: UnixTime) -> Option<VerifiedKeyRecord> {
        best(&self.cert_der, host, &self.records, now)
    }

    /// The key id of [`Self::best`] (0 when none).
    pub(crate) fn current_key_id(&self, host: &str) -> u32 {
        self.best(host, system_clock())
            .map_or(0, |v| v.body().key_id)
    }
}

fn best(
    cert: &[u8],
    host: &str,
    records: &[KeyRecord],
    now: UnixTime,
) -> Option<VerifiedKeyRecord> {
    records
        .iter()
        .filter_map(|r| r.verify(cert, host, now).ok())
        .max_by_key(|v| v.body().not_after)
}

struct State {
    published: Published,
    best: Option<VerifiedKeyRecord>,
}

/// The clients' shared view; [`View::set`] switches every client at once.
pub(crate) struct View {
    host: String,
    state: RwLock<Arc<State>>,
}

impl View {
    pub(crate) fn new(host: &str, published: Published) -> View {
        let v = View {
            host: host.into(),
            state: RwLock::new(Arc::new(State {
                best: None,
                published: published.clone(),
            })),
        };
        v.set(published);
        v
    }

    /// Serve `published` from now on.
    pub(crate) fn set(&self, published: Published) {
        let best = published.best(&self.host, system_clock());
        *self.state.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(State { published, best });
    }

    fn get(&self) -> Arc<State> {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl KeySource for View {
    fn lookup(&self, _host: &str, _now: UnixTime) -> Option<VerifiedKeyRecord> {
        self.get().best.clone()
    }

    fn verify_retry(
        &self,
        host: &str,
        records: &[KeyRecord],
        now: UnixTime,
    ) -> Option<VerifiedKeyRecord> {
        best(&self.get().published.cert_der, host, records, now)
    }
}

/// A key source holding one verified record: the probes' (a connection
/// that must use exactly this key).
pub(crate) struct OneKey(pub(crate) VerifiedKeyRecord);

impl KeySource for OneKey {
    fn lookup(&self, _host: &str, _now: UnixTime) -> Option<VerifiedKeyRecord> {
        Some(self.0.clone())
    }

    fn verify_retry(&self, _: &str, _: &[KeyRecord], _: UnixTime) -> Option<VerifiedKeyRecord> {
        None
    }
}
