//! `zrtt dns`: an authoritative server for one zone file plus the key
//! records of one or more key stores, and the verifier key records of one
//! or more verifier key stores, on UDP and TCP (hickory-server).
//!
//! The zone is served by hickory's in-memory zone handler behind its
//! `Catalog`. [`ZoneState::refresh`] keeps the key records current: it
//! re-reads key stores another process rotated, rotates them itself when
//! asked to, and replaces the key-carrying RRsets when the published set or
//! its TTL changes. Verifier stores are handled the same way, their records
//! (TXT and TLSA) at `_zrttpv.<verifier name>`. [`Handler`] wraps the catalog so that UDP answers never
//! exceed [`EDNS_PAYLOAD`] bytes and the OPT record advertises it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::rr::{LowerName, Name, Record, RecordSet, RecordType, RrKey};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneHandler, ZoneType};
use serde::Deserialize;

pub use crate::transfer::TransferPolicy;
use zrtt_proto::record::encodings;
use zrtt_proto::UnixTime;

pub use crate::client::EDNS_PAYLOAD;
use crate::keystore::{KeyStore, KeyStoreError, KeyStoreRandom};
use crate::records::{self, HttpsOptions, RecordsError};
use crate::verifier_store::VerifierStore;
use crate::zone::{self, Zone, ZoneError};

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The zone file.
    #[error(transparent)]
    Zone(#[from] ZoneError),
    /// A key store.
    #[error(transparent)]
    KeyStore(#[from] KeyStoreError),
    /// Building records.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// A configuration mistake.
    #[error("{0}")]
    Config(String),
    /// Binding a socket.
    #[error("{addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
}

mod config;
mod handler;
mod metrics;
mod referral;
mod regions;
pub use config::{DnsConfig, HostConfig, VerifierConfig};
pub use handler::Handler;
pub use metrics::DnsMetrics;
pub use regions::RegionConfig;

struct HostState {
    store: KeyStore,
    opts: HttpsOptions,
    /// What the served records were built from: (record bytes, ttl).
    served: Option<(Vec<Vec<u8>>, Vec<u8>, u32)>,
}

struct VerifierState {
    store: VerifierStore,
    /// What the served records were built from: (record bytes, cert, ttl).
    served: Option<(Vec<Vec<u8>>, Vec<u8>, u32)>,
}

/// The zone and the key stores behind it.
pub struct ZoneState {
    zone: Zone,
    handler: Arc<InMemoryZoneHandler>,
    /// Per-region views ([`ZoneState::set_regions`]).
    views: Vec<regions::View>,
    hosts: Vec<HostState>,
    verifiers: Vec<VerifierState>,
    rotate: bool,
    transfer: Arc<TransferPolicy>,
    metrics: Arc<DnsMetrics>,
    /// Set once [`serve`] answers, cleared when it stops.
    ready: Option<tokio::sync::watch::Sender<bool>>,
}

/// What [`ZoneState::refresh`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshReport {
    /// Hosts whose key records changed.
    pub updated_hosts: Vec<String>,
    /// Rotation reports that changed something, per host.
    pub rotations: Vec<(String, String)>,
    /// Stores re-read because another process changed them.
    pub reloaded: Vec<String>,
    /// Errors (the server keeps serving the previous records).
    pub errors: Vec<String>,
    /// The zone's new SOA serial, when records changed.
    pub serial: Option<u32>,
}

impl ZoneState {
    /// Load the zone file and open the key stores. Every host must be in
    /// the zone and appear once.
    pub fn new(
        zone_file: &Path,
        origin: Option<&str>,
        hosts: &[HostConfig],
        rotate: bool,
    ) -> Result<Self, ServerError> {
        let zone = zone::load(zone_file, origin)?;
        let mut states: Vec<HostState> = Vec::new();
        for h in hosts {
            let store = KeyStore::open(&h.keystore)?;
            let host = records::fqdn(store.name())?;
            if !zone.origin.zone_of(&host) {
                return Err(ServerError::Config(format!(
                    "{}: host {} is not in the zone {}",
                    h.keystore.display(),
                    store.name(),
                    zone.origin
                )));
            }
            if states.iter().any(|s| s.store.name() == store.name()) {
                return Err(ServerError::Config(format!(
                    "{}: a second key store for {}",
                    h.keystore.display(),
                    store.name()
                )));
            }
            let (v4, v6) = zone.addresses(&host);
            states.push(HostState {
                store,
                opts: HttpsOptions {
                    alpn: h.alpn.clone(),
                    port: h.port,
                    ipv4_hints: v4,
                    ipv6_hints: v6,
                },
                served: None,
            });
        }
        let handler = InMemoryZoneHandler::new(
            zone.origin.clone(),
            zone.records.clone(),
            ZoneType::Primary,
            // Transfers are allowed here and refused per source address by
            // the request handler (transfer.rs).
            AxfrPolicy::AllowAll,
        )
        .map_err(|e| ServerError::Config(format!("zone {}: {e}", zone.origin)))?;
        Ok(Self {
            zone,
            handler: Arc::new(handler),
            views: Vec::new(),
            hosts: states,
            verifiers: Vec::new(),
            rotate,
            transfer: Arc::new(TransferPolicy::default()),
            metrics: Arc::default(),
            ready: None,
        })
    }

