//! From answers to verified keys: decode the HTTPS `key65380`, TXT and
//! AAAA-tunnel encodings, find the certificate that signs each record
//! (pinned, or TLSA `3 0 0` chaining to the roots), verify, and say why
//! anything was refused.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

use hickory_proto::rr::{RData, RecordType};
use zrtt_proto::record::encodings::{self, SvcbRdata, SVC_IPV6HINT};
use zrtt_proto::record::{self, KeyRecord, VerifiedKeyRecord};
use zrtt_proto::{RecordError, UnixTime};

use super::cache::{Answer, Fetched};
use super::{rdata_bytes, Resolved, Trust};

/// Where a key record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// The HTTPS record's `key65380` SvcParam at the host name.
    Https,
    /// A `v=zrtt1` TXT record at the host name.
    Txt,
    /// The AAAA tunnel at `zrtt-tunnel.<host>`.
    AaaaTunnel,
    /// A `v=zrttpv1` TXT record at `_zrttpv.<verifier name>`.
    VerifierTxt,
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoding::Https => "HTTPS key65380",
            Encoding::Txt => "TXT",
            Encoding::AaaaTunnel => "AAAA tunnel",
            Encoding::VerifierTxt => "TXT at _zrttpv",
        })
    }
}

/// What a [`RecordRefusal`] is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// One key record.
    Key {
        /// Its key id.
        key_id: u32,
        /// Where it came from.
        encoding: Encoding,
    },
    /// A whole encoding (it did not decode, or its lookup failed).
    Encoding(Encoding),
    /// A certificate from TLSA (first 4 bytes of its SHA-256, hex).
    Certificate(String),
    /// One verifier key record.
    VerifierKey {
        /// Its verifier id.
        verifier_id: u32,
    },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Key { key_id, encoding } => write!(f, "key {key_id:#010x} ({encoding})"),
            Refused::Encoding(e) => write!(f, "{e}"),
            Refused::Certificate(h) => write!(f, "TLSA certificate {h}"),
            Refused::VerifierKey { verifier_id } => {
                write!(f, "verifier key {verifier_id:08x}")
            }
        }
    }
}

/// Why something was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The record did not decode or did not verify (signature, name,
    /// certificate hash, validity…).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The certificate that signs the record is neither pinned nor published
    /// as TLSA `3 0 0`.
    #[error("its certificate (sha256 {0}…) is neither pinned nor in TLSA")]
    NoCertificate(String),
    /// The certificate that signs the record did not pass the chain check.
    #[error("its certificate is not trusted: {0}")]
    Untrusted(String),
    /// A TLSA certificate did not chain to the CA roots or does not cover
    /// the host.
    #[error("{0}")]
    Chain(String),
    /// Another record that verifies under the same key id has different
    /// content; neither is used.
    #[error("duplicate key id with different content")]
    DuplicateKeyId,
    /// The lookup for this encoding failed.
    #[error("lookup failed: {0}")]
    Lookup(String),
}

/// One refused record, encoding or certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRefusal {
    /// What.
    pub what: Refused,
    /// Why.
    pub reason: RefusalReason,
}

impl std::fmt::Display for RecordRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.reason)
    }
}

/// Per-type answers of one host resolution (`None`: not asked).
pub(super) struct Gathered {
    pub(super) https: Option<Fetched>,
    pub(super) a: Option<Fetched>,
    pub(super) aaaa: Option<Fetched>,
    pub(super) tlsa: Option<Fetched>,
    pub(super) txt: Option<Fetched>,
    pub(super) tunnel: Option<Fetched>,
}

/// Whether the HTTPS answer carries no decodable zrtt records, so the
/// fallback encodings are needed.
pub(super) fn needs_fallback(https: Option<&Fetched>) -> bool {
    let Some(Ok(Answer::Records(rds))) = https else {
        return true;
    };
    !rds.iter().any(|rd| {
        rdata_bytes(rd)
            .and_then(|b| SvcbRdata::decode(&b).ok())
            .is_some_and(|s| matches!(s.zrtt_records(), Ok(Some(_))))
    })
}

/// A certificate that may sign records: its SHA-256, DER, and whether it is
/// trusted (or why not).
struct Cert {
    sha256: [u8; 32],
    der: Vec<u8>,
    trusted: Result<(), String>,
}

/// The certificates that may sign a name's records.
pub(super) struct Certs(Vec<Cert>);

