//! The shortcut's answer service (docs/DNS.md §8), shared by the SDNS
//! (sdns.rs: a flight in a DNS query name) and the gateway's port (a
//! flight's TCP form, first_flight.rs).
//!
//! A flight is looked up in the answer cache **before** it is decrypted,
//! by its flight hash: a copy of a flight already answered (a resolver's
//! retry, the client's TCP fetch after FETCH, a replay) gets the same
//! bytes, never a second run; one being made gets nothing on UDP (the
//! resolver retries) and waits over TCP. A new one from the SDNS is run
//! only within the bounds on unproven queriers (sdns_limits.rs and the
//! soft load limit; FETCH beyond them). A new one is marked running,
//! accepted with `Transport::Shortcut` through the gateway's replay filter
//! (and the fleet's store), its compact request run on the site's backend
//! (shortcut_backend.rs) and the answer stream kept. The cache holds what
//! a flight got as `kind || body` (the TXT payload: ANSWER with the answer
//! stream, or REJECT with a Reject frame), so every copy of a flight gets
//! the same answer on either path.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use zrtt_proto::handshake::{
    decode_reject_records, encode_reject, read_frame, Expect, Frame, Pattern, RejectReason,
    Transport,
};
use zrtt_proto::replay::ReplayFilter;
use zrtt_proto::shortcut::{self, AnswerCache, Lookup};

use super::gate::Gate;
use super::listener::SourceSlot;
use super::sdns_limits::{Deferred, RunLimits};
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
    /// Shortcut flights one source prefix (/24, /48: a resolver's
    /// network) may have running from the SDNS at once; beyond it FETCH
    /// without a run (the client's TCP form runs it).
    pub max_running_per_prefix: usize,
    /// Shortcut flights running from the SDNS at once in all; beyond it
    /// FETCH. Held below the SDNS's UDP task limit.
    pub max_running: usize,
    /// New runs per second one source prefix may start from the SDNS
    /// (bursts of as many; 0: unlimited); beyond it FETCH.
    pub runs_per_sec_per_prefix: f64,
    /// The address the backend is told a request from the SDNS came from
    /// (`X-Forwarded-For`, the PROXY header's source): the querier is a
    /// resolver or a spoofed address, never the client, so a fixed marker
    /// no access rule should trust (default [`DNS_CLIENT_ADDRESS`], from
    /// TEST-NET-1, RFC 5737).
    pub dns_client_address: IpAddr,
    /// Sites (key record names) whose shortcut is off (`--sdns-off`): the
    /// SDNS does not serve their zones (REFUSED) and a shortcut flight's
    /// TCP form for them gets REJECT 8 (the client takes the normal path).
    pub off_sites: Vec<String>,
    /// Flights the answer cache holds (done and running).
    pub cache_entries: usize,
    /// Bytes of answers the answer cache holds.
    pub cache_bytes: usize,
    /// How long an answer is kept at least; the gateway keeps it at least
    /// the replay filter's window (`max_age + max_future`, within which a
    /// copy of the flight could pass the filter's time check).
    pub answer_lifetime: Duration,
}

impl Default for ShortcutConfig {
    fn default() -> Self {
        Self {
            sdns: Vec::new(),
            sdns_ns: None,
            max_running_per_prefix: DEFAULT_MAX_RUNNING_PER_PREFIX,
            max_running: DEFAULT_MAX_RUNNING,
            runs_per_sec_per_prefix: DEFAULT_RUNS_PER_SEC_PER_PREFIX,
            dns_client_address: DNS_CLIENT_ADDRESS,
            off_sites: Vec::new(),
            cache_entries: 1 << 16,
            cache_bytes: 64 << 20,
            answer_lifetime: Duration::ZERO,
        }
    }
}

/// Shortcut flights one source prefix may have running at once by default.
pub const DEFAULT_MAX_RUNNING_PER_PREFIX: usize = 64;
/// Shortcut flights running from the SDNS at once by default.
pub const DEFAULT_MAX_RUNNING: usize = 1024;
/// New SDNS runs per second per source prefix by default.
pub const DEFAULT_RUNS_PER_SEC_PER_PREFIX: f64 = 100.0;
/// The address a request from the SDNS says it came from by default:
/// 192.0.2.1 (TEST-NET-1, RFC 5737: never a real peer, in no private,
/// loopback or internal range an access rule would allow).
pub const DNS_CLIENT_ADDRESS: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
/// The largest response a run started from the SDNS reads (the querier
/// is unproven); beyond it REJECT 7 (the client takes the normal path).
/// A run started by a flight's TCP form reads up to
/// [`MAX_RESPONSE`](zrtt_proto::shortcut::MAX_RESPONSE).
pub const DNS_MAX_RESPONSE: usize = 64 << 10;
/// The answer lifetime when the replay filter does not say its window.
const FALLBACK_LIFETIME: Duration = Duration::from_secs(30);

