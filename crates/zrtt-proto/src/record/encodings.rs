//! DNS encodings of key records (docs/PROTOCOL.md §3):
//!
//! - (a) an SVCB/HTTPS SvcParam in the private-use range, [`SVC_PARAM_KEY`],
//!   at the host name, so one HTTPS query returns address hints and keys;
//! - (b) a TXT record at the host name, `v=zrtt1 ...`, split into strings of
//!   at most 255 bytes;
//! - (c) the HTTPCrypt AAAA tunnel at `zrtt-tunnel.<host>`: a 16-bit order field and
//!   14 payload bytes per address;
//! - the signing certificate as TLSA 3 0 0 (DANE-EE, full certificate, exact
//!   match) at the host name.
//!
//! Verifier key records (docs/PROTOCOL.md §11.1) have one encoding, a TXT
//! record `v=zrttpv1 ...` at `_zrttpv.<verifier name>` ([`verifier_owner`]),
//! with the signing certificate as TLSA 3 0 0 at the same owner.
//!
//! Every decoder is strict and returns a typed error; none panics.

use std::net::{Ipv4Addr, Ipv6Addr};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use super::{
    decode_record_list, encode_record_list, hex, Aead, KeyRecord, RecordBody, RecordError,
    RecordFlags, SignatureAlgorithm, VerifierKeyBody, VerifierKeyRecord, MAX_RECORD_LEN,
};
use crate::codec::{Put, Reader};
use crate::error::InvalidMessage;

/// The private-use SvcParamKey (RFC 9460 §14.3.2: 65280-65534) carrying a
/// record list. Presentation name `key65380`.
pub const SVC_PARAM_KEY: u16 = 65380;
/// SvcParamKey `alpn`.
pub const SVC_ALPN: u16 = 1;
/// SvcParamKey `port`.
pub const SVC_PORT: u16 = 3;
/// SvcParamKey `ipv4hint`.
pub const SVC_IPV4HINT: u16 = 4;
/// SvcParamKey `ipv6hint`.
pub const SVC_IPV6HINT: u16 = 6;

/// The TXT tag and version.
pub const TXT_PREFIX: &str = "v=zrtt1";
/// The TXT tag and version of verifier key records.
pub const VERIFIER_TXT_PREFIX: &str = "v=zrttpv1";
/// The label under a verifier's name where its key records live.
pub const VERIFIER_LABEL: &str = "_zrttpv";
/// Payload bytes per AAAA address in the tunnel.
pub const AAAA_CHUNK: usize = 14;
/// Most AAAA addresses one tunnel may use.
pub const MAX_AAAA_ADDRESSES: usize = 160;

// ---------------------------------------------------------------- SVCB / HTTPS

/// The SvcParam value for [`SVC_PARAM_KEY`]: a record list.
pub fn svc_param_value(records: &[KeyRecord]) -> Vec<u8> {
    encode_record_list(records)
}

/// Decode the SvcParam value of [`SVC_PARAM_KEY`].
pub fn decode_svc_param_value(value: &[u8]) -> Result<Vec<KeyRecord>, RecordError> {
    decode_record_list(value)
}

/// SVCB/HTTPS RDATA (RFC 9460 §2.2), uncompressed, with params as raw values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvcbRdata {
    /// SvcPriority; 0 is AliasMode.
    pub priority: u16,
    /// TargetName in presentation form without the trailing dot; "" is the root ".".
    pub target: String,
    /// (key, value) pairs in strictly ascending key order.
    pub params: Vec<(u16, Vec<u8>)>,
}

impl SvcbRdata {
    /// A ServiceMode record at the owner name itself (target "."), with the
    /// given ALPN ids, address hints and zrtt records.
    pub fn service(
        alpn: &[&str],
        ipv4: &[Ipv4Addr],
        ipv6: &[Ipv6Addr],
        records: &[KeyRecord],
    ) -> Self {
        let mut params = Vec::new();
        if !alpn.is_empty() {
            let mut v = Vec::new();
            for a in alpn {
                v.put_vec_u8(a.as_bytes());
            }
            params.push((SVC_ALPN, v));
        }
        if !ipv4.is_empty() {
            params.push((SVC_IPV4HINT, ipv4.iter().flat_map(|a| a.octets()).collect()));
        }
        if !ipv6.is_empty() {
            params.push((SVC_IPV6HINT, ipv6.iter().flat_map(|a| a.octets()).collect()));
        }
        if !records.is_empty() {
            params.push((SVC_PARAM_KEY, svc_param_value(records)));
        }
        Self {
            priority: 1,
            target: String::new(),
            params,
        }
    }

