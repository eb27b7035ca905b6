//! The one thing zrtt needs from a certificate that webpki does not expose:
//! its validity period, so a record can be refused when it outlives the
//! certificate that signed it. A strict DER walk down to
//! `tbsCertificate.validity`; everything else is left to webpki.

use crate::codec::Reader;
use crate::error::InvalidMessage;
use crate::time::unix_from_civil;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const EXPLICIT_0: u8 = 0xA0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

fn tlv<'a>(r: &mut Reader<'a>) -> Result<(u8, &'a [u8]), InvalidMessage> {
    let tag = r.u8()?;
    let first = r.u8()?;
    let len = match first {
        0..=0x7f => usize::from(first),
        0x81 => {
            let l = usize::from(r.u8()?);
            if l < 0x80 {
                return Err(InvalidMessage::BadEncoding("DER length not minimal"));
            }
            l
        }
        0x82 => {
            let l = usize::from(r.u16()?);
            if l < 0x100 {
                return Err(InvalidMessage::BadEncoding("DER length not minimal"));
            }
            l
        }
        _ => return Err(InvalidMessage::BadEncoding("DER length")),
    };
    Ok((tag, r.take(len)?))
}

fn expect<'a>(r: &mut Reader<'a>, want: u8) -> Result<&'a [u8], InvalidMessage> {
    match tlv(r)? {
        (tag, v) if tag == want => Ok(v),
        _ => Err(InvalidMessage::BadEncoding(
            "unexpected DER tag in certificate",
        )),
    }
}

fn digits(s: &[u8]) -> Option<u32> {
    s.iter().try_fold(0u32, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

fn time(r: &mut Reader<'_>) -> Result<u64, InvalidMessage> {
    let bad = InvalidMessage::BadEncoding("certificate time");
    let (tag, v) = tlv(r)?;
    let (year, rest) = match (tag, v.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&v[..2]).ok_or(bad.clone())?;
            (
                i64::from(if yy >= 50 { 1900 + yy } else { 2000 + yy }),
                &v[2..],
            )
        }
        (GENERALIZED_TIME, 15) => (i64::from(digits(&v[..4]).ok_or(bad.clone())?), &v[4..]),
        _ => return Err(bad),
    };
    if rest[10] != b'Z' {
        return Err(bad);
    }
    let f = |i: usize| digits(&rest[i..i + 2]).ok_or(bad.clone());
    unix_from_civil(year, f(0)?, f(2)?, f(4)?, f(6)?, f(8)?).ok_or(bad.clone())
}

/// `(notBefore, notAfter)` of a DER certificate, seconds since the epoch.
pub fn validity(cert_der: &[u8]) -> Result<(u64, u64), InvalidMessage> {
    let mut outer = Reader::new(cert_der);
    let cert = expect(&mut outer, SEQUENCE)?;
    outer.finish()?;
    let mut c = Reader::new(cert);
    let tbs = expect(&mut c, SEQUENCE)?;
    let mut t = Reader::new(tbs);
    let (mut tag, mut _v) = tlv(&mut t)?;
    if tag == EXPLICIT_0 {
        (tag, _v) = tlv(&mut t)?;
    }
    if tag != INTEGER {
        return Err(InvalidMessage::BadEncoding("certificate serial number"));
    }
    expect(&mut t, SEQUENCE)?; // signature algorithm
    expect(&mut t, SEQUENCE)?; // issuer
    let validity = expect(&mut t, SEQUENCE)?;
    let mut v = Reader::new(validity);
    let not_before = time(&mut v)?;
    let not_after = time(&mut v)?;
    v.finish()?;
    Ok((not_before, not_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_certificates() {
        // rcgen's defaults: 1975-01-01 to 4096-01-01 (a GeneralizedTime).
        for der in [crate::testing::ed25519_cert(), crate::testing::ecdsa_cert()] {
            let (nb, na) = validity(&der).unwrap();
            assert_eq!(nb, unix_from_civil(1975, 1, 1, 0, 0, 0).unwrap());
            assert_eq!(na, unix_from_civil(4096, 1, 1, 0, 0, 0).unwrap());
        }
    }

    #[test]
    fn truncations_are_errors() {
        let der = crate::testing::ecdsa_cert();
        for cut in 0..der.len() {
            assert!(validity(&der[..cut]).is_err(), "cut at {cut}");
        }
    }
}
