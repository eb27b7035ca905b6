//! Establishing a connection: zrtt with the first request in the SYN, TLS
//! 1.3 on the same port when that cannot work ([`establish`]).
//!
//! Order of attempts:
//! 1. a verified key record from the [`KeySource`](super::KeySource) → zrtt,
//!    unless the [`PathMemory`] remembers that the path drops zrtt's bytes;
//!    with Fast Open unless it remembers that the path drops SYN data; no
//!    SYN-ACK within the race delay → once more without Fast Open;
//! 2. a Reject carrying records that verify against the same certificate →
//!    zrtt again at once, with the fresh key (once);
//! 3. a resumed flight refused with Reject 9 → at once again with NK/IK,
//!    never another ticket (the origin's other tickets of that ticket key
//!    are dropped); a resumed flight closed without an answer (a server
//!    that predates resumption) → once more without a ticket; HTTP/2
//!    refused with Reject 8 → TLS with ALPN `h2`;
//! 4. otherwise (no record, other refusals, no answer) → TLS 1.3 (rustls);
//!    a flight that was taken but never answered within `reply_timeout`
//!    (a path that passes the SYN and drops what follows) also makes the
//!    path skip zrtt for a cool-down, as a lost race does.
//!
//! **Racing** (RFC 8305's idea applied to protocols): when no zrtt answer
//! has come within the race delay (three round trips of the path's RTT,
//! measured before or taken from this connection's SYN-ACK, within 250 ms
//! and `syn_timeout`), a TLS handshake starts in parallel. If TLS completes
//! first *and the zrtt flight is still unacknowledged* (something on the
//! path drops it), TLS carries the request and the path skips zrtt for a
//! cool-down. If the server acknowledged the flight, its Reply is due
//! within [`REPLY_BOUND`](crate::reply_bound::REPLY_BOUND) of the moment it
//! may speak, with or without response bytes (docs/PROTOCOL.md §4.3): a
//! slow backend does not delay it. So zrtt keeps the request if the Reply
//! comes by [`reply_overdue_at`](super::reply_overdue_at) (`reply_wait.rs`:
//! a few round trips after it was due and after TLS completed; the race
//! itself is in `race.rs`), and the TLS connection is closed unused; past
//! that the path drops zrtt's bytes after the SYN (a TLS-only
//! middlebox): TLS carries the request at once and the path skips zrtt for
//! a cool-down, as when the flight went unacknowledged. Once a Reply has
//! arrived zrtt is never abandoned. A request sent in a flight that is then
//! abandoned was an idempotent one (early data is only GET, HEAD or OPTIONS
//! without a body), so it is safe to send it again over TLS; any other
//! request is sent only after the Reply, so it never goes twice; a failure
//! after that Reply or inside the channel is the caller's, never TLS's.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use zrtt_proto::handshake::{
    decode_reject_records, ext, read_frame, ClientHandshake, ClientParams, Expect, Frame,
    RejectReason,
};
use zrtt_proto::record::VerifiedKeyRecord;

use super::config::{ClientConfig, EarlyDataPolicy};
use super::paths::PathMemory;
use super::race::{late_after, switch_to_tls, Race};
pub(super) use super::tls_path::{tls_handshake, tls_send, TlsReady};
use crate::error::{Error, Result};
use crate::stream::ChannelStream;
use crate::sys::{self, state};
use crate::tfo::{self, ConnectMode};

/// What [`Error::Timeout`] names when no zrtt reply came in time.
const REPLY_TIMEOUT: &str = "zrtt reply";

pub use super::mode::Mode;

/// Why a connection went to TLS instead of zrtt ([`ConnInfo::fallback`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// zrtt was not tried: no valid key record, or the path memory skips
    /// zrtt on this path.
    NotTried,
    /// TLS won the race while the zrtt flight was unacknowledged (the path
    /// drops zrtt's bytes, SYN included).
    FlightUnacknowledged,
    /// The server took the flight but its Reply was overdue once the raced
    /// TLS handshake had completed
    /// ([`reply_overdue_at`](super::reply_overdue_at)): the path drops
    /// zrtt's bytes after the SYN.
    ReplyOverdue,
    /// No zrtt Reply within [`ClientConfig::reply_timeout`].
    ReplyTimeout,
    /// zrtt was refused or failed otherwise (the notes say how).
    ZrttFailed,
}

