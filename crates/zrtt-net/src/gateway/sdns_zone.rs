//! What the SDNS answers, without I/O: for each site `S` the shortcut zone
//! `zq.S` (docs/DNS.md §8.6): SOA and NS at the apex (with the glue
//! addresses of the default name server `ns.zq.S`), a TXT query for a whole
//! flight name handed to the answer service (shortcut.rs), NXDOMAIN with
//! the zone's SOA for every other name under the zone, REFUSED outside it.
//! The shortcut answer is held to the UDP budget here: an ANSWER that does
//! not fit becomes FETCH, a REJECT loses its records, anything else that
//! does not fit goes out truncated (TC).

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, NS, SOA, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use zrtt_proto::shortcut::{self, NameMatch, NEGATIVE_TTL};

use super::shortcut::{bare_reject, fetch};

/// The EDNS payload the SDNS advertises (and the most a UDP answer uses).
pub(super) const EDNS_PAYLOAD: u16 = 1232;
/// TTL of the NS records at the apex: the delegation lives long.
const NS_TTL: u32 = 6 * 3600;
/// TTL of the name server's addresses.
const GLUE_TTL: u32 = 3600;
/// Longest TXT character-string.
const MAX_STRING: usize = 255;

/// The zones' settings: who their name server is and its addresses.
#[derive(Clone, Debug, Default)]
pub(super) struct ZoneConfig {
    /// The NS target of every zone (`--sdns-ns`); `None`: `ns.zq.S` in
    /// each zone `zq.S`, answered with `glue`.
    pub(super) ns: Option<String>,
    /// The addresses `ns.zq.S` has (the SDNS's listen addresses).
    pub(super) glue: Vec<IpAddr>,
}

/// What to do with a query.
#[derive(Debug)]
pub(super) enum Plan {
    /// Send nothing (not a query, or unreadable).
    Drop,
    /// This answer, made from the zone alone.
    Reply(Message),
    /// A TXT query for a whole flight name under `site`'s zone: the
    /// answer service decides.
    Flight {
        /// The site `S` (the zone is `zq.S`).
        site: String,
        /// The flight's TCP form.
        frame: Vec<u8>,
    },
}

impl ZoneConfig {
    fn ns_name(&self, site: &str) -> String {
        match &self.ns {
            Some(n) => n.trim_end_matches('.').to_owned(),
            None => format!("ns.{}", shortcut::zone_name(site)),
        }
    }

    /// Plan the answer to `query` for the zones of `sites` (the key
    /// records' names).
    pub(super) fn plan(&self, query: &Message, sites: &[String]) -> Plan {
        if query.metadata.message_type != MessageType::Query {
            return Plan::Drop;
        }
        if query.metadata.op_code != OpCode::Query {
            return Plan::Reply(response(query, ResponseCode::NotImp));
        }
        let [q] = &query.queries[..] else {
            return Plan::Reply(response(query, ResponseCode::FormErr));
        };
        if q.query_class() != DNSClass::IN {
            return Plan::Reply(response(query, ResponseCode::Refused));
        }
        let qname = q.name().to_ascii();
        let qtype = q.query_type();
        for site in sites {
            let ns = self.ns_name(site);
            // The default name server's own name: its addresses.
            if self.ns.is_none() && same_name(&qname, &ns) {
                let mut m = response(query, ResponseCode::NoError);
                m.answers = self.glue(q.name(), qtype);
                if m.answers.is_empty() {
                    m.authorities.push(self.soa(site));
                }
                return Plan::Reply(m);
            }
            match shortcut::parse_query_name(&qname, site) {
                NameMatch::Outside => continue,
                NameMatch::Apex => {
                    let mut m = response(query, ResponseCode::NoError);
                    match qtype {
                        RecordType::SOA => m.answers.push(self.soa_at(site, q.name().clone())),
                        RecordType::NS => {
                            m.answers.push(self.ns_record(site, q.name().clone()));
                            if self.ns.is_none() {
                                if let Ok(n) = Name::from_ascii(format!("{ns}.")) {
                                    m.additionals = self.glue(&n, RecordType::A);
                                    m.additionals.extend(self.glue(&n, RecordType::AAAA));
                                }
                            }
                        }
                        _ => m.authorities.push(self.soa(site)),
                    }
                    return Plan::Reply(m);
                }
                NameMatch::Flight(frame) if qtype == RecordType::TXT => {
                    return Plan::Flight {
                        site: site.clone(),
                        frame,
                    };
                }
                NameMatch::Flight(_) | NameMatch::NotFlight => {
                    return Plan::Reply(self.nxdomain(query, site));
                }
            }
        }
        Plan::Reply(response(query, ResponseCode::Refused))
    }

