//! HTTP pieces shared by the gateway (a reverse proxy) and `zrtt proxy` (a
//! forward proxy): hop-by-hop headers and short generated answers.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

/// The body type of answers the gateway and the proxy generate or forward.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// Header fields that concern one connection only (RFC 9110 §7.6.1, plus
/// the older `Keep-Alive`/`Proxy-Connection` and the proxy authentication
/// fields, which a proxy consumes).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The protocol a request asks to switch to: its `Upgrade` value, when
/// `Connection` names `upgrade` (RFC 9110 §7.8); HTTP/1.1 only (HTTP/2
/// has no `Upgrade`).
pub(crate) fn upgrade_requested(headers: &HeaderMap) -> Option<HeaderValue> {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade
        .then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Put `Upgrade: proto` and `Connection: upgrade` back on a message whose
/// hop-by-hop fields were removed.
pub(crate) fn restore_upgrade(headers: &mut HeaderMap, proto: HeaderValue) {
    headers.insert(header::UPGRADE, proto);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// Remove hop-by-hop fields before forwarding a message (RFC 9110
/// §7.6.1): every field named in `Connection`, then the fixed list.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
}

/// A generated `text/plain; charset=utf-8` answer; `msg` gets a final newline.
pub fn text_response(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut body = msg.into();
    body.push('\n');
    // Stated, not only left to the body's size hint (gateway::body::OnFrame
    // keeps that visible): a chunked answer makes a client that sent
    // `Connection: close` wait for the close, which an early answer sends
    // only once the TCP handshake completes (one more round trip).
    let len = HeaderValue::from(body.len());
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(header::CONTENT_LENGTH, len);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_fields_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, X-Secret"));
        h.append("connection", HeaderValue::from_static("x-other"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("x-other", HeaderValue::from_static("1"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn text_response_is_plain_text_with_a_newline() {
        let r = text_response(StatusCode::BAD_GATEWAY, "no backend");
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        // "no backend\n": its length stated, never chunked.
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "11");
    }
}