/// What happened while connecting, for diagnostics and `-w`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnInfo {
    /// The path taken.
    pub mode: Mode,
    /// Why zrtt was not used or failed (for TLS fallback and retries).
    pub notes: Vec<String>,
    /// Why TLS carried the request (`None` on zrtt).
    pub fallback: Option<Fallback>,
    /// How the final TCP connection was opened.
    pub connect_mode: ConnectMode,
    /// The SYN's data was acknowledged (`TCPI_OPT_SYN_DATA`).
    pub syn_data_acked: bool,
    /// The request travelled in the first flight.
    pub early_data: bool,
    /// A refusal carried fresh keys and zrtt was retried with them.
    pub retried_with_fresh_keys: bool,
    /// Time to the TCP handshake (estimated from `tcpi_rtt` for Fast Open).
    pub time_connect: Duration,
    /// Time to the secure channel (zrtt reply or TLS handshake done).
    pub time_appconnect: Duration,
    /// Smoothed RTT the kernel measured on the final connection.
    pub rtt: Duration,
    /// Round trips spent until the first response byte can arrive
    /// (protocol count: TCP, TLS, refusals and retries included).
    pub round_trips: u32,
    /// The local address of the final connection.
    pub local_addr: Option<SocketAddr>,
    /// The provenance verifiers the key record used names (zrtt only):
    /// certificates from them would prove this client's address to the
    /// server on a first contact ([`crate::verifier::ProvenanceStore`]).
    pub verifiers: Vec<String>,
    /// The application protocol the connection speaks.
    pub protocol: AppProtocol,
    /// The zrtt connection resumed a ticket (Noise NNpsk0, docs/PROTOCOL.md §12).
    pub resumed: bool,
}

/// The application protocol inside the connection (first-flight ALPN,
/// docs/PROTOCOL.md §4.2; TLS ALPN on the fallback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppProtocol {
    /// HTTP/1.1: the early data is one request head.
    Http1,
    /// HTTP/2: the early data is the connection preface, SETTINGS and the
    /// leading run of bodiless GETs hyper wrote by then.
    Http2,
}

impl AppProtocol {
    /// Its ALPN id.
    pub fn alpn(self) -> &'static [u8] {
        match self {
            AppProtocol::Http1 => b"http/1.1",
            AppProtocol::Http2 => b"h2",
        }
    }

    /// How much of `request` (this protocol's first bytes) may travel as
    /// early data under `policy`, at most `max` bytes: HTTP/1.1, all of it
    /// if [`early_eligible`]; HTTP/2, the preface and frames up to the end
    /// of the leading run of bodiless GETs
    /// ([`zrtt_proto::http2::first_request`]). `None`: nothing.
    pub fn early_part(self, request: &[u8], policy: EarlyDataPolicy, max: usize) -> Option<usize> {
        match self {
            AppProtocol::Http1 => {
                (early_eligible(request, policy) && request.len() <= max).then_some(request.len())
            }
            AppProtocol::Http2 => match zrtt_proto::http2::first_request(request, max) {
                zrtt_proto::http2::FirstRequest::Ready { early: Some(n) }
                    if policy != EarlyDataPolicy::Never =>
                {
                    Some(n)
                }
                _ => None,
            },
        }
    }
}

/// A host name and the address to reach it at.
#[derive(Clone, Debug)]
pub struct Target {
    /// Host name: the key records' name and the TLS server name.
    pub host: String,
    /// Address to connect to.
    pub addr: SocketAddr,
}

/// An established connection.
pub enum Conn {
    /// The zrtt channel.
    Zrtt(Box<ChannelStream<TcpStream>>),
    /// TLS 1.3.
    Tls(Box<TlsStream<TcpStream>>),
    /// A whole response that came without a channel (the DNS shortcut:
    /// [`Mode::DnsShortcut`], [`Mode::ShortcutFetch`]); reads give it, then
    /// end of stream; writes are dropped.
    Answer(Box<super::shortcut::AnswerStream>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Zrtt(c) => c.fmt(f),
            Conn::Tls(_) => f.write_str("Conn::Tls"),
            Conn::Answer(_) => f.write_str("Conn::Answer"),
        }
    }
}