    /// The server's metrics (shared with [`serve`] and the handler).
    pub fn metrics(&self) -> Arc<DnsMetrics> {
        self.metrics.clone()
    }

    /// Have [`serve`] set `ready` to `true` once it answers (the zone and
    /// the key records loaded) and to `false` when it stops.
    pub fn signal_ready(&mut self, ready: tokio::sync::watch::Sender<bool>) {
        self.ready = Some(ready);
    }

    /// Answer queries from these regions' sources from their views
    /// (regions.rs). Call before serving: every record is rebuilt at the
    /// next [`Self::refresh`].
    pub fn set_regions(&mut self, regions: &[RegionConfig]) -> Result<(), ServerError> {
        let hosts: Vec<(Name, &HttpsOptions)> = self
            .hosts
            .iter()
            .map(|h| Ok((records::fqdn(h.store.name())?, &h.opts)))
            .collect::<Result<_, RecordsError>>()?;
        let mut views = Vec::new();
        for r in regions {
            if views.iter().any(|v: &regions::View| v.name == r.name) {
                return Err(ServerError::Config(format!(
                    "a second region named {}",
                    r.name
                )));
            }
            views.push(regions::View::new(r, &self.zone, &hosts)?);
        }
        self.views = views;
        self.hosts.iter_mut().for_each(|h| h.served = None);
        self.verifiers.iter_mut().for_each(|v| v.served = None);
        Ok(())
    }

    /// Who may transfer the zone and whom to notify (default: nobody).
    pub fn set_transfer(&mut self, policy: TransferPolicy) {
        self.transfer = Arc::new(policy);
    }

    /// Also publish the verifier key records of these verifier key stores
    /// (docs/PROVENANCE.md): each verifier name must be in the zone and
    /// appear once.
    pub fn add_verifiers(&mut self, verifiers: &[VerifierConfig]) -> Result<(), ServerError> {
        for v in verifiers {
            let store = VerifierStore::open(&v.keystore)?;
            let owner = records::fqdn(&encodings::verifier_owner(store.name()))?;
            if !self.zone.origin.zone_of(&owner) {
                return Err(ServerError::Config(format!(
                    "{}: verifier {} is not in the zone {}",
                    v.keystore.display(),
                    store.name(),
                    self.zone.origin
                )));
            }
            if self
                .verifiers
                .iter()
                .any(|s| s.store.name() == store.name())
            {
                return Err(ServerError::Config(format!(
                    "{}: a second verifier key store for {}",
                    v.keystore.display(),
                    store.name()
                )));
            }
            self.verifiers.push(VerifierState {
                store,
                served: None,
            });
        }
        Ok(())
    }

    /// The verifier key stores, in configuration order.
    pub fn verifier_stores(&self) -> impl Iterator<Item = &VerifierStore> {
        self.verifiers.iter().map(|v| &v.store)
    }

    /// The zone's origin.
    pub fn origin(&self) -> &Name {
        &self.zone.origin
    }

    /// The key stores, in configuration order.
    pub fn stores(&self) -> impl Iterator<Item = &KeyStore> {
        self.hosts.iter().map(|h| &h.store)
    }

