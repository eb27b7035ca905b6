//! [`TlsSessions`]: where the gateway's TLS sessions live, so that a
//! client resumes at any gateway of a fleet and across restarts, and every
//! TLS 1.3 session is still used once (the anti-replay 0-RTT needs, RFC
//! 8446 §8.1).
//!
//! - **Alone** (no `--replay-store`): in this process's [`SessionCache`].
//!   At a restart they are handed over: the stopping process stops taking
//!   and issuing sessions, removes them all from its cache and seals them
//!   ([`TlsSessions::hand_over`]); the next process opens them
//!   ([`TlsSessions::adopt`]). Each session is in exactly one process.
//! - **Fleet** (`--replay-store redis://...`): every session any gateway
//!   issues is also written to Redis, sealed ([`super::seal`]), with `SET
//!   <prefix>:tls:<ticket id hex> <sealed> PX <ttl>` in a task of its own
//!   (off the handshake). A ClientHello offering a PSK is held by the I/O
//!   layer until `GETDEL` of its first identity answered (within the
//!   replay store's deadline): what Redis gave is the only session this
//!   connection's rustls may take ([`super::sessions::SessionView`]), so a
//!   session is resumed by the one connection of the fleet whose `GETDEL`
//!   got it. No local copy is kept of a TLS 1.3 session; TLS 1.2 sessions
//!   (looked up by id, no early data) stay in the issuing process only. No answer in time, an error,
//!   a session that does not open: a full handshake. A session issued
//!   before the store's last failure or reconnection (the replay store's
//!   guard: a promoted replica may not have seen its `GETDEL`) resumes
//!   without 0-RTT.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::server::StoresServerSessions;
use zrtt_proto::admission::{canonical_ip, TokenKeyRing};
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::UnixTime;

use super::super::replay_store::ReplayStore;
use super::super::Metrics;
use super::seal::SessionSeal;
use super::SessionCache;

/// How long a session is kept by default (in Redis, or across a restart):
/// rustls tells clients 24 h, but a fleet's Redis would hold every
/// session of a day; past this the client gets a full handshake.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(3600);

const HANDOVER_MAGIC: &[u8; 8] = b"ZRTTTS1\0";

/// A session as stored: when it was issued, the address it was issued to
/// (IPv6 or IPv4-mapped), rustls's value.
pub(super) struct Stored {
    pub issued: UnixTime,
    pub peer: [u8; 16],
    pub value: Vec<u8>,
}

impl Stored {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.value.len());
        out.extend_from_slice(&self.issued.as_millis().to_be_bytes());
        out.extend_from_slice(&self.peer);
        out.extend_from_slice(&self.value);
        out
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        let issued = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        Some(Self {
            issued: UnixTime::from_millis(issued),
            peer: b.get(8..24)?.try_into().ok()?,
            value: b.get(24..)?.to_vec(),
        })
    }
}

/// The 16-byte form of an address (IPv4 mapped).
pub(super) fn address_bytes(ip: IpAddr) -> [u8; 16] {
    match canonical_ip(ip) {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

struct Attached {
    seal: Option<Arc<SessionSeal>>,
    store: Option<Arc<ReplayStore>>,
    clock: fn() -> UnixTime,
    rng: Arc<dyn SecureRandom>,
}

/// A session the fleet's store gave this connection.
#[derive(Debug)]
pub(super) struct Fetched {
    pub ticket: Vec<u8>,
    pub stored: Stored,
    /// Whether it may carry 0-RTT data (issued after the store's guard).
    pub early: bool,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("issued", &self.issued)
            .finish_non_exhaustive()
    }
}

/// The gateway's TLS sessions (module docs). Shared by its connections.
pub struct TlsSessions {
    local: Arc<SessionCache>,
    ttl: Duration,
    attached: OnceLock<Attached>,
    /// Set once the sessions were handed over: nothing is taken or issued.
    stopped: AtomicBool,
}

impl std::fmt::Debug for TlsSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSessions")
            .field("local", &self.local)
            .field("ttl", &self.ttl)
            .field("fleet", &self.fleet())
            .field("stopped", &self.stopped.load(Ordering::Relaxed))
            .finish()
    }
}

