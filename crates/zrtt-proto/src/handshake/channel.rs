//! The forward-secret channel after the handshake: length-framed AEAD
//! records with the sequence number as nonce (Noise transport mode).
//!
//! Frame: `u16 len || AEAD(k, nonce = seq, plaintext)`, plaintext
//! `u8 kind || body`. `Close` is authenticated, so a truncated stream is
//! distinguishable from a finished one.

use core::fmt;

use super::noise_err;
use crate::codec::Put;
use crate::error::{Error, HandshakeError, InvalidMessage};

/// Largest body of one record.
pub const MAX_RECORD_BODY: usize = super::MAX_NOISE_MESSAGE - 16 - 1;

/// Bytes a record adds to its body on the wire: length (2), kind (1), tag (16).
pub const RECORD_OVERHEAD: usize = 2 + 1 + 16;

/// Kind of a channel record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// Application bytes.
    Data = 0,
    /// The sender will send nothing more.
    Close = 1,
    /// An address token from the server (opaque to the channel).
    Token = 2,
    /// The client's confirmation, sent as its first record when it has
    /// nothing else to send: any authenticated record from the client
    /// proves the server is talking to the holder of the flight's
    /// ephemeral key, which a replayer of the first flight is not
    /// (docs/PROTOCOL.md §4.5, §7). Its body is empty.
    Confirm = 3,
}

/// One decrypted record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its kind.
    pub kind: RecordKind,
    /// Its body.
    pub body: Vec<u8>,
}

/// Both directions of an established channel.
pub struct Channel {
    noise: snow::TransportState,
    closed_by_peer: bool,
    failed: bool,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("send_seq", &self.noise.sending_nonce())
            .field("recv_seq", &self.noise.receiving_nonce())
            .field("closed_by_peer", &self.closed_by_peer)
            .finish_non_exhaustive()
    }
}

impl Channel {
    pub(crate) fn new(noise: snow::TransportState) -> Self {
        Self {
            noise,
            closed_by_peer: false,
            failed: false,
        }
    }

    /// Seal `body` as one frame appended to `out`. Bodies longer than
    /// [`MAX_RECORD_BODY`] are an API misuse; use [`Self::seal_data`] for streams.
    pub fn seal(&mut self, kind: RecordKind, body: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if body.len() > MAX_RECORD_BODY {
            return Err(Error::ApiMisuse("channel record body too large"));
        }
        let mut pt = Vec::with_capacity(1 + body.len());
        pt.put_u8(kind as u8);
        pt.extend_from_slice(body);
        self.seal_plaintext(&pt, out)
    }

    /// Seal a record's whole plaintext (`u8 kind || body`, at most
    /// `MAX_RECORD_BODY + 1` bytes) as one frame. The fuzz entry points
    /// call it with arbitrary plaintexts so [`Self::open`]'s parser is reached.
    pub(crate) fn seal_plaintext(&mut self, pt: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if pt.len() > MAX_RECORD_BODY + 1 {
            return Err(Error::ApiMisuse("channel record body too large"));
        }
        let start = out.len();
        out.resize(start + 2 + pt.len() + 16, 0);
        let n = self
            .noise
            .write_message(pt, &mut out[start + 2..])
            .map_err(noise_err)?;
        out[start..start + 2].copy_from_slice(&(n as u16).to_be_bytes());
        out.truncate(start + 2 + n);
        Ok(())
    }

    /// Seal application bytes of any length as as many frames as needed.
    pub fn seal_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        for chunk in data.chunks(MAX_RECORD_BODY) {
            self.seal(RecordKind::Data, chunk, out)?;
        }
        Ok(())
    }

    /// Open one frame's ciphertext (as returned by [`super::read_frame`] with
    /// [`super::Expect::Transport`]). Any failure is fatal: later calls fail too.
    pub fn open(&mut self, ciphertext: &[u8]) -> Result<Record, Error> {
        if self.failed {
            return Err(HandshakeError::DecryptFailed.into());
        }
        if self.closed_by_peer {
            return Err(HandshakeError::Closed.into());
        }
        let mut pt = vec![0u8; ciphertext.len()];
        let n = match self.noise.read_message(ciphertext, &mut pt) {
            Ok(n) => n,
            Err(e) => {
                // A forged, reordered or replayed record ends the channel:
                // errors stay fatal.
                self.failed = true;
                return Err(noise_err(e));
            }
        };
        pt.truncate(n);
        let (&kind, body) = pt
            .split_first()
            .ok_or(InvalidMessage::InvalidField("empty channel record"))?;
        let kind = match kind {
            0 => RecordKind::Data,
            1 => {
                self.closed_by_peer = true;
                RecordKind::Close
            }
            2 => RecordKind::Token,
            3 if body.is_empty() => RecordKind::Confirm,
            3 => return Err(InvalidMessage::InvalidField("confirm record with a body").into()),
            _ => return Err(InvalidMessage::InvalidField("channel record kind").into()),
        };
        Ok(Record {
            kind,
            body: body.to_vec(),
        })
    }

    /// Number of records sealed so far (the next sending nonce).
    pub fn sent(&self) -> u64 {
        self.noise.sending_nonce()
    }

    /// Number of records opened so far (the next receiving nonce).
    pub fn received(&self) -> u64 {
        self.noise.receiving_nonce()
    }
}
