//! Resumption tickets (docs/PROTOCOL.md §12): what a Reply hands a client
//! so its next first flight can skip the semi-static DH (Noise `NNpsk0`).
//!
//! ```text
//! ticket  = key_id (4) || salt (16) || ChaCha20-Poly1305(seal key, nonce 0,
//!           aad = "zrtt ticket v2" || key_id,
//!           psk (32) || issued_s u64 || lifetime_s u32
//!           || semi_static_key_id u32 || semi_static_public (32)
//!           || cert_sha256 (32) || u8 len || name
//!           || u8 family (4|6) || address (4|16))
//! grant   = u32 lifetime_s || psk (32) || ticket        (reply extension 4)
//! ticket key = HKDF-SHA256(salt "", token key, "zrtt resumption ticket key v1")
//! seal key   = HKDF-SHA256(salt, ticket key, "zrtt ticket seal v2")
//! ```
//!
//! The server keeps nothing: `psk` lives in the sealed ticket and in the
//! encrypted Reply. The ticket key is derived from the fleet's rotating
//! token key ([`crate::admission::TokenKey`]) and carries its id, so every
//! gateway of a fleet opens every ticket and rotation comes with the
//! token keys. Each ticket is sealed under its own key (a fresh random
//! salt), so the nonce is fixed and no nonce-collision bound applies.
//!
//! A ticket names the semi-static key its issuing flight was accepted
//! under ([`KeyBinding`]): only a server holding that key accepts it, and
//! servers holding one semi-static key share one replay filter
//! (docs/PROTOCOL.md §7), so a resumed flight is accepted once across
//! every server that can accept it (§12.3).

use core::fmt;
use std::net::IpAddr;

use ring::aead::{self, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use zeroize::Zeroizing;

use crate::codec::{Put, Reader};
use crate::crypto::SecureRandom;
use crate::error::{Error, InvalidMessage};
use crate::record::VerifiedKeyRecord;
use crate::time::UnixTime;

/// Largest ticket accepted in a first flight.
pub const MAX_TICKET_LEN: usize = 512;
/// Smallest ticket accepted in a first flight (key id, nonce, tag and a
/// little; a ticket for a 15-byte name and IPv4 is 129 bytes).
pub const MIN_TICKET_LEN: usize = 32;
/// Associated-data label of a sealed ticket.
const TICKET_AAD: &[u8] = b"zrtt ticket v2";
/// HKDF info deriving a ticket's own seal key from the ticket key and the
/// ticket's salt.
const TICKET_SEAL_LABEL: &[u8] = b"zrtt ticket seal v2";
/// Bytes of the random salt each ticket carries.
pub const TICKET_SALT_LEN: usize = 16;
/// Longest a client keeps a ticket, whatever the grant says (RFC 8446
/// §4.6.1's seven days: a ticket outliving the token keys that seal it is
/// refused anyway, and a server that grants longer is misconfigured or
/// lying; the cap bounds how long a stolen state file stays useful).
pub const MAX_TICKET_LIFETIME_SECS: u32 = 7 * 24 * 3600;
/// HKDF info deriving the ticket key from a token key.
pub const TICKET_KEY_LABEL: &[u8] = b"zrtt resumption ticket key v1";
/// Bytes the grant adds before the ticket: lifetime and psk.
const GRANT_PREFIX: usize = 4 + 32;

/// Why a resumption ticket was refused (Reject 9 on the wire; the detail
/// is for logs and metrics only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// This server does not resume (no ticket keys).
    #[error("resumption is off")]
    Off,
    /// Sealed under a key this server does not hold (retired, another fleet's).
    #[error("ticket sealed under an unknown key")]
    UnknownKey,
    /// Does not open (altered, or not a ticket).
    #[error("ticket does not open")]
    Invalid,
    /// Past its lifetime.
    #[error("ticket expired")]
    Expired,
    /// No live key record of this server has the ticket's name and
    /// certificate hash (another site's ticket, or the certificate changed).
    #[error("ticket bound to a site this server does not serve now")]
    WrongSite,
    /// This server does not hold the semi-static key the ticket was issued
    /// under (another replay domain, or a retired key).
    #[error("ticket bound to a semi-static key this server does not hold")]
    WrongKey,
}

