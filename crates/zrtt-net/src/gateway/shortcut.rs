//! The shortcut's answer service (docs/DNS.md §8), shared by the SDNS
//! (sdns.rs: a flight in a DNS query name) and the gateway's port (a
//! flight's TCP form, first_flight.rs).
//!
//! A flight is looked up in the answer cache **before** it is decrypted,
//! by its flight hash: a copy of a flight already answered (a resolver's
//! retry, the client's TCP fetch after FETCH, a replay) gets the same
//! bytes, never a second run; one being made gets nothing on UDP (the
//! resolver retries) and waits over TCP. A new one is marked running,
//! accepted with `Transport::Shortcut` through the gateway's replay filter
//! (and the fleet's store), its compact request run on the site's backend
//! (shortcut_backend.rs) and the answer stream kept. The cache holds what
//! a flight got as `kind || body` (the TXT payload: ANSWER with the answer
//! stream, or REJECT with a Reject frame), so every copy of a flight gets
//! the same answer on either path.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use zrtt_proto::handshake::{
    encode_reject, read_frame, Expect, Frame, Pattern, RejectReason, Transport,
};
use zrtt_proto::replay::ReplayFilter;
use zrtt_proto::shortcut::{self, AnswerCache, Lookup, TxtAnswer};

use super::gate::Gate;
use super::listener::SourceSlot;
use super::sdns_zone::ZoneConfig;
use super::shortcut_backend::{self, Via};
use super::{lock, Metrics, Shared};

/// The shortcut settings of a gateway (docs/GATEWAY.md, DNS shortcut).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ShortcutConfig {
    /// SDNS addresses, UDP and TCP each (`--sdns`); empty: no SDNS (the
    /// gateway's port still answers a shortcut flight's TCP form).
    pub sdns: Vec<SocketAddr>,
    /// The NS target of every shortcut zone (`--sdns-ns`); `None`:
    /// `ns.zq.S` in zone `zq.S`, answered with the `sdns` addresses.
    pub sdns_ns: Option<String>,
    /// Shortcut flights one source (a resolver) may have running on the
    /// SDNS at once; beyond it REFUSED.
    pub max_running_per_source: usize,
    /// Flights the answer cache holds (done and running).
    pub cache_entries: usize,
    /// Bytes of answers the answer cache holds.
    pub cache_bytes: usize,
    /// How long an answer is kept: at least the replay window (the
    /// timestamp skew window), within which a copy of the flight could
    /// pass the filter's time check.
    pub answer_lifetime: Duration,
}

impl Default for ShortcutConfig {
    fn default() -> Self {
        Self {
            sdns: Vec::new(),
            sdns_ns: None,
            max_running_per_source: DEFAULT_MAX_RUNNING_PER_SOURCE,
            cache_entries: 1 << 16,
            cache_bytes: 64 << 20,
            // The default replay window is 10 s past and 2 s ahead.
            answer_lifetime: Duration::from_secs(30),
        }
    }
}

/// Shortcut flights one resolver may have running at once by default.
pub const DEFAULT_MAX_RUNNING_PER_SOURCE: usize = 64;

/// The answer cache and who is running what.
pub(super) struct Shortcuts {
    cache: Mutex<AnswerCache>,
    /// Woken whenever a running flight is done or abandoned.
    changed: tokio::sync::Notify,
    /// Running flights per SDNS source.
    running: Mutex<HashMap<IpAddr, usize>>,
    max_running_per_source: usize,
    /// The shortcut zones' name server and its addresses (sdns_zone.rs).
    pub(super) zone: ZoneConfig,
}

/// What a flight gets.
#[derive(Debug)]
pub(super) enum Outcome {
    /// This answer (ANSWER or REJECT; the same for every copy once done).
    Answer(TxtAnswer),
    /// Being made (a copy that arrived first); only when not waiting.
    Running,
    /// Not a flight this gateway answers (does not authenticate, another
    /// zone's key, not a shortcut flight): NXDOMAIN, or nothing on TCP.
    NotFlight,
    /// The source has too many flights running: REFUSED.
    Refused,
}

impl Shortcuts {
    /// `glue`: the SDNS's bound addresses.
    pub(super) fn new(cfg: &ShortcutConfig, glue: Vec<IpAddr>) -> Self {
        Self {
            zone: ZoneConfig {
                ns: cfg.sdns_ns.clone(),
                glue,
            },
            cache: Mutex::new(AnswerCache::new(
                cfg.cache_entries,
                cfg.cache_bytes,
                cfg.answer_lifetime,
            )),
            changed: tokio::sync::Notify::new(),
            running: Mutex::new(HashMap::new()),
            max_running_per_source: cfg.max_running_per_source,
        }
    }
}

