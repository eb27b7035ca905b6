//! A shortcut flight's request on the site's backend (docs/DNS.md §8):
//! the compact request becomes `METHOD target HTTP/1.1` with `Host: S`,
//! `Early-Data: 1` always (RFC 8470: no confirmation can come on this
//! path) and the gateway's forwarding fields. From the SDNS the client's
//! address is unknown: `Forwarded: for=unknown`, and `X-Forwarded-For`
//! and the PROXY header's source are a fixed marker
//! ([`ShortcutConfig::dns_client_address`](super::ShortcutConfig)), never
//! the resolver's (or a spoofed) address that access rules could trust.
//! The response is read whole, up to [`DNS_MAX_RESPONSE`] bytes for a run
//! started from the SDNS (an unproven querier) and
//! [`MAX_RESPONSE`](zrtt_proto::shortcut::MAX_RESPONSE) for one started by
//! a TCP form, and written as one HTTP/1.1 message with `Content-Length`
//! and `Connection: close`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use zrtt_proto::shortcut::{CompactRequest, Method, MAX_RESPONSE};

use super::body::RequestBody;
use super::pool::{Failure, ProxyConns};
use super::shortcut::DNS_MAX_RESPONSE;
use super::{access_log, Body, Metrics, Shared};
use crate::http::{strip_hop_by_hop, text_response};

/// Where a shortcut flight came from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Via {
    /// A DNS query from this resolver (the client's address is unknown),
    /// to this SDNS address.
    Dns {
        resolver: SocketAddr,
        local: SocketAddr,
    },
    /// Its TCP form on the gateway's port, from the client itself.
    Tcp { peer: SocketAddr, local: SocketAddr },
}

impl Via {
    /// Who asked (the access log's address) and the local address.
    fn addrs(self) -> (SocketAddr, SocketAddr) {
        match self {
            Via::Dns { resolver, local } => (resolver, local),
            Via::Tcp { peer, local } => (peer, local),
        }
    }

    /// The client and local addresses the backend is told (PROXY header):
    /// from the SDNS the marker `dns_client`, port 0.
    fn told(self, dns_client: IpAddr) -> (SocketAddr, SocketAddr) {
        match self {
            Via::Dns { local, .. } => (SocketAddr::new(dns_client, 0), local),
            Via::Tcp { peer, local } => (peer, local),
        }
    }

    /// What the access log names the path.
    fn label(self) -> &'static str {
        match self {
            Via::Dns { .. } => "sdns",
            Via::Tcp { .. } => "shortcut",
        }
    }
}

/// The response was larger than the run may read.
#[derive(Debug)]
pub(super) struct TooLarge;

/// Run `req` for `site` on its backend and return the serialised
/// response.
pub(super) async fn run(
    shared: &Arc<Shared>,
    site: &str,
    req: &CompactRequest,
    via: Via,
) -> Result<Vec<u8>, TooLarge> {
    let bound = super::shortcut::run_bound(shared);
    match tokio::time::timeout(bound, run_within(shared, site, req, via)).await {
        Ok(r) => r,
        Err(_) => {
            Metrics::inc(&shared.metrics.backend_timeouts);
            Ok(gateway_timeout())
        }
    }
}

fn gateway_timeout() -> Vec<u8> {
    serialise(
        &text_response(StatusCode::GATEWAY_TIMEOUT, "")
            .into_parts()
            .0,
        b"\n",
        false,
    )
}

