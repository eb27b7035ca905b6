//! The zrtt handshake: a one-round-trip Noise exchange whose first message
//! carries the request (docs/PROTOCOL.md §4-§6).
//!
//! ```text
//! client                                              server
//! FirstFlight = 0xD7 hdr || Noise(-> e, es [, s, ss]) {ts, exts, request}
//!                      -------------------------------->
//!                                          Reply = 0xD8 || Noise(<- e, ee [, se]) {exts, response}
//!                      <--------------------------------
//! Transport frames (u16 len || AEAD(seq nonce)), both ways, forward secret
//! ```
//!
//! The state machines do no I/O: callers pass bytes in, get bytes out, and
//! pass time and randomness as arguments. [`read_frame`] splits a byte stream
//! into frames.

mod channel;
mod client;
pub mod resume;
mod server;
mod shortcut;

pub use channel::{Channel, Record as ChannelRecord, RecordKind, MAX_RECORD_BODY, RECORD_OVERHEAD};
pub use client::{ClientHandshake, ClientParams, ServerReply};
pub use resume::{KeyBinding, ResumptionTicket, SiteBinding, TicketError, TicketKey};
pub use server::{Accepted, Refusal, Resumed, ServerConfig, ServerKey};

use core::fmt;

use crate::codec::{Put, Reader};
use crate::error::{Error, InvalidMessage};
use crate::record::{decode_record_list, encode_record_list, KeyRecord};

/// Wire version of the handshake.
pub const PROTOCOL_VERSION: u8 = 1;
/// First byte of a client first flight. Differs from a TLS record (0x14-0x18),
/// an SSLv2 hello (0x80), a PROXY header (`P`, 0x0D) and every HTTP method
/// (ASCII letters), so one port can serve zrtt, TLS and plain HTTP.
pub const FRAME_FIRST_FLIGHT: u8 = 0xD7;
/// First byte of a server reply.
pub const FRAME_REPLY: u8 = 0xD8;
/// First byte of a server refusal.
pub const FRAME_REJECT: u8 = 0xD9;
/// Largest Noise message (the Noise spec's limit).
pub const MAX_NOISE_MESSAGE: usize = 65535;
/// Largest extension block in a first flight or reply.
pub const MAX_EXTENSIONS_LEN: usize = 4096;
/// Length of the clear first-flight header before the Noise length field.
pub const FIRST_FLIGHT_HEADER_LEN: usize = 8;
/// Prologue label.
pub const PROLOGUE_LABEL: &[u8] = b"zrtt/1 prologue\0";

/// Which Noise pattern a first flight uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Pattern {
    /// `NK`: anonymous client, known server key.
    Nk = 1,
    /// `IK`: client static key sent encrypted in the first message.
    Ik = 2,
    /// `NNpsk0`: a resumed connection; the key is a resumption ticket's
    /// `psk` (docs/PROTOCOL.md §12), no semi-static DH.
    Resumed = 3,
    /// The DNS shortcut (docs/PROTOCOL.md §13): Noise `NK` as [`Self::Nk`],
    /// but one-shot (no channel from the client, no ticket) and bound to
    /// [`Transport::Shortcut`].
    Shortcut = 4,
}

impl Pattern {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Nk),
            2 => Some(Self::Ik),
            3 => Some(Self::Resumed),
            4 => Some(Self::Shortcut),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Nk | Self::Shortcut => "NK",
            Self::Ik => "IK",
            Self::Resumed => "NNpsk0",
        }
    }

    /// Bytes the Noise first message adds around its payload.
    pub fn first_message_overhead(self) -> usize {
        match self {
            Self::Nk | Self::Resumed | Self::Shortcut => 32 + 16,
            Self::Ik => 32 + 48 + 16,
        }
    }
}

/// The transport a handshake runs over; bound into the prologue so a flight
/// cannot be moved from one transport to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Transport {
    /// A TCP stream (possibly the SYN's data).
    Tcp = 1,
    /// A UDP datagram.
    Udp = 2,
    /// A shortcut flight ([`Pattern::Shortcut`]), whether it came as a DNS
    /// query name or over TCP: the server picks it from the pattern byte.
    Shortcut = 3,
}

/// Why a server refused a first flight, the only detail that goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum RejectReason {
    /// The key id is not one the server holds.
    UnknownKey = 1,
    /// The key is outside its validity window.
    KeyExpired = 2,
    /// The first flight was seen before.
    Replay = 3,
    /// The timestamp is outside the allowed skew.
    TimestampSkew = 4,
    /// More early data than the record allows.
    EarlyDataTooLarge = 5,
    /// The key requires a client static key (IK).
    ClientAuthRequired = 6,
    /// The server is overloaded and takes no first flights now.
    Busy = 7,
    /// Unsupported version, pattern or AEAD.
    Unsupported = 8,
    /// A resumed flight's ticket was refused (unknown key, does not open,
    /// expired, another site's): retry at once without it.
    TicketRefused = 9,
}

