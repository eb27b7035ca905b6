//! The DNS shortcut, client side (issue #17, docs/DNS.md §8, ASAP §3.2):
//! a GET or HEAD without a body, to a host whose key record is held but
//! whose address is not known yet, also travels inside a DNS query.
//!
//! The race ([`establish_shortcut`], reached through
//! [`ZrttStream::with_shortcut`](super::ZrttStream::with_shortcut)):
//!
//! - the shortcut flight (Noise NK, pattern `0x04`, one-shot) is encoded
//!   into a TXT query name under `zq.<host>` and asked through the
//!   client's resolver, while the plain address lookup goes on beside it;
//! - **ANSWER** (the whole answer stream in the TXT data): opened (its close
//!   record proves the response complete), done: [`Mode::DnsShortcut`];
//! - **FETCH** (the answer does not fit DNS): once the address is known,
//!   the TCP form of the *same* flight goes to the site (Fast Open), the
//!   answer stream is read to the end and opened: [`Mode::ShortcutFetch`];
//! - REJECT, NXDOMAIN, SERVFAIL, REFUSED, no answer, a malformed answer, a
//!   response `425 Too Early`: forgotten, the plain path goes on;
//! - an address the caller's caches hold ([`ShortcutLookup::known`]) or a
//!   lookup ready at its first poll: no query, the plain path only;
//! - the address first, and the client holds no token, provenance or
//!   ticket (`proven`): its plain flight would be gated anyway, so the
//!   shortcut flight's TCP form goes to the site as the plain path, and
//!   the gateway's answer cache runs the request once whichever copy
//!   comes first; with one: the plain path ([`establish_as`], a fresh
//!   flight with the token, so the client keeps its one round trip)
//!   starts at once, and whichever answers first wins (a DNS answer that
//!   comes while the plain connection is still being set up ends it).
//!
//! A request may then (token held) run twice on the backend, both times
//! marked `Early-Data: 1` by the gateway: only GET and HEAD exist in the
//! compact request, as for the TLS race. The compact request carries no
//! header: requests with headers other than [`DROPPED_HEADERS`], or a
//! Host other than the connection's, do not take the shortcut (a cookie
//! or an authorisation silently lost would change the answer). Flights
//! are padded to the longest name under the host (docs/PROTOCOL.md
//! §13.2).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use zrtt_dns::proto::op::ResponseCode;
use zrtt_dns::proto::rr::{Name, RData, RecordType};
use zrtt_dns::resolver::Resolver;
use zrtt_proto::handshake::ClientHandshake;
use zrtt_proto::shortcut::{self, CompactRequest, Method, TxtAnswer};

use super::config::ClientConfig;
use super::connect::{establish_as, local_ip_towards, AppProtocol, Conn, ConnInfo, Mode, Target};
use super::resolve::ResolveFuture;
use crate::error::{Error, Result};
use crate::tfo::{self, ConnectMode};

/// Request headers the shortcut may drop (the compact request is method
/// and target only; the gateway sends `Host` itself). A request with any
/// other header goes the plain path.
pub const DROPPED_HEADERS: [&str; 5] = [
    "host",
    "user-agent",
    "accept",
    "accept-encoding",
    "connection",
];

/// What the shortcut needs besides the request: the resolver its TXT
/// query goes through (the client's configured servers) and the plain
/// address lookup, already under way.
pub struct ShortcutLookup {
    /// The resolver for the TXT query (never cached).
    pub dns: Arc<Resolver>,
    /// The host's address (the plain lookup).
    pub addr: ResolveFuture,
    /// The address if the caller's caches already hold it, checked
    /// synchronously ([`Resolve::resolve_now`](super::Resolve::resolve_now):
    /// overrides, the resolver's cache, `/etc/hosts`): no query is sent.
    pub known: Option<SocketAddr>,
}

impl std::fmt::Debug for ShortcutLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShortcutLookup").finish_non_exhaustive()
    }
}