/// Whether `request` (HTTP/1.x bytes) may travel as early data under `policy`:
/// one complete GET/HEAD/OPTIONS head without a body.
pub fn early_eligible(request: &[u8], policy: EarlyDataPolicy) -> bool {
    if policy == EarlyDataPolicy::Never {
        return false;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(request) {
        Ok(httparse::Status::Complete(n)) if n == request.len() => {}
        _ => return false,
    }
    if !matches!(req.method, Some("GET" | "HEAD" | "OPTIONS")) {
        return false;
    }
    req.headers.iter().all(|h| {
        !(h.name.eq_ignore_ascii_case("transfer-encoding")
            || (h.name.eq_ignore_ascii_case("content-length") && h.value.trim_ascii() != b"0"))
    })
}

// One value per connection attempt, moved once: size does not matter.
#[allow(clippy::large_enum_variant)]
enum Attempt {
    Done(Conn, ConnInfo),
    Rejected(RejectReason, Vec<u8>, u32),
    SynTimeout,
    /// Failed before any of the request inside the channel was written:
    /// TLS may send it.
    Failed(Error),
    /// Failed once part of the request inside the channel was written: the
    /// server may have it, so no fallback sends it again.
    Sent(Error),
}

/// Connect to `target` and send `request` (one HTTP/1.x request's bytes):
/// zrtt if possible, else TLS, racing TLS when zrtt is late. Returns the
/// connection (positioned after the request) and what happened.
pub async fn establish(
    cfg: &ClientConfig,
    target: &Target,
    request: &[u8],
) -> Result<(Conn, ConnInfo)> {
    establish_as(cfg, target, AppProtocol::Http1, request).await
}

/// [`establish`] for `protocol`: its ALPN in the first flight and on the
/// TLS fallback (HTTP/2: only `h2`, an error if TLS does not agree).
/// `request` is what the protocol sent first: for HTTP/2 the connection
/// preface, SETTINGS and the frames of the requests written by then.
pub async fn establish_as(
    cfg: &ClientConfig,
    target: &Target,
    protocol: AppProtocol,
    request: &[u8],
) -> Result<(Conn, ConnInfo)> {
    let t0 = Instant::now();
    let race = Race::default();
    let zrtt = zrtt_attempts(cfg, target, protocol, request, t0, &race);
    tokio::pin!(zrtt);
    // A TLS connection the race completed and zrtt did not need (yet).
    let mut spare = None;
    let outcome = tokio::select! {
        biased;
        r = &mut zrtt => r,
        () = race.late.notified(), if cfg.tls_fallback => {
            if !cfg.paths.take_race(target.addr, Instant::now()) {
                // Over the race budget (paths.rs): wait for zrtt; TLS
                // still follows below if it fails.
                tracing::debug!("{}: zrtt is late, no TLS raced (budget spent)", target.host);
                zrtt.await
            } else {
                let tls = tls_handshake(cfg, target, protocol, t0, None);
                tokio::pin!(tls);
                tokio::select! {
                    biased;
                    r = &mut zrtt => r,
                    t = &mut tls => match t {
                        Ok(ready) => match switch_to_tls(&race, &ready, zrtt.as_mut()).await {
                            Ok(why) => return tls_won(cfg, target, protocol, request, t0, ready, why).await,
                            Err(r) => {
                                spare = Some(ready);
                                r
                            }
                        },
                        // TLS failed: zrtt keeps the request.
                        Err(_) => zrtt.await,
                    },
                }
            }
        }
    };
    let (done, notes, spent, retried, why) = outcome?;
    if let Some((conn, mut info)) = done {
        info.round_trips += spent;
        info.retried_with_fresh_keys = retried;
        info.notes.splice(0..0, notes);
        cfg.paths.observe_rtt(target.addr, info.rtt, Instant::now());
        cfg.paths.zrtt_succeeded(target.addr, Instant::now());
        return Ok((conn, info));
    }
    if !cfg.tls_fallback {
        return Err(Error::Config(format!(
            "zrtt not possible and TLS fallback disabled ({})",
            notes.join("; ")
        )));
    }
    let tls = match spare {
        Some(ready) => ready,
        None => tls_handshake(cfg, target, protocol, t0, None).await?,
    };
    let (conn, mut info) = tls_send(tls, protocol, request).await?;
    info.round_trips += spent;
    info.retried_with_fresh_keys = retried;
    info.notes.splice(0..0, notes);
    info.fallback = Some(why);
    cfg.paths.observe_rtt(target.addr, info.rtt, Instant::now());
    Ok((conn, info))
}

/// TLS won the race (`why`): it carries the request, and the path skips
/// zrtt for a cool-down (an overdue Reply: the second time in a row).
async fn tls_won(
    cfg: &ClientConfig,
    target: &Target,
    protocol: AppProtocol,
    request: &[u8],
    t0: Instant,
    tls: TlsReady,
    why: Fallback,
) -> Result<(Conn, ConnInfo)> {
    let now = Instant::now();
    let (what, cooldown) = match why {
        Fallback::ReplyOverdue => (
            "the flight taken but the zrtt reply overdue",
            cfg.paths.zrtt_reply_overdue(target.addr, now),
        ),
        _ => (
            "the flight unacknowledged",
            Some(cfg.paths.zrtt_failed(target.addr, now)),
        ),
    };
    let skipped = match cooldown {
        Some(c) => format!("zrtt skipped on this path for {} s", c.as_secs()),
        None => "zrtt not skipped yet: the first overdue reply in a row".to_owned(),
    };
    let note = format!(
        "no zrtt answer after {} ms and {what}; TLS won the race ({skipped})",
        t0.elapsed().as_millis(),
    );
    let (conn, mut info) = tls_send(tls, protocol, request).await?;
    info.notes.push(note);
    info.fallback = Some(why);
    // The wait before the race counts too, in this path's RTTs.
    let rtts = t0.elapsed().as_secs_f64() / info.rtt.as_secs_f64().max(1e-6);
    info.round_trips = (rtts.ceil() as u32).max(3);
    cfg.paths.observe_rtt(target.addr, info.rtt, Instant::now());
    Ok((conn, info))
}

/// What the zrtt attempts ended with: a connection or `None` (use TLS),
/// the notes, the round trips spent on failed attempts, whether a
/// refusal's fresh keys were used, and why TLS (if it comes to that).
pub(super) type ZrttOutcome = (Option<(Conn, ConnInfo)>, Vec<String>, u32, bool, Fallback);

/// zrtt with Fast Open, once more without it, once more with fresh keys.
async fn zrtt_attempts(
    cfg: &ClientConfig,
    target: &Target,
    protocol: AppProtocol,
    request: &[u8],
    t0: Instant,
    race: &Race,
) -> Result<ZrttOutcome> {
    let now = (cfg.clock)();
    let mut notes = Vec::new();
    let mut spent = 0u32;
    let mut retried = false;
    let mut why = Fallback::NotTried;
    let mut record = cfg.keys.lookup(&target.host, now);
    if record.is_none() {
        notes.push("no valid key record".to_owned());
    } else if let Some(left) = cfg.paths.zrtt_blocked(target.addr, t0) {
        notes.push(format!(
            "zrtt skipped: the path dropped it recently ({} s left)",
            left.as_secs()
        ));
        record = None;
    }
    let mut fast_open = cfg.fast_open && cfg.paths.fast_open_allowed(target.addr, t0);
    let mut ticket_refused = false;
    while let Some(rec) = record.take() {
        cfg.paths.zrtt_started(target.addr, Instant::now());
        // The ticket key id of the ticket this attempt presented, if any.
        let mut resumed = None;
        let attempt = attempt_zrtt(
            cfg,
            target,
            &rec,
            (protocol, request),
            (fast_open, !ticket_refused),
            t0,
            race,
            &mut resumed,
        );
        match attempt.await {
            Ok(Attempt::Done(conn, info)) => {
                return Ok((Some((conn, info)), notes, spent, retried, why));
            }
            Ok(Attempt::SynTimeout) => {
                notes.push("no SYN-ACK to SYN data; retrying without Fast Open".into());
                cfg.paths.fast_open_failed(target.addr, Instant::now());
                fast_open = false;
                spent += 1;
                record = Some(rec);
            }
            Ok(Attempt::Rejected(reason, records, rts)) => {
                spent += rts;
                why = Fallback::ZrttFailed;
                notes.push(format!("server refused the first flight: {reason}"));
                if reason == RejectReason::TicketRefused && !ticket_refused {
                    // Retry at once with NK/IK, never another ticket, and
                    // drop the origin's other tickets of that ticket key:
                    // this server would refuse them too (docs/PROTOCOL.md
                    // §12.4).
                    ticket_refused = true;
                    if let (Some(store), Some(key_id)) = (&cfg.tokens, resumed) {
                        let n = store.drop_tickets_of_key(&target.host, key_id);
                        if n > 0 {
                            notes.push(format!("dropped {n} more tickets of key {key_id:08x}"));
                        }
                    }
                    record = Some(rec);
                    continue;
                }
                if reason == RejectReason::Unsupported && protocol == AppProtocol::Http2 {
                    // Most likely ALPN h2 not served there; the protocol is
                    // fixed for this connection: TLS with ALPN h2.
                    notes.push("HTTP/2 not served in zrtt there".into());
                    continue;
                }
                if retried || records.is_empty() {
                    continue;
                }
                let fresh = decode_reject_records(&records)
                    .ok()
                    .and_then(|r| cfg.keys.verify_retry(&target.host, &r, (cfg.clock)()));
                match fresh {
                    Some(r) => {
                        retried = true;
                        record = Some(r);
                    }
                    None => notes.push("records in the refusal did not verify".into()),
                }
            }
            Ok(Attempt::Sent(e)) => return Err(e),
            Err(Error::NoAnswer) if resumed.is_some() && !ticket_refused => {
                // Closed without an answer: a server that predates
                // resumption (a fleet upgraded piecemeal) drops a resumed
                // flight so. Once more at once without a ticket.
                notes.push("no answer to a resumed flight; retrying without a ticket".into());
                spent += 1;
                ticket_refused = true;
                record = Some(rec);
            }
            Ok(Attempt::Failed(e)) | Err(e) => {
                notes.push(format!("zrtt failed: {e}"));
                spent += 1;
                why = Fallback::ZrttFailed;
                if matches!(e, Error::Timeout(REPLY_TIMEOUT)) {
                    why = Fallback::ReplyTimeout;
                    // The flight was taken (else the race would have
                    // switched) but no answer came in `reply_timeout`: a
                    // path that lets the SYN through and drops what
                    // follows. Skip zrtt there, as when TLS wins the race.
                    let cooldown = cfg.paths.zrtt_failed(target.addr, Instant::now());
                    notes.push(format!(
                        "zrtt skipped on this path for {} s",
                        cooldown.as_secs()
                    ));
                }
            }
        }
    }
    Ok((None, notes, spent, retried, why))
}

/// A failure once a Reply came: with early data the server has the request,
/// so no TLS fallback may send it again (docs/PROTOCOL.md §4.3).
fn after_reply(early: bool, e: Error) -> Result<Attempt> {
    if early {
        Ok(Attempt::Sent(e))
    } else {
        Err(e)
    }
}

/// The local address the kernel would use towards `dest` (no packet sent).
pub(super) fn local_ip_towards(dest: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if dest.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(bind).ok()?;
    s.connect(dest).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// One zrtt attempt (`flags`: Fast Open, whether a ticket may be used);
/// `resumed_out` is set to the ticket key id when its flight resumed a
/// ticket.
#[allow(clippy::too_many_arguments)]
async fn attempt_zrtt(
    cfg: &ClientConfig,
    target: &Target,
    rec: &VerifiedKeyRecord,
    (protocol, request): (AppProtocol, &[u8]),
    (fast_open, use_ticket): (bool, bool),
    t0: Instant,
    race: &Race,
    resumed_out: &mut Option<u32>,
) -> Result<Attempt> {
    let max_early = rec.body().max_early_data_bytes as usize;
    let early_len = protocol.early_part(request, cfg.early_data, max_early);
    let early = early_len.is_some();
    let mut params = ClientParams::default();
    params.extensions.set(ext::ALPN, protocol.alpn().to_vec());
    let tickets = cfg.tokens.as_ref().filter(|_| cfg.resume);
    if tickets.is_some() {
        params.request_ticket();
    }
    let (early_data, rest) = request.split_at(early_len.unwrap_or(0));
    // A ticket for this origin (used once, whatever happens next) makes a
    // resumed flight; otherwise NK or IK as below.
    // (A ticket the record's terms rule out, e.g. client authentication
    // required, is dropped and the flight built as below.)
    let resumed = tickets
        .filter(|_| use_ticket)
        .and_then(|s| s.take_ticket(&target.host, rec, (cfg.clock)()))
        .and_then(|t| {
            ClientHandshake::resume(rec, t, &params, early_data, (cfg.clock)(), cfg.rng.as_ref())
                .ok()
        });
    let proof = cfg
        .provenance
        .as_ref()
        .and_then(|p| local_ip_towards(target.addr).and_then(|ip| p.for_local(ip, (cfg.clock)())));
    if let Some((key, certs)) = proof {
        params.static_key = Some(key);
        params.extensions.set(ext::PROVENANCE, certs);
    } else if let Some(store) = &cfg.tokens {
        params.static_key = Some(store.static_key(&target.host, cfg.rng.as_ref())?);
        if let Some(tok) =
            local_ip_towards(target.addr).and_then(|ip| store.token(&target.host, ip))
        {
            params.extensions.set(ext::ADDRESS_TOKEN, tok);
        }
    } else if rec.body().flags.client_auth_required() {
        params.static_key = Some(zrtt_proto::crypto::X25519KeyPair::generate(
            cfg.rng.as_ref(),
        )?);
    }
    let (hs, flight) = match resumed {
        Some(r) => r,
        None => ClientHandshake::start(rec, &params, early_data, (cfg.clock)(), cfg.rng.as_ref())?,
    };
    let is_resumed = hs.resumed();
    if is_resumed {
        *resumed_out = hs.ticket_key_id();
    }
    let started = Instant::now();
    let (mut tcp, cmode) =
        tfo::connect_with_data(target.addr, &flight, fast_open, cfg.connect_timeout).await?;

    // Read the reply; meanwhile watch for a SYN-ACK that never comes, and
    // tell the race when the answer is late.
    let mut buf = Vec::with_capacity(4096);
    let dup = || tcp.as_fd().try_clone_to_owned().map_err(Error::io("dup"));
    let watch_fd = dup()?;
    race.watch(dup()?, started);
    let rtt_hint = cfg.paths.rtt(target.addr);
    let syn_delay = PathMemory::race_delay(rtt_hint, cfg.syn_timeout);
    let syn_watch = async move {
        tokio::time::sleep(syn_delay).await;
        match sys::tcp_info(watch_fd.as_fd()) {
            Ok(i) if i.state == state::SYN_SENT && cmode == ConnectMode::FastOpen => {}
            _ => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(syn_watch);
    let late = late_after(t0, rtt_hint, cfg.syn_timeout, dup()?);
    tokio::pin!(late);
    let mut late_fired = false;
    let deadline = tokio::time::Instant::now() + cfg.reply_timeout;
    let used = loop {
        match read_frame(&buf, Expect::ReplyOrReject) {
            Ok(Some((_, used))) => break used,
            Ok(None) => {}
            Err(_) => return Err(Error::Protocol("malformed reply")),
        }
        if buf.len() > 3 + 65535 {
            return Err(Error::Protocol("oversized reply"));
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::select! {
            r = tcp.read(&mut chunk) => r.map_err(|e| match e.kind() {
                io::ErrorKind::ConnectionReset => Error::NoAnswer,
                _ => Error::io("reading reply")(e),
            })?,
            () = &mut syn_watch => return Ok(Attempt::SynTimeout),
            () = &mut late, if !late_fired => {
                late_fired = true;
                race.late.notify_one();
                continue;
            }
            () = tokio::time::sleep_until(deadline) => return Err(Error::Timeout(REPLY_TIMEOUT)),
        };
        if n == 0 {
            return Err(Error::NoAnswer);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let t_reply = t0.elapsed();
    let info = tfo::stream_info(&tcp).map_err(Error::io("TCP_INFO"))?;
    let rtt = Duration::from_micros(u64::from(info.rtt_us));
    let syn_data_acked = info.syn_data();
    if cmode == ConnectMode::FastOpen && !syn_data_acked {
        // The path or the server ignored the SYN's data: do not try again for a while.
        cfg.paths.fast_open_failed(target.addr, Instant::now());
    }
    let frame = match read_frame(&buf[..used], Expect::ReplyOrReject) {
        Ok(Some((f, _))) => f,
        _ => return Err(Error::Protocol("malformed reply")),
    };
    if matches!(frame, Frame::Reply { .. }) {
        race.set_replied();
    }
    // One RTT if the answer came with the SYN-ACK, two if it waited for our ACK.
    let answered_early = syn_data_acked && t_reply.as_secs_f64() < rtt.as_secs_f64() * 1.5;
    let reply_rts = if answered_early { 1 } else { 2 };
    let reply = match frame {
        Frame::Reject { reason, records } => {
            return Ok(Attempt::Rejected(reason, records.to_vec(), reply_rts))
        }
        other => match hs.handle_reply(&other) {
            Ok(r) => r,
            Err(e) => return after_reply(early, Error::from(e)),
        },
    };
    if let (Some(store), Some(t)) = (tickets, reply.ticket) {
        store.put_ticket(&target.host, t);
    }
    let leftover = buf[used..].to_vec();
    let mut stream = ChannelStream::new(tcp, reply.channel, reply.data, leftover, Vec::new());
    let local_addr = stream.get_ref().local_addr().ok();
    if let (Some(store), Some(local)) = (cfg.tokens.clone(), local_addr) {
        let host = target.host.clone();
        stream.on_token(Box::new(move |t| store.put(&host, local.ip(), t)));
    }
    if let Err(e) = stream.process_buffered() {
        return after_reply(early, Error::io("reading after the reply")(e));
    }
    if early {
        // Confirm at once that the flight was ours: a server may hold an
        // early request until then, and only then retry one its backend
        // answered 425 Too Early (docs/PROTOCOL.md §7).
        let confirmed = match stream.confirm() {
            Ok(()) => stream.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = confirmed {
            return Ok(Attempt::Sent(Error::io("confirming")(e)));
        }
    }
    if !rest.is_empty() {
        // The request (HTTP/2: what followed the early part) goes inside
        // the channel; without early data it is itself the confirmation.
        // Once a byte of it is written the server may act on it: a failure
        // then is the caller's error, never a TLS fallback that would send
        // the whole request a second time.
        let mut written = 0;
        let sent = async {
            while written < rest.len() {
                match stream.write(&rest[written..]).await? {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => written += n,
                }
            }
            stream.flush().await
        };
        if let Err(e) = sent.await {
            let e = Error::io("sending request")(e);
            return Ok(if written == 0 {
                Attempt::Failed(e)
            } else {
                Attempt::Sent(e)
            });
        }
    }
    let info = ConnInfo {
        mode: if answered_early {
            Mode::ZrttEarly
        } else {
            Mode::ZrttGated
        },
        notes: Vec::new(),
        fallback: None,
        connect_mode: cmode,
        syn_data_acked,
        early_data: early,
        retried_with_fresh_keys: false,
        time_connect: if cmode == ConnectMode::FastOpen {
            rtt.min(t_reply)
        } else {
            t_reply.saturating_sub(rtt)
        },
        time_appconnect: t_reply,
        rtt,
        round_trips: reply_rts + u32::from(!early),
        local_addr,
        verifiers: {
            let named = &rec.body().verifiers;
            if let Some(store) = cfg.provenance.as_ref().filter(|_| !named.is_empty()) {
                store.note_named(named);
            }
            named.clone()
        },
        protocol,
        resumed: is_resumed,
    };
    Ok(Attempt::Done(Conn::Zrtt(Box::new(stream)), info))
}

/// Whether the socket under an established connection finished its TCP handshake.
pub fn handshake_done(tcp: &TcpStream) -> bool {
    sys::tcp_info(std::os::fd::AsFd::as_fd(tcp)).is_ok_and(|i| i.state == state::ESTABLISHED)
}