    /// Wire-format RDATA.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_u16(self.priority);
        encode_name(&self.target, &mut out);
        for (k, v) in &self.params {
            out.put_u16(*k);
            out.put_vec_u16(v);
        }
        out
    }

    /// Strictly decode wire-format RDATA: uncompressed target, keys strictly
    /// ascending, no params in AliasMode.
    pub fn decode(rdata: &[u8]) -> Result<Self, InvalidMessage> {
        let mut r = Reader::new(rdata);
        let priority = r.u16()?;
        let target = decode_name(&mut r)?;
        let mut params: Vec<(u16, Vec<u8>)> = Vec::new();
        while !r.is_empty() {
            let k = r.u16()?;
            if params.last().is_some_and(|(last, _)| *last >= k) {
                return Err(InvalidMessage::InvalidField(
                    "SvcParamKeys not strictly ascending",
                ));
            }
            params.push((k, r.vec_u16()?.to_vec()));
        }
        if priority == 0 && !params.is_empty() {
            return Err(InvalidMessage::InvalidField(
                "AliasMode record with SvcParams",
            ));
        }
        Ok(Self {
            priority,
            target,
            params,
        })
    }

    /// The raw value of a param.
    pub fn param(&self, key: u16) -> Option<&[u8]> {
        self.params
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// The zrtt records this RDATA carries: `Ok(None)` when it has none (for
    /// example because a resolver stripped the unknown key).
    pub fn zrtt_records(&self) -> Result<Option<Vec<KeyRecord>>, RecordError> {
        self.param(SVC_PARAM_KEY)
            .map(decode_svc_param_value)
            .transpose()
    }

    /// The `ipv4hint` addresses.
    pub fn ipv4_hints(&self) -> Vec<Ipv4Addr> {
        self.param(SVC_IPV4HINT)
            .map(|v| {
                v.chunks_exact(4)
                    .map(|c| Ipv4Addr::new(c[0], c[1], c[2], c[3]))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// RFC 9460 presentation form (the part after `IN HTTPS`). Unknown keys
    /// are written as `keyNNNNN="..."` with `\DDD` escapes.
    pub fn to_presentation(&self) -> String {
        let mut s = format!(
            "{} {}",
            self.priority,
            if self.target.is_empty() {
                ".".to_owned()
            } else {
                format!("{}.", self.target)
            }
        );
        for (k, v) in &self.params {
            s.push(' ');
            match *k {
                SVC_ALPN => {
                    let mut r = Reader::new(v);
                    let mut ids = Vec::new();
                    while let Ok(id) = r.vec_u8() {
                        ids.push(escape_char_string(id).replace(',', "\\\\,"));
                    }
                    s.push_str(&format!("alpn=\"{}\"", ids.join(",")));
                }
                SVC_IPV4HINT => {
                    let a: Vec<String> = self.ipv4_hints().iter().map(|a| a.to_string()).collect();
                    s.push_str(&format!("ipv4hint={}", a.join(",")));
                }
                SVC_IPV6HINT => {
                    let a: Vec<String> = v
                        .chunks_exact(16)
                        .map(|c| {
                            let mut o = [0u8; 16];
                            o.copy_from_slice(c);
                            Ipv6Addr::from(o).to_string()
                        })
                        .collect();
                    s.push_str(&format!("ipv6hint={}", a.join(",")));
                }
                _ => s.push_str(&format!("key{}=\"{}\"", k, escape_char_string(v))),
            }
        }
        s
    }

    /// RFC 3597 generic form (`\# len hex`), accepted by every zone parser.
    pub fn to_generic(&self) -> String {
        generic_rdata(&self.encode())
    }
}

/// RFC 3597 `\# <len> <hex>` for any RDATA.
pub fn generic_rdata(rdata: &[u8]) -> String {
    format!("\\# {} {}", rdata.len(), hex(rdata))
}

fn escape_char_string(v: &[u8]) -> String {
    let mut s = String::with_capacity(v.len() * 2);
    for &b in v {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(b as char);
            }
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\{b:03}")),
        }
    }
    s
}

fn encode_name(name: &str, out: &mut Vec<u8>) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.put_vec_u8(label.as_bytes());
    }
    out.put_u8(0);
}

