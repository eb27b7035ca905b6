//! Server side: `accept` checks and decrypts a first flight; the returned
//! [`Accepted`] writes the reply and yields the channel.
//!
//! Checks run cheapest first, and nothing is recorded before the flight
//! authenticates: header and key id, key validity, AEAD and pattern, size,
//! replay pre-check (no crypto), Noise decryption, then the replay filter's
//! timestamp window and insertion.

use core::fmt;
use core::time::Duration;
use std::net::IpAddr;

use super::resume::{encode_grant, KeyBinding, SiteBinding, TicketContents, TicketError};
use super::{
    encode_reject, ext, noise_err, noise_name, prologue, Channel, Extensions, FirstFlightHeader,
    Frame, Pattern, RejectReason, Transport, FRAME_REPLY, MAX_EXTENSIONS_LEN,
};
use crate::admission::TokenKeyRing;
use crate::codec::{Put, Reader};
use crate::crypto::{noise_params, SecureRandom, X25519KeyPair, ZrttResolver};
use crate::error::{Error, HandshakeError, ReplayError};
use crate::record::{Aead, KeyRecord};
use crate::replay::ReplayFilter;
use crate::time::UnixTime;

/// A semi-static key the server can decrypt first flights with.
#[derive(Clone, Debug)]
pub struct ServerKey {
    /// The signed record published for this key.
    pub record: KeyRecord,
    keypair: X25519KeyPair,
    record_hash: [u8; 32],
    /// The hash of the record this key was published with before it was
    /// re-signed with the same terms, the certificate hash it bore, and
    /// until when (Unix seconds) it is accepted
    /// ([`ServerConfig::keep_previous_records`]).
    previous_record_hash: Option<([u8; 32], [u8; 32], u64)>,
}

impl ServerKey {
    /// Pair a record with its private key; fails if they do not match.
    pub fn new(record: KeyRecord, keypair: X25519KeyPair) -> Result<Self, Error> {
        if keypair.public() != &record.body.public_key {
            return Err(Error::ApiMisuse(
                "private key does not match the record's public key",
            ));
        }
        let record_hash = crate::record::sha256(&record.encode());
        Ok(Self {
            record,
            keypair,
            record_hash,
            previous_record_hash: None,
        })
    }

    /// Whether a flight built on the previous record of this key is
    /// accepted too at `now` (see [`ServerConfig::keep_previous_records`]).
    pub fn accepts_previous_record(&self, now: UnixTime) -> bool {
        self.previous_at(now).is_some()
    }

    fn previous_at(&self, now: UnixTime) -> Option<&[u8; 32]> {
        self.previous_record_hash
            .as_ref()
            .filter(|(_, _, until)| now.as_secs() < *until)
            .map(|(h, _, _)| h)
    }

    /// The certificate hash of the previous record kept at `now`.
    fn previous_cert_at(&self, now: UnixTime) -> Option<&[u8; 32]> {
        self.previous_record_hash
            .as_ref()
            .filter(|(_, _, until)| now.as_secs() < *until)
            .map(|(_, c, _)| c)
    }

    /// What a ticket issued under this key binds (its replay domain).
    fn key_binding(&self) -> KeyBinding {
        KeyBinding {
            key_id: self.record.body.key_id,
            public_key: *self.keypair.public(),
        }
    }
}

/// Whether two records of one key state the same terms: every field but
/// the signing certificate's hash (the signature is outside the body).
fn same_terms(a: &crate::record::RecordBody, b: &crate::record::RecordBody) -> bool {
    let mut b = b.clone();
    b.cert_sha256 = a.cert_sha256;
    *a == b
}

