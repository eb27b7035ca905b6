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
//! - **Fleet** (`--replay-store redis://...`): every TLS 1.3 session any
//!   gateway issues is written to Redis, sealed ([`super::seal`]), with
//!   `SET <prefix>:tls:<ticket id hex> <sealed> NX PX <ttl>` in a task of
//!   its own (off the handshake), at most [`SessionLimits`]`::puts_per_second`
//!   a second (over it: no ticket). A ClientHello offering a PSK is held by
//!   the I/O layer until the take of its first identity answered (within
//!   the replay store's deadline): a script ([`TAKE`]) that reads the
//!   value and leaves a tombstone (`""`, [`TOMBSTONE_SLACK`] past rustls's
//!   60 s freshness window) in its place, atomically. What Redis gave is
//!   the only session this connection's rustls may take
//!   ([`super::sessions::SessionView`]), so a session is resumed by the one
//!   connection of the fleet whose take got it; a `SET` arriving after the
//!   take (late) finds the tombstone and writes nothing (`NX`). A take
//!   that could not be sent (no connection, too many commands waiting, a
//!   failed connection) is queued and sent once the store answers again
//!   (best effort: this process may stop first; docs/PROTOCOL.md §7).
//!   Look-ups are capped ([`SessionLimits`]). No local copy is kept
//!   of a TLS 1.3 session; TLS 1.2 sessions (looked up by id, no early
//!   data) stay in the issuing process only. No answer in time, an error,
//!   a session that does not open: a full handshake. A session issued
//!   before the store's last failure or reconnection (the replay store's
//!   guard: a promoted replica may not have seen its take) resumes
//!   without 0-RTT.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::server::StoresServerSessions;
use zeroize::Zeroizing;
use zrtt_proto::admission::{canonical_ip, TokenKeyRing};
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::UnixTime;

use super::super::replay_store::{ReplayStore, Unavailable};
use super::super::Metrics;
use super::limits::{Limiter, SessionLimits};
use super::seal::SessionSeal;
use super::SessionCache;

/// How long a session is kept by default (in this process, in Redis, or
/// across a restart): rustls tells clients 24 h, but a fleet's Redis would
/// hold every session of a day; past this the client gets a full
/// handshake. nginx's `ssl_session_timeout` default.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(300);

/// The take (`EVAL`, one key, `ARGV[1]` the tombstone's life in ms): the
/// session if there is one (not a tombstone), and a tombstone in its place
/// either way, so that a `SET ... NX` arriving later writes nothing. The
/// tombstone is written with `pcall`: a full store (OOM) still gives the
/// session away (the value is removed: `GETDEL` frees memory).
pub(super) const TAKE: &str = "local v = redis.call('GETDEL', KEYS[1]) \
redis.pcall('SET', KEYS[1], '', 'PX', ARGV[1]) \
if v and v ~= '' then return v end return false";

/// How long a tombstone outlives rustls's freshness window for 0-RTT (a
/// ClientHello's ticket age within 60 s of the server's): a session
/// written after that no longer carries 0-RTT data for a ClientHello the
/// take saw. Plus the store's skew between gateways' clocks.
pub(super) const TOMBSTONE_SLACK: Duration = Duration::from_secs(61);

/// Most takes queued while the store could not be asked.
const MAX_PENDING: usize = 4096;

const HANDOVER_MAGIC: &[u8; 8] = b"ZRTTTS1\0";

/// A session as stored: when it was issued, the address it was issued to
/// (IPv6 or IPv4-mapped), rustls's value.
pub(super) struct Stored {
    pub issued: UnixTime,
    pub peer: [u8; 16],
    pub value: Zeroizing<Vec<u8>>,
}