    /// NXDOMAIN with the zone's SOA (negative TTL [`NEGATIVE_TTL`]).
    pub(super) fn nxdomain(&self, query: &Message, site: &str) -> Message {
        let mut m = response(query, ResponseCode::NXDomain);
        m.authorities.push(self.soa(site));
        m
    }

    fn soa(&self, site: &str) -> Record {
        let zone = Name::from_ascii(format!("{}.", shortcut::zone_name(site))).unwrap_or_default();
        self.soa_at(site, zone)
    }

    fn soa_at(&self, site: &str, owner: Name) -> Record {
        let zone = shortcut::zone_name(site);
        let mname = Name::from_ascii(format!("{}.", self.ns_name(site))).unwrap_or_default();
        let rname = Name::from_ascii(format!("hostmaster.{zone}.")).unwrap_or_default();
        let soa = SOA::new(mname, rname, 1, 3600, 600, 86400, NEGATIVE_TTL);
        Record::from_rdata(owner, NEGATIVE_TTL, RData::SOA(soa))
    }

    fn ns_record(&self, site: &str, owner: Name) -> Record {
        let target = Name::from_ascii(format!("{}.", self.ns_name(site))).unwrap_or_default();
        Record::from_rdata(owner, NS_TTL, RData::NS(NS(target)))
    }

    fn glue(&self, owner: &Name, qtype: RecordType) -> Vec<Record> {
        let mut out: Vec<Record> = Vec::new();
        for ip in self.glue.iter().filter(|ip| !ip.is_unspecified()) {
            let data = match (ip, qtype) {
                (IpAddr::V4(a), RecordType::A) => RData::A(A(*a)),
                (IpAddr::V6(a), RecordType::AAAA) => RData::AAAA(AAAA(*a)),
                _ => continue,
            };
            if !out.iter().any(|r| r.data == data) {
                out.push(Record::from_rdata(owner.clone(), GLUE_TTL, data));
            }
        }
        out
    }
}

fn same_name(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// An authoritative response to `query` with its question (as sent: the
/// resolver checks its letters' case) and, when the query had EDNS, an OPT
/// advertising [`EDNS_PAYLOAD`].
pub(super) fn response(query: &Message, rcode: ResponseCode) -> Message {
    let mut m = Message::response(query.metadata.id, query.metadata.op_code);
    m.metadata.recursion_desired = query.metadata.recursion_desired;
    m.metadata.authoritative = rcode != ResponseCode::Refused;
    m.metadata.response_code = rcode;
    m.add_queries(query.queries.iter().cloned());
    if query.edns.is_some() {
        let mut e = Edns::new();
        e.set_max_payload(EDNS_PAYLOAD);
        m.set_edns(e);
    }
    m
}

/// What a flight's DNS answer finally said (for the counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// ANSWER: the whole answer stream.
    Answer,
    /// FETCH: it did not fit.
    Fetch,
    /// REJECT.
    Reject,
    /// Not even that fitted: truncated.
    Truncated,
}

/// The TXT answer to a flight query, within `budget` bytes: `payload` is
/// the TXT payload `kind || body` (the cached bytes, cut into
/// character-strings here without another copy of the whole). An ANSWER
/// that does not fit becomes FETCH, a REJECT whose records do not fit is
/// sent without them.
pub(super) fn flight_answer(query: &Message, payload: &[u8], budget: usize) -> (Vec<u8>, Sent) {
    let with = |p: &[u8]| {
        let mut m = response(query, ResponseCode::NoError);
        if let Some(q) = query.queries.first() {
            let txt = TXT::from_bytes(p.chunks(MAX_STRING).collect());
            m.answers
                .push(Record::from_rdata(q.name().clone(), 0, RData::TXT(txt)));
        }
        m.to_vec().ok()
    };
    let sent = match payload.first() {
        Some(1) => Sent::Answer,
        Some(3) => Sent::Reject,
        _ => Sent::Fetch,
    };
    if let Some(b) = with(payload).filter(|b| b.len() <= budget) {
        return (b, sent);
    }
    let smaller = match sent {
        Sent::Answer => Some((fetch(), Sent::Fetch)),
        Sent::Reject => bare_reject(payload).map(|p| (p, Sent::Reject)),
        _ => None,
    };
    if let Some((p, sent)) = smaller {
        if let Some(b) = with(&p).filter(|b| b.len() <= budget) {
            return (b, sent);
        }
    }
    (truncated(query), Sent::Truncated)
}

/// `m` encoded within `budget` bytes: else its question alone, truncated.
pub(super) fn encode(m: &Message, query: &Message, budget: usize) -> Vec<u8> {
    match m.to_vec() {
        Ok(b) if b.len() <= budget => b,
        _ => truncated(query),
    }
}

