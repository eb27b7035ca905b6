//! The key-store refresher: every `--refresh` and on SIGHUP, re-read (and
//! with `--rotate`, rotate) the sites' key stores and the store's token
//! keys, then swap them into the running gateway, keeping the previous
//! record of a key re-signed with the same terms (PROTOCOL.md §6).

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use zrtt_dns::token_keys::TokenSchedule;
use zrtt_proto::admission::TokenKeyRing;
use zrtt_proto::handshake::ServerConfig;

use super::keys::{all_keys, store_token_keys, LoadedSite};
use crate::util;

/// What the refresher needs from the gateway.
pub(super) struct Refresher {
    pub(super) sites: Vec<LoadedSite>,
    pub(super) rotate: bool,
    pub(super) every: Duration,
    pub(super) schedule: TokenSchedule,
    /// The token keys to replace, when they come from the default site's store.
    pub(super) store_tokens: Option<TokenKeyRing>,
    pub(super) keys: Arc<RwLock<ServerConfig>>,
    pub(super) hup: Arc<Notify>,
    pub(super) stop: watch::Receiver<bool>,
}

impl Refresher {
    /// Runs until `stop` changes.
    pub(super) fn spawn(self) -> JoinHandle<()> {
        let Refresher {
            sites,
            rotate,
            every,
            schedule,
            store_tokens,
            keys: shared_keys,
            hup,
            mut stop,
        } = self;
        tokio::spawn(async move {
            let sites = Arc::new(Mutex::new(sites));
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(every) => {}
                    () = hup.notified() => {}
                }
                let sites = sites.clone();
                let with_tokens = store_tokens.is_some();
                let fresh = tokio::task::spawn_blocking(move || {
                    let mut sites = sites.lock().unwrap_or_else(|p| p.into_inner());
                    let keys = all_keys(&mut sites, rotate)?;
                    // How long a re-signed key's previous record stays
                    // accepted: resolvers keep it for its TTL.
                    let keep_for = 2 * sites
                        .iter()
                        .filter_map(|s| s.store.as_ref())
                        .map(|ks| ks.policy().record_ttl)
                        .max()
                        .unwrap_or_default()
                        + every;
                    // Token keys: the default site's store.
                    let tokens = match (&sites[0].store, with_tokens) {
                        (Some(ks), true) => Some(store_token_keys(ks.dir(), schedule)?),
                        _ => None,
                    };
                    anyhow::Ok((keys, tokens, keep_for))
                })
                .await;
                match fresh {
                    Ok(Ok((mut cfg, tokens, keep_for))) => {
                        let mut keys = shared_keys.write().unwrap_or_else(|p| p.into_inner());
                        // A re-signed record (a certificate renewal):
                        // flights on the previous one still decrypt.
                        cfg.keep_previous_records(&keys, util::now(), keep_for);
                        // Resumption tickets: the same token keys as before.
                        cfg.resumption = keys.resumption.clone();
                        *keys = cfg;
                        drop(keys);
                        if let (Some(ring), Some(t)) = (&store_tokens, tokens) {
                            ring.replace(t);
                        }
                    }
                    Ok(Err(e)) => tracing::error!("key store: {e:#}"),
                    Err(e) => tracing::error!("key store task: {e}"),
                }
            }
        })
    }
}
