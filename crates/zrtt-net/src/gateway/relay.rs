//! The HTTP relay to the backend: HTTP/1.1 or HTTP/2 served with hyper
//! over the zrtt channel or TLS, each request forwarded with hop-by-hop
//! fields removed.
//!
//! Early data (RFC 8470; the rules in early_rules.rs): the requests that
//! began in a first flight's early data (HTTP/1.1: one safe request;
//! HTTP/2: the first `E` the service is called for) reach the backend with
//! `Early-Data: 1`; an HTTP/2 one that is not safe waits for the client's
//! confirmation (then goes unmarked) or gets 425, and so does a safe one
//! past `max_early_requests` (still marked). If the backend answers
//! 425 Too Early, a marked request is sent again without the mark only
//! once the client has confirmed the handshake over the forward-secret
//! channel (which a replayer cannot do); without that confirmation the 425
//! goes back to the client.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::body::{BodyFault, Holding, OnFrame, RequestBody};
use super::early_answer::EarlyCtl;
use super::early_rules::safe_early;
// The TLS path reads one HTTP/1.1 request's early data by the same rule.
pub(super) use super::early_rules::early_use;
use super::gate::Gate;
use super::listener::SourceSlot;
use super::pool::{Failure, ProxyConns};
use super::{access_log, idle, upgrade};
use super::{Body, Metrics, Shared};
use crate::http::{strip_hop_by_hop, text_response};

/// hyper's read and write buffer per client connection.
const MAX_HTTP_BUFFER: usize = 64 * 1024;

struct ConnCtx {
    gate: Arc<Gate>,
    peer: SocketAddr,
    /// The address the client reached (PROXY headers name it).
    local: SocketAddr,
    /// Its own connection to a `proxy-v2+` backend, kept between requests.
    proxied: ProxyConns,
    /// How many of the first requests began in the first flight's early
    /// data (the first ones the service is called for:
    /// [`super::early_rules::early_use_h2`]).
    early_total: usize,
    /// Requests the service was called for so far.
    called: AtomicUsize,
    /// The connection's protocol.
    protocol: Protocol,
    /// The zrtt connection's confirmation state (`None` for TLS).
    early: Option<Arc<EarlyCtl>>,
    /// The connection's place in its source's count.
    slot: Arc<SourceSlot>,
    /// Requests this connection may have in flight at once
    /// (`max_concurrent_streams`): the rest wait for a slot.
    requests: Arc<tokio::sync::Semaphore>,
    /// The first response head was counted (first-answer histogram).
    answered: AtomicBool,
    /// The name the connection was opened for (TLS server name, or the
    /// zrtt key record's name): requests for another site get 421.
    bound: Option<String>,
}

/// The HTTP version a client connection speaks: ALPN decides, on TLS and
/// in a zrtt first flight ([`super::early_rules::flight_protocol`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    /// HTTP/1.1 (keep-alive, one request at a time).
    Http1,
    /// HTTP/2 (multiplexed streams).
    Http2,
}