/// The semi-static key a ticket's issuing flight was accepted under: only
/// servers holding it (which share a replay filter, docs/PROTOCOL.md §7)
/// accept the ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyBinding {
    /// The key record's id.
    pub key_id: u32,
    /// The key's X25519 public key.
    pub public_key: [u8; 32],
}

/// The site a ticket is good for: the name and certificate hash of the
/// key record its issuing connection was made under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteBinding {
    /// The site's DNS name (the record's `name`).
    pub name: String,
    /// SHA-256 of the certificate that signed the record.
    pub cert_sha256: [u8; 32],
}

impl SiteBinding {
    /// The binding of a verified record.
    pub fn of(record: &VerifiedKeyRecord) -> Self {
        let body = record.body();
        Self {
            name: body.name.clone(),
            cert_sha256: body.cert_sha256,
        }
    }

    /// Whether `record` is for this site under the same certificate.
    pub fn matches(&self, record: &VerifiedKeyRecord) -> bool {
        let body = record.body();
        body.name.eq_ignore_ascii_case(&self.name) && body.cert_sha256 == self.cert_sha256
    }
}

/// What a sealed ticket holds.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketContents {
    /// The pre-shared key of the resumed handshake.
    pub psk: Zeroizing<[u8; 32]>,
    /// When it was issued (Unix seconds).
    pub issued_secs: u64,
    /// How long it lives (seconds).
    pub lifetime_secs: u32,
    /// The site it is good for.
    pub binding: SiteBinding,
    /// The semi-static key it was issued under (its replay domain).
    pub key: KeyBinding,
    /// The client's source address at issue (§12.5).
    pub address: IpAddr,
}

impl fmt::Debug for TicketContents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketContents")
            .field("psk", &"<redacted>")
            .field("issued_secs", &self.issued_secs)
            .field("lifetime_secs", &self.lifetime_secs)
            .field("binding", &self.binding)
            .field("key_id", &format_args!("{:08x}", self.key.key_id))
            .field("address", &self.address)
            .finish()
    }
}

impl TicketContents {
    /// Whether it has expired at `now`.
    pub fn expired(&self, now: UnixTime) -> bool {
        now.as_secs()
            >= self
                .issued_secs
                .saturating_add(u64::from(self.lifetime_secs))
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + 8 + 4 + 36 + 32 + 1 + self.binding.name.len() + 17);
        out.extend_from_slice(&self.psk[..]);
        out.put_u64(self.issued_secs);
        out.put_u32(self.lifetime_secs);
        out.put_u32(self.key.key_id);
        out.extend_from_slice(&self.key.public_key);
        out.extend_from_slice(&self.binding.cert_sha256);
        out.put_vec_u8(self.binding.name.as_bytes());
        match crate::admission::canonical_ip(self.address) {
            IpAddr::V4(a) => {
                out.put_u8(4);
                out.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out.put_u8(6);
                out.extend_from_slice(&a.octets());
            }
        }
        out
    }

    fn decode(plain: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(plain);
        let psk = Zeroizing::new(r.array::<32>()?);
        let issued_secs = r.u64()?;
        let lifetime_secs = r.u32()?;
        let key = KeyBinding {
            key_id: r.u32()?,
            public_key: r.array::<32>()?,
        };
        let cert_sha256 = r.array::<32>()?;
        let name = String::from_utf8(r.vec_u8()?.to_vec())
            .map_err(|_| InvalidMessage::InvalidField("ticket name"))?;
        let address = match r.u8()? {
            4 => IpAddr::from(r.array::<4>()?),
            6 => IpAddr::from(r.array::<16>()?),
            _ => return Err(InvalidMessage::InvalidField("ticket address family")),
        };
        r.finish()?;
        Ok(Self {
            psk,
            issued_secs,
            lifetime_secs,
            binding: SiteBinding { name, cert_sha256 },
            key,
            address,
        })
    }
}

