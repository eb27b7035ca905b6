//! Where the answer is held until the handshake: the stream hyper serves a
//! zrtt connection over. Reads return the early request first; the first
//! response bytes written become the Reply. To a proven address the Reply
//! (and what follows) goes out at once, within the connection's
//! [`AmplificationBudget`]; the rest, and everything to an unproven
//! address, waits until the TCP handshake completes.
//!
//! Early data that is not one safe request ([`EarlyUse::Hold`]) is not
//! handed to hyper until the client confirms the handshake (its first
//! authenticated record, which a replayer cannot produce): the Reply goes
//! out without data, and the held bytes follow the confirmation as
//! ordinary, non-replayable bytes (docs/PROTOCOL.md §7). The peer's close
//! is noticed in every state.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Sleep;
use zrtt_proto::admission::{Admission, AmplificationBudget, TokenKey};
use zrtt_proto::crypto::SecureRandom;
use zrtt_proto::handshake::{Accepted, Extensions, RecordKind};
use zrtt_proto::UnixTime;

use super::gate::Gate;
use super::Metrics;
use crate::error::Result;
use crate::stream::ChannelStream;

/// What it takes to seal a token for the client once its address is proven
/// by a completed handshake.
pub(super) struct TokenIssue {
    pub key: Arc<TokenKey>,
    pub ip: IpAddr,
    pub client_static: [u8; 32],
    pub rng: Arc<dyn SecureRandom>,
    pub clock: fn() -> UnixTime,
}

impl TokenIssue {
    fn seal(&self) -> Option<Vec<u8>> {
        self.key
            .issue(
                self.ip,
                &self.client_static,
                (self.clock)(),
                self.rng.as_ref(),
            )
            .ok()
    }
}

type GateFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// How the early data of an accepted flight is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EarlyUse {
    /// Handed to hyper at once. HTTP/1.1: exactly one safe request,
    /// marked as early data. HTTP/2: a connection start whose requests
    /// were counted (each marked; the unsafe ones, and those past
    /// `max_early_requests`, wait in the relay for the confirmation).
    Serve,
    /// Anything else (HTTP/1.1: a body, an unsafe method, pipelining, a
    /// partial request; HTTP/2: bytes that are not a connection start):
    /// held until the client confirms the handshake.
    Hold,
}

/// What the HTTP relay and the stream share about a connection's early
/// data: whether the client has confirmed the handshake, and a way to ask
/// for the Reply before any response exists (to get that confirmation).
#[derive(Debug, Default)]
pub(super) struct EarlyCtl {
    confirmed: AtomicBool,
    confirmed_notify: Notify,
    reply_now: AtomicBool,
    reader: Mutex<Option<Waker>>,
    abandoned: AtomicBool,
}

impl EarlyCtl {
    /// Whether the client has confirmed the handshake.
    pub(super) fn is_confirmed(&self) -> bool {
        self.confirmed.load(Ordering::Acquire)
    }

    /// The relay gave up on the connection before anything was sent (the
    /// TCP handshake did not complete within the gate timeout): no Reply
    /// and no answer go out (a late 504 would reach a client whose request
    /// never ran; without an answer it falls back to TLS and gets a real
    /// one), and the connection closes.
    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }

    fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    pub(super) fn set_confirmed(&self) {
        if !self.confirmed.swap(true, Ordering::AcqRel) {
            self.confirmed_notify.notify_waiters();
        }
    }

    /// Send the Reply now, even without response data (the client cannot
    /// confirm before it has the Reply).
    pub(super) fn release_reply(&self) {
        self.reply_now.store(true, Ordering::Release);
        if let Some(w) = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            w.wake();
        }
    }

    /// Wait at most `limit` for the client's confirmation.
    pub(super) async fn wait_confirmed(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.confirmed_notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.is_confirmed() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }

    fn park_reader(&self, cx: &Context<'_>) {
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
    }
}

struct Pending {
    tcp: TcpStream,
    accepted: Accepted,
    early_pos: usize,
    /// Response bytes written before the reply went out.
    out: Vec<u8>,
    leftover: Vec<u8>,
    gate_wait: Option<GateFuture>,
    /// The Reply's extensions (a resumption grant).
    exts: Extensions,
}

// One per connection; the open state is the hot one and stays inline.
#[allow(clippy::large_enum_variant)]
enum State {
    Pending(Box<Pending>),
    Open(ChannelStream<TcpStream>),
    Failed,
}