/// Cached form of an answer: its kind byte, then its body.
fn to_cached(a: &TxtAnswer) -> Arc<[u8]> {
    let (kind, body): (u8, &[u8]) = match a {
        TxtAnswer::Answer(b) => (1, b),
        TxtAnswer::Fetch => (2, &[]),
        TxtAnswer::Reject(b) => (3, b),
    };
    let mut v = Vec::with_capacity(1 + body.len());
    v.push(kind);
    v.extend_from_slice(body);
    v.into()
}

fn from_cached(b: &[u8]) -> TxtAnswer {
    match b.split_first() {
        Some((1, rest)) => TxtAnswer::Answer(rest.to_vec()),
        Some((3, rest)) => TxtAnswer::Reject(rest.to_vec()),
        _ => TxtAnswer::Fetch,
    }
}

/// A running flight's entry: abandoned (and waiters woken) unless finished.
struct Run<'a> {
    shared: &'a Shared,
    hash: [u8; 32],
    source: Option<IpAddr>,
    done: bool,
}

impl Run<'_> {
    fn finish(mut self, answer: &TxtAnswer) {
        let now = (self.shared.cfg.clock)();
        let s = &self.shared.shortcuts;
        lock(&s.cache).finish(&self.hash, to_cached(answer), now);
        self.done = true;
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        let s = &self.shared.shortcuts;
        if !self.done {
            lock(&s.cache).abandon(&self.hash);
        }
        if let Some(ip) = self.source {
            let mut r = lock(&s.running);
            if let Some(n) = r.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    r.remove(&ip);
                }
            }
        }
        s.changed.notify_waiters();
    }
}

/// The answer to the flight `frame` (its TCP form) for the zone of `site`
/// (DNS; `None` on TCP: the key's site). `wait`: a flight being made by
/// another copy is waited for (bounded by the backend timeout) rather
/// than answered [`Outcome::Running`].
pub(super) async fn answer(
    shared: &Arc<Shared>,
    frame: &[u8],
    site: Option<&str>,
    via: Via,
    wait: bool,
) -> Outcome {
    let m = &shared.metrics;
    Metrics::inc(&m.shortcut_flights);
    let Ok(hash) = shortcut::flight_hash(frame) else {
        return Outcome::NotFlight;
    };
    let s = &shared.shortcuts;
    let deadline = Instant::now() + shared.cfg.timeouts.backend_response + Duration::from_secs(1);
    let source = match via {
        Via::Dns { resolver, .. } => Some(resolver.ip()),
        Via::Tcp { .. } => None,
    };
    let run = loop {
        let changed = s.changed.notified();
        let mut changed = std::pin::pin!(changed);
        changed.as_mut().enable();
        {
            let now = (shared.cfg.clock)();
            let mut cache = lock(&s.cache);
            match cache.lookup(&hash, now) {
                Lookup::Done(b) => {
                    Metrics::inc(&m.shortcut_cache_hits);
                    return Outcome::Answer(from_cached(&b));
                }
                Lookup::Running if !wait => return Outcome::Running,
                Lookup::Running => {}
                Lookup::Miss => {
                    if let Some(ip) = source {
                        let mut r = lock(&s.running);
                        let n = r.entry(ip).or_insert(0);
                        if *n >= s.max_running_per_source {
                            return Outcome::Refused;
                        }
                        *n += 1;
                    }
                    let run = Run {
                        shared,
                        hash,
                        source,
                        done: false,
                    };
                    if cache.begin(hash, now).is_err() {
                        // Only running flights fill the cache.
                        drop(cache);
                        drop(run);
                        return Outcome::Answer(TxtAnswer::Reject(encode_reject(
                            RejectReason::Busy,
                            &[],
                        )));
                    }
                    break run;
                }
            }
        }
        if tokio::time::timeout_at(deadline.into(), changed)
            .await
            .is_err()
        {
            return Outcome::NotFlight;
        }
    };
    make(shared, frame, site, via, run).await
}