/// The question alone with TC set (never longer than the query).
fn truncated(query: &Message) -> Vec<u8> {
    let mut m = response(query, ResponseCode::NoError);
    m.metadata.truncation = true;
    m.to_vec().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hickory_proto::op::Query;
    use zrtt_proto::shortcut::TxtAnswer;

    const SITE: &str = "www.example.com";

    fn query(name: &str, rtype: RecordType) -> Message {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
        let mut e = Edns::new();
        e.set_max_payload(1232);
        m.set_edns(e);
        m
    }

    fn cfg() -> ZoneConfig {
        ZoneConfig {
            ns: None,
            glue: vec!["192.0.2.53".parse().unwrap(), "0.0.0.0".parse().unwrap()],
        }
    }

    fn reply(p: Plan) -> Message {
        match p {
            Plan::Reply(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn apex_answers_soa_and_ns_with_glue() {
        let sites = vec![SITE.to_owned()];
        let m = reply(cfg().plan(&query("zq.WWW.example.com.", RecordType::SOA), &sites));
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.authoritative);
        assert_eq!(m.queries[0].name().to_ascii(), "zq.WWW.example.com.");
        assert!(matches!(m.answers[0].data, RData::SOA(ref s) if s.minimum == NEGATIVE_TTL));
        let m = reply(cfg().plan(&query("zq.www.example.com.", RecordType::NS), &sites));
        assert!(
            matches!(m.answers[0].data, RData::NS(ref n) if n.0.to_ascii() == "ns.zq.www.example.com.")
        );
        assert_eq!(
            m.additionals.len(),
            1,
            "one address, the unspecified one left out"
        );
        let m = reply(cfg().plan(&query("ns.zq.www.example.com.", RecordType::A), &sites));
        assert!(matches!(m.answers[0].data, RData::A(a) if a.0.to_string() == "192.0.2.53"));
        let m = reply(cfg().plan(&query("ns.zq.www.example.com.", RecordType::AAAA), &sites));
        assert!(m.answers.is_empty() && m.authorities.len() == 1);
        let m = reply(cfg().plan(&query("zq.www.example.com.", RecordType::A), &sites));
        assert!(m.answers.is_empty());
        assert!(matches!(m.authorities[0].data, RData::SOA(_)));
        // A named name server: no glue of ours.
        let named = ZoneConfig {
            ns: Some("ns1.example.net.".into()),
            glue: cfg().glue,
        };
        let m = reply(named.plan(&query("zq.www.example.com.", RecordType::NS), &sites));
        assert!(
            matches!(m.answers[0].data, RData::NS(ref n) if n.0.to_ascii() == "ns1.example.net.")
        );
        assert!(m.additionals.is_empty());
    }

    #[test]
    fn partial_names_nxdomain_outside_refused() {
        let sites = vec![SITE.to_owned()];
        let label = "a".repeat(63);
        let m = reply(cfg().plan(
            &query(&format!("{label}.zq.www.example.com."), RecordType::A),
            &sites,
        ));
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
        assert!(matches!(m.authorities[0].data, RData::SOA(_)));
        assert_eq!(m.authorities[0].ttl, NEGATIVE_TTL);
        let m = reply(cfg().plan(&query("www.example.org.", RecordType::TXT), &sites));
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        let mut two = query("zq.www.example.com.", RecordType::SOA);
        two.add_query(Query::query(
            Name::from_ascii("zq.www.example.com.").unwrap(),
            RecordType::NS,
        ));
        let m = reply(cfg().plan(&two, &sites));
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
    }

    #[test]
    fn answers_shrink_to_the_budget() {
        let q = query("zq.www.example.com.", RecordType::TXT);
        let mut big = vec![1u8];
        big.extend_from_slice(&[0x42; 2000]);
        // Cut as the core cuts them.
        let (b, sent) = flight_answer(&q, &big, 65535);
        assert_eq!(sent, Sent::Answer);
        let back = Message::from_vec(&b).unwrap();
        let RData::TXT(t) = &back.answers[0].data else {
            panic!()
        };
        let strings: Vec<Vec<u8>> = t.txt_data.iter().map(|s| s.to_vec()).collect();
        assert_eq!(strings, TxtAnswer::Answer(vec![0x42; 2000]).to_strings());
        let (b, sent) = flight_answer(&q, &big, 700);
        assert_eq!(sent, Sent::Fetch);
        assert!(b.len() <= 700);
        let back = Message::from_vec(&b).unwrap();
        let RData::TXT(t) = &back.answers[0].data else {
            panic!()
        };
        let a = TxtAnswer::from_strings(t.txt_data.iter().map(|s| &s[..])).unwrap();
        assert_eq!(a, TxtAnswer::Fetch);
        let (b, sent) = flight_answer(&q, &big, 65535);
        assert_eq!(sent, Sent::Answer);
        assert!(b.len() > 2000);
        let (b, sent) = flight_answer(&q, &fetch(), 20);
        assert_eq!(sent, Sent::Truncated);
        assert!(Message::from_vec(&b).unwrap().metadata.truncation);
    }
}