/// Server settings: the live keys and the grace around their validity.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    keys: Vec<ServerKey>,
    /// Clock skew tolerated at the edges of a key's validity window (default
    /// 12 s: the replay filter's default `max_age` plus 2 s; a wider grace
    /// admits no extra legitimate client, only lengthens key retention).
    pub key_validity_grace: Duration,
    /// The token keys whose ticket keys seal and open resumption tickets
    /// (docs/PROTOCOL.md §12); `None`: no tickets issued, resumed flights
    /// refused (Reject 9).
    pub resumption: Option<TokenKeyRing>,
}

impl ServerConfig {
    /// A config holding `keys`; refuses duplicate key ids.
    pub fn new(keys: Vec<ServerKey>) -> Result<Self, Error> {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i]
                .iter()
                .any(|o| o.record.body.key_id == k.record.body.key_id)
            {
                return Err(crate::error::RecordError::DuplicateKeyId(k.record.body.key_id).into());
            }
        }
        Ok(Self {
            keys,
            key_validity_grace: Duration::from_secs(12),
            resumption: None,
        })
    }

    /// The live keys.
    pub fn keys(&self) -> &[ServerKey] {
        &self.keys
    }

    /// After a refresh at `now`: for each key that `old` held with a
    /// different record stating the same terms (every body field but
    /// `cert_sha256`: key id, public key, validity, early-data limit, AEADs,
    /// flags, provenance quorum, verifiers and name; the signature is
    /// outside the body), as after a certificate renewal, also accept
    /// flights built on that previous record for `keep_for` (about twice
    /// the records' DNS TTL: clients and resolvers keep the previous record
    /// until its TTL runs out). A flight binds the hash of the record it
    /// was built on (PROTOCOL.md §5), so without this every such flight
    /// would fail to decrypt (no answer, then the client's TLS fallback).
    /// Only a record this server itself held is carried, never one a
    /// flight names; a key whose terms changed is not carried, so new
    /// terms apply at once. One previous record per key. While one is
    /// kept, a flight that decrypts under neither costs a second
    /// decryption attempt.
    pub fn keep_previous_records(&mut self, old: &ServerConfig, now: UnixTime, keep_for: Duration) {
        for k in &mut self.keys {
            let Some(o) = old
                .keys
                .iter()
                .find(|o| o.record.body.key_id == k.record.body.key_id)
            else {
                continue;
            };
            if o.keypair.public() != k.keypair.public() {
                continue;
            }
            if o.record_hash == k.record_hash {
                k.previous_record_hash = o
                    .previous_record_hash
                    .filter(|(_, _, until)| now.as_secs() < *until);
            } else if same_terms(&o.record.body, &k.record.body) {
                let until = now.as_secs().saturating_add(keep_for.as_secs());
                k.previous_record_hash = Some((o.record_hash, o.record.body.cert_sha256, until));
            }
        }
    }

    /// Records valid at `now`, for refusals that let the client retry at once.
    pub fn retry_records(&self, now: UnixTime) -> Vec<KeyRecord> {
        self.keys
            .iter()
            .filter(|k| k.record.body.check_validity(now).is_ok())
            .map(|k| k.record.clone())
            .collect()
    }

    fn reject(&self, reason: RejectReason, error: Error, now: UnixTime) -> Refusal {
        let records = match reason {
            RejectReason::UnknownKey
            | RejectReason::KeyExpired
            | RejectReason::Unsupported
            | RejectReason::TicketRefused => self.retry_records(now),
            _ => Vec::new(),
        };
        Refusal {
            error,
            reply: Some(encode_reject(reason, &records)),
        }
    }

    /// The refusal for a flight a replay check refused with `error`, as
    /// [`Self::accept`] answers it: `Replay` for a replayed flight; `Busy`
    /// when the check could not vouch for the flight (a full filter, a
    /// restart guard, a shared replay store that did not answer); else
    /// `TimestampSkew`. For checks made after `accept`, such as a fleet's
    /// shared replay store (docs/FLEET.md).
    pub fn replay_refusal(&self, error: ReplayError, now: UnixTime) -> Refusal {
        let reason = match error {
            ReplayError::Replayed => RejectReason::Replay,
            // A full filter, a server that restarted moments ago and refuses
            // what its predecessor might have accepted, or a shared store
            // that cannot vouch for the flight: the client should fall back
            // now and retry later, not fix its clock.
            ReplayError::Full
            | ReplayError::BeforeFilterStart
            | ReplayError::StoreUnavailable
            | ReplayError::HandedOver => RejectReason::Busy,
            ReplayError::TooOld | ReplayError::InFuture => RejectReason::TimestampSkew,
        };
        self.reject(reason, error.into(), now)
    }

    /// Check and decrypt a first flight received on `transport` at `now`.
    ///
    /// On refusal, [`Refusal::reply`] is the frame to send (subject to the
    /// caller's amplification gating), or `None` when the flight did not
    /// authenticate and deserves no answer.
    pub fn accept(
        &self,
        frame: &Frame<'_>,
        transport: Transport,
        now: UnixTime,
        replay: &mut dyn ReplayFilter,
        rng: &dyn SecureRandom,
    ) -> Result<Accepted, Refusal> {
        let (header, ticket, noise_msg) = match frame {
            Frame::FirstFlight {
                header,
                ticket,
                noise,
            } => (*header, *ticket, *noise),
            _ => return Err(Refusal::silent(HandshakeError::UnexpectedFrame.into())),
        };
        if (header.pattern == Pattern::Shortcut) != (transport == Transport::Shortcut) {
            return Err(self.reject(
                RejectReason::Unsupported,
                HandshakeError::UnsupportedPattern(header.pattern as u8).into(),
                now,
            ));
        }
        if header.pattern == Pattern::Resumed {
            return self.accept_resumed(header, ticket, noise_msg, transport, now, replay, rng);
        }
        let Some(key) = self
            .keys
            .iter()
            .find(|k| k.record.body.key_id == header.key_id)
        else {
            return Err(self.reject(
                RejectReason::UnknownKey,
                HandshakeError::UnknownKeyId(header.key_id).into(),
                now,
            ));
        };
        let body = &key.record.body;
        let grace = self.key_validity_grace.as_secs();
        let secs = now.as_secs();
        if secs.saturating_add(grace) < body.not_before
            || secs >= body.not_after.saturating_add(grace)
        {
            return Err(self.reject(
                RejectReason::KeyExpired,
                HandshakeError::KeyNotValidNow(header.key_id).into(),
                now,
            ));
        }
        let aead = match Aead::from_u8(header.aead) {
            Some(a) if body.aeads.contains(&a) => a,
            _ => {
                return Err(self.reject(
                    RejectReason::Unsupported,
                    HandshakeError::UnsupportedAead(header.aead).into(),
                    now,
                ))
            }
        };
        if header.pattern != Pattern::Ik && body.flags.client_auth_required() {
            return Err(self.reject(
                RejectReason::ClientAuthRequired,
                HandshakeError::ClientAuthRequired.into(),
                now,
            ));
        }
        let ephemeral = self.precheck(&header, noise_msg, body, replay, now)?;

        // The record the flight was built on: the current one, else the
        // one this key was published with before a re-signing.
        // NK's reply is `e, ee`: the reply's ephemeral key takes part in one
        // DH only, so ring may generate and use it (IK's `e, ee, se` needs it
        // twice, which ring's single-use keys do not allow).
        let decrypt = |record_hash: &[u8; 32]| -> Result<(snow::HandshakeState, Vec<u8>), Error> {
            let resolver = Box::new(match header.pattern {
                Pattern::Nk | Pattern::Shortcut => {
                    ZrttResolver::single_use_ephemeral(rng, Some(&key.keypair))?
                }
                Pattern::Ik | Pattern::Resumed => ZrttResolver::new(rng, Some(&key.keypair))?,
            });
            let mut noise = noise_params(&noise_name(header.pattern, aead)).and_then(|p| {
                snow::Builder::with_resolver(p, resolver)
                    .prologue(&prologue(record_hash, transport, &header))
                    .and_then(|b| b.local_private_key(key.keypair.private()))
                    .and_then(|b| b.build_responder())
                    .map_err(noise_err)
            })?;
            let mut payload = vec![0u8; noise_msg.len()];
            let n = noise
                .read_message(noise_msg, &mut payload)
                .map_err(noise_err)?;
            payload.truncate(n);
            Ok((noise, payload))
        };
        let (noise, payload, on_previous_record) =
            match (decrypt(&key.record_hash), key.previous_at(now)) {
                (Ok((n, p)), _) => (n, p, false),
                (Err(_), Some(previous)) => {
                    let (n, p) = decrypt(previous).map_err(Refusal::silent)?;
                    (n, p, true)
                }
                (Err(e), None) => return Err(Refusal::silent(e)),
            };

        let mut accepted = self.finish(header, ephemeral, noise, &payload, body, replay, now)?;
        accepted.on_previous_record = on_previous_record;
        if accepted.extensions.get(ext::RESUMPTION).is_some() {
            // Bound to the record the client built on (the previous one
            // after a re-signing: the client still holds it).
            let cert_sha256 = match on_previous_record {
                true => key.previous_cert_at(now).copied(),
                false => None,
            };
            accepted.grant_binding = Some((
                SiteBinding {
                    name: body.name.clone(),
                    cert_sha256: cert_sha256.unwrap_or(body.cert_sha256),
                },
                key.key_binding(),
            ));
        }
        Ok(accepted)
    }

    /// Size bound and replay pre-check, before any crypto; returns the
    /// client ephemeral key.
    fn precheck(
        &self,
        header: &FirstFlightHeader,
        noise_msg: &[u8],
        body: &crate::record::RecordBody,
        replay: &mut dyn ReplayFilter,
        now: UnixTime,
    ) -> Result<[u8; 32], Refusal> {
        // Size bound before any crypto: payload = ts + extensions + early data.
        let max_payload = 8 + 2 + MAX_EXTENSIONS_LEN + body.max_early_data_bytes as usize;
        let overhead = header.pattern.first_message_overhead();
        if noise_msg.len() < overhead + 10 {
            return Err(Refusal::silent(
                crate::error::InvalidMessage::Truncated {
                    needed: overhead + 10,
                    available: noise_msg.len(),
                }
                .into(),
            ));
        }
        if noise_msg.len() - overhead > max_payload {
            return Err(self.reject(
                RejectReason::EarlyDataTooLarge,
                HandshakeError::EarlyDataTooLarge {
                    len: noise_msg.len() - overhead,
                    max: max_payload,
                }
                .into(),
                now,
            ));
        }
        let mut ephemeral = [0u8; 32];
        ephemeral.copy_from_slice(&noise_msg[..32]);
        if replay.seen(header.key_id, &ephemeral) {
            return Err(self.reject(RejectReason::Replay, ReplayError::Replayed.into(), now));
        }
        Ok(ephemeral)
    }

    /// After decryption: parse the payload, check the exact early-data
    /// limit, then the replay filter's window and insertion.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        header: FirstFlightHeader,
        ephemeral: [u8; 32],
        noise: snow::HandshakeState,
        payload: &[u8],
        body: &crate::record::RecordBody,
        replay: &mut dyn ReplayFilter,
        now: UnixTime,
    ) -> Result<Accepted, Refusal> {
        let mut r = Reader::new(payload);
        let parsed = r.u64().and_then(|ts| Ok((ts, Extensions::decode(&mut r)?)));
        let (ts_ms, mut extensions) = parsed.map_err(|e| Refusal::silent(e.into()))?;
        let early_data = r.rest().to_vec();
        if header.pattern == Pattern::Shortcut {
            // Extensions are ignored (no ticket, no token); the early data
            // must be a compact request, checked before the replay filter
            // records the flight.
            extensions = Extensions::new();
            if let Err(e) = crate::shortcut::CompactRequest::decode(&early_data) {
                return Err(Refusal::silent(e.into()));
            }
        }
        if early_data.len() > body.max_early_data_bytes as usize {
            return Err(self.reject(
                RejectReason::EarlyDataTooLarge,
                HandshakeError::EarlyDataTooLarge {
                    len: early_data.len(),
                    max: body.max_early_data_bytes as usize,
                }
                .into(),
                now,
            ));
        }
        let timestamp = UnixTime::from_millis(ts_ms);
        if let Err(e) = replay.check_and_insert(header.key_id, &ephemeral, timestamp, now) {
            return Err(self.replay_refusal(e, now));
        }
        let client_static = noise.get_remote_static().and_then(|s| s.try_into().ok());
        Ok(Accepted {
            header,
            client_ephemeral: ephemeral,
            client_static,
            timestamp,
            extensions,
            early_data,
            on_previous_record: false,
            resumed: None,
            grant_binding: None,
            noise,
        })
    }

    /// A resumed flight (Noise `NNpsk0`, docs/PROTOCOL.md §6 and §12): the
    /// ticket in place of the key record, then the same checks.
    #[allow(clippy::too_many_arguments)]
    fn accept_resumed(
        &self,
        header: FirstFlightHeader,
        ticket: &[u8],
        noise_msg: &[u8],
        transport: Transport,
        now: UnixTime,
        replay: &mut dyn ReplayFilter,
        rng: &dyn SecureRandom,
    ) -> Result<Accepted, Refusal> {
        let refuse = |e: TicketError| {
            self.reject(
                RejectReason::TicketRefused,
                HandshakeError::TicketRefused(e).into(),
                now,
            )
        };
        let ring = self
            .resumption
            .as_ref()
            .ok_or_else(|| refuse(TicketError::Off))?;
        let token_keys = ring.keys();
        let ticket_key = token_keys
            .ticket_key(header.key_id)
            .ok_or_else(|| refuse(TicketError::UnknownKey))?;
        let contents = ticket_key.open(ticket).map_err(refuse)?;
        if contents.expired(now) {
            return Err(refuse(TicketError::Expired));
        }
        let grace = self.key_validity_grace.as_secs();
        let secs = now.as_secs();
        // Only the holder of the semi-static key the ticket was issued
        // under accepts it: holders of one key share one replay filter
        // (PROTOCOL.md §7), so the flight is accepted once in the fleet
        // (§12.3). The key must still be live here (a retired key: Reject
        // 9, and the client falls back to NK/IK at once).
        let key = self
            .keys
            .iter()
            .find(|k| {
                let b = &k.record.body;
                k.key_binding() == contents.key
                    && secs.saturating_add(grace) >= b.not_before
                    && secs < b.not_after.saturating_add(grace)
            })
            .ok_or_else(|| refuse(TicketError::WrongKey))?;
        // The site: the key's record for that name under the ticket's
        // certificate, or the one it bore before a re-signing while that
        // is kept (a certificate renewal, keep_previous_records).
        let body = &key.record.body;
        let cert_ok = body.cert_sha256 == contents.binding.cert_sha256
            || key.previous_cert_at(now) == Some(&contents.binding.cert_sha256);
        if !body.name.eq_ignore_ascii_case(&contents.binding.name) || !cert_ok {
            return Err(refuse(TicketError::WrongSite));
        }
        let aead = match Aead::from_u8(header.aead) {
            Some(a) if body.aeads.contains(&a) => a,
            _ => {
                return Err(self.reject(
                    RejectReason::Unsupported,
                    HandshakeError::UnsupportedAead(header.aead).into(),
                    now,
                ))
            }
        };
        if body.flags.client_auth_required() {
            return Err(self.reject(
                RejectReason::ClientAuthRequired,
                HandshakeError::ClientAuthRequired.into(),
                now,
            ));
        }
        let ephemeral = self.precheck(&header, noise_msg, body, replay, now)?;
        // NNpsk0's reply is `e, ee`: the reply's ephemeral key takes part in
        // one DH only, so ring may generate and use it (as for NK).
        let resolver =
            Box::new(ZrttResolver::single_use_ephemeral(rng, None).map_err(Refusal::silent)?);
        let ticket_hash = crate::record::sha256(ticket);
        let mut noise = noise_params(&noise_name(Pattern::Resumed, aead))
            .and_then(|p| {
                snow::Builder::with_resolver(p, resolver)
                    .prologue(&prologue(&ticket_hash, transport, &header))
                    .and_then(|b| b.psk(0, &contents.psk))
                    .and_then(|b| b.build_responder())
                    .map_err(noise_err)
            })
            .map_err(Refusal::silent)?;
        let mut payload = vec![0u8; noise_msg.len()];
        let n = noise
            .read_message(noise_msg, &mut payload)
            .map_err(|e| Refusal::silent(noise_err(e)))?;
        payload.truncate(n);
        let mut accepted = self.finish(header, ephemeral, noise, &payload, body, replay, now)?;
        if accepted.extensions.get(ext::RESUMPTION).is_some() {
            accepted.grant_binding = Some((contents.binding.clone(), contents.key));
        }
        accepted.resumed = Some(Resumed {
            key: contents.key,
            binding: contents.binding,
            address: contents.address,
            issued_secs: contents.issued_secs,
        });
        Ok(accepted)
    }

    /// The resumption grant (reply extension 4) for `accepted`, when it
    /// asked for one ([`Accepted::ticket_requested`]) and this server
    /// resumes: a fresh `psk` and a ticket sealed under the current token
    /// key's ticket key, bound to the site and to `peer` (the connection's
    /// source address), living as long as that key's tokens.
    pub fn grant_ticket(
        &self,
        accepted: &Accepted,
        peer: IpAddr,
        now: UnixTime,
        rng: &dyn SecureRandom,
    ) -> Result<Option<Vec<u8>>, Error> {
        let (Some(ring), Some((binding, key))) = (&self.resumption, &accepted.grant_binding) else {
            return Ok(None);
        };
        let keys = ring.keys();
        let current = keys.current();
        let mut psk = zeroize::Zeroizing::new([0u8; 32]);
        rng.fill(&mut psk[..])?;
        let contents = TicketContents {
            psk,
            issued_secs: now.as_secs(),
            lifetime_secs: u32::try_from(current.lifetime().as_secs()).unwrap_or(u32::MAX),
            binding: binding.clone(),
            key: *key,
            address: crate::admission::canonical_ip(peer),
        };
        let ticket = current.ticket_key().seal(&contents, rng)?;
        Ok(Some(encode_grant(&contents, &ticket)))
    }
}

