//! A TLS server connection as the async stream hyper serves, driven by
//! hand (not tokio-rustls) so that it can serve before the TLS handshake
//! completes: TLS 1.3 early data (0-RTT) is read while the client's
//! Finished is still on its way, and the answer goes out as half-RTT data.
//!
//! Two gates apply, as for zrtt (docs/PROTOCOL.md §7-§8):
//! - **TCP**: before the TCP handshake completes, TLS bytes go to the peer
//!   only if its address is proven (a session issued to this address,
//!   [`super::sessions`]) and then within its [`AmplificationBudget`];
//!   otherwise they wait, the server flight included;
//! - **TLS**: early data is replayable until the client's Finished
//!   arrives (the confirmation). At most one safe request (GET, HEAD,
//!   OPTIONS, no body) is handed to HTTP before it; anything else in the
//!   early data waits for it.

use std::future::Future;
use std::io::{self, Read as _, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::ServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use zrtt_proto::admission::AmplificationBudget;

use super::super::early_answer::{EarlyCtl, EarlyUse, Grant};
use super::super::gate::Gate;
use super::super::{relay, Metrics};
use crate::error::Result;

type GateFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Sealed TLS bytes buffered before writes wait for the socket.
const MAX_OUT: usize = 64 * 1024;

/// A TLS server connection over TCP that may serve early.
pub(crate) struct EarlyTls {
    io: TcpStream,
    conn: ServerConnection,
    gate: Arc<Gate>,
    metrics: Arc<Metrics>,
    ctl: Arc<EarlyCtl>,
    /// Bytes that may go out before the TCP handshake completes (`None`:
    /// nothing may).
    budget: Option<AmplificationBudget>,
    grant: Option<Grant>,
    /// TLS bytes to write.
    out: Vec<u8>,
    out_pos: usize,
    held_wait: Option<GateFuture>,
    /// Early data received so far, and how much of it HTTP has read.
    early: Vec<u8>,
    early_pos: usize,
    /// Whether one safe request may be handed out before the confirmation
    /// (HTTP/1.1 only), and whether it has been.
    may_serve_early: bool,
    served_early: bool,
    /// Bytes read from the socket before this stream was made (the
    /// ClientHello, when a fleet's store was asked for its session).
    pending: Vec<u8>,
    /// Bytes read from the client until its ClientHello was processed.
    received: usize,
    hello_done: bool,
    eof: bool,
    /// How long closing waits for the client's Finished.
    finish_limit: std::time::Duration,
    finish_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl EarlyTls {
    pub(crate) fn new(
        io: TcpStream,
        conn: ServerConnection,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
        ctl: Arc<EarlyCtl>,
    ) -> Self {
        Self {
            io,
            conn,
            gate,
            metrics,
            ctl,
            budget: None,
            grant: None,
            out: Vec::new(),
            out_pos: 0,
            held_wait: None,
            early: Vec::new(),
            early_pos: 0,
            may_serve_early: false,
            served_early: false,
            pending: Vec::new(),
            received: 0,
            hello_done: false,
            eof: false,
            finish_limit: std::time::Duration::from_secs(3),
            finish_deadline: None,
        }
    }

    /// Bytes already read from the socket, processed before any other.
    pub(crate) fn feed(&mut self, bytes: Vec<u8>) {
        self.pending = bytes;
    }

    /// How long closing may wait for the client's Finished (the gate time).
    pub(crate) fn finish_within(&mut self, limit: std::time::Duration) {
        self.finish_limit = limit;
    }

    /// The rustls connection (after the ClientHello: ALPN, resumption).
    pub(crate) fn connection(&self) -> &ServerConnection {
        &self.conn
    }

    /// Bytes the client sent before anything was written to it.
    pub(crate) fn received(&self) -> usize {
        self.received
    }

    /// Let the proven peer receive up to `budget` before the TCP handshake
    /// completes; `grant` reports how that ended.
    pub(crate) fn answer_early(&mut self, budget: AmplificationBudget, grant: Grant) {
        self.budget = Some(budget);
        self.grant = Some(grant);
    }

    /// Hand one safe early request to HTTP before the confirmation.
    pub(crate) fn serve_early_request(&mut self) {
        self.may_serve_early = true;
    }

    /// Read until the ClientHello has been processed (the server's first
    /// flight is ready), or the client went away.
    pub(crate) async fn read_client_hello(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| loop {
            if self.conn.wants_write() || !self.conn.is_handshaking() {
                self.hello_done = true;
                return Poll::Ready(Ok(()));
            }
            if ready!(self.poll_pull(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        })
        .await
    }

    /// Whether early data was accepted (TLS 1.3 resumption with 0-RTT).
    pub(crate) fn early_data_accepted(&mut self) -> bool {
        self.collect_early();
        self.conn.early_data().is_some() || !self.early.is_empty()
    }

    fn tcp_complete(&mut self) -> bool {
        let done = self.gate.handshake_complete().unwrap_or(false);
        if done {
            self.report(true);
        }
        done
    }

    fn report(&mut self, completed: bool) {
        let Some(grant) = self.grant.take() else {
            return;
        };
        let now = std::time::Instant::now();
        if completed {
            let unused = self.budget.map_or(0, |b| b.unused());
            grant
                .admission
                .early_answer_completed(grant.peer, unused, now);
        } else {
            grant.admission.early_answer_failed(grant.peer, now);
        }
    }

    /// Read TLS bytes from the socket into rustls and process them;
    /// the number of bytes read (0: end of stream).
    fn poll_pull(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut buf = [0u8; 16 * 1024];
        let pending = std::mem::take(&mut self.pending);
        let mut rb = ReadBuf::new(&mut buf);
        let filled = if pending.is_empty() {
            ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
            rb.filled()
        } else {
            &pending[..]
        };
        let n = filled.len();
        if n == 0 {
            self.eof = true;
            return Poll::Ready(Ok(0));
        }
        if !self.hello_done {
            self.received += n;
        }
        let mut input = filled;
        while !input.is_empty() {
            let used = self.conn.read_tls(&mut input)?;
            if let Err(e) = self.conn.process_new_packets() {
                // Send the alert rustls queued, then fail.
                self.fill_out();
                let _ = self.poll_flush_out(cx);
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            if used == 0 {
                break;
            }
        }
        self.collect_early();
        if !self.conn.is_handshaking() {
            self.ctl.set_confirmed();
        }
        Poll::Ready(Ok(n))
    }

    fn collect_early(&mut self) {
        if let Some(mut ed) = self.conn.early_data() {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = ed.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                self.early.extend_from_slice(&chunk[..n]);
            }
        }
    }

    fn fill_out(&mut self) {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut self.out).is_err() {
                break;
            }
        }
    }

    /// Write the queued TLS bytes, within the budget before the TCP
    /// handshake completes and only after it without one.
    fn poll_flush_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_pos < self.out.len() {
            let pending = self.out.len() - self.out_pos;
            let allowed = if self.tcp_complete() {
                pending
            } else {
                self.budget.map_or(0, |b| b.remaining()).min(pending)
            };
            if allowed == 0 {
                if self.held_wait.is_none() && self.budget.is_some() {
                    Metrics::inc(&self.metrics.amplification_holds);
                }
                let gate = self.gate.clone();
                let fut = self
                    .held_wait
                    .get_or_insert_with(|| Box::pin(async move { gate.wait_complete().await }));
                let r = ready!(fut.as_mut().poll(cx));
                self.held_wait = None;
                if let Err(e) = r {
                    Metrics::inc(&self.metrics.gate_timeouts);
                    return Poll::Ready(Err(e.into()));
                }
                continue;
            }
            let range = self.out_pos..self.out_pos + allowed;
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[range]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if !self.gate.handshake_complete().unwrap_or(false) {
                if let Some(b) = self.budget.as_mut() {
                    b.take_bytes(n);
                }
            }
            self.out_pos += n;
        }
        self.out.clear();
        self.out_pos = 0;
        Poll::Ready(Ok(()))
    }

    /// Early bytes HTTP may read now: all of them once confirmed; before
    /// that only one safe request, once, and only when it is complete.
    fn releasable_early(&mut self) -> usize {
        let left = self.early.len() - self.early_pos;
        if left == 0 {
            return 0;
        }
        if self.ctl.is_confirmed() {
            return left;
        }
        if self.may_serve_early
            && !self.served_early
            && self.early_pos == 0
            && relay::early_use(&self.early) == EarlyUse::Serve
        {
            self.served_early = true;
            return left;
        }
        0
    }
}

