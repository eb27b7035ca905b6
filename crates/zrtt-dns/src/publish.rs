//! Publishing key records into an existing authoritative server by RFC 2136
//! dynamic update, signed with TSIG (RFC 8945, HMAC-SHA256 by default).
//!
//! One UPDATE message replaces a host's key records atomically:
//!
//! - prerequisite: the host's TXT RRset is exactly what we just read (or
//!   absent), so a concurrent change makes the update fail instead of
//!   leaving stale keys; the update is then retried from a fresh read;
//! - delete the HTTPS and TLSA RRsets at the host and the AAAA RRset at
//!   `zrtt-tunnel.<host>`, and only the zrtt TXT records at the host (other TXT
//!   records such as SPF stay);
//! - add the new HTTPS, TXT, AAAA tunnel and TLSA records.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigner};
use zrtt_proto::UnixTime;

use crate::client::{self, ClientError, DnsTransport};
use crate::records::{fqdn, HostRecords, RecordsError};
use crate::server::is_zrtt_txt;

/// A failed publication.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// Talking to the server.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Building records.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// A TSIG key that cannot be used.
    #[error("TSIG key: {0}")]
    Key(String),
    /// The server refused the update.
    #[error("{server} refused the update: {rcode}{hint}")]
    Refused {
        /// The server.
        server: SocketAddr,
        /// Its response code.
        rcode: ResponseCode,
        /// What that usually means.
        hint: &'static str,
    },
    /// The answer's TSIG does not verify.
    #[error("{server}: the answer's TSIG does not verify: {reason}")]
    BadResponseSignature {
        /// The server.
        server: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The TXT RRset kept changing under us.
    #[error("the TXT records at {0} changed during every attempt; try again")]
    Contended(String),
    /// Encoding the message.
    #[error("encoding the update: {0}")]
    Encode(String),
}

/// A TSIG key: name, algorithm and secret.
#[derive(Clone)]
pub struct TsigKey {
    /// Key name (as configured on the server).
    pub name: Name,
    /// HMAC algorithm.
    pub algorithm: TsigAlgorithm,
    /// The shared secret.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TsigKey({} {}, <redacted>)", self.name, self.algorithm)
    }
}

fn parse_algorithm(s: &str) -> Result<TsigAlgorithm, PublishError> {
    match s.trim().trim_end_matches('.').to_ascii_lowercase().as_str() {
        "hmac-sha256" => Ok(TsigAlgorithm::HmacSha256),
        "hmac-sha384" => Ok(TsigAlgorithm::HmacSha384),
        "hmac-sha512" => Ok(TsigAlgorithm::HmacSha512),
        other => Err(PublishError::Key(format!(
            "algorithm {other:?} not supported (hmac-sha256, hmac-sha384, hmac-sha512)"
        ))),
    }
}

impl TsigKey {
    /// A key from its parts; the secret is base64.
    pub fn new(name: &str, algorithm: &str, secret_b64: &str) -> Result<Self, PublishError> {
        let mut n =
            Name::from_ascii(name).map_err(|e| PublishError::Key(format!("name {name:?}: {e}")))?;
        n.set_fqdn(true);
        let secret = B64
            .decode(secret_b64.trim())
            .map_err(|_| PublishError::Key("secret is not base64".into()))?;
        if secret.is_empty() {
            return Err(PublishError::Key("empty secret".into()));
        }
        Ok(Self {
            name: n,
            algorithm: parse_algorithm(algorithm)?,
            secret,
        })
    }

    /// `[algorithm:]name:secret`, as `knsupdate -y` and `nsupdate -y` take
    /// it; the algorithm defaults to hmac-sha256.
    pub fn parse(spec: &str) -> Result<Self, PublishError> {
        let parts: Vec<&str> = spec.trim().split(':').collect();
        match parts.as_slice() {
            [name, secret] => Self::new(name, "hmac-sha256", secret),
            [alg, name, secret] => Self::new(name, alg, secret),
            _ => Err(PublishError::Key(
                "expected [hmac-sha256:]name:base64secret".into(),
            )),
        }
    }

