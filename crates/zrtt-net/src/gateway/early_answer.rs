//! Where the answer is held until the handshake: the stream hyper serves a
//! zrtt connection over. Reads return the early request first; the first
//! response bytes written become the Reply. To a proven address the Reply
//! (and what follows) goes out at once, within the connection's
//! [`AmplificationBudget`]; the rest, and everything to an unproven
//! address, waits until the TCP handshake completes.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use zrtt_proto::admission::{AmplificationBudget, TokenKey};
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

struct Pending {
    tcp: TcpStream,
    accepted: Accepted,
    early_pos: usize,
    /// Response bytes written before the reply went out.
    out: Vec<u8>,
    leftover: Vec<u8>,
    gate_wait: Option<GateFuture>,
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
}

/// Largest response buffered before the reply is forced out.
const MAX_REPLY_BUFFER: usize = 256 * 1024;

impl EarlyAnswer {
    pub(super) fn new(
        tcp: TcpStream,
        accepted: Accepted,
        leftover: Vec<u8>,
        gate: Arc<Gate>,
        metrics: Arc<Metrics>,
        token: Option<TokenIssue>,
        budget: Option<AmplificationBudget>,
    ) -> Self {
        Self {
            state: State::Pending(Box::new(Pending {
                tcp,
                accepted,
                early_pos: 0,
                out: Vec::new(),
                leftover,
                gate_wait: None,
            })),
            gate,
            metrics,
            read_waker: None,
            token,
            budget,
            held: Vec::new(),
            held_wait: None,
        }
    }

    fn complete(&self) -> bool {
        self.gate.handshake_complete().unwrap_or(false)
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

    /// Room for the Close record (an empty record) before the handshake.
    fn poll_close_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.complete() || self.budget.as_mut().is_some_and(|b| b.take_empty_record()) {
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
        let State::Pending(p) = &mut self.state else {
            return match self.state {
                State::Open(_) => Poll::Ready(Ok(())),
                _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            };
        };
        let gate = self.gate.clone();
        let fut = p
            .gate_wait
            .get_or_insert_with(|| Box::pin(async move { gate.wait_to_send().await }));
        if let Err(e) = ready!(fut.as_mut().poll(cx)) {
            Metrics::inc(&self.metrics.gate_timeouts);
            self.state = State::Failed;
            return Poll::Ready(Err(e.into()));
        }
        let State::Pending(p) = std::mem::replace(&mut self.state, State::Failed) else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let Pending {
            tcp,
            accepted,
            out,
            leftover,
            ..
        } = *p;
        let complete = self.complete();
        if self.gate.proven() {
            Metrics::inc(&self.metrics.zrtt_answered_early);
            if !complete {
                Metrics::inc(&self.metrics.zrtt_answered_in_syn_recv);
            }
        } else {
            Metrics::inc(&self.metrics.zrtt_answered_gated);
        }
        let exts = Extensions::new();
        let max = accepted.max_reply_data(&exts);
        let (in_reply, sealed_to) = if complete {
            (out.len().min(max), out.len())
        } else {
            // Only a proven address is answered before the handshake.
            let Some(budget) = self.budget.as_mut() else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            let plan = budget.plan_reply(out.len(), max, exts.encoded_len());
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
            if !early.is_empty() {
                // The client sends nothing more before our reply.
                this.read_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // No early request (e.g. a POST waiting for the reply): answer now.
            ready!(this.poll_reply(cx))?;
        }
        match &mut this.state {
            State::Open(s) => Pin::new(s).poll_read(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
        }
    }
}

impl AsyncWrite for EarlyAnswer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
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
        if matches!(this.state, State::Pending(_)) {
            ready!(this.poll_reply(cx))?;
        }
        ready!(this.poll_release_held(cx))?;
        if matches!(this.state, State::Open(_)) {
            // The Close record counts against the budget too.
            ready!(this.poll_close_room(cx))?;
        }
        match &mut this.state {
            State::Open(s) => Pin::new(s).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}