/// The key id a ticket names (its first four bytes), if it is long enough
/// to be a ticket at all.
pub fn ticket_key_id(ticket: &[u8]) -> Option<u32> {
    if ticket.len() < MIN_TICKET_LEN || ticket.len() > MAX_TICKET_LEN {
        return None;
    }
    Some(u32::from_be_bytes([
        ticket[0], ticket[1], ticket[2], ticket[3],
    ]))
}

/// A key that seals and opens tickets; one per token key. Each ticket is
/// sealed under its own key derived from this one and the ticket's salt.
pub struct TicketKey {
    id: u32,
    secret: Zeroizing<[u8; 32]>,
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKey")
            .field("id", &format_args!("{:08x}", self.id))
            .field("key", &"<redacted>")
            .finish()
    }
}

impl TicketKey {
    /// The ticket key of the token key `token_secret` whose id is `id`.
    pub fn derive(token_secret: &[u8; 32], id: u32) -> Self {
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(token_secret);
        let mut secret = Zeroizing::new([0u8; 32]);
        prk.expand(&[TICKET_KEY_LABEL], ring::hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut secret[..]))
            .unwrap_or_else(|_| unreachable!("32 bytes is within HKDF-SHA256's output limit"));
        Self { id, secret }
    }

    /// The seal key of the ticket whose salt is `salt`:
    /// HKDF-SHA256(salt, ticket key, "zrtt ticket seal v2").
    fn seal_key(&self, salt: &[u8]) -> LessSafeKey {
        let mut secret = Zeroizing::new([0u8; 32]);
        ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, salt)
            .extract(&self.secret[..])
            .expand(&[TICKET_SEAL_LABEL], ring::hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut secret[..]))
            .unwrap_or_else(|_| unreachable!("32 bytes is within HKDF-SHA256's output limit"));
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &secret[..])
            .unwrap_or_else(|_| unreachable!("32 bytes is the ChaCha20-Poly1305 key length"));
        LessSafeKey::new(unbound)
    }

    /// The key's id, carried in its tickets.
    pub fn id(&self) -> u32 {
        self.id
    }

    fn aad(&self) -> [u8; 18] {
        let mut aad = [0u8; 18];
        aad[..14].copy_from_slice(TICKET_AAD);
        aad[14..].copy_from_slice(&self.id.to_be_bytes());
        aad
    }

    /// Seal `contents` into a ticket (under its own key: a fresh salt).
    pub fn seal(
        &self,
        contents: &TicketContents,
        rng: &dyn SecureRandom,
    ) -> Result<Vec<u8>, Error> {
        let mut salt = [0u8; TICKET_SALT_LEN];
        rng.fill(&mut salt)?;
        let mut body = Zeroizing::new(contents.encode());
        let mut sealed = Vec::with_capacity(4 + TICKET_SALT_LEN + body.len() + 16);
        sealed.put_u32(self.id);
        sealed.extend_from_slice(&salt);
        // The seal key seals this ticket only: a fixed nonce is unique.
        self.seal_key(&salt)
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key([0u8; NONCE_LEN]),
                aead::Aad::from(self.aad()),
                &mut *body,
            )
            .map_err(|_| Error::ApiMisuse("ticket too large to seal"))?;
        sealed.extend_from_slice(&body);
        if sealed.len() > MAX_TICKET_LEN {
            return Err(Error::ApiMisuse("ticket exceeds MAX_TICKET_LEN"));
        }
        Ok(sealed)
    }

    /// Open a ticket this key sealed (expiry and binding are the caller's).
    pub fn open(&self, ticket: &[u8]) -> Result<TicketContents, TicketError> {
        match ticket_key_id(ticket) {
            Some(id) if id == self.id => {}
            Some(_) => return Err(TicketError::UnknownKey),
            None => return Err(TicketError::Invalid),
        }
        let (salt, sealed) = ticket[4..].split_at(TICKET_SALT_LEN);
        let mut buf = Zeroizing::new(sealed.to_vec());
        let plain = self
            .seal_key(salt)
            .open_in_place(
                Nonce::assume_unique_for_key([0u8; NONCE_LEN]),
                aead::Aad::from(self.aad()),
                &mut buf[..],
            )
            .map_err(|_| TicketError::Invalid)?;
        TicketContents::decode(plain).map_err(|_| TicketError::Invalid)
    }
}

