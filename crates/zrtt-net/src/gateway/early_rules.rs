//! The early-data rules of the zrtt path (RFC 8470; docs/GATEWAY.md,
//! "Early data"): which protocol a first flight asks for, which of its
//! early bytes hyper may read before the client confirms the handshake,
//! how many requests began in them, and which of those may run before
//! the confirmation.
//!
//! - HTTP/1.1 ([`early_use`]): exactly one safe, bodiless request is
//!   served (marked `Early-Data: 1`); anything else is held, bytes and
//!   all, until the confirmation.
//! - HTTP/2 ([`early_use_h2`]): the bytes are served; the HEADERS frames
//!   that started in them are counted ([`zrtt_proto::http2::walk_early`]),
//!   and that many requests, the first the service is called for, are
//!   early: marked, and held until the confirmation (else 425) unless
//!   [`safe_early`].

use hyper::body::Incoming;

use super::early_answer::EarlyUse;
use super::relay::Protocol;

/// How a first flight's early data may be used: [`EarlyUse::Serve`] only
/// for exactly one complete request with a safe method (RFC 9110 §9.2.1:
/// GET, HEAD, OPTIONS), no body and nothing after it, which is all a zrtt
/// client sends early; anything else waits for the client's confirmation.
pub(super) fn early_use(early: &[u8]) -> EarlyUse {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(n)) = req.parse(early) else {
        return EarlyUse::Hold;
    };
    let safe = matches!(req.method, Some("GET" | "HEAD" | "OPTIONS"))
        // An upgrade opens a stream: never from replayable bytes.
        && !req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("upgrade"));
    let no_body = req.headers.iter().all(|h| {
        !(h.name.eq_ignore_ascii_case("transfer-encoding")
            || (h.name.eq_ignore_ascii_case("content-length") && h.value.trim_ascii() != b"0"))
    });
    if n == early.len() && safe && no_body {
        EarlyUse::Serve
    } else {
        EarlyUse::Hold
    }
}

/// How many requests of an HTTP/2 first flight's early data began there
/// ([`zrtt_proto::http2::walk_early`]); anything that does not start with
/// the connection preface is held until the client confirms.
pub(super) fn early_use_h2(early: &[u8]) -> (EarlyUse, usize) {
    match zrtt_proto::http2::walk_early(early) {
        Some(w) => (EarlyUse::Serve, w.headers_started),
        None => (EarlyUse::Hold, 0),
    }
}

/// The protocol a first flight's ALPN extension (docs/PROTOCOL.md §4.2)
/// asks for: none or `http/1.1` is HTTP/1.1, `h2` HTTP/2 when `http2` is
/// served; `None`: not served (Reject 8).
pub(super) fn flight_protocol(
    exts: &zrtt_proto::handshake::Extensions,
    http2: bool,
) -> Option<Protocol> {
    match exts.get(zrtt_proto::handshake::ext::ALPN) {
        None | Some(b"http/1.1") => Some(Protocol::Http1),
        Some(b"h2") if http2 => Some(Protocol::Http2),
        Some(_) => None,
    }
}

/// Whether a request that began in early data may run before the client
/// confirms the handshake: a safe method (RFC 9110 §9.2.1: GET, HEAD,
/// OPTIONS), no body (END_STREAM with the header block, or an empty one),
/// no upgrade and no (extended) CONNECT.
pub(super) fn safe_early(parts: &hyper::http::request::Parts, body: &Incoming) -> bool {
    use hyper::body::Body as _;
    matches!(
        parts.method,
        hyper::Method::GET | hyper::Method::HEAD | hyper::Method::OPTIONS
    ) && body.is_end_stream()
        && !parts.headers.contains_key(hyper::header::UPGRADE)
        && parts.extensions.get::<hyper::ext::Protocol>().is_none()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    proptest::proptest! {
        /// The fuzz entry point's checks (fuzz/fuzz_targets/early_use.rs)
        /// on arbitrary bytes and on requests built from pieces.
        #[test]
        fn early_use_checks_hold(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            lead in "[\r\n]{0,3}",
            method in "GET|HEAD|OPTIONS|POST|PUT|get",
            header in "(Host: a|Content-Length: [01]|Transfer-Encoding: chunked|Upgrade: x)",
            end in "(\r\n|\n){1,3}",
            body in "x{0,2}",
        ) {
            super::super::fuzz_early_use(&raw);
            let req = format!("{lead}{method} / HTTP/1.1\r\n{header}\r\n{end}{body}");
            super::super::fuzz_early_use(req.as_bytes());
        }
    }

    #[test]
    fn only_one_safe_bodiless_request_is_served_early() {
        for ok in [
            &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
            b"HEAD /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            // Mixed line ends (found by fuzz/fuzz_targets/early_use.rs,
            // whose check of the head's end was too strict): httparse and
            // hyper read the same one request.
            b"GET / HTTP/1.1\r\nIost: w7w.example.com-\n\r\n",
            // Empty lines before the request line (RFC 9112 §2.2), also found there.
            b"\n\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(
                early_use(ok),
                EarlyUse::Serve,
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        for held in [
            // unsafe methods, even without a body
            &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"[..],
            b"DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n",
            b"PUT /x HTTP/1.1\r\nHost: a\r\n\r\n",
            // a body, declared or chunked
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            // pipelining: a second request after the first
            b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /2 HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
            // partial or malformed
            b"GET / HTTP/1.1\r\nHost: a\r\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r",
            b"\x00\x01garbage",
        ] {
            assert_eq!(
                early_use(held),
                EarlyUse::Hold,
                "{}",
                String::from_utf8_lossy(held)
            );
        }
    }

    #[test]
    fn http2_early_bytes_are_served_and_their_requests_counted() {
        use zrtt_proto::http2::{FrameHeader, PREFACE};
        let mut b = PREFACE.to_vec();
        for stream in [1u32, 3] {
            let h = FrameHeader {
                len: 1,
                kind: zrtt_proto::http2::kind::HEADERS,
                flags: 0x5,
                stream,
            };
            b.extend(h.encode());
            b.push(0x82);
        }
        assert_eq!(early_use_h2(&b), (EarlyUse::Serve, 2));
        assert_eq!(early_use_h2(b""), (EarlyUse::Serve, 0));
        // Not HTTP/2: nothing is read before the confirmation.
        assert_eq!(
            early_use_h2(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            (EarlyUse::Hold, 0)
        );
    }

    #[test]
    fn the_flight_alpn_chooses_the_protocol() {
        use zrtt_proto::handshake::{ext, Extensions};
        let mut e = Extensions::new();
        assert_eq!(flight_protocol(&e, true), Some(Protocol::Http1));
        e.set(ext::ALPN, b"http/1.1".to_vec());
        assert_eq!(flight_protocol(&e, false), Some(Protocol::Http1));
        e.set(ext::ALPN, b"h2".to_vec());
        assert_eq!(flight_protocol(&e, true), Some(Protocol::Http2));
        assert_eq!(flight_protocol(&e, false), None);
        e.set(ext::ALPN, b"h3".to_vec());
        assert_eq!(flight_protocol(&e, true), None);
    }
}