/// Where a resumed flight's ticket came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The site the ticket is bound to (the server's current record for it
    /// has this name and certificate hash, or had it before a re-signing).
    pub binding: SiteBinding,
    /// The semi-static key it was issued under (held by this server).
    pub key: KeyBinding,
    /// The client's source address when the ticket was issued (a proof of
    /// address when it equals this connection's: docs/PROTOCOL.md §12.5).
    pub address: IpAddr,
    /// When the ticket was issued (Unix seconds).
    pub issued_secs: u64,
}

/// Why a first flight was refused, and what (if anything) to answer.
#[derive(Debug)]
pub struct Refusal {
    /// The detailed reason, for logs and metrics.
    pub error: Error,
    /// A refusal frame to send, or `None` to send nothing.
    pub reply: Option<Vec<u8>>,
}

impl Refusal {
    fn silent(error: Error) -> Self {
        Self { error, reply: None }
    }
}

/// An authenticated, fresh, never-seen first flight.
pub struct Accepted {
    /// Its clear header.
    pub header: FirstFlightHeader,
    /// The client's ephemeral public key.
    pub client_ephemeral: [u8; 32],
    /// The client's static public key (IK only).
    pub client_static: Option<[u8; 32]>,
    /// The client's authenticated timestamp.
    pub timestamp: UnixTime,
    /// Extensions (provenance, token, ALPN, padding).
    pub extensions: Extensions,
    /// The request bytes. Replayable within the replay filter's guarantees: see PROTOCOL.md §7.
    pub early_data: Vec<u8>,
    /// The flight was built on the key's previous record (a re-signed key,
    /// [`ServerConfig::keep_previous_records`]), not its current one.
    pub on_previous_record: bool,
    /// Set for a resumed flight (Noise `NNpsk0`, docs/PROTOCOL.md §12).
    pub resumed: Option<Resumed>,
    /// The site and semi-static key a granted ticket would be bound to,
    /// when one was asked for.
    grant_binding: Option<(SiteBinding, KeyBinding)>,
    noise: snow::HandshakeState,
}

