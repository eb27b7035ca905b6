//! Just enough of a TLS ClientHello to find the session a client offers
//! before rustls sees it: the first PSK identity of a TLS 1.3
//! `pre_shared_key` extension (RFC 8446 §4.2.11), the only one whose
//! session may carry 0-RTT data. The I/O layer takes that session from the
//! fleet's store (an await) so that rustls's synchronous `take` finds it.
//!
//! Only an identity rustls could have issued is worth a look-up (each
//! costs a Redis round trip and leaves a tombstone): one of rustls's
//! ticket-id size ([`TICKET_ID_LEN`]), in a ClientHello that offers TLS
//! 1.3 (`supported_versions`) and `psk_dhe_ke`, the only PSK mode rustls
//! resumes with.
//!
//! Parsing never panics on peer bytes; anything unexpected means "no
//! identity" (rustls then judges the ClientHello itself).

/// Largest ClientHello buffered before rustls sees it (then the
/// connection goes on without a look-up).
pub(super) const MAX_HELLO: usize = 16 * 1024;

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SUPPORTED_VERSIONS: u16 = 43;
const PSK_KEY_EXCHANGE_MODES: u16 = 45;
const PRE_SHARED_KEY: u16 = 41;
const TLS13: [u8; 2] = [3, 4];
const PSK_DHE_KE: u8 = 1;
/// The size of rustls's ticket ids (stateful tickets: 32 random bytes).
pub(super) const TICKET_ID_LEN: usize = 32;

/// What the bytes received so far say.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Hello {
    /// The ClientHello is not complete yet.
    Partial,
    /// A complete ClientHello offering this first PSK identity, or none.
    Complete(Option<Vec<u8>>),
    /// Not a ClientHello this parser follows (rustls will say).
    Other,
}

/// Look at the TLS records received so far (`data`, from the first byte).
pub(super) fn parse(data: &[u8]) -> Hello {
    // Reassemble the handshake message from as many records as it spans.
    let mut msg = Vec::new();
    let mut rest = data;
    loop {
        if rest.len() < 5 {
            return partial(data);
        }
        if rest[0] != HANDSHAKE {
            return Hello::Other;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 {
            return Hello::Other;
        }
        let Some(fragment) = rest.get(5..5 + len) else {
            return partial(data);
        };
        msg.extend_from_slice(fragment);
        rest = &rest[5 + len..];
        if msg.len() >= 4 {
            if msg[0] != CLIENT_HELLO {
                return Hello::Other;
            }
            let body = usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]);
            if body + 4 > MAX_HELLO {
                return Hello::Other;
            }
            if msg.len() >= body + 4 {
                return Hello::Complete(first_identity(&msg[4..body + 4]));
            }
        }
    }
}

fn partial(data: &[u8]) -> Hello {
    if data.len() > MAX_HELLO + 5 * 8 {
        Hello::Other
    } else {
        Hello::Partial
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The first identity of the `pre_shared_key` extension of a ClientHello
/// body, if worth a look-up (module docs).
fn first_identity(body: &[u8]) -> Option<Vec<u8>> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    let mut exts = Reader(r.vec16()?);
    let (mut tls13, mut dhe) = (false, false);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        match u16::try_from(kind).ok()? {
            SUPPORTED_VERSIONS => {
                let versions = Reader(data).vec8()?;
                tls13 = versions.chunks_exact(2).any(|v| v == TLS13);
            }
            PSK_KEY_EXCHANGE_MODES => dhe = Reader(data).vec8()?.contains(&PSK_DHE_KE),
            // Last of the extensions (RFC 8446 §4.2.11).
            PRE_SHARED_KEY => {
                let mut psk = Reader(data);
                let mut ids = Reader(psk.vec16()?);
                let id = ids.vec16()?;
                if !tls13 || !dhe || id.len() != TICKET_ID_LEN {
                    return None;
                }
                return Some(id.to_vec());
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A ClientHello with `exts` (type, data), in records of at most `frag` bytes.
    fn hello(exts: &[(u16, Vec<u8>)], frag: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(32);
        body.extend_from_slice(&[1; 32]);
        body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1, 0];
        msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
        msg.extend_from_slice(&body);
        let mut out = Vec::new();
        for chunk in msg.chunks(frag) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn psk(ids: &[&[u8]]) -> Vec<u8> {
        let mut l = Vec::new();
        for id in ids {
            l.extend_from_slice(&(id.len() as u16).to_be_bytes());
            l.extend_from_slice(id);
            l.extend_from_slice(&[0, 0, 0, 9]);
        }
        let mut d = (l.len() as u16).to_be_bytes().to_vec();
        d.extend_from_slice(&l);
        d.extend_from_slice(&[0, 33, 32]);
        d.extend_from_slice(&[5; 32]);
        d
    }

    const T1: &[u8; 32] = b"ticket-1 ticket-1 ticket-1 ticke";
    const T2: &[u8; 32] = b"ticket-2 ticket-2 ticket-2 ticke";

    /// TLS 1.3 offered, psk_dhe_ke, then the PSK extension.
    fn resuming(ids: &[&[u8]]) -> Vec<(u16, Vec<u8>)> {
        vec![
            (0u16, vec![0, 0]),
            (43, vec![4, 3, 4, 3, 3]),
            (45, vec![1, 1]),
            (41, psk(ids)),
        ]
    }

    #[test]
    fn finds_the_first_identity_across_records() {
        let exts = resuming(&[T1, T2]);
        for frag in [7, 100, 5000] {
            let h = hello(&exts, frag);
            assert_eq!(parse(&h), Hello::Complete(Some(T1.to_vec())), "{frag}");
            for cut in 0..h.len() {
                assert_eq!(parse(&h[..cut]), Hello::Partial, "{frag} {cut}");
            }
        }
        assert_eq!(
            parse(&hello(&[(0, vec![0, 0])], 100)),
            Hello::Complete(None)
        );
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::Other);
    }

    #[test]
    fn looks_up_only_what_rustls_could_have_issued() {
        // Not rustls's ticket-id size.
        for id in [&b"ticket"[..], &[7; 31], &[7; 33], &[7; 1024]] {
            assert_eq!(parse(&hello(&resuming(&[id]), 100)), Hello::Complete(None));
        }
        // No TLS 1.3 offered, or no psk_dhe_ke (psk_ke only).
        let mut no13 = resuming(&[T1]);
        no13[1].1 = vec![2, 3, 3];
        assert_eq!(parse(&hello(&no13, 100)), Hello::Complete(None));
        let mut ke_only = resuming(&[T1]);
        ke_only[2].1 = vec![1, 0];
        assert_eq!(parse(&hello(&ke_only, 100)), Hello::Complete(None));
        let mut without_modes = resuming(&[T1]);
        without_modes.remove(2);
        assert_eq!(parse(&hello(&without_modes, 100)), Hello::Complete(None));
    }

    #[test]
    fn never_panics_on_damaged_hellos() {
        let h = hello(&resuming(&[T1]), 50);
        for i in 0..h.len() {
            for x in [0x01, 0x80, 0xff] {
                let mut bad = h.clone();
                bad[i] ^= x;
                let _ = parse(&bad);
            }
        }
        // An empty identity is no identity.
        assert_eq!(parse(&hello(&resuming(&[b""]), 100)), Hello::Complete(None));
        // A ClientHello larger than MAX_HELLO is not buffered further.
        assert_eq!(
            parse(&hello(&[(21, vec![0; MAX_HELLO])], 16_000)),
            Hello::Other
        );
    }
}
