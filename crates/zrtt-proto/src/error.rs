//! One error type for the crate, with categories, in the style of rustls:
//! peer faults ([`InvalidMessage`], [`RecordError`], [`HandshakeError`],
//! [`ReplayError`]) are kept apart from caller mistakes ([`Error::ApiMisuse`]).
//!
//! Detailed reasons are for logs. On the wire a peer only ever sees a one-byte
//! [`crate::handshake::RejectReason`] or nothing at all.

use thiserror::Error as ThisError;

/// Every error the core returns.
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Bytes that do not parse.
    #[error("invalid message: {0}")]
    InvalidMessage(InvalidMessage),
    /// A key record that is malformed, stale, or not signed by the right certificate.
    #[error("key record refused: {0}")]
    Record(RecordError),
    /// A handshake that cannot proceed.
    #[error("handshake failed: {0}")]
    Handshake(HandshakeError),
    /// A first flight refused by the replay filter.
    #[error("first flight refused: {0}")]
    Replay(ReplayError),
    /// Provenance certificates that do not prove the client's address.
    #[error("provenance refused: {0}")]
    Provenance(crate::provenance::ProvenanceError),
    /// The caller used the API wrongly (a bug in the caller, not the peer).
    #[error("API misuse: {0}")]
    ApiMisuse(&'static str),
    /// A DNS shortcut name, request or answer that does not parse.
    #[error("DNS shortcut: {0}")]
    Shortcut(crate::shortcut::ShortcutError),
    /// The injected random number generator failed.
    #[error("random number generator failed")]
    Rng,
}

// Hand-written `From` impls rather than `#[from]`: the inner error is already
// part of the message, so it must not also be reported as `source()`
// (error chains would print it twice).

impl From<crate::provenance::ProvenanceError> for Error {
    fn from(e: crate::provenance::ProvenanceError) -> Self {
        Self::Provenance(e)
    }
}

impl From<crate::shortcut::ShortcutError> for Error {
    fn from(e: crate::shortcut::ShortcutError) -> Self {
        Self::Shortcut(e)
    }
}

impl From<InvalidMessage> for Error {
    fn from(e: InvalidMessage) -> Self {
        Self::InvalidMessage(e)
    }
}

impl From<RecordError> for Error {
    fn from(e: RecordError) -> Self {
        Self::Record(e)
    }
}

impl From<HandshakeError> for Error {
    fn from(e: HandshakeError) -> Self {
        Self::Handshake(e)
    }
}

impl From<ReplayError> for Error {
    fn from(e: ReplayError) -> Self {
        Self::Replay(e)
    }
}

impl From<InvalidMessage> for RecordError {
    fn from(e: InvalidMessage) -> Self {
        Self::Malformed(e)
    }
}

