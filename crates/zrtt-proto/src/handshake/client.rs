//! Client side: `start` writes the first flight, `handle_reply` finishes.

use core::fmt;

use super::{
    noise_err, noise_name, prologue, Channel, Extensions, FirstFlightHeader, Frame, Pattern,
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
    /// Extensions (provenance, token, ALPN, padding).
    pub extensions: Extensions,
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
}

impl fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClientHandshake {{ key_id: {:#010x}, state: ExpectReply }}",
            self.key_id
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
        if early_data.len() > body.max_early_data_bytes as usize {
            return Err(HandshakeError::EarlyDataTooLarge {
                len: early_data.len(),
                max: body.max_early_data_bytes as usize,
            }
            .into());
        }
        let mut payload =
            Vec::with_capacity(10 + params.extensions.encoded_len() + early_data.len());
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
        Self::start_with_payload(record, params, aead, pattern, &payload, rng)
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
        Ok((
            Self {
                noise,
                key_id: body.key_id,
            },
            frame,
        ))
    }

    /// The key id this handshake used.
    pub fn key_id(&self) -> u32 {
        self.key_id
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
        let extensions = Extensions::decode(&mut r)?;
        let data = r.rest().to_vec();
        let transport = self.noise.into_transport_mode().map_err(noise_err)?;
        Ok(ServerReply {
            channel: Channel::new(transport),
            extensions,
            data,
        })
    }
}