impl Certs {
    /// The pinned certificate, or the TLSA `3 0 0` certificates in `tlsa`
    /// with whether each chains to the roots of `trust` (TLSA `2 0 0` serve
    /// as intermediates) and covers `name`. Unusable TLSA records are added
    /// to `refused`.
    pub(super) fn gather(
        trust: &Trust,
        name: &str,
        tlsa: &[RData],
        pinned: Option<Vec<u8>>,
        now: UnixTime,
        refused: &mut Vec<RecordRefusal>,
    ) -> Self {
        if let Some(der) = pinned {
            return Self(vec![Cert {
                sha256: record::sha256(&der),
                der,
                trusted: Ok(()),
            }]);
        }
        let mut ee: Vec<Vec<u8>> = Vec::new();
        let mut inter: Vec<Vec<u8>> = Vec::new();
        for rd in tlsa {
            let Some(bytes) = rdata_bytes(rd) else {
                continue;
            };
            match bytes.get(..3) {
                Some([2, 0, 0]) => inter.push(bytes[3..].to_vec()),
                Some([3, 0, 0]) => match encodings::decode_tlsa_rdata(&bytes) {
                    Ok(der) => ee.push(der.to_vec()),
                    Err(e) => refused.push(RecordRefusal {
                        what: Refused::Certificate(short_hash(&bytes[3..])),
                        reason: RefusalReason::Record(e),
                    }),
                },
                _ => {}
            }
        }
        let mut certs = Vec::new();
        for der in ee {
            let trusted = trust.check(&der, &inter, name, now);
            if let Err(e) = &trusted {
                refused.push(RecordRefusal {
                    what: Refused::Certificate(short_hash(&der)),
                    reason: RefusalReason::Chain(e.clone()),
                });
            }
            certs.push(Cert {
                sha256: record::sha256(&der),
                der,
                trusted,
            });
        }
        Self(certs)
    }

    /// `verify` run with the certificate whose hash is `cert_sha256`, if
    /// there is one and it is trusted.
    pub(super) fn verify<V>(
        &self,
        cert_sha256: &[u8; 32],
        verify: impl FnOnce(&[u8]) -> Result<V, RecordError>,
    ) -> Result<V, RefusalReason> {
        match self.0.iter().find(|c| &c.sha256 == cert_sha256) {
            None => Err(RefusalReason::NoCertificate(record::hex(&cert_sha256[..4]))),
            Some(Cert {
                trusted: Err(e), ..
            }) => Err(RefusalReason::Untrusted(e.clone())),
            Some(Cert { der, .. }) => verify(der).map_err(RefusalReason::Record),
        }
    }

    /// The certificate with hash `first` (the one that signs the first
    /// key), else the first trusted one.
    pub(super) fn signing(&self, first: Option<&[u8; 32]>) -> Option<Vec<u8>> {
        first
            .and_then(|h| self.0.iter().find(|c| &c.sha256 == h))
            .or_else(|| self.0.iter().find(|c| c.trusted.is_ok()))
            .map(|c| c.der.clone())
    }
}

/// Two different verified records under one id: neither is safe to use.
/// Removes every key whose id another key in `keys` has too, refusing it
/// as `what` says.
pub(super) fn refuse_duplicate_ids<K>(
    keys: &mut Vec<K>,
    id: impl Fn(&K) -> u32,
    what: impl Fn(&K) -> Refused,
    refused: &mut Vec<RecordRefusal>,
) {
    let dup: Vec<u32> = keys
        .iter()
        .enumerate()
        .filter(|(i, k)| keys[..*i].iter().any(|p| id(p) == id(k)))
        .map(|(_, k)| id(k))
        .collect();
    keys.retain(|k| {
        let d = dup.contains(&id(k));
        if d {
            refused.push(RecordRefusal {
                what: what(k),
                reason: RefusalReason::DuplicateKeyId,
            });
        }
        !d
    });
}

/// The records of one answer, noting a failed lookup in `failed`.
pub(super) fn records(
    t: RecordType,
    r: &Option<Fetched>,
    failed: &mut Vec<(RecordType, super::LookupError)>,
) -> Vec<RData> {
    match r {
        Some(Ok(Answer::Records(v))) => v.clone(),
        Some(Ok(Answer::Negative)) | None => Vec::new(),
        Some(Err(e)) => {
            failed.push((t, e.clone()));
            Vec::new()
        }
    }
}