impl fmt::Debug for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accepted")
            .field("header", &self.header)
            .field(
                "client_static",
                &self.client_static.map(|s| crate::record::hex(&s)),
            )
            .field("timestamp", &self.timestamp)
            .field("extensions", &self.extensions)
            .field("early_data_len", &self.early_data.len())
            .field("resumed", &self.resumed)
            .finish_non_exhaustive()
    }
}

impl Accepted {
    /// Whether the client asked for a resumption ticket
    /// ([`ServerConfig::grant_ticket`] makes it).
    pub fn ticket_requested(&self) -> bool {
        self.grant_binding.is_some()
    }

    /// Write the reply carrying `extensions` and the first `data` of the
    /// response (as much as fits; the rest goes through the channel).
    /// Returns the channel and the reply frame.
    pub fn reply(self, extensions: &Extensions, data: &[u8]) -> Result<(Channel, Vec<u8>), Error> {
        if self.header.pattern == Pattern::Shortcut {
            return Err(Error::ApiMisuse(
                "a shortcut flight is answered with shortcut_answer",
            ));
        }
        let mut payload = Vec::with_capacity(2 + extensions.encoded_len() + data.len());
        extensions.encode(&mut payload)?;
        payload.extend_from_slice(data);
        let sealed = self.reply_with_payload(&payload);
        if extensions.get(ext::RESUMPTION).is_some() {
            // A resumption grant holds a psk: wiped once sealed.
            zeroize::Zeroize::zeroize(&mut payload);
        }
        sealed
    }