/// Serve HTTP on `io` (a zrtt channel or TLS) until the client closes or
/// stays idle; `early`: how many of the first requests began in early
/// data (served early, marked `Early-Data: 1`, held if not safe),
/// `ctl` the connection's confirmation state, `transport` what the access
/// log names the path (`zrtt` or `tls`).
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_http<S>(
    shared: Arc<Shared>,
    io: S,
    (peer, local): (SocketAddr, SocketAddr),
    gate: Arc<Gate>,
    early: usize,
    ctl: Option<Arc<EarlyCtl>>,
    slot: Arc<SourceSlot>,
    protocol: Protocol,
    transport: &'static str,
    bound: Option<String>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let t = shared.cfg.timeouts;
    let metrics = shared.metrics.clone();
    let max_streams = shared.cfg.max_concurrent_streams;
    // HTTP/1.1: one response at a time, watched per connection (HTTP/2
    // streams have their own, idle.rs).
    let h1_watch = (protocol == Protocol::Http1).then(idle::StreamWatch::new);
    let conn_watch = h1_watch.clone();
    let activity = idle::Activity::new();
    let io = TokioIo::new(idle::Watched::new(io, activity.clone()));
    let ctx = Arc::new(ConnCtx {
        gate,
        peer,
        local,
        proxied: ProxyConns::default(),
        early_total: early,
        called: AtomicUsize::new(0),
        protocol,
        early: ctl,
        slot,
        requests: Arc::new(tokio::sync::Semaphore::new(max_streams.max(1) as usize)),
        answered: AtomicBool::new(false),
        bound,
    });
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let ctx = ctx.clone();
        let conn_watch = conn_watch.clone();
        // Taken when hyper calls the service, in the order it accepted the
        // requests (HTTP/2: the order their header blocks arrived), not
        // when the request's task first runs.
        let nth = ctx.called.fetch_add(1, Ordering::AcqRel);
        let from_early = (nth < ctx.early_total).then_some(nth);
        async move {
            let entry = shared
                .cfg
                .access_log
                .then(|| access_log::Entry::new(&req, ctx.peer, transport));
            // HTTP/2 refuses streams beyond the cap, but a stream's end
            // and its request's end are not the same moment: count the
            // requests themselves (held until a slot frees, as RFC 9113
            // §5.1.2 allows).
            let permit = ctx.requests.clone().acquire_owned().await.ok();
            let in_flight = InFlight::new(&shared.metrics.requests_in_flight, permit);
            let mut resp = forward(&shared, &ctx, req, from_early).await;
            // HTTP/2: a response that stops moving toward the client is
            // cancelled on its own (idle.rs).
            if let Some(w) = idle::StreamWatch::current().or_else(|| conn_watch.clone()) {
                resp = w.watch(resp);
            }
            // Counted in flight until the body is dropped.
            let resp = OnFrame::wrap(resp, move || {
                let _counted = &in_flight;
            });
            if !ctx.answered.swap(true, Ordering::AcqRel) {
                let labels = super::metrics::AnswerLabels {
                    path: transport,
                    early: if ctx.gate.proven() { "true" } else { "false" },
                };
                shared
                    .metrics
                    .latency
                    .first_answer
                    .get_or_create(&labels)
                    .observe(ctx.gate.age().as_secs_f64());
            }
            if let Some(e) = entry {
                e.finish(&resp);
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let served = match protocol {
        Protocol::Http1 => {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .keep_alive(true)
                .header_read_timeout(t.request_head)
                // Bounded buffering per connection: a slow reader costs at
                // most this plus the channel's own bound (stream.rs), never
                // the whole answer: hyper stops reading the backend until
                // the client reads.
                .max_buf_size(MAX_HTTP_BUFFER);
            let mut conn = http.serve_connection(io, svc).with_upgrades();
            let graceful = |c: std::pin::Pin<&mut _>| {
                hyper::server::conn::http1::UpgradeableConnection::graceful_shutdown(c)
            };
            let pinned = std::pin::Pin::new(&mut conn);
            let stalled = async {
                if let Some(w) = &h1_watch {
                    w.stalled(t.stream_idle).await;
                    Metrics::inc(&metrics.responses_stalled);
                } else {
                    std::future::pending::<()>().await;
                }
            };
            let watched = (&*activity, stalled);
            let r = idle::drive(pinned, graceful, watched, t.stream_idle, t.shutdown_grace).await;
            match (r, conn.into_parts()) {
                (Err(e), Some(parts)) if e.is_timeout() => {
                    head_timed_out(parts.io.into_inner(), &parts.read_buf, &metrics, t).await;
                    Ok(())
                }
                (r, _) => r,
            }
        }
        Protocol::Http2 => {
            // Each stream's task runs under a watch that cancels a response
            // making no progress (idle.rs); hyper refuses streams beyond
            // the cap (REFUSED_STREAM), and the connection's request slots
            // (ConnCtx::requests) bound its backend requests to it.
            let exec = idle::StreamExec {
                idle: t.stream_idle,
                stalled: metrics.responses_stalled.clone(),
            };
            let mut http = hyper::server::conn::http2::Builder::new(exec);
            http.timer(TokioTimer::new())
                .max_concurrent_streams(max_streams)
                .max_send_buf_size(MAX_HTTP_BUFFER);
            // No keep-alive pings: they would keep an unused connection
            // open for ever; one on which nothing moves closes (idle.rs).
            let conn = http.serve_connection(io, svc);
            tokio::pin!(conn);
            let graceful = |c: std::pin::Pin<&mut _>| {
                hyper::server::conn::http2::Connection::graceful_shutdown(c)
            };
            let watched = (&*activity, std::future::pending());
            idle::drive(conn, graceful, watched, t.stream_idle, t.shutdown_grace).await
        }
    };
    if let Err(e) = served {
        tracing::debug!("http {peer}: {e}");
    }
}

/// A request counted in `requests_in_flight`, holding its connection's
/// slot, until dropped (with its response body).
struct InFlight {
    gauge: prometheus_client::metrics::gauge::Gauge,
    /// Released with the request.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl InFlight {
    fn new(
        gauge: &prometheus_client::metrics::gauge::Gauge,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        gauge.inc();
        Self {
            gauge: gauge.clone(),
            _slot: slot,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The request head did not arrive within `Timeouts::request_head`: if
/// part of one came (`unread`), answer 408 and close, as HAProxy's `timeout
/// http-request` does; a connection that sent nothing of a head (a new
/// one, or kept alive between requests) is closed without an answer.
async fn head_timed_out<S>(mut io: S, unread: &[u8], m: &Metrics, t: super::Timeouts)
where
    S: AsyncWrite + Unpin,
{
    if unread.is_empty() {
        return;
    }
    Metrics::inc(&m.request_heads_timed_out);
    let why = "request head timed out\n";
    let resp = format!(
        "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{why}",
        why.len()
    );
    let send = async {
        io.write_all(resp.as_bytes()).await?;
        io.shutdown().await
    };
    let _ = tokio::time::timeout(t.shutdown_grace, send).await;
}

/// Fields a client may not decide for the backend: whether the request was
/// early data, and who the client is (RFC 7239 and its predecessors: only
/// the gateway knows the address it saw).
const GATEWAY_FIELDS: [&str; 6] = [
    "early-data",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
];

/// Remove hop-by-hop fields and [`GATEWAY_FIELDS`], then say who the
/// client is: `Forwarded: for=...;proto=https` (RFC 7239) and the
/// `X-Forwarded-For`/`X-Forwarded-Proto` most backends read.
pub(super) fn forwarding_fields(headers: &mut hyper::HeaderMap, peer: SocketAddr) {
    strip_hop_by_hop(headers);
    for f in GATEWAY_FIELDS {
        headers.remove(f);
    }
    let ip = zrtt_proto::admission::canonical_ip(peer.ip());
    // RFC 7239 §6: IPv6 addresses are quoted and bracketed.
    let node = match ip {
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("\"[{a}]\""),
    };
    for (name, value) in [
        ("forwarded", format!("for={node};proto=https")),
        ("x-forwarded-for", ip.to_string()),
        ("x-forwarded-proto", "https".to_owned()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
}

/// The host a request is for: from the request target, else `Host`.
fn request_host(parts: &hyper::http::request::Parts) -> Option<String> {
    parts
        .uri
        .authority()
        .map(|a| a.host().to_owned())
        .or_else(|| {
            parts
                .headers
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.parse::<hyper::http::uri::Authority>().ok())
                .map(|a| a.host().to_owned())
        })
}

/// The answer to a request that got no response: why its body was cut
/// (413, 408), else why no backend answered (502, 504). The connection
/// closes after a cut body (its rest may still be on the way).
fn failure(m: &Metrics, f: Failure, body: &RequestBody) -> Response<Body> {
    let (status, why) = match (body.fault(), f) {
        (Some(BodyFault::TooLarge), _) => (StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
        (Some(BodyFault::TimedOut), _) => (StatusCode::REQUEST_TIMEOUT, "request body timed out"),
        (_, Failure::NoneHealthy) => {
            Metrics::inc(&m.backend_errors);
            (StatusCode::BAD_GATEWAY, "no backend of this site is up")
        }
        (_, Failure::TimedOut) => {
            Metrics::inc(&m.backend_timeouts);
            return text_response(StatusCode::GATEWAY_TIMEOUT, "backend timed out");
        }
        (_, Failure::Backend(e)) => {
            tracing::debug!("backend: {e}");
            Metrics::inc(&m.backend_errors);
            return text_response(StatusCode::BAD_GATEWAY, "backend unavailable");
        }
    };
    let mut r = text_response(status, why);
    if status != StatusCode::BAD_GATEWAY {
        r.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

fn too_large() -> Response<Body> {
    let mut r = text_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    r.headers_mut()
        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

async fn forward(
    shared: &Arc<Shared>,
    ctx: &ConnCtx,
    req: Request<Incoming>,
    from_early: Option<usize>,
) -> Response<Body> {
    let m = &shared.metrics;
    // An unproven source may be spoofed: its request reaches the backend
    // only once the TCP handshake has proven the address.
    if !ctx.gate.proven() && ctx.gate.wait_complete().await.is_err() {
        Metrics::inc(&m.gate_timeouts);
        // Nothing reached the backend: on zrtt send nothing at all, so the
        // client falls back to TLS (or its race already did) instead of
        // getting a 504 once its handshake completes late.
        if let Some(ctl) = &ctx.early {
            ctl.abandon();
        }
        return text_response(StatusCode::GATEWAY_TIMEOUT, "handshake incomplete");
    }
    if !ctx.slot.claim() {
        Metrics::inc(&m.source_limited);
        let mut r = text_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many connections from your address",
        );
        r.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    Metrics::inc(&m.requests);
    let confirmed = || ctx.early.as_ref().is_some_and(|c| c.is_confirmed());
    // HTTP/1.1: early unless the client confirmed the handshake before we
    // forward it (then it is the client's own request, not a replay).
    // HTTP/2: every request that began in early data is marked, confirmed
    // or not (several may, and the confirmation may race their forwarding).
    let mut early = from_early.is_some() && (ctx.protocol == Protocol::Http2 || !confirmed());
    let (mut parts, body) = req.into_parts();
    let beyond_cap = from_early.is_some_and(|n| n >= shared.cfg.max_early_requests);
    let unsafe_early = early && !safe_early(&parts, &body);
    if early && (beyond_cap || unsafe_early) {
        // Not safe to run from replayable bytes (an HTTP/2 request: the
        // HTTP/1.1 path holds these bytes before hyper sees them), or
        // beyond what one flight may run unconfirmed
        // (`max_early_requests`): held until the client confirms the
        // handshake (a replayer cannot); else 425 (RFC 8470 §5.2).
        Metrics::inc(&m.early_requests_held);
        let ok = match &ctx.early {
            Some(ctl) => {
                ctl.release_reply();
                ctl.wait_confirmed(shared.cfg.timeouts.first_flight).await
            }
            None => false,
        };
        if !ok {
            Metrics::inc(&m.early_requests_too_early);
            return text_response(StatusCode::TOO_EARLY, "request needs a confirmed handshake");
        }
        // An unsafe one is the client's own request now (it was never run
        // from early data); a safe one past the cap keeps its mark, as
        // every request begun in early data.
        early = !unsafe_early;
    }
    if early {
        Metrics::inc(&m.early_requests);
    }
    // WebSocket and other upgrades (HTTP/1.1): relayed once both sides
    // switched (upgrade.rs).
    let upgrade = upgrade::requested(&parts.headers)
        .filter(|_| parts.version == hyper::Version::HTTP_11)
        .zip(parts.extensions.remove::<OnUpgrade>());
    if parts.method == hyper::Method::CONNECT {
        // A reverse proxy opens no tunnels.
        return text_response(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not served here");
    }
    let Some(site) = shared.sites.route(request_host(&parts).as_deref()) else {
        return text_response(
            StatusCode::MISDIRECTED_REQUEST,
            "this gateway does not serve that host",
        );
    };
    // A connection opened for one site (its certificate or its key)
    // carries no request for another.
    if let Some(bound) = &ctx.bound {
        if shared.sites.route(Some(bound)).is_some_and(|b| b != site) {
            return text_response(
                StatusCode::MISDIRECTED_REQUEST,
                "this connection was opened for another site",
            );
        }
    }
    // A site whose backend is a directory: the gateway answers.
    if let Some(files) = &shared.files[site] {
        return files.serve(Request::from_parts(parts, ()), early).await;
    }
    let pool = &shared.pools[site];
    if upgrade.is_some() && pool.any_h2c() {
        return text_response(
            StatusCode::NOT_IMPLEMENTED,
            "upgrades need an HTTP/1.1 backend",
        );
    }
    let limit = shared.cfg.max_request_body;
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if limit.zip(declared).is_some_and(|(l, d)| d > l) {
        return Holding::wrap(too_large(), body.boxed());
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    // The connector reaches the site's backend whatever the URI says; its
    // authority is the request's (an h2c backend reads it as :authority).
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            parts
                .headers
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let Ok(uri) = hyper::Uri::try_from(format!("http://{authority}{path}")) else {
        return text_response(StatusCode::BAD_REQUEST, "bad request target");
    };
    let mut headers = parts.headers.clone();
    forwarding_fields(&mut headers, ctx.peer);
    if let Some((proto, _)) = &upgrade {
        upgrade::restore(&mut headers, proto.clone());
    }
    // HTTP/2 carries the host in the request target (:authority); an
    // HTTP/1.1 backend needs it as Host (pool.rs drops it for h2c).
    if !headers.contains_key(hyper::header::HOST) {
        if let Some(v) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            headers.insert(hyper::header::HOST, v);
        }
    }
    // An early request may have to be sent twice (425): keep its body.
    let (mut body, saved): (RequestBody, Option<Bytes>) = if early {
        match Limited::new(body, 64 * 1024).collect().await {
            Ok(c) => {
                let b = c.to_bytes();
                (RequestBody::full(b.clone()), Some(b))
            }
            Err(_) => return text_response(StatusCode::PAYLOAD_TOO_LARGE, "early body too large"),
        }
    } else {
        (
            RequestBody::new(body.boxed(), limit, shared.cfg.timeouts.request_body),
            None,
        )
    };
    let mut attempt_early = early;
    loop {
        let build = |b: RequestBody| {
            let mut breq = Request::new(b);
            *breq.method_mut() = parts.method.clone();
            *breq.uri_mut() = uri.clone();
            *breq.headers_mut() = headers.clone();
            if attempt_early {
                breq.headers_mut().insert(
                    HeaderName::from_static("early-data"),
                    HeaderValue::from_static("1"),
                );
            }
            breq
        };
        let sent = std::time::Instant::now();
        let addrs = (ctx.peer, ctx.local);
        let resp = match pool.send(&build, &body, addrs, &ctx.proxied).await {
            Err(f) => return Holding::wrap_rest(failure(m, f, &body), &body),
            Ok(r) => {
                m.latency.backend.observe(sent.elapsed().as_secs_f64());
                r
            }
        };
        if attempt_early && resp.status() == StatusCode::TOO_EARLY {
            // RFC 8470 §5.2: only the client's confirmation (its first
            // record over the forward-secret channel) makes the request
            // non-replayable. A completed TCP handshake does not: a replayer
            // completes its own.
            if let (Some(b), Some(ctl)) = (&saved, &ctx.early) {
                ctl.release_reply();
                if ctl.wait_confirmed(shared.cfg.timeouts.first_flight).await {
                    Metrics::inc(&m.backend_425_retries);
                    attempt_early = false;
                    body = RequestBody::full(b.clone());
                    continue;
                }
                Metrics::inc(&m.backend_425_unconfirmed);
            }
        }
        let (mut rparts, rbody) = resp.into_parts();
        let switching = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
        let proto = rparts.headers.get(hyper::header::UPGRADE).cloned();
        strip_hop_by_hop(&mut rparts.headers);
        match (
            switching,
            upgrade,
            rparts.extensions.remove::<OnUpgrade>(),
            proto,
        ) {
            (true, Some((_, client)), Some(backend), Some(proto)) => {
                upgrade::restore(&mut rparts.headers, proto);
                upgrade::relay(shared, client, backend, ctx.slot.clone());
            }
            // A 101 nobody asked for, or without a protocol: not relayed.
            (true, ..) => {
                Metrics::inc(&m.backend_errors);
                return text_response(
                    StatusCode::BAD_GATEWAY,
                    "backend switched protocols unasked",
                );
            }
            _ => {}
        }
        if attempt_early {
            rparts.extensions.insert(access_log::ServedEarly);
        }
        return Response::from_parts(rparts, rbody.boxed());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn clients_cannot_choose_forwarding_fields() {
        let mut h = hyper::HeaderMap::new();
        for f in GATEWAY_FIELDS {
            h.insert(f, HeaderValue::from_static("1.2.3.4"));
        }
        h.insert("connection", HeaderValue::from_static("x-keep"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        forwarding_fields(&mut h, "[::ffff:198.18.0.1]:4000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=198.18.0.1;proto=https");
        assert_eq!(h["x-forwarded-for"], "198.18.0.1");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert!(!h.contains_key("early-data") && !h.contains_key("x-real-ip"));
        assert!(!h.contains_key("x-keep") && !h.contains_key("x-forwarded-host"));
        assert!(h.contains_key("accept"));
        let mut h = hyper::HeaderMap::new();
        forwarding_fields(&mut h, "[2001:db8::1]:4000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=\"[2001:db8::1]\";proto=https");
    }

    #[test]
    fn only_served_hosts() {
        let req = |uri: &str, host: Option<&str>| {
            let mut b = hyper::Request::builder().uri(uri);
            if let Some(h) = host {
                b = b.header("host", h);
            }
            b.body(()).unwrap().into_parts().0
        };
        let site = |names: &[&str]| super::super::Site {
            health: None,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            backends: vec!["127.0.0.1:1".parse().unwrap()],
        };
        let sites = super::super::sites::Sites::new(site(&["www.example.com"]), &[]);
        let serves = |r| sites.route(request_host(&r).as_deref()).is_some();
        assert!(serves(req("/", Some("www.example.com"))));
        assert!(serves(req("/", Some("WWW.Example.com.:443"))));
        assert!(serves(req("https://www.example.com/x", None)));
        assert!(!serves(req("/", Some("evil.example"))));
        assert!(!serves(req("/", None)));
        let any = super::super::sites::Sites::new(site(&[]), &[]);
        assert!(any
            .route(request_host(&req("/", Some("anything"))).as_deref())
            .is_some());
    }
}