/// The compact request (method and target) of `request`, one HTTP/1.1
/// request's bytes, if it may take the shortcut to `host`: a complete GET
/// or HEAD head without a body, no header beyond [`DROPPED_HEADERS`], a
/// target in origin form that fits the query name
/// ([`shortcut::max_target_len`]). `Err`: why not.
pub fn compact_request(
    request: &[u8],
    host: &str,
) -> std::result::Result<CompactRequest, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = req.parse(request) else {
        return Err("not a complete request head");
    };
    let method = match req.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        _ => return Err("only GET and HEAD"),
    };
    let no_body = |h: &httparse::Header<'_>| {
        !(h.name.eq_ignore_ascii_case("transfer-encoding")
            || (h.name.eq_ignore_ascii_case("content-length") && h.value.trim_ascii() != b"0"))
    };
    if head != request.len() || !req.headers.iter().all(no_body) {
        return Err("a request body");
    }
    let dropped = |name: &str| DROPPED_HEADERS.iter().any(|d| name.eq_ignore_ascii_case(d));
    if !req.headers.iter().all(|h| dropped(h.name)) {
        return Err("a header the compact request cannot carry");
    }
    // The gateway sends the key record's name as Host: another Host (a
    // virtual host behind the same address) would get another answer.
    let same_host = |h: &httparse::Header<'_>| {
        let v = std::str::from_utf8(h.value).unwrap_or("").trim();
        let name = match v.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => v,
        };
        let trim = |n: &str| n.strip_suffix('.').unwrap_or(n).to_owned();
        trim(name).eq_ignore_ascii_case(&trim(host))
    };
    let host_header = |h: &&httparse::Header<'_>| h.name.eq_ignore_ascii_case("host");
    if !req.headers.iter().filter(host_header).all(same_host) {
        return Err("a Host header other than the connection's host");
    }
    let target = req.path.unwrap_or("");
    if target.len() > shortcut::max_target_len(host) {
        return Err("the target does not fit the query name");
    }
    CompactRequest::new(method, target).map_err(|_| "the target is not in origin form")
}

/// A whole response that came without a channel ([`Conn::Answer`]):
/// reads give it, then end of stream; writes are accepted and dropped
/// (hyper writes the request it already sent).
#[derive(Debug)]
pub struct AnswerStream {
    data: Vec<u8>,
    pos: usize,
    /// The plain connection being closed in order ([`wind_down`]): shutting
    /// this stream down waits for it (bounded), so that a program that
    /// exits after its response does not reset it.
    wind_down: Option<tokio::task::JoinHandle<()>>,
}

impl AnswerStream {
    fn new(data: Vec<u8>, wind_down: Option<tokio::task::JoinHandle<()>>) -> Self {
        Self {
            data,
            pos: 0,
            wind_down,
        }
    }
}

impl AsyncRead for AnswerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = this.data.get(this.pos..).unwrap_or_default();
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for AnswerStream {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(h) = this.wind_down.as_mut() {
            let _ = std::task::ready!(Pin::new(h).poll(cx));
            this.wind_down = None;
        }
        Poll::Ready(Ok(()))
    }
}

/// What the TXT query brought.
enum Txt {
    Answer(Vec<u8>),
    Fetch,
    Nothing(String),
}

/// Ask `qname` TXT through `dns`.
async fn ask(dns: &Resolver, qname: &str) -> Txt {
    let msg = match dns.query_uncached(qname, RecordType::TXT).await {
        Ok(m) => m,
        Err(e) => return Txt::Nothing(e.to_string()),
    };
    if msg.metadata.response_code == ResponseCode::NXDomain {
        return Txt::Nothing("NXDOMAIN".into());
    }
    let Ok(mut name) = Name::from_ascii(qname) else {
        return Txt::Nothing("bad query name".into());
    };
    name.set_fqdn(true);
    let txt = msg.answers.iter().find_map(|r| match &r.data {
        RData::TXT(t) if r.name == name => Some(t),
        _ => None,
    });
    let Some(txt) = txt else {
        return Txt::Nothing("no TXT record in the answer".into());
    };
    match TxtAnswer::from_strings(txt.txt_data.iter().map(|s| &s[..])) {
        Ok(TxtAnswer::Answer(stream)) => Txt::Answer(stream),
        Ok(TxtAnswer::Fetch) => Txt::Fetch,
        Ok(TxtAnswer::Reject(_)) => Txt::Nothing("REJECT".into()),
        Err(e) => Txt::Nothing(format!("malformed answer: {e}")),
    }
}