/// Reply extension 4: `u32 lifetime_s || psk || ticket`.
pub fn encode_grant(contents: &TicketContents, ticket: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(GRANT_PREFIX + ticket.len());
    out.put_u32(contents.lifetime_secs);
    out.extend_from_slice(&contents.psk[..]);
    out.extend_from_slice(ticket);
    out
}

/// A ticket as a client keeps it: the opaque ticket, its `psk`, when it
/// expires and the site it is good for. Used once ([`Self`] is consumed by
/// [`super::ClientHandshake::resume`]).
#[derive(Clone, PartialEq, Eq)]
pub struct ResumptionTicket {
    ticket: Vec<u8>,
    psk: Zeroizing<[u8; 32]>,
    expires: UnixTime,
    binding: SiteBinding,
}

impl fmt::Debug for ResumptionTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumptionTicket")
            .field("ticket_len", &self.ticket.len())
            .field("psk", &"<redacted>")
            .field("expires", &self.expires)
            .field("binding", &self.binding)
            .finish()
    }
}

impl ResumptionTicket {
    /// Read a grant (reply extension 4) received for `binding`; it expires
    /// `lifetime_s` (at most [`MAX_TICKET_LIFETIME_SECS`]) after `sent`
    /// (the client's time when it sent the flight, so a little before the
    /// server's expiry).
    pub fn from_grant(
        grant: &[u8],
        binding: SiteBinding,
        sent: UnixTime,
    ) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(grant);
        let lifetime = r.u32()?.min(MAX_TICKET_LIFETIME_SECS);
        let psk = Zeroizing::new(r.array::<32>()?);
        let ticket = r.rest().to_vec();
        if ticket_key_id(&ticket).is_none() {
            return Err(InvalidMessage::InvalidField("ticket length"));
        }
        Ok(Self {
            ticket,
            psk,
            expires: sent.saturating_add(core::time::Duration::from_secs(u64::from(lifetime))),
            binding,
        })
    }

    /// The opaque ticket bytes.
    pub fn ticket(&self) -> &[u8] {
        &self.ticket
    }

    pub(crate) fn psk(&self) -> &[u8; 32] {
        &self.psk
    }

    /// When it expires.
    pub fn expires(&self) -> UnixTime {
        self.expires
    }

    /// The site it is good for.
    pub fn binding(&self) -> &SiteBinding {
        &self.binding
    }

    /// Whether it may be used at `now` with `record` (the client's current
    /// verified record for the origin): not expired, same name and
    /// certificate.
    pub fn usable(&self, record: &VerifiedKeyRecord, now: UnixTime) -> bool {
        now < self.expires && self.binding.matches(record)
    }

    /// The stored form (for the client's state file):
    /// `u64 expires_ms || cert_sha256 || u8 len || name || psk || u16 len || ticket`.
    pub fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(
            8 + 32 + 1 + 32 + 2 + self.ticket.len() + 64,
        ));
        out.put_u64(self.expires.as_millis());
        out.extend_from_slice(&self.binding.cert_sha256);
        out.put_vec_u8(self.binding.name.as_bytes());
        out.extend_from_slice(&self.psk[..]);
        out.put_vec_u16(&self.ticket);
        out
    }

    /// Read the stored form back.
    pub fn decode(bytes: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(bytes);
        let expires = UnixTime::from_millis(r.u64()?);
        let cert_sha256 = r.array::<32>()?;
        let name = String::from_utf8(r.vec_u8()?.to_vec())
            .map_err(|_| InvalidMessage::InvalidField("ticket name"))?;
        let psk = Zeroizing::new(r.array::<32>()?);
        let ticket = r.vec_u16()?.to_vec();
        r.finish()?;
        if ticket_key_id(&ticket).is_none() {
            return Err(InvalidMessage::InvalidField("ticket length"));
        }
        Ok(Self {
            ticket,
            psk,
            expires,
            binding: SiteBinding { name, cert_sha256 },
        })
    }
}