    /// A request handler serving this zone; it sees every later refresh.
    pub fn handler(&self) -> Handler {
        let view_of = |h: &Arc<InMemoryZoneHandler>, zone: &Zone| {
            let mut catalog = Catalog::new();
            let h: Arc<dyn ZoneHandler> = h.clone();
            catalog.upsert(LowerName::new(&self.zone.origin), vec![h]);
            (catalog, referral::Cuts::of(zone))
        };
        Handler {
            default: view_of(&self.handler, &self.zone),
            views: self
                .views
                .iter()
                .map(|v| (v.nets.clone(), view_of(&v.handler, &v.zone)))
                .collect(),
            transfer: self.transfer.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Bring the key records up to date at `now`: reload stores changed on
    /// disk, rotate (when enabled), and replace the RRsets of every host
    /// whose published records or TTL changed. Errors are reported, not
    /// returned: the previous records stay in service.
    pub async fn refresh(&mut self, now: UnixTime, rng: &dyn KeyStoreRandom) -> RefreshReport {
        let mut report = RefreshReport::default();
        let mut updates: Vec<(String, BTreeMap<RrKey, Option<RecordSet>>)> = Vec::new();
        // The same per view (built on the view's zone and address hints).
        let mut view_updates = vec![Vec::new(); self.views.len()];
        for (hi, h) in self.hosts.iter_mut().enumerate() {
            let name = h.store.name().to_owned();
            match h.store.reload_if_changed() {
                Ok(true) => report.reloaded.push(name.clone()),
                Ok(false) => {}
                Err(e) => report.errors.push(format!("{name}: reload: {e}")),
            }
            if self.rotate {
                match h.store.rotate(now, rng) {
                    Ok(r) if r.changed() => report.rotations.push((name.clone(), r.to_string())),
                    Ok(_) => {}
                    Err(e) => report.errors.push(format!("{name}: rotate: {e}")),
                }
            }
            let published = h.store.published_records(now);
            let ttl = h.store.record_ttl(now);
            let key = (
                published.iter().map(|r| r.encode()).collect::<Vec<_>>(),
                h.store.cert_der().to_vec(),
                ttl,
            );
            if h.served.as_ref() == Some(&key) {
                continue;
            }
            let built =
                build_rrsets(&self.zone, &h.store, &published, ttl, &h.opts).and_then(|sets| {
                    let views = self
                        .views
                        .iter()
                        .map(|v| build_rrsets(&v.zone, &h.store, &published, ttl, &v.opts[hi]));
                    Ok((sets, views.collect::<Result<Vec<_>, _>>()?))
                });
            match built {
                Ok((sets, views)) => {
                    updates.push((name.clone(), sets));
                    for (u, sets) in view_updates.iter_mut().zip(views) {
                        u.push(sets);
                    }
                    h.served = Some(key);
                }
                Err(e) => report.errors.push(format!("{name}: records: {e}")),
            }
        }
        for v in &mut self.verifiers {
            let name = v.store.name().to_owned();
            match v.store.reload_if_changed() {
                Ok(true) => report.reloaded.push(format!("verifier {name}")),
                Ok(false) => {}
                Err(e) => report.errors.push(format!("verifier {name}: reload: {e}")),
            }
            if self.rotate {
                match v.store.rotate(now, rng) {
                    Ok(r) if r.changed() => report
                        .rotations
                        .push((format!("verifier {name}"), r.to_string())),
                    Ok(_) => {}
                    Err(e) => report.errors.push(format!("verifier {name}: rotate: {e}")),
                }
            }
            let published = v.store.published_records(now);
            let ttl = v.store.record_ttl(now);
            let key = (
                published.iter().map(|r| r.encode()).collect::<Vec<_>>(),
                v.store.cert_der().to_vec(),
                ttl,
            );
            if v.served.as_ref() == Some(&key) {
                continue;
            }
            match build_verifier_rrsets(&self.zone, &v.store, &published, ttl) {
                Ok(sets) => {
                    // A view changes addresses only: the same sets.
                    view_updates.iter_mut().for_each(|u| u.push(sets.clone()));
                    updates.push((format!("verifier {name}"), sets));
                    v.served = Some(key);
                }
                Err(e) => report.errors.push(format!("verifier {name}: records: {e}")),
            }
        }
        if !updates.is_empty() {
            let now_secs = u32::try_from(now.as_secs()).unwrap_or(u32::MAX);
            let (names, sets): (Vec<String>, Vec<_>) = updates.into_iter().unzip();
            let origin = &self.zone.origin;
            if let Some(serial) = regions::apply(&self.handler, origin, &sets, now_secs).await {
                self.zone.serial = serial;
                report.serial = Some(serial);
            }
            for (v, sets) in self.views.iter_mut().zip(&view_updates) {
                if let Some(serial) = regions::apply(&v.handler, origin, sets, now_secs).await {
                    v.zone.serial = serial;
                }
            }
            report.updated_hosts = names;
        }
        report
    }
}

/// The RRsets to install for one host: `None` removes one.
fn build_rrsets(
    zone: &Zone,
    store: &KeyStore,
    published: &[zrtt_proto::record::KeyRecord],
    ttl: u32,
    opts: &HttpsOptions,
) -> Result<BTreeMap<RrKey, Option<RecordSet>>, ServerError> {
    let hr = records::host_records(store.name(), published, store.cert_der(), ttl, opts)?;
    let serial = zone.serial;
    let mut out = BTreeMap::new();
    let host = LowerName::new(&hr.host);
    let tunnel = LowerName::new(&hr.tunnel_owner);
    let set = |name: &Name, rtype: RecordType, recs: Vec<Record>| {
        if recs.is_empty() {
            return None;
        }
        let mut s = RecordSet::with_ttl(name.clone(), rtype, ttl);
        for r in recs {
            s.insert(r, serial);
        }
        Some(s)
    };
    out.insert(
        RrKey::new(host.clone(), RecordType::HTTPS),
        set(&hr.host, RecordType::HTTPS, hr.https),
    );
    out.insert(
        RrKey::new(host.clone(), RecordType::TLSA),
        set(&hr.host, RecordType::TLSA, hr.tlsa),
    );
    out.insert(
        RrKey::new(tunnel, RecordType::AAAA),
        set(&hr.tunnel_owner, RecordType::AAAA, hr.aaaa),
    );
    // TXT: keep the zone's own TXT records (SPF and the like) at the host,
    // with the key records' TTL since the RRset now carries keys.
    let txt_key = RrKey::new(host, RecordType::TXT);
    let mut txt: Vec<Record> = zone
        .records
        .get(&txt_key)
        .map(|s| {
            s.records_without_rrsigs()
                .filter(|r| !is_zrtt_txt(r))
                .cloned()
                .map(|mut r| {
                    r.ttl = ttl;
                    r
                })
                .collect()
        })
        .unwrap_or_default();
    txt.extend(hr.txt);
    out.insert(txt_key, set(&hr.host, RecordType::TXT, txt));
    Ok(out)
}

/// The RRsets to install for one verifier: TXT and TLSA at `_zrttpv.<name>`
/// (`None` removes one). The zone's own records at that owner are replaced.
fn build_verifier_rrsets(
    zone: &Zone,
    store: &VerifierStore,
    published: &[zrtt_proto::record::VerifierKeyRecord],
    ttl: u32,
) -> Result<BTreeMap<RrKey, Option<RecordSet>>, ServerError> {
    let vr = records::verifier_records(store.name(), published, store.cert_der(), ttl)?;
    let serial = zone.serial;
    let owner = LowerName::new(&vr.owner);
    let set = |rtype: RecordType, recs: Vec<Record>| {
        if recs.is_empty() {
            return None;
        }
        let mut s = RecordSet::with_ttl(vr.owner.clone(), rtype, ttl);
        for r in recs {
            s.insert(r, serial);
        }
        Some(s)
    };
    let mut out = BTreeMap::new();
    out.insert(
        RrKey::new(owner.clone(), RecordType::TXT),
        set(RecordType::TXT, vr.txt.clone()),
    );
    out.insert(
        RrKey::new(owner, RecordType::TLSA),
        set(RecordType::TLSA, vr.tlsa.clone()),
    );
    Ok(out)
}

/// Whether a TXT record claims to be a zrtt key record.
pub fn is_zrtt_txt(r: &Record) -> bool {
    match &r.data {
        hickory_proto::rr::RData::TXT(t) => {
            t.txt_data.first().is_some_and(|s| s.starts_with(b"v=zrtt"))
        }
        _ => false,
    }
}

/// Bound sockets for one listen address.
#[derive(Debug)]
pub struct Listener {
    /// UDP socket.
    pub udp: tokio::net::UdpSocket,
    /// TCP listener on the same port.
    pub tcp: tokio::net::TcpListener,
}

impl Listener {
    /// Bind UDP and TCP on `addr`. With port 0, both get the same free port.
    pub async fn bind(addr: SocketAddr) -> Result<Self, ServerError> {
        let bind_err = |error| ServerError::Bind { addr, error };
        for _ in 0..16 {
            let udp = tokio::net::UdpSocket::bind(addr).await.map_err(bind_err)?;
            let port = udp.local_addr().map_err(bind_err)?.port();
            match tokio::net::TcpListener::bind(SocketAddr::new(addr.ip(), port)).await {
                Ok(tcp) => return Ok(Self { udp, tcp }),
                Err(e) if addr.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(bind_err(e)),
            }
        }
        Err(bind_err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "no port free for both UDP and TCP",
        )))
    }

