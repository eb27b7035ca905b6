//! Client side: `start` writes the first flight, `handle_reply` finishes.

use core::fmt;

use super::resume::{ResumptionTicket, SiteBinding};
use super::{
    ext, noise_err, noise_name, prologue, Channel, Extensions, FirstFlightHeader, Frame, Pattern,
    Transport, MAX_NOISE_MESSAGE, PROTOCOL_VERSION,
};
use crate::codec::{Put, Reader};
use crate::crypto::{noise_params, SecureRandom, X25519KeyPair, ZrttResolver};
use crate::error::{Error, HandshakeError};
use crate::record::{Aead, VerifiedKeyRecord};
use crate::time::UnixTime;

/// What the client puts into its first flight besides the request.
#[derive(Clone, Debug)]
pub struct ClientParams {
    /// Transport the flight travels on.
    pub transport: Transport,
    /// AEAD to use; `None` takes the record's first preference.
    pub aead: Option<Aead>,
    /// A static key for Noise IK (bound by a provenance certificate or token);
    /// `None` uses NK.
    pub static_key: Option<X25519KeyPair>,
    /// Extensions (provenance, token, ALPN, resumption, padding).
    pub extensions: Extensions,
}

impl ClientParams {
    /// Ask the server for a resumption ticket (extension 4, empty);
    /// [`ServerReply::ticket`] holds it when the server sent one.
    pub fn request_ticket(&mut self) -> &mut Self {
        self.extensions.set(ext::RESUMPTION, Vec::new());
        self
    }
}

impl Default for ClientParams {
    fn default() -> Self {
        Self {
            transport: Transport::Tcp,
            aead: None,
            static_key: None,
            extensions: Extensions::new(),
        }
    }
}

/// A client waiting for the server's reply (the only client handshake state).
pub struct ClientHandshake {
    noise: snow::HandshakeState,
    key_id: u32,
    pub(super) pattern: Pattern,
    /// The site a ticket from the reply is good for (`None`: none asked).
    binding: Option<SiteBinding>,
    /// When the flight was built (a granted ticket's lifetime counts from here).
    pub(super) sent: UnixTime,
}

impl fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClientHandshake {{ key_id: {:#010x}, pattern: {:?}, state: ExpectReply }}",
            self.key_id, self.pattern
        )
    }
}

/// The server's reply, decrypted.
#[derive(Debug)]
pub struct ServerReply {
    /// Forward-secret channel for everything after the reply.
    pub channel: Channel,
    /// Extensions the server sent.
    pub extensions: Extensions,
    /// The first response bytes.
    pub data: Vec<u8>,
    /// A resumption ticket for the next visit, when one was asked for
    /// ([`ClientParams::request_ticket`]) and the server granted it.
    pub ticket: Option<ResumptionTicket>,
}