/// The kinds of a TXT payload (`kind || body`, docs/DNS.md §8).
const KIND_ANSWER: u8 = 1;
const KIND_FETCH: u8 = 2;
const KIND_REJECT: u8 = 3;

/// The answer cache and who is running what.
pub(super) struct Shortcuts {
    cache: Mutex<AnswerCache>,
    /// Woken whenever a running flight is done or abandoned.
    changed: tokio::sync::Notify,
    /// Runs started from the SDNS, per source prefix and in all.
    limits: Mutex<RunLimits>,
    /// What the backend is told a DNS-path request came from.
    pub(super) dns_client: IpAddr,
    /// Sites whose shortcut is off.
    off_sites: Vec<String>,
    /// The shortcut zones' name server and its addresses (sdns_zone.rs).
    pub(super) zone: ZoneConfig,
}

/// What a flight gets.
#[derive(Debug)]
pub(super) enum Outcome {
    /// This TXT payload, `kind || body`: ANSWER with the answer stream or
    /// REJECT with a Reject frame (the same bytes for every copy once done,
    /// shared with the cache).
    Answer(Arc<[u8]>),
    /// Not run, over a bound for unproven queriers (sdns_limits.rs, the
    /// soft load limit): FETCH, the TCP form runs it.
    Deferred(Deferred),
    /// Being made (a copy that arrived first); only when not waiting.
    Running,
    /// Not a flight this gateway answers (does not authenticate, another
    /// zone's key, not a shortcut flight): NXDOMAIN, or nothing on TCP.
    NotFlight,
}

impl Shortcuts {
    /// `glue`: the SDNS's bound addresses; `window`: the replay filter's.
    pub(super) fn new(cfg: &ShortcutConfig, glue: Vec<IpAddr>, window: Option<Duration>) -> Self {
        Self {
            zone: ZoneConfig {
                ns: cfg.sdns_ns.clone(),
                glue,
            },
            cache: Mutex::new(AnswerCache::new(
                cfg.cache_entries,
                cfg.cache_bytes,
                answer_lifetime(cfg.answer_lifetime, window),
            )),
            changed: tokio::sync::Notify::new(),
            limits: Mutex::new(RunLimits::new(
                cfg.max_running_per_prefix.max(1),
                cfg.max_running.clamp(1, super::sdns::MAX_UDP_TASKS / 2),
                cfg.runs_per_sec_per_prefix,
            )),
            dns_client: cfg.dns_client_address,
            off_sites: cfg.off_sites.clone(),
        }
    }
}

impl Shortcuts {
    /// Whether the shortcut of `site` (a key record's name) is on.
    pub(super) fn serves(&self, site: &str) -> bool {
        let site = site.trim_end_matches('.');
        !self
            .off_sites
            .iter()
            .any(|o| o.trim_end_matches('.').eq_ignore_ascii_case(site))
    }
}

/// How long answers are kept: the configured time, at least the replay
/// filter's window (a copy of the flight passing the filter's time check
/// must find the answer, or it would be refused REJECT 3).
fn answer_lifetime(configured: Duration, window: Option<Duration>) -> Duration {
    configured.max(window.unwrap_or(FALLBACK_LIFETIME))
}

/// The TXT payload `kind || body`.
fn payload(kind: u8, body: &[u8]) -> Arc<[u8]> {
    let mut v = Vec::with_capacity(1 + body.len());
    v.push(kind);
    v.extend_from_slice(body);
    v.into()
}

/// REJECT with a Reject frame for `reason` and no records.
fn reject(reason: RejectReason) -> Arc<[u8]> {
    payload(KIND_REJECT, &encode_reject(reason, &[]))
}

/// The FETCH payload.
pub(super) fn fetch() -> Arc<[u8]> {
    Arc::from(&[KIND_FETCH][..])
}

/// Whether a TXT payload is an ANSWER.
pub(super) fn is_answer(p: &[u8]) -> bool {
    p.first() == Some(&KIND_ANSWER)
}