impl TlsSessions {
    /// At most `capacity` sessions in this process, each kept `ttl` in a
    /// fleet's store or across a restart.
    pub fn new(capacity: usize, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            local: SessionCache::new(capacity),
            ttl,
            attached: OnceLock::new(),
            stopped: AtomicBool::new(false),
        })
    }

    /// How long sessions are kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Seal with keys derived from `tokens` and share through `store`
    /// (done once, when the gateway is built; later calls change nothing).
    /// Without token keys nothing is shared nor handed over.
    pub(crate) fn attach(
        &self,
        tokens: Option<TokenKeyRing>,
        store: Option<Arc<ReplayStore>>,
        clock: fn() -> UnixTime,
        rng: Arc<dyn SecureRandom>,
    ) {
        let seal = tokens.map(|t| Arc::new(SessionSeal::new(t)));
        if seal.is_none() && store.is_some() {
            tracing::warn!(
                "TLS sessions: no token key to seal them with (--no-tokens): kept in this process, not shared through the replay store"
            );
        }
        let store = store.filter(|_| seal.is_some());
        let _ = self.attached.set(Attached {
            seal,
            store,
            clock,
            rng,
        });
    }

    /// Whether sessions are shared through a fleet's store.
    pub fn fleet(&self) -> bool {
        self.attached.get().is_some_and(|a| a.store.is_some())
    }

    pub(super) fn now(&self) -> UnixTime {
        self.attached
            .get()
            .map_or_else(crate::client::system_clock, |a| (a.clock)())
    }

    pub(super) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn redis_key(store: &ReplayStore, ticket: &[u8]) -> String {
        format!(
            "{}:tls:{}",
            store.config().prefix,
            zrtt_proto::record::hex(ticket)
        )
    }

    /// Keep a session rustls issued (`ticket` → `stored`).
    pub(super) fn put(&self, ticket: Vec<u8>, stored: Stored) -> bool {
        if self.stopped() {
            return false;
        }
        if let Some(a) = self.attached.get().filter(|_| !is_tls12(&stored.value)) {
            if let (Some(store), Some(seal)) = (&a.store, &a.seal) {
                // In a fleet a TLS 1.3 session lives in the store only.
                let expires = stored.issued.saturating_add(self.ttl);
                let state = stored.encode();
                match seal.seal(&ticket, &state[8..], stored.issued, expires, &*a.rng) {
                    Ok(sealed) => self.spawn_set(store, &ticket, sealed),
                    Err(e) => tracing::debug!("TLS session not shared: {e}"),
                }
                return true;
            }
        }
        self.local.put(ticket, stored.encode())
    }

    fn spawn_set(&self, store: &Arc<ReplayStore>, ticket: &[u8], sealed: Vec<u8>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut cmd = redis::cmd("SET");
        cmd.arg(Self::redis_key(store, ticket))
            .arg(sealed)
            .arg("PX")
            .arg(
                u64::try_from(self.ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        let store = store.clone();
        rt.spawn(async move {
            if let Err(e) = store.query::<()>(cmd, None).await {
                tracing::debug!("TLS session not written to the replay store: {e}");
            }
        });
    }

    /// Take the session of `ticket` from this process (TLS 1.3: single
    /// use). In a fleet none is returned (TLS 1.3 sessions are not kept
    /// here then; the store is the only source).
    pub(super) fn take_local(&self, ticket: &[u8]) -> Option<Stored> {
        if self.fleet() {
            return None;
        }
        let got = self.local.take(ticket);
        if self.stopped() {
            return None;
        }
        got.and_then(|v| Stored::decode(&v))
    }

    /// Look up a TLS 1.2 session id (reusable: no early data in TLS 1.2).
    pub(super) fn get_local(&self, id: &[u8]) -> Option<Stored> {
        if self.stopped() {
            return None;
        }
        self.local.get(id).and_then(|v| Stored::decode(&v))
    }

    /// Take `ticket`'s session from the fleet's store (`GETDEL`, within
    /// the replay store's deadline); `None` without a fleet, when the
    /// store has none, or did not answer in time.
    pub(super) async fn fetch(&self, ticket: &[u8], m: &Metrics) -> Option<Fetched> {
        let a = self.attached.get()?;
        let (store, seal) = (a.store.as_ref()?, a.seal.as_ref()?);
        if self.stopped() {
            return None;
        }
        let mut cmd = redis::cmd("GETDEL");
        cmd.arg(Self::redis_key(store, ticket));
        let deadline = store.config().timeout;
        let start = std::time::Instant::now();
        let answer = store.query(cmd, Some(deadline)).await;
        m.latency
            .tls_session_take
            .observe(start.elapsed().as_secs_f64());
        let sealed: Option<Vec<u8>> = match answer {
            Ok(v) => v,
            Err(e) => {
                Metrics::inc(&m.tls_sessions_unavailable);
                tracing::debug!("TLS session: replay store {e}: full handshake");
                return None;
            }
        };
        let Some(sealed) = sealed else {
            Metrics::inc(&m.tls_sessions_missed);
            return None;
        };
        let opened = match seal.open(ticket, &sealed, self.now()) {
            Ok(o) => o,
            Err(e) => {
                Metrics::inc(&m.tls_sessions_missed);
                tracing::debug!("TLS session from the replay store: {e}");
                return None;
            }
        };
        Metrics::inc(&m.tls_sessions_taken);
        let mut raw = opened.issued.as_millis().to_be_bytes().to_vec();
        raw.extend_from_slice(&opened.state);
        let stored = Stored::decode(&raw)?;
        let early = opened.issued > store.guard();
        if !early {
            Metrics::inc(&m.tls_sessions_without_early);
        }
        Some(Fetched {
            ticket: ticket.to_vec(),
            stored,
            early,
        })
    }

    /// Stop taking and issuing sessions, and hand every session this
    /// process holds over to its successor: removed from this process,
    /// sealed (`ZRTTTS1\0`, then per session: ticket length u16, ticket,
    /// sealed length u32, sealed). Empty in a fleet (the store holds them;
    /// this process goes on taking from it) or without a sealing key.
    pub fn hand_over(&self) -> Vec<u8> {
        let Some(seal) = self
            .attached
            .get()
            .filter(|a| a.store.is_none())
            .and_then(|a| a.seal.clone())
        else {
            return Vec::new();
        };
        self.stopped.store(true, Ordering::Release);
        let now = self.now();
        let rng = match self.attached.get() {
            Some(a) => a.rng.clone(),
            None => return Vec::new(),
        };
        let mut out = HANDOVER_MAGIC.to_vec();
        for (ticket, v) in self.local.drain() {
            let Some(s) = Stored::decode(&v) else {
                continue;
            };
            let expires = s.issued.saturating_add(self.ttl);
            if expires <= now || ticket.len() > usize::from(u16::MAX) {
                continue;
            }
            let Ok(sealed) = seal.seal(&ticket, &v[8..], s.issued, expires, &*rng) else {
                continue;
            };
            out.extend_from_slice(&(ticket.len() as u16).to_be_bytes());
            out.extend_from_slice(&ticket);
            out.extend_from_slice(&(sealed.len() as u32).to_be_bytes());
            out.extend_from_slice(&sealed);
        }
        if out.len() == HANDOVER_MAGIC.len() {
            return Vec::new();
        }
        out
    }

    /// Take back what [`Self::hand_over`] gave when nobody used it (an
    /// aborted hand-over), and serve sessions again.
    pub fn resume(&self, handed: &[u8]) {
        self.stopped.store(false, Ordering::Release);
        let _ = self.adopt(handed);
    }

    /// Hold the sessions a predecessor handed over (those that open and
    /// have not expired); how many.
    pub fn adopt(&self, handed: &[u8]) -> usize {
        if handed.is_empty() {
            return 0;
        }
        let Some(seal) = self.attached.get().and_then(|a| a.seal.clone()) else {
            tracing::warn!("TLS sessions handed over, but no key to open them: dropped");
            return 0;
        };
        let Some(mut rest) = handed.strip_prefix(HANDOVER_MAGIC.as_slice()) else {
            tracing::warn!("TLS sessions handed over: not a session hand-over, dropped");
            return 0;
        };
        let now = self.now();
        let mut n = 0;
        while !rest.is_empty() {
            let Some((ticket, sealed, next)) = entry(rest) else {
                tracing::warn!("TLS sessions handed over: truncated; kept {n}");
                break;
            };
            rest = next;
            if let Ok(o) = seal.open(ticket, sealed, now) {
                let mut v = o.issued.as_millis().to_be_bytes().to_vec();
                v.extend_from_slice(&o.state);
                self.local.put(ticket.to_vec(), v);
                n += 1;
            }
        }
        tracing::info!("TLS sessions: {n} handed over by the previous process");
        n
    }
}

/// Whether rustls's session value is a TLS 1.2 session (kept in this
/// process only: TLS 1.2 has no early data, and its session ids are
/// looked up, not taken). rustls's encoding: SNI presence (u8), the SNI
/// (u8 length), the version (u16); anything else is shared.
fn is_tls12(value: &[u8]) -> bool {
    let at = match value.first() {
        Some(1) => 2 + usize::from(value.get(1).copied().unwrap_or(0)),
        _ => 1,
    };
    value.get(at..at + 2) == Some(&[0x03, 0x03][..])
}

fn entry(b: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let tl = usize::from(u16::from_be_bytes(b.get(..2)?.try_into().ok()?));
    let ticket = b.get(2..2 + tl)?;
    let at = 2 + tl;
    let sl = u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize;
    let sealed = b.get(at + 4..at + 4 + sl)?;
    Some((ticket, sealed, b.get(at + 4 + sl..)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use zrtt_proto::admission::{TokenKey, TokenKeys};

    fn sessions(secret: u8) -> Arc<TlsSessions> {
        let s = TlsSessions::new(16, DEFAULT_SESSION_TTL);
        let ring = TokenKeyRing::new(TokenKeys::single(TokenKey::new(
            &[secret; 32],
            Duration::from_secs(60),
        )));
        s.attach(
            Some(ring),
            None,
            crate::client::system_clock,
            Arc::new(ring::rand::SystemRandom::new()),
        );
        s
    }

    fn stored(v: &[u8]) -> Stored {
        Stored {
            issued: crate::client::system_clock(),
            peer: [1; 16],
            value: v.to_vec(),
        }
    }

    #[test]
    fn a_hand_over_moves_every_session_once() {
        let old = sessions(1);
        assert!(old.put(b"t1".to_vec(), stored(b"one")));
        assert!(old.put(b"t2".to_vec(), stored(b"two")));
        assert_eq!(old.take_local(b"t2").unwrap().value, b"two");
        let handed = old.hand_over();
        assert!(!handed.windows(3).any(|w| w == b"one"), "sealed");
        // The old process takes and issues nothing any more.
        assert!(old.take_local(b"t1").is_none());
        assert!(!old.put(b"t3".to_vec(), stored(b"three")));
        let new = sessions(1);
        assert_eq!(new.adopt(&handed), 1);
        let got = new.take_local(b"t1").unwrap();
        assert_eq!((got.value.as_slice(), got.peer), (&b"one"[..], [1; 16]));
        assert!(new.take_local(b"t1").is_none(), "single use");
        // Another key (another site, or a key made at start): nothing opens.
        assert_eq!(sessions(2).adopt(&handed), 0);
        // Damaged: what parses before the damage is kept, nothing panics.
        for cut in 0..handed.len() {
            let _ = sessions(1).adopt(&handed[..cut]);
        }
    }

    #[test]
    fn an_aborted_hand_over_gives_the_sessions_back() {
        let s = sessions(1);
        s.put(b"t1".to_vec(), stored(b"one"));
        let handed = s.hand_over();
        s.resume(&handed);
        assert_eq!(s.take_local(b"t1").unwrap().value, b"one");
    }
}