/// The TCP form of the flight to `addr` (Fast Open), the answer stream read
/// to the end (bounded by the response limit and `reply_timeout`), the
/// connection's RTT and whether it was answered within a round trip of the
/// SYN data being acknowledged.
async fn fetch(
    cfg: &ClientConfig,
    addr: SocketAddr,
    flight: &[u8],
) -> Result<(Vec<u8>, Duration, bool)> {
    let t = Instant::now();
    let fast_open = cfg.fast_open && cfg.paths.fast_open_allowed(addr, t);
    let (mut tcp, cmode) =
        tfo::connect_with_data(addr, flight, fast_open, cfg.connect_timeout).await?;
    let limit = shortcut::MAX_RESPONSE + 64 * 1024;
    let mut stream = Vec::new();
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = tcp
                .read(&mut chunk)
                .await
                .map_err(Error::io("reading the shortcut answer"))?;
            if n == 0 {
                return Ok(());
            }
            if stream.len() + n > limit {
                return Err(Error::Protocol("oversized shortcut answer"));
            }
            stream.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(cfg.reply_timeout, read)
        .await
        .map_err(|_| Error::Timeout("shortcut answer"))??;
    let took = t.elapsed();
    let info = tfo::stream_info(&tcp).map_err(Error::io("TCP_INFO"))?;
    let rtt = Duration::from_micros(u64::from(info.rtt_us));
    let early = cmode == ConnectMode::FastOpen
        && info.syn_data()
        && took.as_secs_f64() < rtt.as_secs_f64() * 1.5;
    Ok((stream, rtt, early))
}

/// Whether `response` (an HTTP/1.1 response) says `425 Too Early`.
fn too_early(response: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    r.parse(response).is_ok() && r.code == Some(425)
}

/// Whether the client holds something that makes its plain flight to
/// `addr` answered before the handshake: provenance for the local
/// address towards it, an address token for that address, or a
/// resumption ticket for `host`. Without one the gateway gates the plain
/// flight anyway (docs/PROTOCOL.md §8).
fn proven(cfg: &ClientConfig, host: &str, addr: SocketAddr) -> bool {
    let local = local_ip_towards(addr);
    let now = (cfg.clock)();
    let by_provenance = (cfg.provenance.as_ref())
        .zip(local)
        .is_some_and(|(p, ip)| p.for_local(ip, now).is_some());
    let by_token = cfg.tokens.as_ref().is_some_and(|s| {
        (cfg.resume && s.tickets(host) > 0) || local.is_some_and(|ip| s.token(host, ip).is_some())
    });
    by_provenance || by_token
}

/// The info of a request answered by the shortcut.
fn answered(mode: Mode, t0: Instant, rtt: Duration, early: bool, notes: Vec<String>) -> ConnInfo {
    let fetched = mode == Mode::ShortcutFetch;
    ConnInfo {
        mode,
        notes,
        fallback: None,
        connect_mode: if fetched {
            ConnectMode::FastOpen
        } else {
            ConnectMode::Plain
        },
        syn_data_acked: fetched,
        early_data: true,
        retried_with_fresh_keys: false,
        time_connect: if fetched { rtt } else { Duration::ZERO },
        time_appconnect: t0.elapsed(),
        rtt,
        // Beyond the DNS lookup the plain path needs anyway.
        round_trips: match (fetched, early) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => 2,
        },
        local_addr: None,
        verifiers: Vec::new(),
        protocol: AppProtocol::Http1,
        resumed: false,
    }
}

/// The shortcut flight and its query name, or why the request does not
/// take the shortcut.
fn prepare(
    cfg: &ClientConfig,
    host: &str,
    protocol: AppProtocol,
    request: &[u8],
) -> std::result::Result<(ClientHandshake, Vec<u8>, String), String> {
    if !cfg.dns_shortcut {
        return Err("off".into());
    }
    if protocol != AppProtocol::Http1 {
        return Err("HTTP/2 (the answer is HTTP/1.1)".into());
    }
    if cfg.early_data == super::EarlyDataPolicy::Never {
        return Err("no early data allowed".into());
    }
    let creq = compact_request(request, host)?;
    let now = (cfg.clock)();
    let rec = cfg
        .keys
        .lookup(host, now)
        .ok_or_else(|| "no valid key record".to_owned())?;
    if rec.body().flags.client_auth_required() {
        return Err("the key record requires client authentication".into());
    }
    let (hs, flight) =
        ClientHandshake::start_shortcut(&rec, &creq, None, Some(host), now, cfg.rng.as_ref())
            .map_err(|e| format!("flight: {e}"))?;
    let qname = shortcut::query_name(&flight, host).map_err(|e| format!("query name: {e}"))?;
    Ok((hs, flight, qname))
}