impl ClientHandshake {
    /// Build the first flight for `record`, carrying `early_data`, at `now`.
    /// Returns the state to keep and the frame to send.
    pub fn start(
        record: &VerifiedKeyRecord,
        params: &ClientParams,
        early_data: &[u8],
        now: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<(Self, Vec<u8>), Error> {
        if params.transport == Transport::Shortcut {
            return Err(Error::ApiMisuse(
                "a shortcut flight is made by start_shortcut",
            ));
        }
        let body = record.body();
        body.check_validity(now)?;
        let aead = match params.aead {
            Some(a) if body.aeads.contains(&a) => a,
            Some(a) => return Err(HandshakeError::UnsupportedAead(a as u8).into()),
            None => body.aeads[0],
        };
        let pattern = if params.static_key.is_some() {
            Pattern::Ik
        } else if body.flags.client_auth_required() {
            return Err(HandshakeError::ClientAuthRequired.into());
        } else {
            Pattern::Nk
        };
        let payload = encode_payload(record, params, pattern, early_data, now)?;
        let mut hs = Self::start_with_payload(record, params, aead, pattern, &payload, rng)?;
        hs.0.sent = now;
        Ok(hs)
    }

    /// Build a resumed first flight (Noise `NNpsk0`, docs/PROTOCOL.md §12)
    /// with `ticket`, which is used up. `record` is the client's current
    /// verified record for the origin: the ticket must be bound to its name
    /// and certificate ([`ResumptionTicket::usable`]), and its early-data
    /// limit and AEADs apply. `params.static_key` must be `None`; to get a
    /// fresh ticket, [`ClientParams::request_ticket`].
    pub fn resume(
        record: &VerifiedKeyRecord,
        ticket: ResumptionTicket,
        params: &ClientParams,
        early_data: &[u8],
        now: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<(Self, Vec<u8>), Error> {
        if !ticket.usable(record, now) {
            return Err(Error::ApiMisuse(
                "resumption ticket expired or bound to another site or certificate",
            ));
        }
        if params.static_key.is_some() {
            return Err(Error::ApiMisuse(
                "a resumed flight has no client static key",
            ));
        }
        if params.transport == Transport::Shortcut {
            return Err(Error::ApiMisuse(
                "a shortcut flight is made by start_shortcut",
            ));
        }
        let body = record.body();
        body.check_validity(now)?;
        if body.flags.client_auth_required() {
            return Err(HandshakeError::ClientAuthRequired.into());
        }
        let aead = match params.aead {
            Some(a) if body.aeads.contains(&a) => a,
            Some(a) => return Err(HandshakeError::UnsupportedAead(a as u8).into()),
            None => body.aeads[0],
        };
        let pattern = Pattern::Resumed;
        let payload = encode_payload(record, params, pattern, early_data, now)?;
        let header = FirstFlightHeader {
            version: PROTOCOL_VERSION,
            pattern,
            aead: aead as u8,
            key_id: super::resume::ticket_key_id(ticket.ticket())
                .ok_or(Error::ApiMisuse("malformed ticket"))?,
        };
        let ticket_hash = crate::record::sha256(ticket.ticket());
        let prologue = prologue(&ticket_hash, params.transport, &header);
        let resolver = Box::new(ZrttResolver::new(rng, None)?);
        let mut noise =
            snow::Builder::with_resolver(noise_params(&noise_name(pattern, aead))?, resolver)
                .prologue(&prologue)
                .and_then(|b| b.psk(0, ticket.psk()))
                .and_then(|b| b.build_initiator())
                .map_err(noise_err)?;
        let mut msg = vec![0u8; payload.len() + pattern.first_message_overhead()];
        let n = noise.write_message(&payload, &mut msg).map_err(noise_err)?;
        let mut frame =
            Vec::with_capacity(super::FIRST_FLIGHT_HEADER_LEN + 4 + ticket.ticket().len() + n);
        frame.extend_from_slice(&header.encode());
        frame.put_vec_u16(ticket.ticket());
        frame.put_vec_u16(&msg[..n]);
        let binding = params
            .extensions
            .get(ext::RESUMPTION)
            .map(|_| ticket.binding().clone());
        Ok((
            Self {
                noise,
                key_id: header.key_id,
                pattern,
                binding,
                sent: now,
            },
            frame,
        ))
    }

    /// The Noise part of [`Self::start`]: encrypt `payload` (timestamp,
    /// extensions, early data, already checked and encoded) into a first
    /// flight. The fuzz entry points call it with arbitrary payloads so
    /// the server's plaintext parsers are reached.
    pub(crate) fn start_with_payload(
        record: &VerifiedKeyRecord,
        params: &ClientParams,
        aead: Aead,
        pattern: Pattern,
        payload: &[u8],
        rng: &dyn SecureRandom,
    ) -> Result<(Self, Vec<u8>), Error> {
        let body = record.body();
        let header = FirstFlightHeader {
            version: PROTOCOL_VERSION,
            pattern,
            aead: aead as u8,
            key_id: body.key_id,
        };
        let record_hash = crate::record::sha256(&record.record().encode());
        let prologue = prologue(&record_hash, params.transport, &header);
        let msg_len = payload.len() + pattern.first_message_overhead();
        if msg_len > MAX_NOISE_MESSAGE {
            return Err(Error::ApiMisuse("first flight payload too large"));
        }

        let resolver = Box::new(ZrttResolver::new(rng, params.static_key.as_ref())?);
        let params_n = noise_params(&noise_name(pattern, aead))?;
        let mut builder = snow::Builder::with_resolver(params_n, resolver)
            .prologue(&prologue)
            .map_err(noise_err)?
            .remote_public_key(&body.public_key)
            .map_err(noise_err)?;
        if let Some(k) = &params.static_key {
            builder = builder.local_private_key(k.private()).map_err(noise_err)?;
        }
        let mut noise = builder.build_initiator().map_err(noise_err)?;

        let mut msg = vec![0u8; msg_len];
        let n = noise.write_message(payload, &mut msg).map_err(noise_err)?;
        let mut frame = Vec::with_capacity(2 + super::FIRST_FLIGHT_HEADER_LEN + n);
        frame.extend_from_slice(&header.encode());
        frame.put_vec_u16(&msg[..n]);
        let binding = params
            .extensions
            .get(ext::RESUMPTION)
            .map(|_| SiteBinding::of(record));
        Ok((
            Self {
                noise,
                key_id: body.key_id,
                pattern,
                binding,
                sent: UnixTime::from_secs(0),
            },
            frame,
        ))
    }

    /// The key id this handshake used (a resumed one: the ticket's key id).
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Whether this is a resumed handshake.
    pub fn resumed(&self) -> bool {
        self.pattern == Pattern::Resumed
    }

    /// The ticket key id of the ticket a resumed handshake presented (its
    /// header's key id); `None` for NK and IK.
    pub fn ticket_key_id(&self) -> Option<u32> {
        self.resumed().then_some(self.key_id)
    }

    /// Process the server's answer: a reply finishes the handshake; a refusal
    /// ends it with [`HandshakeError::Rejected`] (the caller then reads the
    /// frame's records, if any, to retry, or falls back to TLS).
    pub fn handle_reply(mut self, frame: &Frame<'_>) -> Result<ServerReply, Error> {
        let noise_msg = match frame {
            Frame::Reply { noise } => *noise,
            Frame::Reject { reason, .. } => return Err(HandshakeError::Rejected(*reason).into()),
            _ => return Err(HandshakeError::UnexpectedFrame.into()),
        };
        let mut payload = vec![0u8; noise_msg.len()];
        let n = self
            .noise
            .read_message(noise_msg, &mut payload)
            .map_err(noise_err)?;
        let mut r = Reader::new(&payload[..n]);
        let mut extensions = Extensions::decode(&mut r)?;
        let data = r.rest().to_vec();
        let transport = self.noise.into_transport_mode().map_err(noise_err)?;
        // A grant that does not parse is ignored: tickets are an optimisation.
        // The grant holds the psk: taken out of the extensions and wiped.
        let grant = extensions
            .take(ext::RESUMPTION)
            .map(zeroize::Zeroizing::new);
        let ticket = match (self.binding, grant) {
            (Some(binding), Some(grant)) => {
                ResumptionTicket::from_grant(&grant, binding, self.sent).ok()
            }
            _ => None,
        };
        Ok(ServerReply {
            channel: Channel::new(transport),
            extensions,
            data,
            ticket,
        })
    }
}

/// Timestamp, extensions and early data of a first flight, checked
/// against `record`'s early-data limit and the Noise message limit.
pub(super) fn encode_payload(
    record: &VerifiedKeyRecord,
    params: &ClientParams,
    pattern: Pattern,
    early_data: &[u8],
    now: UnixTime,
) -> Result<Vec<u8>, Error> {
    let max = record.body().max_early_data_bytes as usize;
    if early_data.len() > max {
        return Err(HandshakeError::EarlyDataTooLarge {
            len: early_data.len(),
            max,
        }
        .into());
    }
    let mut payload = Vec::with_capacity(10 + params.extensions.encoded_len() + early_data.len());
    payload.put_u64(now.as_millis());
    params.extensions.encode(&mut payload)?;
    payload.extend_from_slice(early_data);
    let msg_len = payload.len() + pattern.first_message_overhead();
    if msg_len > MAX_NOISE_MESSAGE {
        return Err(HandshakeError::EarlyDataTooLarge {
            len: early_data.len(),
            max: MAX_NOISE_MESSAGE - (msg_len - early_data.len()),
        }
        .into());
    }
    Ok(payload)
}
