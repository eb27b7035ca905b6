//! The Noise side of the DNS shortcut (docs/PROTOCOL.md §13): a one-shot
//! NK flight carrying a compact request, answered by one answer stream
//! (Reply, data records, close record). The client sends nothing after
//! its flight.

use super::client::encode_payload;
use super::{
    ext, read_frame, Accepted, ClientHandshake, ClientParams, Expect, Extensions, Frame, Pattern,
    RecordKind, Transport, MAX_NOISE_MESSAGE,
};
use crate::crypto::SecureRandom;
use crate::error::{Error, HandshakeError, InvalidMessage};
use crate::record::{Aead, VerifiedKeyRecord};
use crate::shortcut::{
    padded_dns_form_len, CompactRequest, ShortcutError, DNS_FORM_OVERHEAD, MAX_ANSWER_RECORD,
    MAX_RESPONSE, PADDING_OVERHEAD,
};
use crate::time::UnixTime;

/// Response bytes the Reply of an answer stream carries at most: one Noise
/// message less its ephemeral key, tag and the empty extension list.
const MAX_REPLY_DATA: usize = MAX_NOISE_MESSAGE - 32 - 16 - 2;

impl ClientHandshake {
    /// Build a shortcut flight (pattern 0x04) for `record` carrying
    /// `request`, at `now`. Returns the state to keep and the flight in its
    /// TCP form ([`crate::shortcut::query_name`] makes its DNS name).
    ///
    /// `pad_for: Some(site)` adds the padding extension (`0xFFFF`, zeros)
    /// so that the DNS form is [`padded_dns_form_len`]`(site)` bytes,
    /// whatever the target: every query name under `site` is as long as
    /// the longest one (same answer room under the 3x bound, the target's
    /// length hidden); a target over [`crate::shortcut::max_target_len`]
    /// is [`ShortcutError::TooLong`]. The server ignores extensions of
    /// shortcut flights.
    pub fn start_shortcut(
        record: &VerifiedKeyRecord,
        request: &CompactRequest,
        aead: Option<Aead>,
        pad_for: Option<&str>,
        now: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<(Self, Vec<u8>), Error> {
        let body = record.body();
        body.check_validity(now)?;
        if body.flags.client_auth_required() {
            return Err(HandshakeError::ClientAuthRequired.into());
        }
        let aead = match aead {
            Some(a) if body.aeads.contains(&a) => a,
            Some(a) => return Err(HandshakeError::UnsupportedAead(a as u8).into()),
            None => body.aeads[0],
        };
        let mut extensions = Extensions::new();
        if let Some(site) = pad_for {
            let want = padded_dns_form_len(site);
            // Unpadded DNS form: the overhead (method byte included) and
            // the target.
            let len = DNS_FORM_OVERHEAD + request.target().len() + PADDING_OVERHEAD;
            let Some(pad) = want.checked_sub(len) else {
                return Err(ShortcutError::TooLong {
                    len: crate::shortcut::names::query_name_len(len, site),
                    max: crate::shortcut::MAX_NAME_LEN,
                }
                .into());
            };
            extensions.set(ext::PADDING, vec![0; pad]);
        }
        let params = ClientParams {
            transport: Transport::Shortcut,
            aead: Some(aead),
            static_key: None,
            extensions,
        };
        let pattern = Pattern::Shortcut;
        let payload = encode_payload(record, &params, pattern, &request.encode(), now)?;
        let (mut hs, frame) =
            Self::start_with_payload(record, &params, aead, pattern, &payload, rng)?;
        hs.sent = now;
        Ok((hs, frame))
    }

    /// Open a shortcut flight's answer stream (the body of a TXT ANSWER, or
    /// what the site sent back over TCP up to EOF) and return the HTTP
    /// response. The stream must be exactly a Reply, data records and one
    /// close record (which proves the response complete); a Reject frame
    /// ends it with [`HandshakeError::Rejected`].
    pub fn open_shortcut_answer(self, stream: &[u8]) -> Result<Vec<u8>, Error> {
        if self.pattern != Pattern::Shortcut {
            return Err(Error::ApiMisuse("not a shortcut flight"));
        }
        let truncated = || ShortcutError::BadAnswer("answer stream without its close record");
        let (frame, mut used) = read_frame(stream, Expect::ReplyOrReject)?.ok_or_else(truncated)?;
        let reply = self.handle_reply(&frame)?;
        let mut channel = reply.channel;
        let mut response = reply.data;
        loop {
            let Some((Frame::Transport(ct), n)) = read_frame(&stream[used..], Expect::Transport)?
            else {
                return Err(truncated().into());
            };
            used += n;
            let record = channel.open(ct)?;
            match record.kind {
                RecordKind::Data if response.len() + record.body.len() <= MAX_RESPONSE => {
                    response.extend_from_slice(&record.body);
                }
                RecordKind::Data => {
                    return Err(ShortcutError::BadAnswer("response over MAX_RESPONSE").into())
                }
                RecordKind::Close if !record.body.is_empty() => {
                    return Err(InvalidMessage::InvalidField("close record with a body").into())
                }
                RecordKind::Close if used < stream.len() => {
                    return Err(InvalidMessage::TrailingBytes(stream.len() - used).into())
                }
                RecordKind::Close => return Ok(response),
                RecordKind::Token | RecordKind::Confirm => {
                    return Err(HandshakeError::UnexpectedFrame.into())
                }
            }
        }
    }
}

impl Accepted {
    /// The compact request of a shortcut flight (checked by
    /// [`super::ServerConfig::accept`]); an API misuse for other patterns.
    pub fn shortcut_request(&self) -> Result<CompactRequest, Error> {
        if self.header.pattern != Pattern::Shortcut {
            return Err(Error::ApiMisuse("not a shortcut flight"));
        }
        Ok(CompactRequest::decode(&self.early_data)?)
    }

    /// Answer a shortcut flight with `response` (a complete HTTP/1.1
    /// response, at most [`MAX_RESPONSE`] bytes): the answer stream, a
    /// Reply (empty extension list and as much of the response as fits one
    /// Noise message), data records of at most 16 KiB with the rest, and
    /// one close record.
    pub fn shortcut_answer(self, response: &[u8]) -> Result<Vec<u8>, Error> {
        if self.header.pattern != Pattern::Shortcut {
            return Err(Error::ApiMisuse("not a shortcut flight"));
        }
        if response.len() > MAX_RESPONSE {
            return Err(Error::ApiMisuse("shortcut response over MAX_RESPONSE"));
        }
        let (first, rest) = response.split_at(response.len().min(MAX_REPLY_DATA));
        let mut payload = Vec::with_capacity(2 + first.len());
        Extensions::new().encode(&mut payload)?;
        payload.extend_from_slice(first);
        let (mut channel, mut out) = self.reply_with_payload(&payload)?;
        for chunk in rest.chunks(MAX_ANSWER_RECORD) {
            channel.seal(RecordKind::Data, chunk, &mut out)?;
        }
        channel.seal(RecordKind::Close, &[], &mut out)?;
        Ok(out)
    }
}