/// Accept and run a new flight (marked running by `run`).
async fn make(
    shared: &Arc<Shared>,
    frame: &[u8],
    site: Option<&str>,
    via: Via,
    run: Run<'_>,
) -> Outcome {
    let m = &shared.metrics;
    let busy = || Outcome::Answer(TxtAnswer::Reject(encode_reject(RejectReason::Busy, &[])));
    let Ok(Some((parsed, _))) = read_frame(frame, Expect::FirstFlight) else {
        return Outcome::NotFlight;
    };
    let Frame::FirstFlight { header, .. } = &parsed else {
        return Outcome::NotFlight;
    };
    if header.pattern != Pattern::Shortcut {
        return Outcome::NotFlight;
    }
    let active = shared.active.load(std::sync::atomic::Ordering::Relaxed);
    if shared.admission.intake(active, Instant::now()).is_busy() {
        Metrics::inc(&m.zrtt_busy);
        return busy();
    }
    let now = (shared.cfg.clock)();
    let (result, key_site) = {
        let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
        let key_site = keys
            .keys()
            .iter()
            .find(|k| k.record.body.key_id == header.key_id)
            .map(|k| k.record.body.name.clone());
        // A flight under another site's zone is not one of this zone's
        // names (checked before decrypting).
        if let (Some(zone_site), Some(k)) = (site, &key_site) {
            if !zone_site.eq_ignore_ascii_case(k) {
                return Outcome::NotFlight;
            }
        }
        let mut replay: &std::sync::Mutex<dyn ReplayFilter> = &shared.cfg.replay;
        let result = keys.accept(
            &parsed,
            Transport::Shortcut,
            now,
            &mut replay,
            shared.cfg.rng.as_ref(),
        );
        (result, key_site)
    };
    let accepted = match result {
        Ok(a) => match super::first_flight::check_store(shared, &a, now).await {
            None => a,
            Some(refusal) => {
                tracing::debug!("shortcut flight refused: {}", refusal.error);
                return match refusal.reply {
                    Some(r) => Outcome::Answer(TxtAnswer::Reject(r)),
                    None => busy(),
                };
            }
        },
        Err(refusal) => {
            tracing::debug!("shortcut flight refused: {}", refusal.error);
            return match (refusal.reply, &refusal.error) {
                (Some(r), _) => Outcome::Answer(TxtAnswer::Reject(r)),
                // It authenticated, but its early data is not a compact
                // request (a method other than GET or HEAD, a bad target):
                // refused before the replay filter recorded it.
                (None, zrtt_proto::Error::Shortcut(_)) => Outcome::Answer(TxtAnswer::Reject(
                    encode_reject(RejectReason::Unsupported, &[]),
                )),
                (None, _) => Outcome::NotFlight,
            };
        }
    };
    Metrics::inc(&m.zrtt_accepted);
    let Some(site) = key_site else {
        return Outcome::NotFlight;
    };
    let request = match accepted.shortcut_request() {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!("shortcut flight: compact request: {e}");
            let a = TxtAnswer::Reject(encode_reject(RejectReason::Unsupported, &[]));
            run.finish(&a);
            return Outcome::Answer(a);
        }
    };
    Metrics::inc(&m.shortcut_runs);
    let a = match shortcut_backend::run(shared, &site, &request, via).await {
        Ok(response) => match accepted.shortcut_answer(&response) {
            Ok(stream) => TxtAnswer::Answer(stream),
            Err(e) => {
                tracing::debug!("shortcut answer: {e}");
                TxtAnswer::Reject(encode_reject(RejectReason::Busy, &[]))
            }
        },
        Err(shortcut_backend::TooLarge) => {
            Metrics::inc(&m.shortcut_too_large);
            TxtAnswer::Reject(encode_reject(RejectReason::Busy, &[]))
        }
    };
    run.finish(&a);
    Outcome::Answer(a)
}

/// Serve a shortcut flight's TCP form (`frame`) on the gateway's port:
/// once the TCP handshake has completed (the address is unproven: no token
/// rides a shortcut flight), write the cached or freshly made answer
/// stream (or the Reject frame) and close.
pub(super) async fn serve_tcp(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    gate_fd: Arc<OwnedFd>,
    slot: Arc<SourceSlot>,
    frame: &[u8],
) {
    let m = &shared.metrics;
    let Ok(gate) = Gate::new(gate_fd, false, shared.cfg.timeouts.gate) else {
        return;
    };
    if gate.wait_complete().await.is_err() {
        Metrics::inc(&m.gate_timeouts);
        return;
    }
    if !slot.claim() {
        Metrics::inc(&m.source_limited);
        return;
    }
    let local = tcp
        .local_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let bytes = match answer(shared, frame, None, Via::Tcp { peer, local }, true).await {
        Outcome::Answer(TxtAnswer::Answer(stream)) => {
            Metrics::inc(&m.shortcut_tcp_answers);
            stream
        }
        Outcome::Answer(TxtAnswer::Reject(frame)) => {
            Metrics::inc(&m.shortcut_rejects);
            Metrics::inc(&m.zrtt_rejects_sent);
            frame
        }
        other => {
            tracing::debug!("shortcut flight from {peer}: {other:?}");
            Metrics::inc(&m.zrtt_silent_drops);
            return;
        }
    };
    if tcp.write_all(&bytes).await.is_ok() {
        super::close::linger(tcp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_answers_keep_their_kind_and_bytes() {
        for a in [
            TxtAnswer::Answer(vec![0xD8, 0, 3, 1, 2, 3]),
            TxtAnswer::Reject(encode_reject(RejectReason::Busy, &[])),
            TxtAnswer::Fetch,
        ] {
            assert_eq!(from_cached(&to_cached(&a)), a);
        }
        assert_eq!(from_cached(&[]), TxtAnswer::Fetch);
    }
}
