//! The HTTP relay to the backend: HTTP/1.1 served with hyper over the zrtt
//! channel or TLS, each request forwarded with hop-by-hop fields removed,
//! early data marked `Early-Data: 1` (RFC 8470) and a 425 answered by
//! sending the request again once the handshake has completed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::gate::Gate;
use super::{Body, Metrics, Shared};
use crate::http::{strip_hop_by_hop, text_response};

struct ConnCtx {
    gate: Arc<Gate>,
    peer: SocketAddr,
    /// The next request is the one that arrived in the first flight.
    early_pending: AtomicBool,
}

/// Serve HTTP/1.1 on `io` (a zrtt channel or TLS) until the client closes
/// or stays idle; `early`: the first request arrived as early data.
pub(super) async fn serve_http<S>(
    shared: Arc<Shared>,
    io: S,
    peer: SocketAddr,
    gate: Arc<Gate>,
    early: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle_timeout = shared.cfg.timeouts.idle;
    let ctx = Arc::new(ConnCtx {
        gate,
        peer,
        early_pending: AtomicBool::new(early),
    });
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(forward(&shared, &ctx, req).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(idle_timeout);
    if let Err(e) = http.serve_connection(TokioIo::new(io), svc).await {
        tracing::debug!("http {peer}: {e}");
    }
}

/// Remove what the client may not decide for the backend: hop-by-hop
/// fields, and an `Early-Data` field (only the gateway knows whether a
/// request was early data).
fn strip_client_fields(headers: &mut hyper::HeaderMap) {
    strip_hop_by_hop(headers);
    headers.remove("early-data");
}

fn full(b: Bytes) -> Body {
    Full::new(b).map_err(|never| match never {}).boxed()
}

async fn forward(shared: &Shared, ctx: &ConnCtx, req: Request<Incoming>) -> Response<Body> {
    let m = &shared.metrics;
    // An unproven source may be spoofed: its request reaches the backend
    // only once the TCP handshake has proven the address.
    if !ctx.gate.proven() && ctx.gate.wait_complete().await.is_err() {
        Metrics::inc(&m.gate_timeouts);
        return text_response(StatusCode::GATEWAY_TIMEOUT, "handshake incomplete");
    }
    Metrics::inc(&m.requests);
    let early = ctx.early_pending.swap(false, Ordering::AcqRel);
    if early {
        Metrics::inc(&m.early_requests);
    }
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let Ok(uri) = hyper::Uri::try_from(format!("http://{}{}", shared.cfg.backend, path)) else {
        return text_response(StatusCode::BAD_REQUEST, "bad request target");
    };
    let mut headers = parts.headers;
    strip_client_fields(&mut headers);
    if let Ok(v) = HeaderValue::from_str(&ctx.peer.ip().to_string()) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), v);
    }
    // An early request may have to be sent twice (425): keep its body.
    let (mut body, saved): (Body, Option<Bytes>) = if early {
        match Limited::new(body, 64 * 1024).collect().await {
            Ok(c) => {
                let b = c.to_bytes();
                (full(b.clone()), Some(b))
            }
            Err(_) => return text_response(StatusCode::PAYLOAD_TOO_LARGE, "early body too large"),
        }
    } else {
        (body.boxed(), None)
    };
    let mut attempt_early = early;
    loop {
        let mut breq = Request::new(body);
        *breq.method_mut() = parts.method.clone();
        *breq.uri_mut() = uri.clone();
        *breq.headers_mut() = headers.clone();
        if attempt_early {
            breq.headers_mut().insert(
                HeaderName::from_static("early-data"),
                HeaderValue::from_static("1"),
            );
        }
        let resp = match tokio::time::timeout(
            shared.cfg.timeouts.backend_response,
            shared.backend.request(breq),
        )
        .await
        {
            Err(_) => {
                Metrics::inc(&m.backend_timeouts);
                return text_response(StatusCode::GATEWAY_TIMEOUT, "backend timed out");
            }
            Ok(Err(e)) => {
                tracing::debug!("backend: {e}");
                Metrics::inc(&m.backend_errors);
                return text_response(StatusCode::BAD_GATEWAY, "backend unavailable");
            }
            Ok(Ok(r)) => r,
        };
        if attempt_early && resp.status() == StatusCode::TOO_EARLY {
            if let Some(b) = &saved {
                Metrics::inc(&m.backend_425_retries);
                if ctx.gate.wait_complete().await.is_err() {
                    Metrics::inc(&m.gate_timeouts);
                    return text_response(StatusCode::GATEWAY_TIMEOUT, "handshake incomplete");
                }
                attempt_early = false;
                body = full(b.clone());
                continue;
            }
        }
        let (mut rparts, rbody) = resp.into_parts();
        strip_hop_by_hop(&mut rparts.headers);
        return Response::from_parts(rparts, rbody.boxed());
    }
}