    /// The Noise part of [`Self::reply`]: encrypt `payload` (extensions and
    /// data, already encoded) into the reply. The fuzz entry points call it
    /// with arbitrary payloads so the client's plaintext parser is reached.
    pub(crate) fn reply_with_payload(
        mut self,
        payload: &[u8],
    ) -> Result<(Channel, Vec<u8>), Error> {
        let overhead = match self.header.pattern {
            Pattern::Nk | Pattern::Ik | Pattern::Resumed | Pattern::Shortcut => 32 + 16,
        };
        if payload.len() + overhead > super::MAX_NOISE_MESSAGE {
            return Err(Error::ApiMisuse("reply data too large for one message"));
        }
        let mut msg = vec![0u8; payload.len() + overhead];
        let n = self
            .noise
            .write_message(payload, &mut msg)
            .map_err(noise_err)?;
        let mut frame = Vec::with_capacity(3 + n);
        frame.put_u8(FRAME_REPLY);
        frame.put_vec_u16(&msg[..n]);
        let transport = self.noise.into_transport_mode().map_err(noise_err)?;
        Ok((Channel::new(transport), frame))
    }

    /// Largest `data` [`Self::reply`] accepts with these extensions.
    pub fn max_reply_data(&self, extensions: &Extensions) -> usize {
        super::MAX_NOISE_MESSAGE - 32 - 16 - 2 - extensions.encoded_len()
    }
}