/// [`run`] without its overall bound (the one waiters wait for).
async fn run_within(
    shared: &Arc<Shared>,
    site: &str,
    req: &CompactRequest,
    via: Via,
) -> Result<Vec<u8>, TooLarge> {
    let m = &shared.metrics;
    let method = match req.method() {
        Method::Get => hyper::Method::GET,
        Method::Head => hyper::Method::HEAD,
    };
    let head = method == hyper::Method::HEAD;
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(site) {
        headers.insert(header::HOST, v);
    }
    let dns_client = shared.shortcuts.dns_client;
    super::relay::forwarding_fields(&mut headers, via.told(dns_client).0);
    if let Via::Dns { .. } = via {
        // RFC 7239 §6.3: the client is not known.
        headers.insert(
            HeaderName::from_static("forwarded"),
            HeaderValue::from_static("for=unknown;proto=https"),
        );
    }
    headers.insert(
        HeaderName::from_static("early-data"),
        HeaderValue::from_static("1"),
    );
    let entry = shared.cfg.access_log.then(|| {
        let mut logged = Request::new(());
        *logged.method_mut() = method.clone();
        if let Ok(u) = req.target().parse() {
            *logged.uri_mut() = u;
        }
        *logged.headers_mut() = headers.clone();
        access_log::Entry::new(&logged, via.addrs().0, via.label())
    });
    Metrics::inc(&m.requests);
    Metrics::inc(&m.early_requests);
    let mut resp = match shared.sites.route(Some(site)) {
        None => text_response(
            StatusCode::MISDIRECTED_REQUEST,
            "this gateway does not serve that host",
        ),
        Some(i) => match &shared.files[i] {
            Some(files) => {
                let mut r = Request::new(());
                *r.method_mut() = method.clone();
                *r.headers_mut() = headers.clone();
                match req.target().parse() {
                    Ok(u) => {
                        *r.uri_mut() = u;
                        files.serve(r, true).await
                    }
                    Err(_) => text_response(StatusCode::BAD_REQUEST, "bad request target"),
                }
            }
            None => backend(shared, i, site, &method, req.target(), &headers, via).await,
        },
    };
    resp.extensions_mut().insert(access_log::ServedEarly);
    if let Some(e) = entry {
        e.finish(&resp);
    }
    let (parts, body) = resp.into_parts();
    let limit = match via {
        Via::Dns { .. } => DNS_MAX_RESPONSE,
        Via::Tcp { .. } => MAX_RESPONSE,
    };
    let read = Limited::new(body, limit).collect();
    let body = match tokio::time::timeout(shared.cfg.timeouts.stream_idle, read).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return Err(TooLarge);
        }
        Ok(Err(e)) => {
            tracing::debug!("shortcut response body: {e}");
            Metrics::inc(&m.backend_errors);
            return Ok(serialise(
                &text_response(StatusCode::BAD_GATEWAY, "backend failed")
                    .into_parts()
                    .0,
                b"backend failed\n",
                false,
            ));
        }
        Err(_) => {
            Metrics::inc(&m.backend_timeouts);
            return Ok(gateway_timeout());
        }
    };
    Ok(serialise(&parts, &body, head))
}

/// The backend's response to the request, or the gateway's 502/504.
async fn backend(
    shared: &Arc<Shared>,
    site: usize,
    host: &str,
    method: &hyper::Method,
    target: &str,
    headers: &HeaderMap,
    via: Via,
) -> Response<Body> {
    let m = &shared.metrics;
    let Ok(uri) = hyper::Uri::try_from(format!("http://{host}{target}")) else {
        return text_response(StatusCode::BAD_REQUEST, "bad request target");
    };
    let build = |b: RequestBody| {
        let mut r = Request::new(b);
        *r.method_mut() = method.clone();
        *r.uri_mut() = uri.clone();
        *r.headers_mut() = headers.clone();
        r
    };
    let body = RequestBody::empty();
    let own = ProxyConns::default();
    let sent = std::time::Instant::now();
    match shared.pools[site]
        .send(&build, &body, via.told(shared.shortcuts.dns_client), &own)
        .await
    {
        Ok(r) => {
            m.latency.backend.observe(sent.elapsed().as_secs_f64());
            let (mut parts, b) = r.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, b.boxed())
        }
        Err(Failure::TimedOut) => {
            Metrics::inc(&m.backend_timeouts);
            text_response(StatusCode::GATEWAY_TIMEOUT, "backend timed out")
        }
        Err(f) => {
            tracing::debug!("shortcut backend: {f:?}");
            Metrics::inc(&m.backend_errors);
            text_response(StatusCode::BAD_GATEWAY, "backend unavailable")
        }
    }
}

/// One HTTP/1.1 response: status line, the fields but hop-by-hop ones,
/// `Content-Length` (the body's; for HEAD and 304 the backend's, the body
/// being empty; none for 1xx and 204), `Connection: close`, the body.
pub(super) fn serialise(parts: &hyper::http::response::Parts, body: &[u8], head: bool) -> Vec<u8> {
    let status = parts.status;
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
        .as_bytes(),
    );
    let mut fields = parts.headers.clone();
    strip_hop_by_hop(&mut fields);
    let declared = fields.remove(header::CONTENT_LENGTH);
    for (name, value) in &fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let no_body = status.is_informational() || status == StatusCode::NO_CONTENT;
    let length = if no_body {
        None
    } else if head || status == StatusCode::NOT_MODIFIED {
        declared.map(|v| v.as_bytes().to_vec())
    } else {
        Some(body.len().to_string().into_bytes())
    };
    if let Some(l) = length {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(&l);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    if !head && !no_body && status != StatusCode::NOT_MODIFIED {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn responses_are_one_closed_http11_message() {
        let r = Response::builder()
            .status(200)
            .header("content-type", "text/plain")
            .header("transfer-encoding", "chunked")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let out = serialise(&r.into_parts().0, b"hello", false);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
        );
        let r = Response::builder()
            .status(200)
            .header("content-length", "123")
            .body(())
            .unwrap();
        let out = serialise(&r.into_parts().0, b"", true);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-length: 123\r\nconnection: close\r\n\r\n"
        );
        let r = Response::builder().status(204).body(()).unwrap();
        let out = serialise(&r.into_parts().0, b"", false);
        assert_eq!(out, b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
    }
}