/// The server side of a zrtt connection before and after the Reply.
pub(super) struct EarlyAnswer {
    state: State,
    gate: Arc<Gate>,
    metrics: Arc<Metrics>,
    read_waker: Option<Waker>,
    token: Option<TokenIssue>,
    /// Bytes that may go out before the handshake completes: `None` for an
    /// unproven address (nothing may).
    budget: Option<AmplificationBudget>,
    /// Response bytes over the budget, sealed only once the handshake completes.
    held: Vec<u8>,
    held_wait: Option<GateFuture>,
    ctl: Arc<EarlyCtl>,
    /// [`EarlyUse::Hold`]: the early bytes, then anything that arrived
    /// through the channel, until the client confirms.
    unconfirmed: Option<Vec<u8>>,
    /// Confirmed bytes not yet handed to the reader.
    released: Vec<u8>,
    released_pos: usize,
    /// How long a held request waits for the confirmation after the Reply.
    confirm_limit: Duration,
    confirm_deadline: Option<Pin<Box<Sleep>>>,
    /// The early answer to report when the handshake completes or fails.
    grant: Option<Grant>,
    /// The Close record's room was charged (or the handshake completed).
    close_charged: bool,
}

impl Drop for EarlyAnswer {
    fn drop(&mut self) {
        // Ended without noticing the handshake: look once more.
        if self.grant.is_some() {
            let done = self.gate.handshake_complete().unwrap_or(false);
            self.report(done);
        }
        if let State::Open(stream) = std::mem::replace(&mut self.state, State::Failed) {
            super::close::linger(stream.into_inner());
        }
    }
}

/// An early answer the admission policy granted, to be reported once.
pub(super) struct Grant {
    pub admission: Arc<Admission>,
    pub peer: IpAddr,
}

/// Largest response buffered before the reply is forced out (more than any
/// pre-handshake budget, which is at most one record).
const MAX_REPLY_BUFFER: usize = 64 * 1024;