impl Drop for EarlyTls {
    fn drop(&mut self) {
        if self.grant.is_some() {
            let done = self.gate.handshake_complete().unwrap_or(false);
            self.report(done);
        }
    }
}

impl AsyncRead for EarlyTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            // The server flight (and anything queued) goes out as the gates allow.
            this.fill_out();
            if let Poll::Ready(Err(e)) = this.poll_flush_out(cx) {
                return Poll::Ready(Err(e));
            }
            if this.grant.is_some() {
                this.tcp_complete();
            }
            let n = this.releasable_early();
            if n > 0 {
                let n = n.min(buf.remaining());
                buf.put_slice(&this.early[this.early_pos..this.early_pos + n]);
                this.early_pos += n;
                return Poll::Ready(Ok(()));
            }
            if this.ctl.is_confirmed() {
                match this.conn.reader().read(buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_pull(cx))?;
        }
    }
}

impl AsyncWrite for EarlyTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.out.len() - this.out_pos >= MAX_OUT {
            ready!(this.poll_flush_out(cx))?;
        }
        loop {
            let n = this.conn.writer().write(data)?;
            this.fill_out();
            if let Poll::Ready(Err(e)) = this.poll_flush_out(cx) {
                return Poll::Ready(Err(e));
            }
            if n > 0 || data.is_empty() {
                return Poll::Ready(Ok(n));
            }
            // rustls holds as much plaintext as it may before the handshake
            // completes: drive the handshake (this registers for the
            // client's next bytes) and try again.
            ready!(this.poll_flush_out(cx))?;
            if ready!(this.poll_pull(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.fill_out();
        ready!(this.poll_flush_out(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Finish the TLS handshake before closing: the session tickets go
        // out only after the client's Finished (a client that reads to the
        // end would otherwise keep a spent ticket), and an early answer's
        // outcome is known only once the TCP handshake completes. Bounded:
        // a client that never finishes meets the handshake timeout.
        if this.conn.is_handshaking() && !this.eof {
            let limit = this.finish_limit;
            let deadline = this
                .finish_deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
            let expired = deadline.as_mut().poll(cx).is_ready();
            while !expired && this.conn.is_handshaking() && !this.eof {
                this.fill_out();
                ready!(this.poll_flush_out(cx))?;
                ready!(this.poll_pull(cx))?;
            }
        }
        if this.grant.is_some() && !this.tcp_complete() {
            let gate = this.gate.clone();
            let fut = this
                .held_wait
                .get_or_insert_with(|| Box::pin(async move { gate.wait_complete().await }));
            let done = ready!(fut.as_mut().poll(cx)).is_ok();
            this.held_wait = None;
            this.report(done);
        }
        this.conn.send_close_notify();
        this.fill_out();
        ready!(this.poll_flush_out(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