    /// The machine-readable line `zrtt dns` prints: `listening udp=ADDR tcp=ADDR`.
    pub fn describe(&self) -> String {
        let a =
            |r: std::io::Result<SocketAddr>| r.map_or_else(|e| e.to_string(), |a| a.to_string());
        format!(
            "listening udp={} tcp={}",
            a(self.udp.local_addr()),
            a(self.tcp.local_addr())
        )
    }
}

/// Serve `state` on `listeners` until `shutdown` fires, refreshing the key
/// records every `refresh_every` with the time from `clock`.
pub async fn serve(
    mut state: ZoneState,
    listeners: Vec<Listener>,
    clock: impl Fn() -> UnixTime + Send,
    rng: &dyn KeyStoreRandom,
    refresh_every: Duration,
    shutdown: shutdown::Shutdown,
) -> Result<(), ServerError> {
    let first = state.refresh(clock(), rng).await;
    log_refresh(&first);
    state.metrics.refreshed(&first, state.zone.serial);
    let notify = |state: &ZoneState, r: &RefreshReport| {
        if r.serial.is_none() || state.transfer.notify.is_empty() {
            return;
        }
        let (origin, to) = (state.zone.origin.clone(), state.transfer.notify.clone());
        let metrics = state.metrics.clone();
        tokio::task::spawn_blocking(move || {
            for (addr, r) in crate::transfer::notify(&origin, &to) {
                metrics.notified(r.is_ok());
                match r {
                    Ok(()) => tracing::info!("NOTIFY {origin} to {addr}: answered"),
                    Err(e) => tracing::warn!("NOTIFY {origin} to {addr}: {e}"),
                }
            }
        });
    };
    notify(&state, &first);
    let mut server = hickory_server::Server::new(state.handler());
    for l in listeners {
        server.register_socket(l.udp);
        server.register_listener(l.tcp, Duration::from_secs(10), 64);
    }
    if let Some(r) = &state.ready {
        r.send_replace(true);
    }
    let mut tick = tokio::time::interval(refresh_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let r = state.refresh(clock(), rng).await;
                log_refresh(&r);
                state.metrics.refreshed(&r, state.zone.serial);
                notify(&state, &r);
            }
            _ = shutdown.wait() => break,
        }
    }
    if let Some(r) = &state.ready {
        r.send_replace(false);
    }
    let _ = server.shutdown_gracefully().await;
    Ok(())
}

