//! The verifier protocol's two messages, sans-IO (the TCP shell is
//! `zrtt_net::verifier`):
//!
//! ```text
//! request:  "ZPV1" | client static key (32) | u32 requested seconds | u8 has_previous | [previous certificate]
//! response: u8 status (0 ok, 1 bad request, 2 no key can sign) | [certificate]
//! ```

use super::*;

/// First bytes of a verifier request.
pub const VERIFIER_REQUEST_MAGIC: &[u8; 4] = b"ZPV1";
/// Largest verifier request (with a previous IPv6 certificate).
pub const MAX_VERIFIER_REQUEST: usize = 4 + 32 + 4 + 1 + 98;
/// Response status: a certificate follows.
pub const STATUS_OK: u8 = 0;
/// Response status: the request was malformed.
pub const STATUS_BAD_REQUEST: u8 = 1;
/// Response status: the verifier has no key that can sign now.
pub const STATUS_NO_KEY: u8 = 2;

/// A client's request for a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierRequest {
    /// The static key to certify.
    pub client_static: [u8; 32],
    /// The duration the client asks for, seconds.
    pub requested_secs: u32,
    /// The certificate this verifier issued before, to be refreshed.
    pub previous: Option<Certificate>,
}

/// Why a verifier message was refused (the text is what logs show).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifierWireError {
    /// The request does not start with the magic.
    #[error("not a zrtt verifier request")]
    NotARequest,
    /// The has_previous flag is neither 0 nor 1.
    #[error("bad request flag")]
    BadFlag,
    /// The request does not decode.
    #[error("malformed verifier request")]
    Malformed,
    /// The previous certificate does not decode, or bytes follow it.
    #[error("bad previous certificate")]
    BadPrevious,
    /// The response's certificate does not decode.
    #[error("verifier sent a malformed certificate")]
    BadCertificate,
    /// The response says the verifier has no key that can sign now.
    #[error("verifier has no key that can sign now")]
    NoKey,
    /// The response is empty or refuses the request.
    #[error("verifier refused the request")]
    Refused,
}

impl VerifierRequest {
    /// Wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut req = Vec::with_capacity(MAX_VERIFIER_REQUEST);
        req.extend_from_slice(VERIFIER_REQUEST_MAGIC);
        req.extend_from_slice(&self.client_static);
        req.put_u32(self.requested_secs);
        match &self.previous {
            Some(p) => {
                req.put_u8(1);
                p.encode(&mut req);
            }
            None => req.put_u8(0),
        }
        req
    }

    /// Decode a request read so far: `Ok(None)` while it is incomplete.
    pub fn decode(b: &[u8]) -> Result<Option<Self>, VerifierWireError> {
        let mut r = Reader::new(b);
        let parsed = (|| {
            if r.take(4)? != VERIFIER_REQUEST_MAGIC {
                return Ok(Err(VerifierWireError::NotARequest));
            }
            let client_static = r.array::<32>()?;
            let requested_secs = r.u32()?;
            let previous = match r.u8()? {
                0 => None,
                1 => match decode_one(r.rest()) {
                    Ok(c) => Some(c),
                    Err(ProvenanceError::Malformed(e @ InvalidMessage::Truncated { .. })) => {
                        return Err(e)
                    }
                    Err(_) => return Ok(Err(VerifierWireError::BadPrevious)),
                },
                _ => return Ok(Err(VerifierWireError::BadFlag)),
            };
            Ok(Ok(Self {
                client_static,
                requested_secs,
                previous,
            }))
        })();
        match parsed {
            Ok(Ok(req)) => Ok(Some(req)),
            Ok(Err(e)) => Err(e),
            Err(InvalidMessage::Truncated { .. }) => Ok(None),
            Err(_) => Err(VerifierWireError::Malformed),
        }
    }
}

/// One certificate and nothing after it.
fn decode_one(bytes: &[u8]) -> Result<Certificate, ProvenanceError> {
    let mut r = Reader::new(bytes);
    let c = Certificate::decode(&mut r)?;
    r.finish()?;
    Ok(c)
}

/// A successful response carrying `cert`.
pub fn encode_verifier_response(cert: &Certificate) -> Vec<u8> {
    let mut out = vec![STATUS_OK];
    cert.encode(&mut out);
    out
}

/// Decode a whole response (the verifier closes the connection after it).
pub fn decode_verifier_response(b: &[u8]) -> Result<Certificate, VerifierWireError> {
    match b.split_first() {
        Some((&STATUS_OK, cert)) => decode_one(cert).map_err(|_| VerifierWireError::BadCertificate),
        Some((&STATUS_NO_KEY, _)) => Err(VerifierWireError::NoKey),
        _ => Err(VerifierWireError::Refused),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cert() -> Certificate {
        Certificate {
            verifier_id: 7,
            address: IpAddr::from([198, 18, 0, 1]),
            start: 1,
            duration: 2,
            signature: [3; 64],
        }
    }

    #[test]
    fn requests_decode_incrementally_and_refuse_what_is_not_one() {
        let first = VerifierRequest {
            client_static: [7; 32],
            requested_secs: 3600,
            previous: None,
        };
        let refresh = VerifierRequest {
            previous: Some(cert()),
            ..first.clone()
        };
        for req in [&first, &refresh] {
            let b = req.encode();
            assert!(b.len() <= MAX_VERIFIER_REQUEST);
            for cut in 0..b.len() {
                assert_eq!(VerifierRequest::decode(&b[..cut]), Ok(None), "cut {cut}");
            }
            assert_eq!(VerifierRequest::decode(&b), Ok(Some(req.clone())));
        }
        let mut b = first.encode();
        b[0] = b'X';
        assert_eq!(
            VerifierRequest::decode(&b),
            Err(VerifierWireError::NotARequest)
        );
        let mut b = first.encode();
        *b.last_mut().unwrap() = 2;
        assert_eq!(VerifierRequest::decode(&b), Err(VerifierWireError::BadFlag));
        let mut b = refresh.encode();
        b.push(0);
        assert_eq!(
            VerifierRequest::decode(&b),
            Err(VerifierWireError::BadPrevious)
        );
        let mut b = refresh.encode();
        b[41] = 9; // certificate version
        assert_eq!(
            VerifierRequest::decode(&b),
            Err(VerifierWireError::BadPrevious)
        );
    }

    #[test]
    fn responses() {
        let r = encode_verifier_response(&cert());
        assert_eq!(decode_verifier_response(&r), Ok(cert()));
        assert_eq!(
            decode_verifier_response(&r[..r.len() - 1]),
            Err(VerifierWireError::BadCertificate)
        );
        assert_eq!(
            decode_verifier_response(&[STATUS_NO_KEY]),
            Err(VerifierWireError::NoKey)
        );
        assert_eq!(
            decode_verifier_response(&[STATUS_BAD_REQUEST]),
            Err(VerifierWireError::Refused)
        );
        assert_eq!(
            decode_verifier_response(&[]),
            Err(VerifierWireError::Refused)
        );
    }
}