impl RejectReason {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::UnknownKey,
            2 => Self::KeyExpired,
            3 => Self::Replay,
            4 => Self::TimestampSkew,
            5 => Self::EarlyDataTooLarge,
            6 => Self::ClientAuthRequired,
            7 => Self::Busy,
            8 => Self::Unsupported,
            9 => Self::TicketRefused,
            _ => return None,
        })
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownKey => "unknown key",
            Self::KeyExpired => "key expired",
            Self::Replay => "replay",
            Self::TimestampSkew => "timestamp outside the allowed skew",
            Self::EarlyDataTooLarge => "early data too large",
            Self::ClientAuthRequired => "client authentication required",
            Self::Busy => "server busy",
            Self::Unsupported => "unsupported version, pattern or AEAD",
            Self::TicketRefused => "resumption ticket refused",
        })
    }
}

/// Extension types in a first flight or reply (`u16 type || u16 len || value`).
pub mod ext {
    /// Provenance certificates (opaque to the handshake; see the provenance layer).
    pub const PROVENANCE: u16 = 1;
    /// An address token the server issued earlier (opaque to the handshake).
    pub const ADDRESS_TOKEN: u16 = 2;
    /// Application protocol of the early data, e.g. `http/1.1`.
    pub const ALPN: u16 = 3;
    /// Resumption: empty in a first flight (send me a ticket); in a Reply,
    /// the ticket grant (docs/PROTOCOL.md §12).
    pub const RESUMPTION: u16 = 4;
    /// Padding; its value is ignored.
    pub const PADDING: u16 = 0xFFFF;
}

/// A list of extensions, at most one of each type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extensions(Vec<(u16, Vec<u8>)>);

impl Extensions {
    /// No extensions.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Add or replace an extension.
    pub fn set(&mut self, ty: u16, value: Vec<u8>) -> &mut Self {
        self.0.retain(|(t, _)| *t != ty);
        self.0.push((ty, value));
        self
    }

    /// The value of an extension.
    pub fn get(&self, ty: u16) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, v)| v.as_slice())
    }

    /// Remove an extension and return its value.
    pub fn take(&mut self, ty: u16) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(t, _)| *t == ty)?;
        Some(self.0.remove(i).1)
    }

    /// All extensions in order.
    pub fn iter(&self) -> impl Iterator<Item = &(u16, Vec<u8>)> {
        self.0.iter()
    }

    /// Bytes the extension block takes on the wire, without its length field.
    pub fn encoded_len(&self) -> usize {
        self.0.iter().map(|(_, v)| 4 + v.len()).sum()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let len = self.encoded_len();
        if len > MAX_EXTENSIONS_LEN || self.0.iter().any(|(_, v)| v.len() > u16::MAX as usize) {
            return Err(Error::ApiMisuse("extensions exceed MAX_EXTENSIONS_LEN"));
        }
        out.put_u16(len as u16);
        for (t, v) in &self.0 {
            out.put_u16(*t);
            out.put_vec_u16(v);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, InvalidMessage> {
        let block = r.vec_u16()?;
        if block.len() > MAX_EXTENSIONS_LEN {
            return Err(InvalidMessage::Oversized {
                len: block.len(),
                max: MAX_EXTENSIONS_LEN,
            });
        }
        let mut r = Reader::new(block);
        let mut out: Vec<(u16, Vec<u8>)> = Vec::new();
        while !r.is_empty() {
            let t = r.u16()?;
            let v = r.vec_u16()?;
            out.push((t, v.to_vec()));
        }
        // Duplicates in O(n log n): up to 1024 empty extensions fit.
        let mut types: Vec<u16> = out.iter().map(|(t, _)| *t).collect();
        types.sort_unstable();
        if types.windows(2).any(|w| w[0] == w[1]) {
            return Err(InvalidMessage::InvalidField("duplicate extension"));
        }
        Ok(Self(out))
    }
}

/// The clear header of a first flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstFlightHeader {
    /// Handshake version.
    pub version: u8,
    /// Noise pattern.
    pub pattern: Pattern,
    /// AEAD id (see [`crate::record::Aead`]); kept raw so unknown ids can be refused with a reason.
    pub aead: u8,
    /// The key record's id (a resumed flight: its ticket's key id).
    pub key_id: u32,
}

impl FirstFlightHeader {
    /// The 8 header bytes, which the prologue also binds.
    pub fn encode(&self) -> [u8; FIRST_FLIGHT_HEADER_LEN] {
        let mut out = [0u8; FIRST_FLIGHT_HEADER_LEN];
        out[0] = FRAME_FIRST_FLIGHT;
        out[1] = self.version;
        out[2] = self.pattern as u8;
        out[3] = self.aead;
        out[4..8].copy_from_slice(&self.key_id.to_be_bytes());
        out
    }
}

/// One frame read off a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A client's first flight.
    FirstFlight {
        /// Clear header.
        header: FirstFlightHeader,
        /// The resumption ticket of a resumed flight (empty otherwise).
        ticket: &'a [u8],
        /// The Noise message.
        noise: &'a [u8],
    },
    /// A server's reply.
    Reply {
        /// The Noise message.
        noise: &'a [u8],
    },
    /// A server's refusal, with fresh records if it had any.
    Reject {
        /// Reason.
        reason: RejectReason,
        /// Raw record list (possibly empty). Decode and verify before use.
        records: &'a [u8],
    },
    /// A transport frame's ciphertext.
    Transport(&'a [u8]),
}

