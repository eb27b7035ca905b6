//! The TXT answer to a shortcut query: one TXT RR whose character-strings,
//! concatenated, are `u8 kind || body`.

use super::ShortcutError;
use crate::handshake::{read_frame, Expect, Frame};

const KIND_ANSWER: u8 = 0x01;
const KIND_FETCH: u8 = 0x02;
const KIND_REJECT: u8 = 0x03;
/// Longest TXT character-string.
const MAX_STRING: usize = 255;

/// What the gateway's DNS server says to a shortcut flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxtAnswer {
    /// `0x01`: the whole answer stream (Reply, data records, close record).
    Answer(Vec<u8>),
    /// `0x02`: the answer exists or is being made but does not fit this DNS
    /// answer: send the TCP form of the same flight to the site.
    Fetch,
    /// `0x03`: a Reject frame (docs/PROTOCOL.md §4.4).
    Reject(Vec<u8>),
}

impl TxtAnswer {
    fn kind_and_body(&self) -> (u8, &[u8]) {
        match self {
            Self::Answer(b) => (KIND_ANSWER, b),
            Self::Fetch => (KIND_FETCH, &[]),
            Self::Reject(b) => (KIND_REJECT, b),
        }
    }

    /// The TXT RR's character-strings (at most 255 bytes each, all full but
    /// the last).
    pub fn to_strings(&self) -> Vec<Vec<u8>> {
        let (kind, body) = self.kind_and_body();
        let mut all = Vec::with_capacity(1 + body.len());
        all.push(kind);
        all.extend_from_slice(body);
        all.chunks(MAX_STRING).map(<[u8]>::to_vec).collect()
    }

    /// Parse a TXT RR's character-strings. An Answer must not be empty, a
    /// Fetch has no body, a Reject holds exactly one Reject frame.
    pub fn from_strings<'a>(
        strings: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Self, ShortcutError> {
        let mut all = Vec::new();
        for s in strings {
            if s.len() > MAX_STRING {
                return Err(ShortcutError::BadAnswer("TXT string over 255 bytes"));
            }
            if all.len() + s.len() > u16::MAX as usize {
                return Err(ShortcutError::BadAnswer("TXT answer over 65535 bytes"));
            }
            all.extend_from_slice(s);
        }
        let Some((&kind, body)) = all.split_first() else {
            return Err(ShortcutError::BadAnswer("empty TXT answer"));
        };
        match kind {
            KIND_ANSWER if body.is_empty() => Err(ShortcutError::BadAnswer("empty answer stream")),
            KIND_ANSWER => Ok(Self::Answer(body.to_vec())),
            KIND_FETCH if body.is_empty() => Ok(Self::Fetch),
            KIND_FETCH => Err(ShortcutError::BadAnswer("FETCH with a body")),
            KIND_REJECT => match read_frame(body, Expect::ReplyOrReject) {
                Ok(Some((Frame::Reject { .. }, used))) if used == body.len() => {
                    Ok(Self::Reject(body.to_vec()))
                }
                _ => Err(ShortcutError::BadAnswer("REJECT without one Reject frame")),
            },
            _ => Err(ShortcutError::BadAnswer("unknown kind")),
        }
    }

    /// Bytes of the TXT RDATA (each string's length octet included).
    pub fn rdata_len(&self) -> usize {
        let n = 1 + self.kind_and_body().1.len();
        n + n.div_ceil(MAX_STRING)
    }
}