/// A REJECT payload's Reject frame without its records (`None`: not a
/// REJECT).
pub(super) fn bare_reject(p: &[u8]) -> Option<Arc<[u8]>> {
    let (&KIND_REJECT, frame) = p.split_first()? else {
        return None;
    };
    match read_frame(frame, Expect::ReplyOrReject) {
        Ok(Some((Frame::Reject { reason, .. }, _))) => Some(reject(reason)),
        _ => None,
    }
}

/// A Reject frame refused under the zone of `site` keeps only that site's
/// records (a REJECT 1 would list every co-hosted site's otherwise).
fn site_reject(frame: Vec<u8>, site: Option<&str>) -> Vec<u8> {
    let Some(site) = site else {
        return frame;
    };
    let Ok(Some((Frame::Reject { reason, records }, _))) =
        read_frame(&frame, Expect::ReplyOrReject)
    else {
        return frame;
    };
    let kept: Vec<_> = decode_reject_records(records)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.body.name.eq_ignore_ascii_case(site))
        .collect();
    encode_reject(reason, &kept)
}

/// The longest a run takes: the backend's answer, then its body.
pub(super) fn run_bound(shared: &Shared) -> Duration {
    let t = &shared.cfg.timeouts;
    t.backend_response + t.stream_idle
}

/// A running flight's entry: abandoned (and waiters woken) unless finished.
struct Run<'a> {
    shared: &'a Shared,
    hash: [u8; 32],
    /// The SDNS query's source, counted in the run limits.
    source: Option<IpAddr>,
    done: bool,
}

impl Run<'_> {
    fn finish(mut self, answer: &Arc<[u8]>) {
        let now = (self.shared.cfg.clock)();
        let s = &self.shared.shortcuts;
        lock(&s.cache).finish(&self.hash, answer.clone(), now);
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
            lock(&s.limits).end(ip);
        }
        s.changed.notify_waiters();
    }
}