fn decode_name(r: &mut Reader<'_>) -> Result<String, InvalidMessage> {
    let mut labels: Vec<String> = Vec::new();
    let mut total = 1usize;
    loop {
        let len = r.u8()? as usize;
        if len == 0 {
            break;
        }
        if len > 63 {
            return Err(InvalidMessage::InvalidField(
                "compressed or invalid label in TargetName",
            ));
        }
        total += len + 1;
        if total > 255 {
            return Err(InvalidMessage::Oversized {
                len: total,
                max: 255,
            });
        }
        let l = r.take(len)?;
        // Host-name characters only: a label holding '.', controls or
        // non-ASCII would not survive presentation or re-encoding.
        if !l
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return Err(InvalidMessage::BadEncoding("TargetName label characters"));
        }
        labels.push(String::from_utf8_lossy(l).to_ascii_lowercase());
    }
    Ok(labels.join("."))
}

// ------------------------------------------------------------------------ TXT

/// The TXT text of one record: `v=zrtt1 id=.. pk=.. nb=.. na=.. ed=.. ae=..
/// fl=.. q=.. pv=.. n=.. cs=.. sa=.. sg=..`, fields in this order, each once.
pub fn txt_text(rec: &KeyRecord) -> String {
    let b = &rec.body;
    let aeads: Vec<String> = b.aeads.iter().map(|a| (*a as u8).to_string()).collect();
    format!(
        "{TXT_PREFIX} id={:08x} pk={} nb={} na={} ed={} ae={} fl={} q={} pv={} n={} cs={} sa={} sg={}",
        b.key_id,
        B64.encode(b.public_key),
        b.not_before,
        b.not_after,
        b.max_early_data_bytes,
        aeads.join(","),
        b.flags.bits(),
        b.provenance_quorum,
        b.verifiers.join(","),
        b.name,
        B64.encode(b.cert_sha256),
        rec.sig_alg as u8,
        B64.encode(&rec.signature),
    )
}

/// The TXT character-strings (each at most 255 bytes) of one record.
pub fn txt_strings(rec: &KeyRecord) -> Vec<Vec<u8>> {
    split_strings(txt_text(rec))
}

/// TXT RDATA of one record.
pub fn txt_rdata(rec: &KeyRecord) -> Vec<u8> {
    strings_rdata(&txt_strings(rec))
}

/// Zone-file presentation of the TXT RDATA (quoted strings).
pub fn txt_presentation(rec: &KeyRecord) -> String {
    strings_presentation(&txt_strings(rec))
}

fn split_strings(text: String) -> Vec<Vec<u8>> {
    text.into_bytes().chunks(255).map(<[u8]>::to_vec).collect()
}

fn strings_rdata(strings: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in strings {
        out.put_vec_u8(s);
    }
    out
}

