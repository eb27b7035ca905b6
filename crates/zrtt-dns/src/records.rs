//! The DNS records that carry a host's published key records
//! (docs/PROTOCOL.md §3), as hickory records for serving and updating, and
//! as zone-file text for manual setups:
//!
//! - `HTTPS 1 . alpn=.. [port=..] [ipv4hint=..] [ipv6hint=..] key65380=<record list>` at the host;
//! - one `TXT "v=zrtt1 ..."` per record at the host;
//! - the AAAA tunnel at `zrtt-tunnel.<host>`;
//! - `TLSA 3 0 0 <certificate>` at the host;
//!
//! and those of a provenance verifier's published keys: one `TXT
//! "v=zrttpv1 ..."` per verifier key record and `TLSA 3 0 0 <certificate>`,
//! both at `_zrttpv.<verifier name>`.
//!
//! The RDATA bytes come from zrtt-proto's encoders and are only wrapped
//! in hickory types, so what is served is exactly what the decoders accept.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecoder, Restrict};
use zrtt_proto::record::encodings::{self, SvcbRdata, SVC_PORT};
use zrtt_proto::record::{KeyRecord, VerifierKeyRecord};

/// Per-host options of the HTTPS record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpsOptions {
    /// ALPN ids (`alpn`); empty leaves the parameter out.
    pub alpn: Vec<String>,
    /// `port`, when the gateway does not listen on 443.
    pub port: Option<u16>,
    /// `ipv4hint` addresses (the server copies the zone's A records).
    pub ipv4_hints: Vec<Ipv4Addr>,
    /// `ipv6hint` addresses (the zone's AAAA records).
    pub ipv6_hints: Vec<Ipv6Addr>,
}

/// The key-carrying RRsets of one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRecords {
    /// The host (fully qualified).
    pub host: Name,
    /// `zrtt-tunnel.<host>` (fully qualified).
    pub tunnel_owner: Name,
    /// The HTTPS RRset (one record).
    pub https: Vec<Record>,
    /// The zrtt TXT records (one per key).
    pub txt: Vec<Record>,
    /// The AAAA tunnel.
    pub aaaa: Vec<Record>,
    /// TLSA 3 0 0 with the certificate.
    pub tlsa: Vec<Record>,
}

impl HostRecords {
    /// Every record, HTTPS, TXT, AAAA tunnel, TLSA in that order.
    pub fn all(&self) -> impl Iterator<Item = &Record> {
        self.https
            .iter()
            .chain(&self.txt)
            .chain(&self.aaaa)
            .chain(&self.tlsa)
    }
}

/// Errors building records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// The host name is not a valid DNS name.
    #[error("invalid host name {0:?}")]
    BadName(String),
    /// An encoder produced RDATA hickory does not read (a bug).
    #[error("{rtype} RDATA does not decode: {reason}")]
    Rdata {
        /// The type.
        rtype: RecordType,
        /// hickory's reason.
        reason: String,
    },
}

/// A fully qualified, lowercase hickory name for `host`.
pub fn fqdn(host: &str) -> Result<Name, RecordsError> {
    let mut n = Name::from_ascii(host.trim_end_matches('.').to_ascii_lowercase())
        .map_err(|_| RecordsError::BadName(host.to_owned()))?;
    n.set_fqdn(true);
    Ok(n)
}

/// Wrap wire-format RDATA as hickory RDATA of `rtype`.
pub fn rdata(rtype: RecordType, bytes: &[u8]) -> Result<RData, RecordsError> {
    let len = u16::try_from(bytes.len()).map_err(|_| RecordsError::Rdata {
        rtype,
        reason: "longer than 65535 bytes".into(),
    })?;
    let mut d = BinDecoder::new(bytes);
    RData::read(&mut d, rtype, Restrict::new(len)).map_err(|e| RecordsError::Rdata {
        rtype,
        reason: e.to_string(),
    })
}

/// The HTTPS RDATA for `records` with `opts`.
pub fn https_rdata(records: &[KeyRecord], opts: &HttpsOptions) -> SvcbRdata {
    let alpn: Vec<&str> = opts.alpn.iter().map(String::as_str).collect();
    let mut svcb = SvcbRdata::service(&alpn, &opts.ipv4_hints, &opts.ipv6_hints, records);
    if let Some(port) = opts.port {
        svcb.params.push((SVC_PORT, port.to_be_bytes().to_vec()));
        svcb.params.sort_by_key(|(k, _)| *k);
    }
    svcb
}