/// Build the result of a host resolution from per-type answers: decode,
/// check certificates, verify records.
pub(super) fn assemble(
    trust: &Trust,
    host: &str,
    now: UnixTime,
    g: Gathered,
    pinned: Option<Vec<u8>>,
    lookups: usize,
    t0: Instant,
) -> Resolved {
    let mut refused = Vec::new();
    let mut failed = Vec::new();
    let https = records(RecordType::HTTPS, &g.https, &mut failed);
    let a = records(RecordType::A, &g.a, &mut failed);
    let aaaa = records(RecordType::AAAA, &g.aaaa, &mut failed);
    let tlsa = records(RecordType::TLSA, &g.tlsa, &mut failed);
    let txt = records(RecordType::TXT, &g.txt, &mut failed);
    let tunnel = records(RecordType::AAAA, &g.tunnel, &mut failed);
    for (enc, r) in [
        (Encoding::Https, &g.https),
        (Encoding::Txt, &g.txt),
        (Encoding::AaaaTunnel, &g.tunnel),
    ] {
        if let Some(Err(e)) = r {
            refused.push(RecordRefusal {
                what: Refused::Encoding(enc),
                reason: RefusalReason::Lookup(e.to_string()),
            });
        }
    }

    // Addresses.
    let mut addrs: Vec<IpAddr> = Vec::new();
    for rd in a.iter().chain(&aaaa) {
        match rd {
            RData::A(x) => addrs.push(IpAddr::V4(x.0)),
            RData::AAAA(x) => addrs.push(IpAddr::V6(x.0)),
            _ => {}
        }
    }

    // Candidate records: HTTPS first, then the fallbacks.
    let (mut cands, hints) = https_candidates(&https, &mut refused);
    if addrs.is_empty() {
        addrs = hints;
    }
    cands.extend(fallback_candidates(&txt, &tunnel, &mut refused));

    // Certificates: pinned, or TLSA 3 0 0 that chains to the roots.
    let certs = Certs::gather(trust, host, &tlsa, pinned, now, &mut refused);

    // Verify each candidate against its certificate. The same record in
    // two encodings counts once; a forged copy under a genuine key id
    // fails on its own and does not shadow the genuine one.
    let mut keys: Vec<(VerifiedKeyRecord, Encoding)> = Vec::new();
    for (i, (rec, enc)) in cands.iter().enumerate() {
        if cands[..i].iter().any(|(prev, _)| prev == rec) {
            continue;
        }
        match certs.verify(&rec.body.cert_sha256, |der| rec.verify(der, host, now)) {
            Ok(v) => keys.push((v, *enc)),
            Err(reason) => refused.push(RecordRefusal {
                what: Refused::Key {
                    key_id: rec.body.key_id,
                    encoding: *enc,
                },
                reason,
            }),
        }
    }
    refuse_duplicate_ids(
        &mut keys,
        |(k, _)| k.body().key_id,
        |(k, enc)| Refused::Key {
            key_id: k.body().key_id,
            encoding: *enc,
        },
        &mut refused,
    );
    keys.sort_by_key(|(k, _)| std::cmp::Reverse(k.body().not_after));
    let cert_der = certs.signing(keys.first().map(|(k, _)| &k.body().cert_sha256));
    Resolved {
        host: host.to_owned(),
        addrs,
        key_encoding: keys.first().map(|k| k.1),
        keys: keys.into_iter().map(|k| k.0).collect(),
        refused,
        cert_der,
        lookups,
        failed,
        elapsed: t0.elapsed(),
    }
}

/// Key records in HTTPS answers, and the address hints they carry.
fn https_candidates(
    https: &[RData],
    refused: &mut Vec<RecordRefusal>,
) -> (Vec<(KeyRecord, Encoding)>, Vec<IpAddr>) {
    let mut cands = Vec::new();
    let mut hints: Vec<IpAddr> = Vec::new();
    for rd in https {
        let Some(bytes) = rdata_bytes(rd) else {
            continue;
        };
        let svcb = match SvcbRdata::decode(&bytes) {
            Ok(s) => s,
            Err(e) => {
                refused.push(RecordRefusal {
                    what: Refused::Encoding(Encoding::Https),
                    reason: RefusalReason::Record(e.into()),
                });
                continue;
            }
        };
        hints.extend(svcb.ipv4_hints().into_iter().map(IpAddr::V4));
        if let Some(v6) = svcb.param(SVC_IPV6HINT) {
            hints.extend(v6.chunks_exact(16).filter_map(|c| {
                <[u8; 16]>::try_from(c)
                    .ok()
                    .map(|b| IpAddr::V6(Ipv6Addr::from(b)))
            }));
        }
        match svcb.zrtt_records() {
            Ok(Some(list)) => cands.extend(list.into_iter().map(|r| (r, Encoding::Https))),
            Ok(None) => {}
            Err(e) => refused.push(RecordRefusal {
                what: Refused::Encoding(Encoding::Https),
                reason: RefusalReason::Record(e),
            }),
        }
    }
    (cands, hints)
}