/// The answer to the flight `frame` (its TCP form) for the zone of `site`
/// (DNS; `None` on TCP: the key's site). `wait`: a flight being made by
/// another copy is waited for, as long as a run can take, rather than
/// answered [`Outcome::Running`]; past that a waiter gets REJECT 7 (the
/// client takes the normal path at once), never NXDOMAIN.
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
    let deadline = Instant::now() + run_bound(shared) + Duration::from_secs(1);
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
                    return Outcome::Answer(b);
                }
                Lookup::Running if !wait => return Outcome::Running,
                Lookup::Running => {}
                Lookup::Miss => {
                    if let Some(ip) = source {
                        if let Err(why) = lock(&s.limits).try_start(ip, Instant::now()) {
                            return Outcome::Deferred(why);
                        }
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
                        return Outcome::Answer(reject(RejectReason::Busy));
                    }
                    break run;
                }
            }
        }
        if tokio::time::timeout_at(deadline.into(), changed)
            .await
            .is_err()
        {
            // Longer than any run: not cached, the run may still end.
            return Outcome::Answer(reject(RejectReason::Busy));
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
    let busy = || Outcome::Answer(reject(RejectReason::Busy));
    let Ok(Some((parsed, _))) = read_frame(frame, Expect::FirstFlight) else {
        return Outcome::NotFlight;
    };
    let Frame::FirstFlight { header, .. } = &parsed else {
        return Outcome::NotFlight;
    };
    if header.pattern != Pattern::Shortcut {
        return Outcome::NotFlight;
    }
    // The gateway's intake before decrypting, as for a first flight on
    // its port: over a hard limit busy; over a soft one a flight from an
    // unproven address waits for its handshake, and the SDNS's querier
    // is never proven: FETCH, the client's TCP form runs it (checked
    // first, so such a flight takes no hard decryption token).
    let active = shared.active.load(std::sync::atomic::Ordering::Relaxed);
    let intake = match via {
        Via::Dns { .. } => shared.admission.intake_unproven(active, Instant::now()),
        Via::Tcp { .. } => shared.admission.intake(active, Instant::now()),
    };
    if intake.is_busy() {
        Metrics::inc(&m.zrtt_busy);
        return busy();
    }
    if matches!(via, Via::Dns { .. }) && !intake.may_answer_early() {
        return Outcome::Deferred(Deferred::Load);
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
        // The site's shortcut is off (its TCP form; its zone is not served).
        if key_site
            .as_deref()
            .is_some_and(|k| !shared.shortcuts.serves(k))
        {
            return Outcome::Answer(reject(RejectReason::Unsupported));
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
    let refused = |r: Vec<u8>| Outcome::Answer(payload(KIND_REJECT, &site_reject(r, site)));
    let accepted = match result {
        Ok(a) => match super::first_flight::check_store(shared, &a, now).await {
            None => a,
            Some(refusal) => {
                tracing::debug!("shortcut flight refused: {}", refusal.error);
                return refusal.reply.map_or_else(busy, refused);
            }
        },
        Err(refusal) => {
            tracing::debug!("shortcut flight refused: {}", refusal.error);
            return match (refusal.reply, &refusal.error) {
                (Some(r), _) => refused(r),
                // It authenticated, but its early data is not a compact
                // request (a method other than GET or HEAD, a bad target):
                // refused before the replay filter recorded it.
                (None, zrtt_proto::Error::Shortcut(_)) => {
                    Outcome::Answer(reject(RejectReason::Unsupported))
                }
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
            let a = reject(RejectReason::Unsupported);
            run.finish(&a);
            return Outcome::Answer(a);
        }
    };
    Metrics::inc(&m.shortcut_runs);
    let a = match shortcut_backend::run(shared, &site, &request, via).await {
        Ok(response) => match accepted.shortcut_answer(&response) {
            Ok(stream) => {
                drop(response);
                payload(KIND_ANSWER, &stream)
            }
            Err(e) => {
                tracing::debug!("shortcut answer: {e}");
                reject(RejectReason::Busy)
            }
        },
        Err(shortcut_backend::TooLarge) => {
            Metrics::inc(&m.shortcut_too_large);
            reject(RejectReason::Busy)
        }
    };
    // Kept whatever its size: a FETCH for it must find it (its TCP form
    // would otherwise be refused by the replay filter, REJECT 3).
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
    let payload = match answer(shared, frame, None, Via::Tcp { peer, local }, true).await {
        Outcome::Answer(p) => p,
        other => {
            tracing::debug!("shortcut flight from {peer}: {other:?}");
            Metrics::inc(&m.zrtt_silent_drops);
            return;
        }
    };
    if is_answer(&payload) {
        Metrics::inc(&m.shortcut_tcp_answers);
    } else {
        Metrics::inc(&m.shortcut_rejects);
        Metrics::inc(&m.zrtt_rejects_sent);
    }
    // The answer stream or the Reject frame, from the cached payload.
    if tcp.write_all(&payload[1..]).await.is_ok() {
        super::close::linger(tcp);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use zrtt_proto::time::UnixTime;

    #[test]
    fn answers_live_at_least_the_replay_window() {
        assert_eq!(
            answer_lifetime(Duration::ZERO, Some(Duration::from_secs(12))),
            Duration::from_secs(12)
        );
        assert_eq!(
            answer_lifetime(Duration::from_secs(40), Some(Duration::from_secs(12))),
            Duration::from_secs(40)
        );
        assert_eq!(answer_lifetime(Duration::ZERO, None), FALLBACK_LIFETIME);
        // A 90 s window: an answer is still there 80 s after it was made.
        let s = Shortcuts::new(
            &ShortcutConfig::default(),
            Vec::new(),
            Some(Duration::from_secs(90)),
        );
        let t0 = UnixTime::from_millis(1_800_000_000_000);
        let mut cache = lock(&s.cache);
        cache.begin([1; 32], t0).unwrap();
        cache.finish(&[1; 32], payload(KIND_ANSWER, b"stream"), t0);
        let later = UnixTime::from_millis(1_800_000_080_000);
        assert!(matches!(cache.lookup(&[1; 32], later), Lookup::Done(_)));
    }

    #[test]
    fn runs_from_the_sdns_stay_below_the_udp_task_limit() {
        let cfg = ShortcutConfig {
            max_running: usize::MAX,
            ..ShortcutConfig::default()
        };
        let s = Shortcuts::new(&cfg, Vec::new(), None);
        let now = Instant::now();
        let mut limits = lock(&s.limits);
        let cap = super::super::sdns::MAX_UDP_TASKS / 2;
        for i in 0..cap {
            let ip = IpAddr::from([10, (i >> 8) as u8, i as u8, 1]);
            assert_eq!(limits.try_start(ip, now), Ok(()));
        }
        assert_eq!(
            limits.try_start(IpAddr::from([11, 0, 0, 1]), now),
            Err(Deferred::AllRunning)
        );
        assert!(s.serves("www.example.com"));
    }

    #[test]
    fn payloads_and_bare_rejects() {
        assert!(is_answer(&payload(KIND_ANSWER, b"x")));
        assert!(!is_answer(&fetch()));
        assert_eq!(bare_reject(&fetch()), None);
        let r = reject(RejectReason::Busy);
        assert_eq!(bare_reject(&r).unwrap(), r);
    }
}