/// The plain path to `addr` ([`establish_as`]); owns what it uses, so
/// that it can be wound down in the background ([`wind_down`]).
fn plain_path_to(
    cfg: Arc<ClientConfig>,
    host: &str,
    addr: SocketAddr,
    protocol: AppProtocol,
    request: Arc<[u8]>,
) -> Plain {
    let target = Target {
        host: host.to_owned(),
        addr,
    };
    Box::pin(async move { establish_as(&cfg, &target, protocol, &request).await })
}

type Plain = Pin<Box<dyn Future<Output = Result<(Conn, ConnInfo)>> + Send + 'static>>;

/// Bound on each step of [`wind_down`].
const WIND_DOWN: Duration = Duration::from_secs(2);

/// The shortcut won while the plain path was under way: let that
/// connection finish and close it in order (shut down, read to the end)
/// instead of resetting it. A gateway that answered it early counts a
/// reset before it saw the handshake complete as a failed early answer,
/// and then answers that address only after the handshake for a
/// cool-down (docs/PROTOCOL.md §8): dropping the connection would cost
/// the client's next connections their round trip.
async fn wind_down(plain: Plain) {
    let Ok(Ok((conn, _))) = tokio::time::timeout(WIND_DOWN, plain).await else {
        return;
    };
    async fn close<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
        let _ = tokio::io::AsyncWriteExt::shutdown(s).await;
        let mut buf = [0u8; 4096];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    }
    let closing = async move {
        match conn {
            Conn::Zrtt(mut s) => close(s.as_mut()).await,
            Conn::Tls(mut s) => close(s.as_mut()).await,
            Conn::Answer(_) => {}
        }
    };
    let _ = tokio::time::timeout(WIND_DOWN, closing).await;
}

type Fetching<'a> = Pin<Box<dyn Future<Output = Result<(Vec<u8>, Duration, bool)>> + Send + 'a>>;