/// What a reader expects next on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Server side, before the handshake.
    FirstFlight,
    /// Client side, before the handshake.
    ReplyOrReject,
    /// Both sides after the handshake.
    Transport,
}

/// Try to read one frame from the front of `buf`. Returns `Ok(None)` when
/// more bytes are needed, or the frame and the bytes it used.
pub fn read_frame(
    buf: &[u8],
    expect: Expect,
) -> Result<Option<(Frame<'_>, usize)>, InvalidMessage> {
    let mut r = Reader::new(buf);
    let need_more = |e: InvalidMessage| match e {
        InvalidMessage::Truncated { .. } => Ok(None),
        other => Err(other),
    };
    macro_rules! try_read {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return need_more(e),
            }
        };
    }
    match expect {
        Expect::FirstFlight => {
            let ty = try_read!(r.u8());
            if ty != FRAME_FIRST_FLIGHT {
                return Err(InvalidMessage::UnknownFrameType(ty));
            }
            let version = try_read!(r.u8());
            if version != PROTOCOL_VERSION {
                return Err(InvalidMessage::UnsupportedVersion(version));
            }
            let p = try_read!(r.u8());
            let pattern = Pattern::from_u8(p).ok_or(InvalidMessage::InvalidField("pattern"))?;
            let aead = try_read!(r.u8());
            let key_id = try_read!(r.u32());
            let ticket: &[u8] = if pattern == Pattern::Resumed {
                let t = try_read!(r.vec_u16());
                if resume::ticket_key_id(t) != Some(key_id) {
                    return Err(InvalidMessage::InvalidField("resumption ticket"));
                }
                t
            } else {
                &[]
            };
            let noise = try_read!(r.vec_u16());
            Ok(Some((
                Frame::FirstFlight {
                    header: FirstFlightHeader {
                        version,
                        pattern,
                        aead,
                        key_id,
                    },
                    ticket,
                    noise,
                },
                r.position(),
            )))
        }
        Expect::ReplyOrReject => match try_read!(r.u8()) {
            FRAME_REPLY => {
                let noise = try_read!(r.vec_u16());
                Ok(Some((Frame::Reply { noise }, r.position())))
            }
            FRAME_REJECT => {
                let reason = try_read!(r.u8());
                let reason = RejectReason::from_u8(reason)
                    .ok_or(InvalidMessage::InvalidField("reject reason"))?;
                let records = try_read!(r.vec_u16());
                Ok(Some((Frame::Reject { reason, records }, r.position())))
            }
            other => Err(InvalidMessage::UnknownFrameType(other)),
        },
        Expect::Transport => {
            let ct = try_read!(r.vec_u16());
            if ct.len() < 16 + 1 {
                return Err(InvalidMessage::InvalidField(
                    "transport frame shorter than a tag",
                ));
            }
            Ok(Some((Frame::Transport(ct), r.position())))
        }
    }
}

/// Encode a refusal frame carrying `records` (may be empty).
pub fn encode_reject(reason: RejectReason, records: &[KeyRecord]) -> Vec<u8> {
    let list = encode_record_list(records);
    let mut out = Vec::with_capacity(4 + list.len());
    out.put_u8(FRAME_REJECT);
    out.put_u8(reason as u8);
    out.put_vec_u16(&list);
    out
}

/// Decode the records of a refusal. They are unauthenticated until verified
/// against the certificate like any record from DNS.
pub fn decode_reject_records(records: &[u8]) -> Result<Vec<KeyRecord>, Error> {
    if records.is_empty() {
        return Ok(Vec::new());
    }
    Ok(decode_record_list(records)?)
}

/// The prologue both sides feed to Noise:
/// `PROLOGUE_LABEL || SHA-256(encoded key record) || u8 transport || 8 header bytes`.
/// The record hash binds everything the client relied on (name, key,
/// validity, limits, flags, certificate hash, signature), as ECH binds its
/// whole config.
pub fn prologue(
    record_hash: &[u8; 32],
    transport: Transport,
    header: &FirstFlightHeader,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(PROLOGUE_LABEL.len() + 32 + 9);
    p.extend_from_slice(PROLOGUE_LABEL);
    p.extend_from_slice(record_hash);
    p.put_u8(transport as u8);
    p.extend_from_slice(&header.encode());
    p
}

pub(crate) fn noise_name(pattern: Pattern, aead: crate::record::Aead) -> String {
    format!(
        "Noise_{}_25519_{}_SHA256",
        pattern.name(),
        aead.noise_name()
    )
}

pub(crate) fn noise_err(e: snow::Error) -> Error {
    match e {
        snow::Error::Decrypt => Error::Handshake(crate::error::HandshakeError::DecryptFailed),
        other => Error::Handshake(crate::error::HandshakeError::Noise(other.to_string())),
    }
}