fn strings_presentation(strings: &[Vec<u8>]) -> String {
    strings
        .iter()
        .map(|s| format!("\"{}\"", escape_char_string(s)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The concatenated character-strings of TXT RDATA.
fn txt_concat(rdata: &[u8]) -> Result<Vec<u8>, InvalidMessage> {
    let mut r = Reader::new(rdata);
    let mut text = Vec::with_capacity(rdata.len());
    while !r.is_empty() {
        text.extend_from_slice(r.vec_u8()?);
    }
    Ok(text)
}

/// The fields of a zrtt TXT text after its tag: `name=value`, separated by
/// single spaces, each expected in order.
struct TxtFields<'a> {
    parts: core::str::Split<'a, char>,
}

impl<'a> TxtFields<'a> {
    /// Check the size, ASCII and the tag `<family><version>` (e.g.
    /// `v=zrtt` `1`): another version of the family is `UnsupportedVersion`,
    /// anything else `not_ours`.
    fn open(
        text: &'a [u8],
        family: &str,
        version: u8,
        not_ours: &'static str,
    ) -> Result<Self, InvalidMessage> {
        if text.len() > 2 * MAX_RECORD_LEN {
            return Err(InvalidMessage::Oversized {
                len: text.len(),
                max: 2 * MAX_RECORD_LEN,
            });
        }
        let text =
            core::str::from_utf8(text).map_err(|_| InvalidMessage::BadEncoding("TXT not ASCII"))?;
        let mut parts = text.split(' ');
        let v = parts.next().unwrap_or_default();
        match v.strip_prefix(family).and_then(|n| n.parse::<u8>().ok()) {
            Some(n) if n == version && v.len() == family.len() + 1 => Ok(Self { parts }),
            Some(n) if n != version => Err(InvalidMessage::UnsupportedVersion(n)),
            _ => Err(InvalidMessage::BadEncoding(not_ours)),
        }
    }

    /// The value of the next field, which must be `name`.
    fn field(&mut self, name: &'static str) -> Result<&'a str, InvalidMessage> {
        let p = self.parts.next().ok_or(InvalidMessage::Truncated {
            needed: 1,
            available: 0,
        })?;
        p.strip_prefix(name)
            .and_then(|p| p.strip_prefix('='))
            .ok_or(InvalidMessage::BadEncoding("TXT fields out of order"))
    }

    /// No field may follow.
    fn finish(mut self) -> Result<(), InvalidMessage> {
        match self.parts.next() {
            Some(_) => Err(InvalidMessage::BadEncoding("extra TXT fields")),
            None => Ok(()),
        }
    }

    /// `id=` as 8 lowercase hex digits.
    fn id(&mut self, name: &'static str) -> Result<u32, InvalidMessage> {
        let bad = InvalidMessage::BadEncoding("id must be 8 lowercase hex digits");
        let s = self.field(name)?;
        if s.len() != 8 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad);
        }
        u32::from_str_radix(s, 16).map_err(|_| bad)
    }

    /// `sa=` and `sg=`: the signature algorithm and the signature.
    fn signature(&mut self) -> Result<(SignatureAlgorithm, Vec<u8>), RecordError> {
        let alg_id = dec::<u8>(self.field("sa")?)?;
        let sig_alg = SignatureAlgorithm::from_u8(alg_id)
            .ok_or(RecordError::UnsupportedSignatureAlgorithm(alg_id))?;
        let signature = B64
            .decode(self.field("sg")?)
            .map_err(|_| InvalidMessage::BadEncoding("signature base64"))?;
        if signature.len() > u16::MAX as usize {
            return Err(InvalidMessage::Oversized {
                len: signature.len(),
                max: u16::MAX as usize,
            }
            .into());
        }
        Ok((sig_alg, signature))
    }
}

/// Whether a TXT RDATA claims to be a zrtt record (any version), so a
/// resolver can skip unrelated TXT records such as SPF.
pub fn txt_is_zrtt(rdata: &[u8]) -> bool {
    let mut r = Reader::new(rdata);
    r.vec_u8().is_ok_and(|first| first.starts_with(b"v=zrtt"))
}

/// Decode TXT RDATA (wire form: length-prefixed strings, concatenated).
pub fn decode_txt_rdata(rdata: &[u8]) -> Result<KeyRecord, RecordError> {
    decode_txt_text(&txt_concat(rdata)?)
}

/// Decode the concatenated TXT text of one record.
pub fn decode_txt_text(text: &[u8]) -> Result<KeyRecord, RecordError> {
    let mut f = TxtFields::open(text, "v=zrtt", 1, "TXT does not start with v=zrtt1")?;
    let key_id = f.id("id")?;
    let public_key = b64_array::<32>(f.field("pk")?)?;
    let not_before = dec::<u64>(f.field("nb")?)?;
    let not_after = dec::<u64>(f.field("na")?)?;
    let max_early_data_bytes = dec::<u32>(f.field("ed")?)?;
    let aeads = f
        .field("ae")?
        .split(',')
        .map(|a| {
            dec::<u8>(a).and_then(|id| {
                Aead::from_u8(id).ok_or(InvalidMessage::InvalidField("unknown aead"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let flags = RecordFlags::from_bits(dec::<u16>(f.field("fl")?)?).ok_or(
        InvalidMessage::InvalidField("undefined critical flag bits set"),
    )?;
    let provenance_quorum = dec::<u8>(f.field("q")?)?;
    let verifiers = match f.field("pv")? {
        "" => Vec::new(),
        list => list.split(',').map(str::to_owned).collect(),
    };
    let name = f.field("n")?.to_owned();
    let cert_sha256 = b64_array::<32>(f.field("cs")?)?;
    let (sig_alg, signature) = f.signature()?;
    f.finish()?;
    let body = RecordBody {
        key_id,
        public_key,
        not_before,
        not_after,
        max_early_data_bytes,
        aeads,
        flags,
        provenance_quorum,
        verifiers,
        name,
        cert_sha256,
    };
    // Validate before encoding (a 300-byte name would not fit its length
    // byte), then re-run the binary decoder so both encodings enforce
    // identical rules.
    body.validate()?;
    KeyRecord::decode(
        &KeyRecord {
            body,
            sig_alg,
            signature,
        }
        .encode(),
    )
}

// ------------------------------------------------------- verifier key records

/// Owner name of a verifier's key records (TXT) and certificate (TLSA):
/// `_zrttpv.<name>`.
pub fn verifier_owner(name: &str) -> String {
    format!("{VERIFIER_LABEL}.{}", super::normalize_name(name))
}

/// The TXT text of one verifier key record: `v=zrttpv1 id=.. pk=.. nb=..
/// na=.. n=.. cs=.. sa=.. sg=..`, fields in this order, each once.
pub fn verifier_txt_text(rec: &VerifierKeyRecord) -> String {
    let b = &rec.body;
    format!(
        "{VERIFIER_TXT_PREFIX} id={:08x} pk={} nb={} na={} n={} cs={} sa={} sg={}",
        b.verifier_id,
        B64.encode(b.public_key),
        b.not_before,
        b.not_after,
        b.name,
        B64.encode(b.cert_sha256),
        rec.sig_alg as u8,
        B64.encode(&rec.signature),
    )
}

/// The TXT character-strings (each at most 255 bytes) of one verifier key record.
pub fn verifier_txt_strings(rec: &VerifierKeyRecord) -> Vec<Vec<u8>> {
    split_strings(verifier_txt_text(rec))
}

/// TXT RDATA of one verifier key record.
pub fn verifier_txt_rdata(rec: &VerifierKeyRecord) -> Vec<u8> {
    strings_rdata(&verifier_txt_strings(rec))
}

/// Zone-file presentation of a verifier key record's TXT RDATA.
pub fn verifier_txt_presentation(rec: &VerifierKeyRecord) -> String {
    strings_presentation(&verifier_txt_strings(rec))
}

/// Whether a TXT RDATA claims to be a verifier key record (any version).
pub fn txt_is_zrtt_verifier(rdata: &[u8]) -> bool {
    let mut r = Reader::new(rdata);
    r.vec_u8().is_ok_and(|first| first.starts_with(b"v=zrttpv"))
}

/// Decode the TXT RDATA of one verifier key record.
pub fn decode_verifier_txt_rdata(rdata: &[u8]) -> Result<VerifierKeyRecord, RecordError> {
    decode_verifier_txt_text(&txt_concat(rdata)?)
}

/// Decode the concatenated TXT text of one verifier key record; like key
/// records, through the binary decoder, so both forms obey the same rules.
pub fn decode_verifier_txt_text(text: &[u8]) -> Result<VerifierKeyRecord, RecordError> {
    let mut f = TxtFields::open(text, "v=zrttpv", 1, "TXT does not start with v=zrttpv1")?;
    let verifier_id = f.id("id")?;
    let public_key = b64_array::<32>(f.field("pk")?)?;
    let not_before = dec::<u64>(f.field("nb")?)?;
    let not_after = dec::<u64>(f.field("na")?)?;
    let name = f.field("n")?.to_owned();
    let cert_sha256 = b64_array::<32>(f.field("cs")?)?;
    let (sig_alg, signature) = f.signature()?;
    f.finish()?;
    let body = VerifierKeyBody {
        verifier_id,
        public_key,
        not_before,
        not_after,
        name,
        cert_sha256,
    };
    body.validate()?;
    VerifierKeyRecord::decode(
        &VerifierKeyRecord {
            body,
            sig_alg,
            signature,
        }
        .encode(),
    )
}

fn dec<T: core::str::FromStr>(s: &str) -> Result<T, InvalidMessage> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if !canonical {
        return Err(InvalidMessage::BadEncoding(
            "number not in canonical decimal",
        ));
    }
    s.parse()
        .map_err(|_| InvalidMessage::BadEncoding("number out of range"))
}

fn b64_array<const N: usize>(s: &str) -> Result<[u8; N], InvalidMessage> {
    let v = B64
        .decode(s)
        .map_err(|_| InvalidMessage::BadEncoding("base64"))?;
    v.try_into()
        .map_err(|_| InvalidMessage::InvalidField("base64 field has the wrong length"))
}

// ---------------------------------------------------------------- AAAA tunnel

/// First label of the AAAA tunnel's owner name: a host name (letters,
/// digits, hyphen), since servers check the owners of address records
/// (BIND's `check-names` refuses `_zrtt`, as the zone files of earlier
/// versions had it).
pub const AAAA_TUNNEL_LABEL: &str = "zrtt-tunnel";

/// Owner name of the AAAA tunnel for a host: `zrtt-tunnel.<host>`, so the
/// tunnel's addresses never mix with the host's real AAAA records.
pub fn aaaa_tunnel_owner(host: &str) -> String {
    format!("{AAAA_TUNNEL_LABEL}.{}", super::normalize_name(host))
}

/// Encode a record list as AAAA addresses: address `i` is `u16 i || 14 bytes`
/// of the stream `u16 len || record list`, zero-padded.
pub fn aaaa_tunnel(records: &[KeyRecord]) -> Vec<Ipv6Addr> {
    let list = encode_record_list(records);
    let mut stream = Vec::with_capacity(list.len() + 2);
    stream.put_vec_u16(&list);
    stream
        .chunks(AAAA_CHUNK)
        .enumerate()
        .map(|(i, chunk)| {
            let mut a = [0u8; 16];
            a[..2].copy_from_slice(&(i as u16).to_be_bytes());
            a[2..2 + chunk.len()].copy_from_slice(chunk);
            Ipv6Addr::from(a)
        })
        .collect()
}

/// Decode a tunnel from its addresses in any order (DNS does not keep RRset
/// order). Orders must be exactly 0..n, the padding zero and the count exact.
pub fn decode_aaaa_tunnel(addrs: &[Ipv6Addr]) -> Result<Vec<KeyRecord>, RecordError> {
    if addrs.is_empty() {
        return Err(InvalidMessage::Truncated {
            needed: 1,
            available: 0,
        }
        .into());
    }
    if addrs.len() > MAX_AAAA_ADDRESSES {
        return Err(InvalidMessage::Oversized {
            len: addrs.len(),
            max: MAX_AAAA_ADDRESSES,
        }
        .into());
    }
    let mut sorted: Vec<[u8; 16]> = addrs.iter().map(|a| a.octets()).collect();
    sorted.sort_unstable();
    let mut stream = Vec::with_capacity(sorted.len() * AAAA_CHUNK);
    for (i, a) in sorted.iter().enumerate() {
        if u16::from_be_bytes([a[0], a[1]]) as usize != i {
            return Err(InvalidMessage::BadEncoding("AAAA tunnel order fields not 0..n").into());
        }
        stream.extend_from_slice(&a[2..]);
    }
    let mut r = Reader::new(&stream);
    let list = r.vec_u16()?;
    let padding = r.rest();
    if padding.len() >= AAAA_CHUNK || padding.iter().any(|&b| b != 0) {
        return Err(InvalidMessage::BadEncoding("AAAA tunnel padding").into());
    }
    decode_record_list(list)
}

// ----------------------------------------------------------------------- TLSA

/// TLSA RDATA `3 0 0 <certificate DER>` (DANE-EE, full certificate, exact).
pub fn tlsa_rdata(cert_der: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + cert_der.len());
    out.extend_from_slice(&[3, 0, 0]);
    out.extend_from_slice(cert_der);
    out
}

/// Zone-file presentation of the TLSA RDATA.
pub fn tlsa_presentation(cert_der: &[u8]) -> String {
    format!("3 0 0 {}", hex(cert_der))
}

/// Largest certificate accepted from TLSA.
pub const MAX_TLSA_CERT: usize = 4096;

/// Decode TLSA RDATA, accepting only `3 0 0` with a parseable certificate;
/// returns the certificate DER.
pub fn decode_tlsa_rdata(rdata: &[u8]) -> Result<&[u8], RecordError> {
    let mut r = Reader::new(rdata);
    let usage = r.u8()?;
    let selector = r.u8()?;
    let mtype = r.u8()?;
    if (usage, selector, mtype) != (3, 0, 0) {
        return Err(InvalidMessage::InvalidField("TLSA must be 3 0 0").into());
    }
    let cert = r.rest();
    if cert.is_empty() {
        return Err(InvalidMessage::Truncated {
            needed: 1,
            available: 0,
        }
        .into());
    }
    if cert.len() > MAX_TLSA_CERT {
        return Err(InvalidMessage::Oversized {
            len: cert.len(),
            max: MAX_TLSA_CERT,
        }
        .into());
    }
    let der = pki_types::CertificateDer::from(cert);
    webpki::EndEntityCert::try_from(&der)
        .map_err(|e| RecordError::BadCertificate(e.to_string()))?;
    Ok(cert)
}