/// Key records in the fallback encodings: TXT at the host, the AAAA tunnel.
fn fallback_candidates(
    txt: &[RData],
    tunnel: &[RData],
    refused: &mut Vec<RecordRefusal>,
) -> Vec<(KeyRecord, Encoding)> {
    let mut cands: Vec<_> = decode_txt(
        txt,
        encodings::txt_is_zrtt,
        encodings::decode_txt_rdata,
        Encoding::Txt,
        refused,
    )
    .into_iter()
    .map(|r| (r, Encoding::Txt))
    .collect();
    let tun: Vec<Ipv6Addr> = tunnel
        .iter()
        .filter_map(|rd| match rd {
            RData::AAAA(x) => Some(x.0),
            _ => None,
        })
        .collect();
    if !tun.is_empty() {
        match encodings::decode_aaaa_tunnel(&tun) {
            Ok(list) => cands.extend(list.into_iter().map(|r| (r, Encoding::AaaaTunnel))),
            Err(e) => refused.push(RecordRefusal {
                what: Refused::Encoding(Encoding::AaaaTunnel),
                reason: RefusalReason::Record(e),
            }),
        }
    }
    cands
}

/// The TXT records that `is` marks as zrtt's, decoded; those that do not
/// decode are refused as `encoding`.
pub(super) fn decode_txt<R>(
    txt: &[RData],
    is: fn(&[u8]) -> bool,
    decode: fn(&[u8]) -> Result<R, RecordError>,
    encoding: Encoding,
    refused: &mut Vec<RecordRefusal>,
) -> Vec<R> {
    let mut out = Vec::new();
    for bytes in txt.iter().filter_map(rdata_bytes) {
        if !is(&bytes) {
            continue;
        }
        match decode(&bytes) {
            Ok(r) => out.push(r),
            Err(e) => refused.push(RecordRefusal {
                what: Refused::Encoding(encoding),
                reason: RefusalReason::Record(e),
            }),
        }
    }
    out
}

fn short_hash(der: &[u8]) -> String {
    record::hex(&record::sha256(der)[..4])
}

#[cfg(test)]
mod tests {
    use super::*;
    use zrtt_proto::testing;

    fn txt(rec: &KeyRecord) -> RData {
        crate::records::rdata(RecordType::TXT, &encodings::txt_rdata(rec)).unwrap()
    }

    fn gathered(txt_records: Vec<RData>) -> Gathered {
        Gathered {
            https: Some(Ok(Answer::Negative)),
            a: Some(Ok(Answer::Negative)),
            aaaa: Some(Ok(Answer::Negative)),
            tlsa: None,
            txt: Some(Ok(Answer::Records(txt_records))),
            tunnel: Some(Ok(Answer::Negative)),
        }
    }

    #[test]
    fn two_verified_records_under_one_key_id_are_both_refused() {
        let cert = testing::ed25519_cert();
        let rng = ring::rand::SystemRandom::new();
        let signer = testing::ed25519_signer();
        let a = testing::body(&testing::semi_static("a"), &cert)
            .sign(&signer, &rng)
            .unwrap();
        let mut b_body = testing::body(&testing::semi_static("b"), &cert);
        b_body.key_id = a.body.key_id;
        let b = b_body.sign(&signer, &rng).unwrap();
        let c = testing::body(&testing::semi_static("c"), &cert)
            .sign(&signer, &rng)
            .unwrap();
        let trust = Trust::none();
        let now = UnixTime::from_secs(testing::T0 + 10);
        let g = gathered(vec![txt(&a), txt(&b), txt(&c), txt(&a)]);
        let got = assemble(
            &trust,
            testing::NAME,
            now,
            g,
            Some(cert.clone()),
            0,
            Instant::now(),
        );
        // c is used; a and b (same id, both validly signed) are not; the
        // repeated a counts once.
        assert_eq!(got.keys.len(), 1);
        assert_eq!(got.keys[0].body().key_id, c.body.key_id);
        let dups: Vec<_> = got
            .refused
            .iter()
            .filter(|f| f.reason == RefusalReason::DuplicateKeyId)
            .collect();
        assert_eq!(dups.len(), 2, "{:?}", got.refused);
        assert_eq!(got.refused.len(), 2);
        // Without the duplicate, a is used.
        let g = gathered(vec![txt(&a)]);
        let got = assemble(&trust, testing::NAME, now, g, Some(cert), 0, Instant::now());
        assert_eq!(got.keys.len(), 1);
        assert!(got.refused.is_empty());
    }
}