impl EarlyAnswer {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        tcp: TcpStream,
        mut accepted: Accepted,
        leftover: Vec<u8>,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
        (token, exts): (Option<TokenIssue>, Extensions),
        budget: Option<AmplificationBudget>,
        early_use: EarlyUse,
        ctl: Arc<EarlyCtl>,
        confirm_limit: Duration,
        grant: Option<Grant>,
    ) -> Self {
        let unconfirmed =
            (early_use == EarlyUse::Hold).then(|| std::mem::take(&mut accepted.early_data));
        Self {
            state: State::Pending(Box::new(Pending {
                tcp,
                accepted,
                early_pos: 0,
                out: Vec::new(),
                leftover,
                gate_wait: None,
                exts,
            })),
            gate,
            metrics,
            read_waker: None,
            token,
            budget,
            held: Vec::new(),
            held_wait: None,
            ctl,
            unconfirmed,
            released: Vec::new(),
            released_pos: 0,
            confirm_limit,
            confirm_deadline: None,
            grant,
            close_charged: false,
        }
    }

    /// Reading before the Reply, once the early request has been handed
    /// out: the client sends nothing before our Reply, so wait for the
    /// response (or for [`EarlyCtl::release_reply`]), but notice the client
    /// leaving (end of stream, reset) and refuse bytes it may not send yet.
    fn poll_peer_before_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let State::Pending(p) = &mut self.state else {
            return Poll::Ready(Ok(()));
        };
        let mut probe = [0u8; 1];
        let mut rb = ReadBuf::new(&mut probe);
        match p.tcp.poll_peek(cx, &mut rb) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(())),
            Poll::Ready(Ok(_)) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "client sent bytes before the reply",
            ))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.read_waker = Some(cx.waker().clone());
                self.ctl.park_reader(cx);
                Poll::Pending
            }
        }
    }

    /// [`EarlyUse::Hold`]: read the channel until the client's first
    /// record confirms the handshake, then release the held bytes. Ends
    /// the connection if the client leaves or takes longer than the limit.
    fn poll_confirmation(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let State::Open(s) = &mut self.state else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let Some(held) = self.unconfirmed.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        loop {
            if s.records_received() > 0 {
                self.ctl.set_confirmed();
                self.released = self.unconfirmed.take().unwrap_or_default();
                self.released_pos = 0;
                self.confirm_deadline = None;
                return Poll::Ready(Ok(()));
            }
            let limit = self.confirm_limit;
            let deadline = self
                .confirm_deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "client did not confirm the handshake",
                )));
            }
            let mut chunk = [0u8; 4096];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut *s).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() && s.records_received() == 0 {
                // Closed before confirming: nothing held ever runs.
                held.clear();
                return Poll::Ready(Ok(()));
            }
            held.extend_from_slice(rb.filled());
        }
    }

    fn complete(&mut self) -> bool {
        let done = self.gate.handshake_complete().unwrap_or(false);
        if done {
            self.report(true);
        }
        done
    }

    /// Tell the admission policy how an early answer ended (once): the
    /// handshake completed (unused budget goes back) or it did not.
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

    /// Wait (re-polled through `held_wait`) until the handshake completes.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let gate = self.gate.clone();
        let fut = self
            .held_wait
            .get_or_insert_with(|| Box::pin(async move { gate.wait_complete().await }));
        let r = ready!(fut.as_mut().poll(cx));
        self.held_wait = None;
        if let Err(e) = r {
            Metrics::inc(&self.metrics.gate_timeouts);
            self.state = State::Failed;
            return Poll::Ready(Err(e.into()));
        }
        Poll::Ready(Ok(()))
    }

    /// How many of `want` bytes may be written now: all of them once the
    /// handshake is complete; before that, what still fits in the budget as
    /// one record, waiting for the handshake when nothing fits.
    fn poll_room(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        loop {
            if self.complete() {
                return Poll::Ready(Ok(want));
            }
            if let Some(n) = self.budget.as_mut().map(|b| b.take_record(want)) {
                if n > 0 {
                    return Poll::Ready(Ok(n));
                }
            }
            if self.held_wait.is_none() {
                Metrics::inc(&self.metrics.amplification_holds);
            }
            ready!(self.poll_handshake(cx))?;
        }
    }

    /// Room for the Close record (an empty record) before the handshake,
    /// charged once however often shutdown is polled.
    fn poll_close_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.close_charged
            || self.complete()
            || self.budget.as_mut().is_some_and(|b| b.take_empty_record())
        {
            self.close_charged = true;
            return Poll::Ready(Ok(()));
        }
        self.poll_handshake(cx)
    }

    /// Send what the budget allowed, then seal the held bytes once the
    /// handshake completes.
    fn poll_release_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.held.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.held_wait.is_none() {
            // First push out the reply frame that fits the budget.
            if let State::Open(s) = &mut self.state {
                ready!(Pin::new(s).poll_flush(cx))?;
            }
        }
        ready!(self.poll_handshake(cx))?;
        let State::Open(s) = &mut self.state else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut *s).poll_write(cx, &self.held))?;
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Send the reply once the gate opens; afterwards the state is `Open`.
    fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // After an abandon no Reply goes out, whoever asks (the Reply timer).
        if self.abandoned_before_reply() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        let State::Pending(p) = &mut self.state else {
            return match self.state {
                State::Open(_) => Poll::Ready(Ok(())),
                _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            };
        };
        let exts_len = p.exts.encoded_len();
        loop {
            let gate = self.gate.clone();
            let fut = p
                .gate_wait
                .get_or_insert_with(|| Box::pin(async move { gate.wait_to_send().await }));
            if let Err(e) = ready!(fut.as_mut().poll(cx)) {
                Metrics::inc(&self.metrics.gate_timeouts);
                self.state = State::Failed;
                return Poll::Ready(Err(e.into()));
            }
            // Before the handshake no more than the kernel sends before the
            // client's ACK, as it stands now (gate.rs, within_first_window).
            self.budget = self
                .budget
                .map(|b| super::gate::within_first_window(b, self.gate.socket()));
            // Before the handshake, the Reply itself must fit the budget.
            let fits = self
                .budget
                .is_some_and(|b| b.remaining() >= zrtt_proto::admission::REPLY_OVERHEAD + exts_len);
            if fits || self.gate.handshake_complete().unwrap_or(false) {
                break;
            }
            let gate = self.gate.clone();
            p.gate_wait = Some(Box::pin(async move { gate.wait_complete().await }));
        }
        let State::Pending(p) = std::mem::replace(&mut self.state, State::Failed) else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let Pending {
            tcp,
            mut accepted,
            out,
            leftover,
            early_pos,
            exts,
            ..
        } = *p;
        // Early bytes not read yet (HTTP/2 flushes SETTINGS before reading
        // the preface) are read after the Reply, before the channel's.
        self.released = accepted.early_data.split_off(early_pos);
        self.released_pos = 0;
        let complete = self.complete();
        if self.gate.proven() {
            Metrics::inc(&self.metrics.zrtt_answered_early);
            if !complete {
                Metrics::inc(&self.metrics.zrtt_answered_in_syn_recv);
            }
        } else {
            Metrics::inc(&self.metrics.zrtt_answered_gated);
        }
        let max = accepted.max_reply_data(&exts);
        let (in_reply, sealed_to) = if complete {
            (out.len().min(max), out.len())
        } else {
            // Only a proven address is answered before the handshake, and
            // only when the Reply fits (checked above).
            let Some(plan) = self
                .budget
                .as_mut()
                .and_then(|b| b.plan_reply(out.len(), max, exts.encoded_len()))
            else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            if plan.sent() < out.len() {
                Metrics::inc(&self.metrics.amplification_holds);
            }
            (plan.in_reply, plan.sent())
        };
        let (mut channel, mut frame) = accepted
            .reply(&exts, &out[..in_reply])
            .map_err(io::Error::other)?;
        if sealed_to > in_reply {
            channel
                .seal_data(&out[in_reply..sealed_to], &mut frame)
                .map_err(io::Error::other)?;
        }
        self.held = out[sealed_to..].to_vec();
        let mut stream = ChannelStream::new(tcp, channel, Vec::new(), leftover, frame);
        if complete {
            self.issue_token(&mut stream)?;
        }
        self.state = State::Open(stream);
        self.confirm_deadline = None;
        if let Some(w) = self.read_waker.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }

    fn issue_token(&mut self, stream: &mut ChannelStream<TcpStream>) -> io::Result<()> {
        if let Some(t) = self.token.take() {
            if let Some(token) = t.seal() {
                stream.queue_record(RecordKind::Token, &token)?;
                Metrics::inc(&self.metrics.tokens_issued);
            }
        }
        Ok(())
    }

    fn maybe_issue_token(&mut self) -> io::Result<()> {
        if self.token.is_none() || !self.complete() {
            return Ok(());
        }
        let mut state = std::mem::replace(&mut self.state, State::Failed);
        let r = match &mut state {
            State::Open(s) => self.issue_token(s),
            _ => Ok(()),
        };
        self.state = state;
        r
    }
}