    /// Read a key file: BIND/`tsig-keygen` syntax
    /// (`key "name" { algorithm hmac-sha256; secret "..."; };`), Knot's
    /// `keymgr -t` YAML (`id:`, `algorithm:`, `secret:`), or one
    /// `[algorithm:]name:secret` line.
    pub fn from_file(path: &Path) -> Result<Self, PublishError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PublishError::Key(format!("{}: {e}", path.display())))?;
        Self::from_text(&text).map_err(|e| match e {
            PublishError::Key(r) => PublishError::Key(format!("{}: {r}", path.display())),
            e => e,
        })
    }

    /// See [`Self::from_file`].
    pub fn from_text(text: &str) -> Result<Self, PublishError> {
        let word_after = |key: &str| -> Option<String> {
            let i = text.find(key)?;
            let rest = text[i + key.len()..].trim_start_matches([' ', '\t', ':']);
            let rest = rest.trim_start();
            let v: String = if let Some(q) = rest.strip_prefix('"') {
                q.chars().take_while(|c| *c != '"').collect()
            } else {
                rest.chars()
                    .take_while(|c| !c.is_whitespace() && *c != ';' && *c != '{')
                    .collect()
            };
            (!v.is_empty()).then_some(v)
        };
        if text.contains("secret") {
            let name = word_after("key ")
                .filter(|n| n != "{")
                .or_else(|| word_after("id:"))
                .ok_or_else(|| PublishError::Key("no key name".into()))?;
            let alg = word_after("algorithm").unwrap_or_else(|| "hmac-sha256".into());
            let secret =
                word_after("secret").ok_or_else(|| PublishError::Key("no secret".into()))?;
            return Self::new(&name, &alg, &secret);
        }
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| PublishError::Key("empty key file".into()))?;
        Self::parse(line)
    }

    fn signer(&self) -> Result<TSigner, PublishError> {
        TSigner::new(
            self.secret.clone(),
            self.algorithm.clone(),
            self.name.clone(),
            300,
        )
        .map_err(|e| PublishError::Key(e.to_string()))
    }
}

/// What a publication did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublishReport {
    /// Old zrtt TXT records removed.
    pub removed_txt: usize,
    /// Records added.
    pub added: usize,
    /// UPDATE size in bytes (with TSIG).
    pub message_bytes: usize,
    /// Attempts needed (more than one when the TXT RRset changed meanwhile).
    pub attempts: usize,
}

/// Build the UPDATE that replaces the key records of `hr.host` in `zone`,
/// given the host's current TXT RRset.
pub fn update_message(zone: &Name, hr: &HostRecords, current_txt: &[Record]) -> Message {
    let mut m = Message::new(client::random_id(), MessageType::Query, OpCode::Update);
    let mut zq = Query::query(zone.clone(), RecordType::SOA);
    zq.set_query_class(DNSClass::IN);
    m.add_query(zq);
    // Prerequisites (answer section): the TXT RRset is as read.
    if current_txt.is_empty() {
        let mut none = Record::update0(hr.host.clone(), 0, RecordType::TXT);
        none.dns_class = DNSClass::NONE;
        m.answers.push(none);
    } else {
        for r in current_txt {
            let mut p = r.clone();
            p.ttl = 0;
            p.dns_class = DNSClass::IN;
            m.answers.push(p);
        }
    }
    // Updates (authority section).
    for (owner, rtype) in [
        (&hr.host, RecordType::HTTPS),
        (&hr.host, RecordType::TLSA),
        (&hr.tunnel_owner, RecordType::AAAA),
    ] {
        let mut del = Record::update0(owner.clone(), 0, rtype);
        del.dns_class = DNSClass::ANY;
        m.authorities.push(del);
    }
    for r in current_txt.iter().filter(|r| is_zrtt_txt(r)) {
        let mut del = r.clone();
        del.ttl = 0;
        del.dns_class = DNSClass::NONE;
        m.authorities.push(del);
    }
    m.authorities.extend(hr.all().cloned());
    m
}

/// The addresses of `host` on `server`, for the HTTPS hints.
pub fn lookup_hints(
    server: SocketAddr,
    host: &str,
    timeout: Duration,
) -> Result<(Vec<std::net::Ipv4Addr>, Vec<std::net::Ipv6Addr>), ClientError> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for rt in [RecordType::A, RecordType::AAAA] {
        let (m, _) = client::query(server, host, rt, DnsTransport::Tcp, timeout)?;
        for r in &m.answers {
            match &r.data {
                RData::A(a) if r.name == fqdn_lossy(host) => v4.push(a.0),
                RData::AAAA(a) if r.name == fqdn_lossy(host) => v6.push(a.0),
                _ => {}
            }
        }
    }
    Ok((v4, v6))
}

