//! The DNS shortcut (docs/PROTOCOL.md §13, after ASAP, CoNEXT 2011): a
//! one-shot first flight (pattern [`Pattern::Shortcut`], transport
//! [`Transport::Shortcut`]) carrying a compact GET/HEAD request, sent as
//! the name of a TXT query under the site's shortcut zone `zq.<site>`;
//! the gateway's DNS server answers with the whole encrypted response, or
//! with FETCH (send the same flight over TCP) or REJECT.
//!
//! This module is the sans-IO part: the compact request, the flight's two
//! forms (TCP and DNS) and its query name, the TXT answer, the UDP size
//! bound and the server's answer cache. The Noise side lives in
//! [`crate::handshake`] (`ClientHandshake::start_shortcut`,
//! `Accepted::shortcut_answer`, `ClientHandshake::open_shortcut_answer`).
//!
//! [`Pattern::Shortcut`]: crate::handshake::Pattern::Shortcut
//! [`Transport::Shortcut`]: crate::handshake::Transport::Shortcut

mod answer;
mod cache;
pub(crate) mod names;

pub use answer::TxtAnswer;
pub use cache::{AnswerCache, CacheFull, Lookup};
pub use names::{
    max_target_len, padded_dns_form_len, parse_query_name, query_name, zone_name, NameMatch,
    MAX_NAME_LEN, PADDING_OVERHEAD,
};

use crate::codec::Put;
use crate::handshake::{read_frame, Expect, Frame, Pattern, FRAME_FIRST_FLIGHT, PROTOCOL_VERSION};

/// The label of the shortcut zone under a site: `zq.<site>`.
pub const ZONE_LABEL: &str = "zq";
/// Largest HTTP response a shortcut answers (a larger one: Reject 7, busy).
pub const MAX_RESPONSE: usize = 1 << 20;
/// TTL of the shortcut zone's negative answers (its SOA minimum), seconds.
pub const NEGATIVE_TTL: u32 = 5;
/// Largest body of one data record in an answer stream after the Reply.
pub const MAX_ANSWER_RECORD: usize = 16 * 1024;
/// Bytes of the DNS form before the Noise message:
/// `version || pattern || aead || key_id(4)`.
pub const DNS_FORM_HEADER_LEN: usize = 7;
/// Bytes a shortcut flight's DNS form takes besides its target: the header
/// (7), the client's ephemeral key (32), timestamp (8), empty extension
/// list (2), method (1) and the AEAD tag (16).
pub const DNS_FORM_OVERHEAD: usize = DNS_FORM_HEADER_LEN + 32 + 8 + 2 + 1 + 16;

/// What went wrong with a shortcut name, request or answer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShortcutError {
    /// The query name would exceed the DNS limit.
    #[error("shortcut query name of {len} characters, at most {max}")]
    TooLong {
        /// Length the name would have (no trailing dot).
        len: usize,
        /// The limit (253).
        max: usize,
    },
    /// A target that is not origin-form printable ASCII (`/`, 0x21..=0x7E).
    #[error("shortcut target is not an origin-form path of printable ASCII")]
    BadTarget,
    /// A method byte other than GET (1) or HEAD (2).
    #[error("shortcut method {0} unknown")]
    BadMethod(u8),
    /// A name that is not a shortcut flight's.
    #[error("not a shortcut query name")]
    BadName,
    /// A frame that is not a shortcut flight's TCP or DNS form.
    #[error("not a shortcut flight: {0}")]
    BadFlight(&'static str),
    /// A TXT answer or answer stream that does not parse.
    #[error("bad shortcut answer: {0}")]
    BadAnswer(&'static str),
}

/// The request methods a shortcut carries (nothing with a body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Method {
    /// `GET`.
    Get = 1,
    /// `HEAD`.
    Head = 2,
}

impl Method {
    /// The method as it appears in a request line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
        }
    }
}

/// The early data of a shortcut flight: `u8 method || target`, the target
/// in origin-form (starts with `/`, bytes 0x21..=0x7E). No headers, no body:
/// the gateway makes the HTTP request (`Host` from the site, `Early-Data: 1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactRequest {
    method: Method,
    target: String,
}

