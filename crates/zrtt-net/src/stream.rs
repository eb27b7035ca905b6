//! The forward-secret zrtt channel as an async byte stream
//! (`AsyncRead + AsyncWrite`), so hyper runs over it unchanged.
//!
//! Reading opens transport records (docs/PROTOCOL.md §4.5): data records
//! become bytes, an authenticated `Close` is the end of stream (a stream that
//! ends without one is an error: truncation), token records go to a callback,
//! a `Confirm` record only counts (see [`ChannelStream::records_received`]).
//! Writing seals bytes into data records; shutdown sends `Close`.
//!
//! Memory is bounded per connection: at most [`MAX_PENDING_WRITE`] sealed
//! bytes wait for the socket (further writes wait: backpressure to
//! whatever produces them), and at most one read chunk plus 64 KiB of
//! plaintext waits for the reader.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use zrtt_proto::handshake::{read_frame, Channel, Expect, Frame, RecordKind};

/// Called with each address token the peer sends.
pub type TokenSink = Box<dyn FnMut(Vec<u8>) + Send>;

/// Largest amount of sealed bytes buffered before writes wait for the socket.
pub const MAX_PENDING_WRITE: usize = 64 * 1024;

/// Most plaintext sealed per write call (one record).
const MAX_WRITE_CHUNK: usize = 16 * 1024;

/// A [`Channel`] over a byte stream `S`.
pub struct ChannelStream<S> {
    io: S,
    channel: Channel,
    /// Ciphertext read but not yet opened.
    rbuf: Vec<u8>,
    /// Plaintext opened but not yet returned.
    plain: Vec<u8>,
    plain_pos: usize,
    /// Sealed bytes not yet written.
    wbuf: Vec<u8>,
    wpos: usize,
    peer_closed: bool,
    close_sent: bool,
    on_token: Option<TokenSink>,
}

impl<S> std::fmt::Debug for ChannelStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelStream")
            .field("channel", &self.channel)
            .field("peer_closed", &self.peer_closed)
            .finish_non_exhaustive()
    }
}

impl<S> ChannelStream<S> {
    /// Wrap `io` with an established `channel`. `plain` is plaintext that
    /// arrived with the handshake (the reply's first response bytes),
    /// `leftover` ciphertext read past the handshake, `pending_out` bytes to
    /// send before anything else (e.g. the reply frame).
    pub fn new(
        io: S,
        channel: Channel,
        plain: Vec<u8>,
        leftover: Vec<u8>,
        pending_out: Vec<u8>,
    ) -> Self {
        Self {
            io,
            channel,
            rbuf: leftover,
            plain,
            plain_pos: 0,
            wbuf: pending_out,
            wpos: 0,
            peer_closed: false,
            close_sent: false,
            on_token: None,
        }
    }

    /// Deliver address tokens from the peer to `sink`.
    pub fn on_token(&mut self, sink: TokenSink) {
        self.on_token = Some(sink);
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The underlying stream, giving up the channel (records queued but
    /// not written are lost).
    pub fn into_inner(self) -> S {
        self.io
    }

    /// Seal a record of `kind` and queue it.
    pub fn queue_record(&mut self, kind: RecordKind, body: &[u8]) -> io::Result<()> {
        self.channel
            .seal(kind, body, &mut self.wbuf)
            .map_err(io::Error::other)
    }

    /// Open the frames already buffered (e.g. a token record that arrived
    /// together with the handshake), so their side effects happen now.
    pub fn process_buffered(&mut self) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        while self.open_buffered()? {}
        Ok(())
    }

    /// Whether sealed bytes are waiting to be written.
    pub fn has_pending_write(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// Queue the client's confirmation (a `Confirm` record): sent with the
    /// next write, flush or read. A server takes any authenticated record
    /// from the client as proof that the first flight was not replayed.
    pub fn confirm(&mut self) -> io::Result<()> {
        self.queue_record(RecordKind::Confirm, &[])
    }

    /// Records opened from the peer so far (any kind). Non-zero means the
    /// peer holds the handshake's keys: for a server, that the client of the
    /// first flight is live on this connection.
    pub fn records_received(&self) -> u64 {
        self.channel.received()
    }

    /// Whether the peer sent an authenticated `Close`.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<S: AsyncRead + AsyncWrite + Unpin> ChannelStream<S> {
    fn poll_write_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.wpos < self.wbuf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.wpos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.wpos += n;
        }
        self.wbuf.clear();
        self.wpos = 0;
        Poll::Ready(Ok(()))
    }