/// Bytes that do not follow the wire format.
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// Input ended early.
    #[error("truncated: needed {needed} more bytes, {available} available")]
    Truncated {
        /// Bytes the next field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// Bytes left over after a complete structure.
    #[error("{0} trailing bytes after a complete structure")]
    TrailingBytes(usize),
    /// Input larger than the format allows.
    #[error("oversized: {len} bytes, at most {max} allowed")]
    Oversized {
        /// Length seen.
        len: usize,
        /// Largest length allowed.
        max: usize,
    },
    /// A version this implementation does not speak.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// A frame whose type byte is unknown.
    #[error("unknown frame type 0x{0:02x}")]
    UnknownFrameType(u8),
    /// A field with a value the format forbids.
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
    /// A text or DNS encoding that does not decode.
    #[error("bad encoding: {0}")]
    BadEncoding(&'static str),
}

/// Why a key record was refused.
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// The record's bytes do not parse.
    #[error("malformed: {0}")]
    Malformed(InvalidMessage),
    /// The record names another host.
    #[error("record is for {found:?}, expected {expected:?}")]
    WrongName {
        /// Name the caller asked for.
        expected: String,
        /// Name in the record.
        found: String,
    },
    /// `not_after` has passed.
    #[error("expired at {not_after} (now {now})")]
    Expired {
        /// End of validity, seconds since the epoch.
        not_after: u64,
        /// Caller's time, seconds since the epoch.
        now: u64,
    },
    /// `not_before` is still ahead.
    #[error("not valid before {not_before} (now {now})")]
    NotYetValid {
        /// Start of validity, seconds since the epoch.
        not_before: u64,
        /// Caller's time, seconds since the epoch.
        now: u64,
    },
    /// The signature does not verify under the certificate's key.
    #[error("bad signature")]
    BadSignature,
    /// The record is valid for longer than clients accept.
    #[error("record lifetime {lifetime} s exceeds the maximum of {max} s")]
    LifetimeTooLong {
        /// `not_after - not_before`.
        lifetime: u64,
        /// The maximum.
        max: u64,
    },
    /// The record's validity is not inside its certificate's validity.
    #[error("record validity is outside its certificate's ({cert_not_before}..{cert_not_after})")]
    OutlivesCertificate {
        /// Certificate notBefore, seconds since the epoch.
        cert_not_before: u64,
        /// Certificate notAfter, seconds since the epoch.
        cert_not_after: u64,
    },
    /// The certificate offered is not the one the record names by hash.
    #[error("certificate does not match the record's certificate hash")]
    CertificateMismatch,
    /// The certificate does not parse or does not cover the record's name.
    #[error("certificate unusable: {0}")]
    BadCertificate(String),
    /// A signature algorithm this implementation does not know.
    #[error("unsupported signature algorithm {0}")]
    UnsupportedSignatureAlgorithm(u8),
    /// The published key is a point of small order (all-zero and the like):
    /// no shared secret or signature under it means anything.
    #[error("the published key is of small order")]
    WeakKey,
    /// The signing key is of a type zrtt cannot use.
    #[error("unsupported signing key: {0}")]
    UnsupportedKey(&'static str),
    /// Two records in one set carry the same key id.
    #[error("duplicate key id {0:#010x}")]
    DuplicateKeyId(u32),
}

/// Why a handshake stopped.
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The server holds no key with this id.
    #[error("unknown key id {0:#010x}")]
    UnknownKeyId(u32),
    /// The key exists but is outside its validity window.
    #[error("key {0:#010x} is outside its validity window")]
    KeyNotValidNow(u32),
    /// More early data than the key record allows.
    #[error("early data of {len} bytes exceeds the limit of {max}")]
    EarlyDataTooLarge {
        /// Early data offered.
        len: usize,
        /// Limit from the key record.
        max: usize,
    },
    /// Authentication of a handshake or transport message failed.
    #[error("decryption failed")]
    DecryptFailed,
    /// The authenticated timestamp is too far from the server's clock.
    #[error("timestamp {ts_ms} ms is outside the window around {now_ms} ms")]
    TimestampOutOfWindow {
        /// Client's timestamp.
        ts_ms: u64,
        /// Server's time.
        now_ms: u64,
    },
    /// A Noise pattern byte other than NK or IK.
    #[error("unsupported handshake pattern {0}")]
    UnsupportedPattern(u8),
    /// An AEAD the key record does not offer.
    #[error("unsupported AEAD {0}")]
    UnsupportedAead(u8),
    /// The key record demands a client static key and the flight had none.
    #[error("client authentication required")]
    ClientAuthRequired,
    /// A resumed flight's ticket was refused (Reject 9 on the wire).
    #[error("resumption ticket refused: {0}")]
    TicketRefused(crate::handshake::TicketError),
    /// The server refused the first flight.
    #[error("server refused the first flight: {0}")]
    Rejected(crate::handshake::RejectReason),
    /// A frame arrived that the state machine does not expect now.
    #[error("unexpected frame")]
    UnexpectedFrame,
    /// The peer closed the channel.
    #[error("channel closed")]
    Closed,
    /// The underlying Noise implementation failed in a way not covered above.
    #[error("noise: {0}")]
    Noise(String),
}

/// Why the replay filter refused a first flight.
#[derive(Debug, ThisError, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayError {
    /// This client ephemeral key was already seen for this key.
    #[error("replayed first flight")]
    Replayed,
    /// The flight's timestamp is older than the allowed skew.
    #[error("timestamp too old")]
    TooOld,
    /// The flight's timestamp is further ahead than the allowed skew.
    #[error("timestamp in the future")]
    InFuture,
    /// The flight predates this filter's start, so it may have been seen before a restart.
    #[error("timestamp predates the filter's start")]
    BeforeFilterStart,
    /// The filter's window is full; refusing keeps its false-positive bound.
    #[error("replay filter full for this window")]
    Full,
    /// A replay store shared by several servers (docs/FLEET.md) could not
    /// vouch for the flight: it did not answer in time, failed, or may have
    /// lost what it recorded.
    #[error("shared replay store unavailable")]
    StoreUnavailable,
    /// This process handed its replay state to a successor (a gateway
    /// restart without a blackout, docs/GATEWAY.md): it no longer accepts
    /// flights; the successor does.
    #[error("replay state handed over to a successor process")]
    HandedOver,
}
