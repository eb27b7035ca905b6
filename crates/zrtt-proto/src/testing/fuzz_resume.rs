//! Fuzz entry point of resumption tickets (docs/PROTOCOL.md §12): the
//! client's stored form and grants, the server's ticket opening, the
//! plaintext behind the ticket AEAD, and mutated resumed flights.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use super::*;
use crate::admission::TokenKeyRing;
use crate::handshake::resume::{TicketContents, MAX_TICKET_LEN};
use crate::handshake::{ClientHandshake, ClientParams, ResumptionTicket, SiteBinding, TicketError};

/// The fixture's vector server with the fixture's token keys resuming.
pub fn fuzz_resuming_server() -> &'static ServerConfig {
    static S: OnceLock<ServerConfig> = OnceLock::new();
    S.get_or_init(|| {
        let mut s = vector_server();
        s.resumption = Some(TokenKeyRing::new(fuzz_token_keys()));
        s
    })
}

/// A ticket the fixture server grants to [`FUZZ_PEER`] at [`fuzz_now`].
pub fn fuzz_ticket() -> ResumptionTicket {
    fuzz_ticket_with(3)
}

/// As [`fuzz_ticket`], its `psk` and nonce drawn from `rng(seed)`.
pub fn fuzz_ticket_with(seed: u8) -> ResumptionTicket {
    let f = fuzz_fixture();
    let server = fuzz_resuming_server();
    let mut params = ClientParams::default();
    params.request_ticket();
    let (client, flight) =
        ClientHandshake::start(&f.record, &params, b"", fuzz_now(), &rng(1)).unwrap();
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    let acc = server
        .accept(
            &frame,
            Transport::Tcp,
            fuzz_now(),
            &mut NoReplayFilter,
            &rng(2),
        )
        .unwrap();
    let grant = server
        .grant_ticket(&acc, FUZZ_PEER, fuzz_now(), &rng(seed))
        .unwrap()
        .unwrap();
    let mut exts = crate::handshake::Extensions::new();
    exts.set(crate::handshake::ext::RESUMPTION, grant);
    let (_, reply) = acc.reply(&exts, b"").unwrap();
    let (frame, _) = read_frame(&reply, Expect::ReplyOrReject).unwrap().unwrap();
    client.handle_reply(&frame).unwrap().ticket.unwrap()
}

/// Mode byte, then: 0, arbitrary bytes as a stored ticket, a grant and a
/// presented ticket (never a panic; what decodes re-encodes to the same
/// value); 1, `nonce (12) || plaintext` sealed under the fixture's ticket
/// key, so the parser behind the AEAD is reached (what opens seals and
/// opens again to the same contents); 2, `(u16 pos || u8 xor)*` applied to
/// a real resumed flight, which the resuming server must refuse or accept
/// without panicking (unmodified: accepted).
pub fn ticket(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let f = fuzz_fixture();
    let keys = &f.tokens;
    match mode % 3 {
        0 => {
            if let Ok(t) = ResumptionTicket::decode(rest) {
                assert_eq!(ResumptionTicket::decode(&t.encode()).unwrap(), t);
            }
            let binding = SiteBinding::of(&f.record);
            if let Ok(t) = ResumptionTicket::from_grant(rest, binding, fuzz_now()) {
                assert!(t.ticket().len() <= MAX_TICKET_LEN);
                assert_eq!(ResumptionTicket::decode(&t.encode()).unwrap(), t);
            }
            if let Some(id) = crate::handshake::resume::ticket_key_id(rest) {
                match keys.ticket_key(id) {
                    Some(k) => {
                        let _ = k.open(rest);
                    }
                    None => {
                        let r = keys.current().ticket_key().open(rest);
                        assert_eq!(r, Err(TicketError::UnknownKey));
                    }
                }
            }
        }
        1 => {
            use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
            if rest.len() < 12 {
                return;
            }
            let (nonce, pt) = rest.split_at(12);
            let tk = keys.current().ticket_key();
            let id = tk.id();
            // The ticket key, derived here as the spec says, independently.
            let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&[1; 32]);
            let mut secret = [0u8; 32];
            prk.expand(
                &[crate::handshake::resume::TICKET_KEY_LABEL],
                ring::hkdf::HKDF_SHA256,
            )
            .unwrap()
            .fill(&mut secret)
            .unwrap();
            let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &secret).unwrap());
            let mut aad = b"zrtt ticket v1".to_vec();
            aad.extend_from_slice(&id.to_be_bytes());
            let mut sealed = pt.to_vec();
            key.seal_in_place_append_tag(
                Nonce::try_assume_unique_for_key(nonce).unwrap(),
                Aad::from(&aad),
                &mut sealed,
            )
            .unwrap();
            let mut t = id.to_be_bytes().to_vec();
            t.extend_from_slice(nonce);
            t.extend_from_slice(&sealed);
            match tk.open(&t) {
                Ok(contents) => {
                    let again = tk.seal(&contents, &rng(4)).unwrap();
                    let back: TicketContents = tk.open(&again).unwrap();
                    assert_eq!(back, contents);
                }
                Err(e) => assert!(
                    e == TicketError::Invalid,
                    "a ticket under a held key opens or is invalid: {e:?}"
                ),
            }
        }
        _ => {
            static FLIGHT: OnceLock<Vec<u8>> = OnceLock::new();
            let flight = FLIGHT.get_or_init(|| {
                let mut params = ClientParams::default();
                params.request_ticket();
                ClientHandshake::resume(
                    &f.record,
                    fuzz_ticket(),
                    &params,
                    b"GET / HTTP/1.1\r\n\r\n",
                    fuzz_now(),
                    &rng(5),
                )
                .unwrap()
                .1
            });
            let mut bytes = flight.clone();
            for edit in rest.chunks_exact(3) {
                let pos = usize::from(u16::from_be_bytes([edit[0], edit[1]])) % bytes.len();
                bytes[pos] ^= edit[2];
            }
            let server = fuzz_resuming_server();
            if let Ok(Some((frame, _))) = read_frame(&bytes, Expect::FirstFlight) {
                let r = server.accept(
                    &frame,
                    Transport::Tcp,
                    fuzz_now(),
                    &mut NoReplayFilter,
                    &rng(6),
                );
                if bytes == *flight {
                    assert!(r.is_ok(), "the unmodified flight is accepted");
                }
            }
        }
    }
}