    /// Open whole frames from `rbuf` into `plain`. Returns true if progress was made.
    fn open_buffered(&mut self) -> io::Result<bool> {
        let mut used_total = 0;
        let mut progress = false;
        while !self.peer_closed {
            let frame = read_frame(&self.rbuf[used_total..], Expect::Transport)
                .map_err(|_| invalid("malformed channel record"))?;
            let Some((Frame::Transport(ct), used)) = frame else {
                break;
            };
            let rec = self
                .channel
                .open(ct)
                .map_err(|_| invalid("channel record failed to open"))?;
            used_total += used;
            progress = true;
            match rec.kind {
                RecordKind::Data => {
                    if self.plain_pos == self.plain.len() {
                        self.plain.clear();
                        self.plain_pos = 0;
                    }
                    self.plain.extend_from_slice(&rec.body);
                }
                RecordKind::Close => self.peer_closed = true,
                RecordKind::Confirm => {}
                RecordKind::Token => {
                    if let Some(sink) = self.on_token.as_mut() {
                        sink(rec.body);
                    }
                }
            }
            if self.plain.len() - self.plain_pos >= 64 * 1024 {
                break;
            }
        }
        self.rbuf.drain(..used_total);
        Ok(progress)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ChannelStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Queued records (a confirmation, a token) go out without waiting
        // for a write; a full socket leaves them for later.
        if this.has_pending_write() {
            if let Poll::Ready(Err(e)) = this.poll_write_pending(cx) {
                return Poll::Ready(Err(e));
            }
        }
        loop {
            if this.plain_pos < this.plain.len() {
                let n = buf.remaining().min(this.plain.len() - this.plain_pos);
                buf.put_slice(&this.plain[this.plain_pos..this.plain_pos + n]);
                this.plain_pos += n;
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if this.open_buffered()? {
                continue;
            }
            let mut tmp = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut tmp);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "channel ended without an authenticated close",
                )));
            }
            this.rbuf.extend_from_slice(rb.filled());
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ChannelStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        // Make room: what is already sealed goes first. Beyond the limit,
        // wait for the socket (backpressure on a slow reader).
        if this.has_pending_write()
            && this.poll_write_pending(cx)?.is_pending()
            && this.wbuf.len() - this.wpos >= MAX_PENDING_WRITE
        {
            return Poll::Pending;
        }
        if this.wpos > 0 {
            // Drop what the socket took, so the buffer holds only what waits.
            this.wbuf.drain(..this.wpos);
            this.wpos = 0;
        }
        let n = buf.len().min(MAX_WRITE_CHUNK);
        this.channel
            .seal_data(&buf[..n], &mut this.wbuf)
            .map_err(io::Error::other)?;
        // Start sending right away; completion is the flush's job.
        let _ = this.poll_write_pending(cx)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_pending(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_sent {
            this.channel
                .seal(RecordKind::Close, &[], &mut this.wbuf)
                .map_err(io::Error::other)?;
            this.close_sent = true;
        }
        ready!(this.poll_write_pending(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::task::Waker;
    use zrtt_proto::testing::fuzz_channels;

    /// A socket whose peer never reads: every write waits.
    struct Stuck;

    impl AsyncRead for Stuck {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Stuck {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    /// Attack review, issue 11 item 4: a client that stops reading costs the
    /// gateway at most `MAX_PENDING_WRITE` sealed bytes (plus the one record
    /// being sealed), and further writes wait, which is the backpressure
    /// hyper passes on to the backend. Before the bound, every write was
    /// taken and the buffer grew with the response (1.7 MB per slow reader).
    #[test]
    fn a_peer_that_never_reads_holds_at_most_the_write_bound() {
        let mut s =
            ChannelStream::new(Stuck, fuzz_channels().1, Vec::new(), Vec::new(), Vec::new());
        let mut cx = Context::from_waker(Waker::noop());
        let chunk = vec![0x61u8; 4096];
        let mut taken = 0usize;
        let mut waited = false;
        for _ in 0..1024 {
            match Pin::new(&mut s).poll_write(&mut cx, &chunk) {
                Poll::Ready(Ok(n)) => taken += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => {
                    waited = true;
                    break;
                }
            }
        }
        assert!(waited, "4 MiB taken by a socket that accepts nothing");
        let held = s.wbuf.len() - s.wpos;
        assert!(
            held <= MAX_PENDING_WRITE + MAX_WRITE_CHUNK + 64,
            "{held} sealed bytes held"
        );
        assert!(
            taken >= MAX_PENDING_WRITE,
            "only {taken} bytes taken before waiting"
        );
        // It stays bounded: a writer retrying is refused again.
        assert!(Pin::new(&mut s).poll_write(&mut cx, &chunk).is_pending());
        assert_eq!(s.wbuf.len() - s.wpos, held);
    }
}
