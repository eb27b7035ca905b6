//! The access log: one line per request, as nginx's `access_log` writes
//! one, through `tracing` (target `zrtt_access`, level info) so that the
//! operator's log pipeline and `RUST_LOG` apply. Off unless
//! [`GatewayConfig::access_log`](super::GatewayConfig::access_log).

use std::net::SocketAddr;
use std::time::Instant;

use hyper::{Request, Response};

/// Marks a response whose request was served from early data (replayable
/// bytes, forwarded with `Early-Data: 1`).
#[derive(Clone, Copy, Debug)]
pub(super) struct ServedEarly;

/// What is known of a request when it arrives.
pub(super) struct Entry {
    start: Instant,
    peer: SocketAddr,
    via: &'static str,
    method: String,
    target: String,
    version: hyper::Version,
    host: String,
}

impl Entry {
    /// `via`: the path the connection took (`zrtt` or `tls`).
    pub(super) fn new<B>(req: &Request<B>, peer: SocketAddr, via: &'static str) -> Self {
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()))
            .unwrap_or("-");
        Self {
            start: Instant::now(),
            peer,
            via,
            method: req.method().to_string(),
            target: req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
            version: req.version(),
            host: printable(host),
        }
    }

    /// The line, once the response head is ready.
    pub(super) fn line<B>(&self, resp: &Response<B>) -> String {
        let bytes = resp
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        format!(
            "{} {} {} \"{} {} {:?}\" {} {} early={} ms={:.1}",
            self.peer,
            self.via,
            self.host,
            printable(&self.method),
            printable(&self.target),
            self.version,
            resp.status().as_u16(),
            bytes,
            u8::from(resp.extensions().get::<ServedEarly>().is_some()),
            self.start.elapsed().as_secs_f64() * 1000.0,
        )
    }

    /// Writes the line.
    pub(super) fn finish<B>(self, resp: &Response<B>) {
        tracing::info!(target: "zrtt_access", "{}", self.line(resp));
    }
}

/// Client-chosen text, made safe for one log line: quotes, backslashes,
/// control and non-ASCII bytes escaped, at most 2,000 characters.
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(2000));
    for c in s.chars() {
        if out.len() >= 2000 {
            out.push_str("...");
            break;
        }
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push_str(&c.escape_default().to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_line_per_request() {
        let req = Request::get("/a%20b?q=%22x%22")
            .header("host", "www.example.com")
            .body(())
            .unwrap();
        let e = Entry::new(&req, "192.0.2.1:5555".parse().unwrap(), "zrtt");
        let mut resp = Response::builder()
            .status(200)
            .header("content-length", "42")
            .body(())
            .unwrap();
        resp.extensions_mut().insert(ServedEarly);
        let line = e.line(&resp);
        assert!(
            line.starts_with(
                "192.0.2.1:5555 zrtt www.example.com \"GET /a%20b?q=%22x%22 HTTP/1.1\" 200 42 early=1 ms="
            ),
            "{line}"
        );
        let plain = Response::builder().status(404).body(()).unwrap();
        assert!(e.line(&plain).contains("\" 404 - early=0 ms="));
    }

    #[test]
    fn client_text_cannot_break_the_line() {
        assert_eq!(printable("a\"b\\c\nd\u{e9}"), "a\\\"b\\\\c\\nd\\u{e9}");
        assert!(printable(&"x".repeat(5000)).len() <= 2003);
    }
}