impl CompactRequest {
    /// A request for `target` (origin-form: `/path?query`).
    pub fn new(method: Method, target: &str) -> Result<Self, ShortcutError> {
        if !valid_target(target.as_bytes()) {
            return Err(ShortcutError::BadTarget);
        }
        Ok(Self {
            method,
            target: target.to_owned(),
        })
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The target (origin-form).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The wire bytes: `u8 method || target`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.target.len());
        out.put_u8(self.method as u8);
        out.extend_from_slice(self.target.as_bytes());
        out
    }

    /// Parse the wire bytes (exactly a method byte and a valid target).
    pub fn decode(bytes: &[u8]) -> Result<Self, ShortcutError> {
        let (&m, target) = bytes.split_first().ok_or(ShortcutError::BadTarget)?;
        let method = match m {
            1 => Method::Get,
            2 => Method::Head,
            other => return Err(ShortcutError::BadMethod(other)),
        };
        if !valid_target(target) {
            return Err(ShortcutError::BadTarget);
        }
        // Printable ASCII, so valid UTF-8.
        let target = String::from_utf8(target.to_vec()).map_err(|_| ShortcutError::BadTarget)?;
        Ok(Self { method, target })
    }
}

fn valid_target(t: &[u8]) -> bool {
    t.first() == Some(&b'/') && t.iter().all(|b| (0x21..=0x7E).contains(b))
}

/// The DNS form of a shortcut flight given in its TCP form (the
/// FirstFlight frame `D7 01 04 aead key_id noise_len noise`): the frame
/// without its first byte and without the Noise length,
/// `01 04 aead key_id noise`.
pub fn dns_form(frame: &[u8]) -> Result<Vec<u8>, ShortcutError> {
    let parsed = read_frame(frame, Expect::FirstFlight)
        .map_err(|_| ShortcutError::BadFlight("not a first flight"))?;
    let Some((Frame::FirstFlight { header, noise, .. }, used)) = parsed else {
        return Err(ShortcutError::BadFlight("truncated"));
    };
    if header.pattern != Pattern::Shortcut {
        return Err(ShortcutError::BadFlight("pattern is not shortcut"));
    }
    if used != frame.len() {
        return Err(ShortcutError::BadFlight("trailing bytes"));
    }
    // No Noise message at all has no DNS form: `tcp_form` refuses it too.
    if noise.is_empty() {
        return Err(ShortcutError::BadFlight("truncated"));
    }
    let mut out = Vec::with_capacity(DNS_FORM_HEADER_LEN + noise.len());
    out.extend_from_slice(&header.encode()[1..]);
    out.extend_from_slice(noise);
    Ok(out)
}

/// The TCP form (a FirstFlight frame) of a shortcut flight's DNS form; the
/// inverse of [`dns_form`].
pub fn tcp_form(dns_form: &[u8]) -> Result<Vec<u8>, ShortcutError> {
    if dns_form.len() <= DNS_FORM_HEADER_LEN {
        return Err(ShortcutError::BadFlight("truncated"));
    }
    let (header, noise) = dns_form.split_at(DNS_FORM_HEADER_LEN);
    if header[0] != PROTOCOL_VERSION {
        return Err(ShortcutError::BadFlight("version"));
    }
    if header[1] != Pattern::Shortcut as u8 {
        return Err(ShortcutError::BadFlight("pattern is not shortcut"));
    }
    if noise.len() > crate::handshake::MAX_NOISE_MESSAGE {
        return Err(ShortcutError::BadFlight("Noise message too long"));
    }
    let mut out = Vec::with_capacity(1 + dns_form.len() + 2);
    out.put_u8(FRAME_FIRST_FLIGHT);
    out.extend_from_slice(header);
    out.put_vec_u16(noise);
    Ok(out)
}

/// The answer cache's key for a flight given in its TCP form: SHA-256 of
/// its DNS form, so both forms of one flight hash alike.
pub fn flight_hash(frame: &[u8]) -> Result<[u8; 32], ShortcutError> {
    Ok(crate::record::sha256(&dns_form(frame)?))
}

/// The largest DNS response message a shortcut answer over UDP may take:
/// `min(3 x query_len, EDNS payload (512 without EDNS, at least 512), 1232)`.
/// A query's source address is unproven, so the answer is bounded like any
/// answer to an unproven address (docs/PROTOCOL.md §13). Over TCP the bound
/// is the DNS limit, 65535.
pub fn udp_response_budget(query_len: usize, edns_payload: Option<u16>) -> usize {
    let edns = edns_payload.map_or(512, |p| usize::from(p).max(512));
    query_len.saturating_mul(3).min(edns).min(1232)
}
