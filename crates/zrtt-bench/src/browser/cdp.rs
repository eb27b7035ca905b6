//! Chromium's DevTools protocol over `--remote-debugging-pipe`: the browser
//! reads commands from its file descriptor 3 and writes answers and events
//! to its descriptor 4, each message one JSON object followed by a NUL byte
//! (no WebSocket, no port). [`Cdp`] sends a command and waits for the
//! answer with its id, keeping the events that arrive meanwhile for
//! [`Cdp::wait_event`].
//!
//! Only what `zrtt lab browser` needs: attach to the page, navigate, wait
//! for the load event, evaluate an expression, take a screenshot, close.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// Longest message kept (a full-page PNG screenshot in base64 is the
/// largest, well below this).
const MAX_MESSAGE: usize = 64 << 20;

/// A DevTools session over the browser's pipe: `W` is the write end of its
/// descriptor 3; the messages of its descriptor 4 come from [`reader`].
pub(super) struct Cdp<W: Write> {
    to_browser: W,
    from_browser: Receiver<Result<Value>>,
    next_id: u64,
    /// Events read while waiting for an answer, oldest first.
    events: VecDeque<Value>,
}

/// Reads NUL-terminated JSON messages from `r` (the browser's descriptor
/// 4) into `tx` until end of file, a read error or an oversized message;
/// run on its own thread.
pub(super) fn reader<R: Read>(r: R, tx: mpsc::Sender<Result<Value>>) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r
            .by_ref()
            .take(MAX_MESSAGE as u64 + 1)
            .read_until(0, &mut buf)
        {
            Ok(0) => return,
            Ok(_) if buf.last() != Some(&0) => {
                let why = if buf.len() > MAX_MESSAGE {
                    anyhow!("a DevTools message over {MAX_MESSAGE} bytes")
                } else {
                    anyhow!("the browser's pipe ended inside a message")
                };
                let _ = tx.send(Err(why));
                return;
            }
            Ok(_) => {
                buf.pop();
                let m = serde_json::from_slice(&buf).context("a DevTools message that is not JSON");
                if tx.send(m).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(anyhow!(e).context("reading the browser's pipe")));
                return;
            }
        }
    }
}

impl<W: Write> Cdp<W> {
    pub(super) fn new(to_browser: W, from_browser: Receiver<Result<Value>>) -> Cdp<W> {
        Cdp {
            to_browser,
            from_browser,
            next_id: 1,
            events: VecDeque::new(),
        }
    }

    /// The next message from the browser, by `deadline`.
    fn recv(&mut self, deadline: Instant, what: &str) -> Result<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.from_browser.recv_timeout(left) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => bail!("no {what} from the browser in time"),
            Err(RecvTimeoutError::Disconnected) => {
                bail!("the browser closed its DevTools pipe while {what} was awaited")
            }
        }
    }

    /// Sends `method` with `params` (to the page `session`, or to the
    /// browser) and returns the answer's `result`; a protocol error is an
    /// error naming the method.
    pub(super) fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut m = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            m["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&m)?;
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .and_then(|()| self.to_browser.flush())
            .with_context(|| format!("sending {method} to the browser"))?;
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.recv(deadline, &format!("answer to {method}"))?;
            if m.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(e) = m.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(m.get("result").cloned().unwrap_or(Value::Null));
            }
            if m.get("method").is_some() {
                self.events.push_back(m);
            }
        }
    }

    /// Forgets the events received so far (kept or still in the pipe), so
    /// that a wait that follows sees only later ones.
    pub(super) fn drain_events(&mut self) {
        self.events.clear();
        while let Ok(m) = self.from_browser.try_recv() {
            if m.is_err() {
                // A broken pipe: the next call reports it.
                break;
            }
        }
    }

    /// Waits for the event `method` (of `session`, or of the browser) by
    /// `deadline` and returns its `params`; other events are dropped.
    pub(super) fn wait_event(
        &mut self,
        session: Option<&str>,
        method: &str,
        deadline: Instant,
    ) -> Result<Value> {
        let wanted = |m: &Value| {
            m.get("method").and_then(Value::as_str) == Some(method)
                && m.get("sessionId").and_then(Value::as_str) == session
        };
        while let Some(m) = self.events.pop_front() {
            if wanted(&m) {
                return Ok(m.get("params").cloned().unwrap_or(Value::Null));
            }
        }
        loop {
            let m = self.recv(deadline, method)?;
            if wanted(&m) {
                return Ok(m.get("params").cloned().unwrap_or(Value::Null));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Vec<Result<Value>> {
        let (tx, rx) = mpsc::channel();
        reader(bytes, tx);
        rx.into_iter().collect()
    }

    #[test]
    fn messages_are_split_at_nul_bytes() {
        let m = parse(b"{\"id\":1,\"result\":{}}\0{\"method\":\"Page.loadEventFired\"}\0");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].as_ref().unwrap()["id"], 1);
        assert_eq!(m[1].as_ref().unwrap()["method"], "Page.loadEventFired");
        // A message cut short, and one that is not JSON, are errors.
        let m = parse(b"{\"id\":1}\0{\"id\":");
        assert!(m[0].is_ok());
        assert!(m[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("inside a message"));
        assert!(parse(b"nope\0")[0].is_err());
    }

    #[test]
    fn a_call_skips_events_and_keeps_them_for_wait_event() {
        let (tx, rx) = mpsc::channel();
        let mut sent = Vec::new();
        {
            let mut cdp = Cdp::new(&mut sent, rx);
            tx.send(Ok(
                json!({"method": "Page.frameNavigated", "sessionId": "S", "params": {"a": 1}}),
            ))
            .unwrap();
            tx.send(Ok(json!({"method": "Page.loadEventFired", "sessionId": "S", "params": {"timestamp": 2.5}})))
                .unwrap();
            tx.send(Ok(json!({"id": 1, "result": {"frameId": "F"}})))
                .unwrap();
            let r = cdp
                .call(
                    Some("S"),
                    "Page.navigate",
                    json!({"url": "http://x/"}),
                    Duration::from_secs(1),
                )
                .unwrap();
            assert_eq!(r["frameId"], "F");
            let deadline = Instant::now() + Duration::from_secs(1);
            // The browser's own events do not match a session's.
            tx.send(Ok(json!({"method": "Page.loadEventFired", "params": {}})))
                .unwrap();
            let e = cdp
                .wait_event(Some("S"), "Page.loadEventFired", deadline)
                .unwrap();
            assert_eq!(e["timestamp"], 2.5);
            tx.send(Ok(
                json!({"id": 2, "error": {"code": -32000, "message": "no"}}),
            ))
            .unwrap();
            let err = cdp
                .call(None, "Browser.close", json!({}), Duration::from_secs(1))
                .unwrap_err();
            assert!(err.to_string().starts_with("Browser.close: "), "{err}");
            // Nothing more comes: the wait ends at its deadline.
            let t = Instant::now();
            assert!(cdp
                .wait_event(
                    Some("S"),
                    "Page.loadEventFired",
                    t + Duration::from_millis(50)
                )
                .is_err());
        }
        let text = String::from_utf8(sent).unwrap();
        let msgs: Vec<Value> = text
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0]["id"], 1);
        assert_eq!(msgs[0]["sessionId"], "S");
        assert_eq!(msgs[0]["params"]["url"], "http://x/");
        assert_eq!(msgs[1]["method"], "Browser.close");
        assert!(msgs[1].get("sessionId").is_none());
        assert!(text.ends_with('\0'));
    }
}