impl AsyncRead for EarlyAnswer {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Pending(p) = &mut this.state {
            let early = &p.accepted.early_data;
            if p.early_pos < early.len() {
                let n = buf.remaining().min(early.len() - p.early_pos);
                buf.put_slice(&early[p.early_pos..p.early_pos + n]);
                p.early_pos += n;
                return Poll::Ready(Ok(()));
            }
            if !early.is_empty() && !this.ctl.reply_now.load(Ordering::Acquire) {
                return this.poll_peer_before_reply(cx);
            }
            // No early request to serve (none, or held), or the relay
            // needs the client's confirmation: answer now.
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_confirmation(cx))?;
        if this.released_pos < this.released.len() {
            let n = buf.remaining().min(this.released.len() - this.released_pos);
            buf.put_slice(&this.released[this.released_pos..this.released_pos + n]);
            this.released_pos += n;
            if this.released_pos == this.released.len() {
                this.released = Vec::new();
                this.released_pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if this.grant.is_some() {
            // Report the early answer's handshake as soon as it completes.
            this.complete();
        }
        let State::Open(s) = &mut this.state else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let r = Pin::new(&mut *s).poll_read(cx, buf);
        if s.records_received() > 0 {
            this.ctl.set_confirmed();
        }
        r
    }
}

impl EarlyAnswer {
    /// The relay abandoned the connection and no Reply went out yet.
    fn abandoned_before_reply(&self) -> bool {
        self.ctl.is_abandoned() && matches!(self.state, State::Pending(_))
    }
}

impl AsyncWrite for EarlyAnswer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.abandoned_before_reply() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        if let State::Pending(p) = &mut this.state {
            if p.out.len() < MAX_REPLY_BUFFER {
                let n = data.len().min(MAX_REPLY_BUFFER - p.out.len());
                p.out.extend_from_slice(&data[..n]);
                return Poll::Ready(Ok(n));
            }
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        // Later writes stay inside the budget too (hyper may have flushed
        // the head before the body arrived from the backend).
        let n = ready!(this.poll_room(cx, data.len()))?;
        match &mut this.state {
            State::Open(s) => Pin::new(s).poll_write(cx, &data[..n]),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.abandoned_before_reply() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        if let State::Pending(p) = &this.state {
            if p.out.is_empty() {
                return Poll::Ready(Ok(()));
            }
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        this.maybe_issue_token()?;
        match &mut this.state {
            State::Open(s) => Pin::new(s).poll_flush(cx),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.abandoned_before_reply() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        if matches!(this.state, State::Pending(_)) {
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        if matches!(this.state, State::Open(_)) {
            // The Close record counts against the budget too.
            ready!(this.poll_close_room(cx))?;
        }
        if this.grant.is_some() && !this.complete() {
            // An early answer's outcome is known only once the handshake
            // completes (or does not): closing first would leave the socket
            // in SYN_RECV and count a client that was merely quick as a
            // failure. The answer is out already; only the end waits.
            ready!(this.poll_handshake(cx))?;
            this.complete();
        }
        match &mut this.state {
            State::Open(s) => Pin::new(s).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests;