fn fqdn_lossy(host: &str) -> Name {
    fqdn(host).unwrap_or_default()
}

/// Replace the key records of `hr.host` in `zone` on `server`, signed with
/// `key` (unsigned when `None`, for servers that allow it by address).
/// `tsig_time` is the wall clock: the server refuses a TSIG more than 300 s
/// away from its own time.
pub fn publish(
    server: SocketAddr,
    zone: &str,
    hr: &HostRecords,
    key: Option<&TsigKey>,
    tsig_time: UnixTime,
    timeout: Duration,
) -> Result<PublishReport, PublishError> {
    let zone = fqdn(zone)?;
    let signer = key.map(TsigKey::signer).transpose()?;
    let host = hr.host.to_ascii();
    for attempt in 1..=3 {
        let (txt_answer, _) =
            client::query(server, &host, RecordType::TXT, DnsTransport::Tcp, timeout)?;
        let current: Vec<Record> = txt_answer
            .answers
            .iter()
            .filter(|r| r.name == hr.host && r.record_type() == RecordType::TXT)
            .cloned()
            .collect();
        let mut m = update_message(&zone, hr, &current);
        let mut verifier = match &signer {
            Some(s) => m
                .finalize(s, tsig_time.as_secs())
                .map_err(|e| PublishError::Encode(e.to_string()))?,
            None => None,
        };
        let bytes = m
            .to_vec()
            .map_err(|e| PublishError::Encode(e.to_string()))?;
        let answer = client::exchange_bytes(server, &bytes, DnsTransport::Tcp, timeout)?;
        let resp = match verifier.as_mut() {
            Some(v) => match v.verify(&answer) {
                Ok(r) => r.into_message(),
                Err(e) => {
                    // An error answer (BADKEY, BADSIG) is unsigned: report its rcode.
                    let msg = Message::from_vec(&answer).map_err(|_| {
                        PublishError::BadResponseSignature {
                            server,
                            reason: e.to_string(),
                        }
                    })?;
                    if msg.metadata.response_code == ResponseCode::NoError {
                        return Err(PublishError::BadResponseSignature {
                            server,
                            reason: e.to_string(),
                        });
                    }
                    msg
                }
            },
            None => Message::from_vec(&answer).map_err(|e| ClientError::BadAnswer {
                server,
                reason: e.to_string(),
            })?,
        };
        match resp.metadata.response_code {
            ResponseCode::NoError => {
                return Ok(PublishReport {
                    removed_txt: current.iter().filter(|r| is_zrtt_txt(r)).count(),
                    added: hr.all().count(),
                    message_bytes: bytes.len(),
                    attempts: attempt,
                })
            }
            ResponseCode::YXRRSet | ResponseCode::NXRRSet => continue,
            rcode => return Err(PublishError::Refused {
                server,
                rcode,
                hint: match rcode {
                    ResponseCode::NotAuth => {
                        " (TSIG key unknown or bad signature, or not authoritative for the zone)"
                    }
                    ResponseCode::Refused => " (the server's ACL does not allow this update)",
                    ResponseCode::NotZone => " (a record is outside the zone)",
                    _ => "",
                },
            }),
        }
    }
    Err(PublishError::Contended(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_formats() {
        let s = "c2VjcmV0c2VjcmV0c2VjcmV0";
        let a = TsigKey::parse(&format!("hmac-sha256:zrtt-key:{s}")).unwrap();
        let b = TsigKey::parse(&format!("zrtt-key:{s}")).unwrap();
        assert_eq!(a.name, b.name);
        let bind =
            format!("key \"zrtt-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{s}\";\n}};\n");
        let c = TsigKey::from_text(&bind).unwrap();
        assert_eq!(c.name.to_ascii(), "zrtt-key.");
        assert_eq!(c.secret, b"secretsecretsecret");
        let knot = format!("key:\n  - id: zrtt-key\n    algorithm: hmac-sha256\n    secret: {s}\n");
        let d = TsigKey::from_text(&knot).unwrap();
        assert_eq!(d.name, c.name);
        assert!(TsigKey::parse("hmac-md5:k:c2VjcmV0").is_err());
        assert!(format!("{a:?}").contains("redacted"));
    }
}
