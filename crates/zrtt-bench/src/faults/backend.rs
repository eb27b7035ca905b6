//! The small HTTP backend behind the gateway: in-process, in the server's
//! namespace, one thread per connection, a fixed body, `Connection: close`.
//! It can be made slow (a delay before each answer) or taken down (its
//! listener closed, so the gateway's connects are refused) and brought
//! back, which is what the backend faults need.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use zrtt_lab::{HostThread, Lab};

#[derive(Default)]
struct State {
    stop: AtomicBool,
    down: AtomicBool,
    /// Whether the listener is open (the serving thread's view).
    listening: AtomicBool,
    delay_ms: AtomicU64,
    served: AtomicU64,
    /// Paths of the requests under [`ONCE`] answered, in order.
    seen: std::sync::Mutex<Vec<String>>,
}

/// Requests whose paths start with this are remembered ([`Backend::seen`]):
/// how the fleet scenario counts how often a replayed request ran.
pub(crate) const ONCE: &str = "/once/";

/// A running backend; stopped when dropped.
pub(crate) struct Backend {
    state: Arc<State>,
    thread: Option<HostThread<()>>,
}

impl Backend {
    /// Serves `body` on `addr` in lab host `host`; returns once it listens.
    pub(crate) fn start(lab: &Lab, host: &str, addr: SocketAddr, body: Vec<u8>) -> Result<Backend> {
        let state = Arc::new(State::default());
        let s = state.clone();
        let body: Arc<[u8]> = body.into();
        let thread = lab.spawn_in_host(host, move || serve(&s, addr, body))?;
        let backend = Backend {
            state,
            thread: Some(thread),
        };
        backend.wait_listening(true)?;
        Ok(backend)
    }

    fn wait_listening(&self, on: bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state.listening.load(Ordering::SeqCst) != on {
            if Instant::now() > deadline {
                bail!(
                    "the backend did not {} within 10 s",
                    if on { "listen" } else { "close" }
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Takes the backend down (listener closed) or brings it back; returns
    /// once done.
    pub(crate) fn set_down(&self, down: bool) -> Result<()> {
        self.state.down.store(down, Ordering::SeqCst);
        self.wait_listening(!down)
    }

    /// A delay before every answer (zero: none).
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Paths under [`ONCE`] answered so far, in order.
    pub(crate) fn seen(&self) -> Vec<String> {
        self.state
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Requests answered so far.
    pub(crate) fn served(&self) -> u64 {
        self.state.served.load(Ordering::SeqCst)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join();
        }
    }
}

fn serve(state: &Arc<State>, addr: SocketAddr, body: Arc<[u8]>) {
    let mut listener: Option<TcpListener> = None;
    while !state.stop.load(Ordering::SeqCst) {
        if state.down.load(Ordering::SeqCst) {
            if listener.take().is_some() {
                state.listening.store(false, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let l = match &listener {
            Some(l) => l,
            None => match TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            }) {
                Ok(l) => {
                    state.listening.store(true, Ordering::SeqCst);
                    listener.insert(l)
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            },
        };
        match l.accept() {
            Ok((conn, _)) => {
                let (state, body) = (state.clone(), body.clone());
                std::thread::spawn(move || {
                    let _ = answer(conn, &state, &body);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    state.listening.store(false, Ordering::SeqCst);
}

/// Reads one request head and answers it (after the delay), then closes.
fn answer(mut conn: TcpStream, state: &State, body: &[u8]) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk)?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let delay = state.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        std::thread::sleep(Duration::from_millis(delay));
    }
    let head_only = head.starts_with(b"HEAD ");
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    conn.write_all(&out)?;
    state.served.fetch_add(1, Ordering::SeqCst);
    let path = head.split(|&b| b == b' ').nth(1).unwrap_or_default();
    if path.starts_with(ONCE.as_bytes()) {
        if let Ok(mut seen) = state.seen.lock() {
            seen.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_with_the_body_and_closes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let state = State::default();
        let t = std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            answer(c, &state, b"hello").unwrap();
            state.served.load(Ordering::SeqCst)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 5\r\n"));
        assert!(out.ends_with("\r\n\r\nhello"));
        assert_eq!(t.join().unwrap(), 1);
    }
}