/// Polls `f` if there is one, else never completes.
async fn some<F: Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Send `request` to `target.host` (port `target.addr.port()`; the address
/// comes from `lookup`), by the DNS shortcut and the plain path raced (see
/// the module docs); a request that cannot take the shortcut waits for the
/// address and goes the plain path ([`establish_as`]). The notes say why.
pub(super) async fn establish_shortcut(
    cfg: Arc<ClientConfig>,
    target: &Target,
    protocol: AppProtocol,
    request: Vec<u8>,
    lookup: ShortcutLookup,
) -> Result<(Conn, ConnInfo)> {
    let t0 = Instant::now();
    let ShortcutLookup { dns, addr, known } = lookup;
    let host = target.host.as_str();
    let port = target.addr.port();
    let mut notes = Vec::new();
    let request: Arc<[u8]> = request.into();
    let plain = |ip: SocketAddr| {
        let to = SocketAddr::new(ip.ip(), port);
        plain_path_to(cfg.clone(), host, to, protocol, request.clone())
    };
    let cfg = cfg.as_ref();
    let with_notes = |r: Result<(Conn, ConnInfo)>, notes: Vec<String>| {
        r.map(|(conn, mut info)| {
            info.notes.splice(0..0, notes);
            (conn, info)
        })
    };
    let resolved = |r: io::Result<SocketAddr>| r.map_err(Error::io("resolving the host"));
    let mut addr = addr;
    // An address already known (cached) leaves nothing to save: the plain
    // path at once, and no query that would run the request a second time.
    let known_now = match known {
        Some(a) => Poll::Ready(Ok(a)),
        None => std::future::poll_fn(|cx| Poll::Ready(addr.as_mut().poll(cx))).await,
    };
    let prepared = match known_now {
        Poll::Ready(r) => {
            notes.push("DNS shortcut not used: the address is known".to_owned());
            return with_notes(plain(resolved(r)?).await, notes);
        }
        Poll::Pending => prepare(cfg, host, protocol, &request),
    };
    let (hs, flight, qname) = match prepared {
        Ok(p) => p,
        Err(why) => {
            notes.push(format!("DNS shortcut not used: {why}"));
            let r = plain(resolved(addr.await)?).await;
            return with_notes(r, notes);
        }
    };
    let mut hs = Some(hs);
    let txt = ask(&dns, &qname);
    tokio::pin!(txt);
    let mut addr = Some(addr);
    let mut txt_done = false;
    let mut want_fetch = false;
    let mut known: Option<SocketAddr> = None;
    let mut addr_err: Option<Error> = None;
    let mut plain_path: Option<Plain> = None;
    let mut fetching: Option<Fetching<'_>> = None;
    let ms = |t0: Instant| t0.elapsed().as_secs_f64() * 1000.0;
    loop {
        if txt_done && addr.is_none() && plain_path.is_none() && fetching.is_none() {
            // Nothing left to wait for.
            if let Some(e) = addr_err.take() {
                return Err(e);
            }
            let ip = known.ok_or(Error::Protocol("no address"))?;
            plain_path = Some(plain(ip));
        }
        tokio::select! {
            biased;
            r = &mut txt, if !txt_done => {
                txt_done = true;
                match r {
                    Txt::Answer(stream) => {
                        match hs.take().map(|h| h.open_shortcut_answer(&stream)) {
                            Some(Ok(resp)) if !too_early(&resp) => {
                                notes.push(format!(
                                    "DNS shortcut: answered in the DNS answer after {:.1} ms{}",
                                    ms(t0),
                                    if plain_path.is_some() { " (the plain connection under way is closed in order)" } else { "" }
                                ));
                                let info = answered(Mode::DnsShortcut, t0, Duration::ZERO, true, notes);
                                let wind = plain_path.take().map(|p| tokio::spawn(wind_down(p)));
                                return Ok((Conn::Answer(Box::new(AnswerStream::new(resp, wind))), info));
                            }
                            Some(Ok(_)) => notes.push("DNS shortcut: 425 Too Early; plain path".into()),
                            Some(Err(e)) => notes.push(format!("DNS shortcut: the answer did not open ({e}); plain path")),
                            None => {}
                        }
                    }
                    Txt::Fetch => match known {
                        _ if plain_path.is_some() => notes.push(
                            "DNS shortcut: FETCH after the plain path started; plain path".into(),
                        ),
                        // The TCP form is already on its way.
                        _ if fetching.is_some() => {}
                        Some(ip) => fetching = Some(Box::pin(fetch(cfg, SocketAddr::new(ip.ip(), port), &flight))),
                        None => want_fetch = true,
                    },
                    Txt::Nothing(why) => notes.push(format!("DNS shortcut: {why}; plain path")),
                }
            }
            r = some(&mut addr) => {
                addr = None;
                match resolved(r) {
                    Ok(ip) => {
                        known = Some(ip);
                        let to = SocketAddr::new(ip.ip(), port);
                        if want_fetch {
                            fetching = Some(Box::pin(fetch(cfg, to, &flight)));
                        } else if !txt_done && !proven(cfg, host, to) {
                            // The plain flight would be gated anyway: the
                            // shortcut flight's TCP form is the plain path,
                            // and the gateway's answer cache runs the
                            // request once whichever copy comes first.
                            notes.push(format!(
                                "address after {:.1} ms, before the DNS shortcut's answer, no token: the shortcut flight's TCP form sent",
                                ms(t0)
                            ));
                            fetching = Some(Box::pin(fetch(cfg, to, &flight)));
                        } else {
                            if !txt_done {
                                notes.push(format!(
                                    "address after {:.1} ms, before the DNS shortcut's answer: plain path started (a token: one round trip; the request may run twice)",
                                    ms(t0)
                                ));
                            }
                            plain_path = Some(plain(ip));
                        }
                    }
                    Err(e) => addr_err = Some(e),
                }
            }
            r = some(&mut plain_path) => return with_notes(r, notes),
            r = some(&mut fetching) => {
                fetching = None;
                let opened = r.and_then(|(stream, rtt, early)| {
                    let h = hs.take().ok_or(Error::Protocol("shortcut handshake used"))?;
                    let resp = h.open_shortcut_answer(&stream).map_err(Error::from)?;
                    Ok((resp, rtt, early))
                });
                match opened {
                    Ok((resp, rtt, early)) if !too_early(&resp) => {
                        notes.push(format!(
                            "DNS shortcut: FETCH, the same flight over TCP answered after {:.1} ms",
                            ms(t0)
                        ));
                        let info = answered(Mode::ShortcutFetch, t0, rtt, early, notes);
                        return Ok((Conn::Answer(Box::new(AnswerStream::new(resp, None))), info));
                    }
                    Ok(_) => notes.push("DNS shortcut fetch: 425 Too Early; plain path".into()),
                    Err(e) => notes.push(format!("DNS shortcut fetch failed ({e}); plain path")),
                }
                if let Some(ip) = known {
                    plain_path = Some(plain(ip));
                }
            }
        }
    }
}