fn log_refresh(r: &RefreshReport) {
    for (host, what) in &r.rotations {
        tracing::info!("{host}: rotation: {what}");
    }
    for host in &r.updated_hosts {
        tracing::info!("{host}: key records updated");
    }
    for e in &r.errors {
        tracing::error!("{e}");
    }
}

pub mod shutdown;

/// The AAAA tunnel owner for a host, as served.
pub fn tunnel_owner(host: &str) -> String {
    encodings::aaaa_tunnel_owner(host)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn config_is_read_alone_or_from_the_shared_files_dns_section() {
        let tmp = tempfile::tempdir().unwrap();
        let own = tmp.path().join("dns.toml");
        std::fs::write(&own, "zone = \"z.zone\"\n[[host]]\nkeystore = \"ks\"\n").unwrap();
        let c = DnsConfig::from_file(&own).unwrap();
        assert_eq!(c.zone.unwrap(), tmp.path().join("z.zone"));
        assert_eq!(c.hosts[0].keystore, tmp.path().join("ks"));
        let shared = tmp.path().join("zrtt.toml");
        std::fs::write(
            &shared,
            "[gateway]\nbackend = \"127.0.0.1:80\"\n[dns]\nzone = \"z.zone\"\nadmin = \"127.0.0.1:9153\"\n[[dns.host]]\nkeystore = \"ks\"\n",
        )
        .unwrap();
        let c = DnsConfig::from_file(&shared).unwrap();
        assert_eq!(c.zone.unwrap(), tmp.path().join("z.zone"));
        assert_eq!(c.hosts.len(), 1);
        assert_eq!(c.admin, "127.0.0.1:9153".parse().ok());
        std::fs::write(&own, "zone = \"z.zone\"\nbogus = 1\n").unwrap();
        assert!(DnsConfig::from_file(&own).is_err(), "unknown keys refused");
    }
}