/// Build the key-carrying records of `host` with TTL `ttl`. With no
/// records, the HTTPS record has no `key65380` and there is no TXT or AAAA
/// tunnel; TLSA is always there.
pub fn host_records(
    host: &str,
    records: &[KeyRecord],
    cert_der: &[u8],
    ttl: u32,
    opts: &HttpsOptions,
) -> Result<HostRecords, RecordsError> {
    let name = fqdn(host)?;
    let tunnel_owner = fqdn(&encodings::aaaa_tunnel_owner(host))?;
    let rec = |owner: &Name, rtype, bytes: &[u8]| -> Result<Record, RecordsError> {
        Ok(Record::from_rdata(owner.clone(), ttl, rdata(rtype, bytes)?))
    };
    let https = vec![rec(
        &name,
        RecordType::HTTPS,
        &https_rdata(records, opts).encode(),
    )?];
    let txt = records
        .iter()
        .map(|r| rec(&name, RecordType::TXT, &encodings::txt_rdata(r)))
        .collect::<Result<_, _>>()?;
    let aaaa = if records.is_empty() {
        Vec::new()
    } else {
        encodings::aaaa_tunnel(records)
            .iter()
            .map(|a| rec(&tunnel_owner, RecordType::AAAA, &a.octets()))
            .collect::<Result<_, _>>()?
    };
    let tlsa = vec![rec(
        &name,
        RecordType::TLSA,
        &encodings::tlsa_rdata(cert_der),
    )?];
    Ok(HostRecords {
        host: name,
        tunnel_owner,
        https,
        txt,
        aaaa,
        tlsa,
    })
}

/// Zone-file lines for the same records (HTTPS in presentation form with
/// `key65380="..."`, TXT strings, AAAA tunnel, TLSA).
pub fn zone_fragment(
    host: &str,
    records: &[KeyRecord],
    cert_der: &[u8],
    ttl: u32,
    opts: &HttpsOptions,
) -> String {
    let host = zrtt_proto::record::normalize_name(host);
    let mut s = format!("; zrtt key records for {host}: {} key(s)\n", records.len());
    s.push_str(&format!(
        "{host}. {ttl} IN HTTPS {}\n",
        https_rdata(records, opts).to_presentation()
    ));
    for r in records {
        s.push_str(&format!(
            "{host}. {ttl} IN TXT {}\n",
            encodings::txt_presentation(r)
        ));
    }
    if !records.is_empty() {
        let owner = encodings::aaaa_tunnel_owner(&host);
        for a in encodings::aaaa_tunnel(records) {
            s.push_str(&format!("{owner}. {ttl} IN AAAA {a}\n"));
        }
    }
    s.push_str(&format!(
        "{host}. {ttl} IN TLSA {}\n",
        encodings::tlsa_presentation(cert_der)
    ));
    s
}

/// The records that carry a verifier's keys, at `_zrttpv.<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierRecords {
    /// `_zrttpv.<name>` (fully qualified).
    pub owner: Name,
    /// One `TXT "v=zrttpv1 ..."` per published verifier key record.
    pub txt: Vec<Record>,
    /// TLSA 3 0 0 with the certificate that signs them.
    pub tlsa: Vec<Record>,
}

/// Build a verifier's records with TTL `ttl`: a TXT record per verifier key
/// record and TLSA 3 0 0 with the certificate, both at `_zrttpv.<name>`.
pub fn verifier_records(
    name: &str,
    records: &[VerifierKeyRecord],
    cert_der: &[u8],
    ttl: u32,
) -> Result<VerifierRecords, RecordsError> {
    let owner = fqdn(&encodings::verifier_owner(name))?;
    let rec = |rtype, bytes: &[u8]| -> Result<Record, RecordsError> {
        Ok(Record::from_rdata(owner.clone(), ttl, rdata(rtype, bytes)?))
    };
    let txt = records
        .iter()
        .map(|r| rec(RecordType::TXT, &encodings::verifier_txt_rdata(r)))
        .collect::<Result<_, _>>()?;
    let tlsa = vec![rec(RecordType::TLSA, &encodings::tlsa_rdata(cert_der))?];
    Ok(VerifierRecords { owner, txt, tlsa })
}

/// Zone-file lines for a verifier's records (for publishing by hand or
/// through another DNS server).
pub fn verifier_zone_fragment(
    name: &str,
    records: &[VerifierKeyRecord],
    cert_der: &[u8],
    ttl: u32,
) -> String {
    let owner = encodings::verifier_owner(name);
    let mut s = format!(
        "; zrtt verifier key records for {}: {} key(s)\n",
        zrtt_proto::record::normalize_name(name),
        records.len()
    );
    for r in records {
        s.push_str(&format!(
            "{owner}. {ttl} IN TXT {}\n",
            encodings::verifier_txt_presentation(r)
        ));
    }
    s.push_str(&format!(
        "{owner}. {ttl} IN TLSA {}\n",
        encodings::tlsa_presentation(cert_der)
    ));
    s
}