impl Stored {
    pub(super) fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(24 + self.value.len()));
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
            value: Zeroizing::new(b.get(24..)?.to_vec()),
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
    limiter: Limiter,
    /// Tickets whose take could not be sent, to take once the store
    /// answers again; whether a task is sending them.
    pending: Mutex<VecDeque<Vec<u8>>>,
    flushing: AtomicBool,
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
        Self::with_limits(capacity, ttl, SessionLimits::default())
    }

    /// [`Self::new`] with other caps on a fleet's store ([`SessionLimits`]).
    pub fn with_limits(capacity: usize, ttl: Duration, limits: SessionLimits) -> Arc<Self> {
        Arc::new(Self {
            local: SessionCache::new(capacity),
            ttl,
            attached: OnceLock::new(),
            stopped: AtomicBool::new(false),
            limiter: Limiter::new(limits, Instant::now()),
            pending: Mutex::new(VecDeque::new()),
            flushing: AtomicBool::new(false),
        })
    }

    /// The caps on a fleet's store.
    pub fn limits(&self) -> SessionLimits {
        self.limiter.limits()
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

    /// Keep a session rustls issued (`ticket` → `stored`); `false`: not
    /// kept, rustls issues no ticket.
    pub(super) fn put(&self, ticket: Vec<u8>, stored: Stored, m: &Metrics) -> bool {
        if self.stopped() {
            return false;
        }
        if let Some(a) = self.attached.get().filter(|_| !is_tls12(&stored.value)) {
            if let (Some(store), Some(seal)) = (&a.store, &a.seal) {
                // In a fleet a TLS 1.3 session lives in the store only,
                // written at most at the cap's rate.
                if !self.limiter.put(Instant::now()) {
                    Metrics::inc(&m.tls_sessions_puts_limited);
                    return false;
                }
                let expires = stored.issued.saturating_add(self.ttl);
                let state = stored.encode();
                match seal.seal(&ticket, &state[8..], stored.issued, expires, &*a.rng) {
                    Ok(sealed) => self.spawn_set(store, &ticket, sealed),
                    Err(e) => tracing::debug!("TLS session not shared: {e}"),
                }
                return true;
            }
        }
        let kept = self.local.put(ticket, stored.encode().to_vec());
        self.expire_local();
        kept
    }

    /// Drop this process's sessions past the TTL (oldest first), so the
    /// store holds the last TTL's sessions, not its capacity of dead ones.
    fn expire_local(&self) {
        let now = self.now().as_millis();
        let ttl = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        self.local.expire_oldest(|v| {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .is_none_or(|b| u64::from_be_bytes(b).saturating_add(ttl) <= now)
        });
    }

    fn spawn_set(&self, store: &Arc<ReplayStore>, ticket: &[u8], sealed: Vec<u8>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut cmd = redis::cmd("SET");
        // NX: a take that came first left a tombstone (or took it).
        cmd.arg(Self::redis_key(store, ticket))
            .arg(sealed)
            .arg("NX")
            .arg("PX")
            .arg(
                u64::try_from(self.ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        let store = store.clone();
        rt.spawn(async move {
            if let Err(e) = store.query::<Option<String>>(cmd, None).await {
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
            .filter(|s| self.live(s))
    }

    /// Whether `s` is within the TTL (`--tls-session-ttl`).
    fn live(&self, s: &Stored) -> bool {
        s.issued.saturating_add(self.ttl) > self.now()
    }

    /// Look up a TLS 1.2 session id (reusable: no early data in TLS 1.2).
    pub(super) fn get_local(&self, id: &[u8]) -> Option<Stored> {
        if self.stopped() {
            return None;
        }
        self.local
            .get(id)
            .and_then(|v| Stored::decode(&v))
            .filter(|s| self.live(s))
    }

    fn take_cmd(store: &ReplayStore, ticket: &[u8]) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(TAKE)
            .arg(1)
            .arg(Self::redis_key(store, ticket))
            .arg(
                u64::try_from((TOMBSTONE_SLACK + store.config().skew).as_millis())
                    .unwrap_or(u64::MAX),
            );
        cmd
    }

    /// Take `ticket`'s session from the fleet's store (module docs), for
    /// a ClientHello from `source` (`early`: before its TCP handshake
    /// completed), within the replay store's deadline;
    /// `None` without a fleet, over the look-up caps, when the store has
    /// none, or did not answer in time.
    pub(super) async fn fetch(
        self: &Arc<Self>,
        ticket: &[u8],
        source: IpAddr,
        early: bool,
        m: &Metrics,
    ) -> Option<Fetched> {
        let a = self.attached.get()?;
        let (store, seal) = (a.store.as_ref()?, a.seal.as_ref()?);
        if self.stopped() {
            return None;
        }
        if !self.limiter.lookup(source, early, Instant::now()) {
            Metrics::inc(&m.tls_sessions_lookups_limited);
            return None;
        }
        let deadline = store.config().timeout;
        let start = std::time::Instant::now();
        let answer = store
            .query(Self::take_cmd(store, ticket), Some(deadline))
            .await;
        m.latency
            .tls_session_take
            .observe(start.elapsed().as_secs_f64());
        let sealed: Option<Vec<u8>> = match answer {
            Ok(v) => v,
            Err(e) => {
                Metrics::inc(&m.tls_sessions_unavailable);
                tracing::debug!("TLS session: replay store {e}: full handshake");
                if !matches!(e, Unavailable::Timeout) {
                    // Not sent, or not known to have run (a timeout's
                    // take still runs): take it later, lest this
                    // ClientHello (captured) resume with 0-RTT at another
                    // gateway.
                    self.take_later(store, ticket);
                }
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
        let mut raw = Zeroizing::new(opened.issued.as_millis().to_be_bytes().to_vec());
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

    /// Queue the take of `ticket` until the store answers (a task sends
    /// the queue, one take at a time, once connected, each until it was
    /// sent; bounded: the oldest are dropped).
    fn take_later(self: &Arc<Self>, store: &Arc<ReplayStore>, ticket: &[u8]) {
        {
            let mut q = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() >= MAX_PENDING {
                q.pop_front();
            }
            q.push_back(ticket.to_vec());
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, store) = (self.clone(), store.clone());
        rt.spawn(async move {
            loop {
                let next = this
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pop_front();
                let Some(ticket) = next else {
                    this.flushing.store(false, Ordering::Release);
                    // A ticket queued between the pop and the store above
                    // finds `flushing` set: look once more.
                    let more = !this
                        .pending
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_empty();
                    if more && !this.flushing.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    return;
                };
                loop {
                    let cmd = Self::take_cmd(&store, &ticket);
                    match store.query::<Option<Vec<u8>>>(cmd, None).await {
                        Err(Unavailable::NotConnected | Unavailable::Overloaded) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        _ => break,
                    }
                }
            }
        });
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
                let mut v = Zeroizing::new(o.issued.as_millis().to_be_bytes().to_vec());
                v.extend_from_slice(&o.state);
                self.local.put(ticket.to_vec(), v.to_vec());
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
            value: Zeroizing::new(v.to_vec()),
        }
    }

    #[test]
    fn a_hand_over_moves_every_session_once() {
        let m = Metrics::default();
        let old = sessions(1);
        assert!(old.put(b"t1".to_vec(), stored(b"one"), &m));
        assert!(old.put(b"t2".to_vec(), stored(b"two"), &m));
        assert_eq!(&old.take_local(b"t2").unwrap().value[..], b"two");
        let handed = old.hand_over();
        assert!(!handed.windows(3).any(|w| w == b"one"), "sealed");
        // The old process takes and issues nothing any more.
        assert!(old.take_local(b"t1").is_none());
        assert!(!old.put(b"t3".to_vec(), stored(b"three"), &m));
        let new = sessions(1);
        assert_eq!(new.adopt(&handed), 1);
        let got = new.take_local(b"t1").unwrap();
        assert_eq!((&got.value[..], got.peer), (&b"one"[..], [1; 16]));
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
        let m = Metrics::default();
        let s = sessions(1);
        s.put(b"t1".to_vec(), stored(b"one"), &m);
        let handed = s.hand_over();
        s.resume(&handed);
        assert_eq!(&s.take_local(b"t1").unwrap().value[..], b"one");
    }

    #[test]
    fn local_sessions_live_only_the_ttl() {
        let m = Metrics::default();
        let s = TlsSessions::new(16, Duration::from_secs(60));
        let old = |v: &[u8]| Stored {
            issued: UnixTime::from_millis(crate::client::system_clock().as_millis() - 61_000),
            peer: [1; 16],
            value: Zeroizing::new(v.to_vec()),
        };
        assert!(s.put(b"t1".to_vec(), old(b"one"), &m));
        assert!(s.put(b"t2".to_vec(), stored(b"two"), &m));
        assert!(s.take_local(b"t1").is_none(), "past --tls-session-ttl");
        assert!(s.take_local(b"t2").is_some());
        // TLS 1.2 ids (looked up, not taken): no SNI, version 0x0303.
        assert!(s.put(b"i1".to_vec(), old(&[0, 3, 3]), &m));
        assert!(s.put(b"i2".to_vec(), stored(&[0, 3, 3]), &m));
        assert!(s.get_local(b"i1").is_none(), "past --tls-session-ttl");
        assert!(s.get_local(b"i2").is_some());
    }

    #[test]
    fn expired_sessions_leave_memory_when_new_ones_come() {
        let m = Metrics::default();
        let s = TlsSessions::new(1000, Duration::from_secs(60));
        let at = |ago_ms: u64| Stored {
            issued: UnixTime::from_millis(crate::client::system_clock().as_millis() - ago_ms),
            peer: [1; 16],
            value: Zeroizing::new(b"secret".to_vec()),
        };
        // Never taken (clients that did not come back), issued over time.
        for i in 0..100u64 {
            assert!(s.put(i.to_be_bytes().to_vec(), at(120_000 - i * 1_000), &m));
        }
        // Issued 120 s to 21 s ago: those older than 60 s are gone, not
        // kept until the capacity evicts them.
        let (held, _) = s.local.len();
        assert!((38..=40).contains(&held), "{held}");
        assert!(s.take_local(&99u64.to_be_bytes()).is_some());
    }
}
