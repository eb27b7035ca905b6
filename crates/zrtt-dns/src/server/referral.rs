//! Delegations inside the zone (RFC 1034 §4.3.2, step 3b): a query for a
//! name at or below a zone cut (an NS RRset at a name other than the
//! origin) is answered with a referral: no answer, AA clear, the cut's NS
//! RRset in the authority section and the glue (A and AAAA of name servers
//! inside the zone) in the additional section.
//!
//! hickory's in-memory zone handler answers such queries authoritatively
//! (AA set) and without glue, which a resolver cannot follow when the name
//! server's name is below the cut, as `ns.zq.<site>` is for the DNS
//! shortcut's zone (docs/DNS.md §8.6): unbound answered SERVFAIL. The cut
//! itself keeps being answered by the catalog for DS (the parent's record).

use hickory_proto::rr::{LowerName, RData, Record, RecordType, RrKey};

use crate::zone::Zone;

/// One zone cut: its NS records and their glue.
pub(super) struct Cut {
    name: LowerName,
    ns: Vec<Record>,
    glue: Vec<Record>,
}

impl Cut {
    /// The NS records (authority section).
    pub(super) fn ns(&self) -> &[Record] {
        &self.ns
    }

    /// The glue (additional section).
    pub(super) fn glue(&self) -> &[Record] {
        &self.glue
    }
}

/// The zone cuts of one zone (or one region's view of it).
#[derive(Default)]
pub(super) struct Cuts(Vec<Cut>);

impl Cuts {
    /// The cuts of `zone`, with glue from its records.
    pub(super) fn of(zone: &Zone) -> Self {
        let origin = LowerName::new(&zone.origin);
        let mut cuts = Vec::new();
        for (key, set) in &zone.records {
            if key.record_type != RecordType::NS || key.name == origin {
                continue;
            }
            let ns: Vec<Record> = set.records_without_rrsigs().cloned().collect();
            let mut glue = Vec::new();
            for r in &ns {
                let RData::NS(target) = &r.data else { continue };
                let target = LowerName::new(&target.0);
                if !origin.zone_of(&target) {
                    continue;
                }
                for rtype in [RecordType::A, RecordType::AAAA] {
                    if let Some(s) = zone.records.get(&RrKey::new(target.clone(), rtype)) {
                        glue.extend(s.records_without_rrsigs().cloned());
                    }
                }
            }
            cuts.push(Cut {
                name: key.name.clone(),
                ns,
                glue,
            });
        }
        Self(cuts)
    }

    /// The cut a query for `qname` of type `qtype` is referred to: the
    /// deepest one at or above `qname` (DS at the cut itself excepted).
    pub(super) fn find(&self, qname: &LowerName, qtype: RecordType) -> Option<&Cut> {
        self.0
            .iter()
            .filter(|c| c.name.zone_of(qname) && !(qtype == RecordType::DS && c.name == *qname))
            .max_by_key(|c| c.name.num_labels())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    #[test]
    fn names_at_or_below_a_cut_are_referred_with_in_zone_glue() {
        let zone = crate::zone::parse(
            "$ORIGIN example.com.\n$TTL 300\n@ IN SOA ns1 h 1 7200 900 1209600 5\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.10\nzq.www IN NS ns.zq.www\nzq.www IN NS ns.other.net.\nns.zq.www IN A 192.0.2.53\nns.zq.www IN AAAA 2001:db8::53\nsub IN NS ns.sub\nns.sub IN A 192.0.2.54\na.b.sub IN NS ns.b.sub\n",
            None,
            None,
        )
        .unwrap();
        let cuts = Cuts::of(&zone);
        let q = |n: &str, t| {
            cuts.find(&LowerName::from(Name::from_str(n).unwrap()), t)
                .map(|c| c.name.to_string())
        };
        assert_eq!(
            q("x.y.zq.www.example.com.", RecordType::TXT).as_deref(),
            Some("zq.www.example.com.")
        );
        assert_eq!(
            q("ZQ.WWW.example.com.", RecordType::NS).as_deref(),
            Some("zq.www.example.com.")
        );
        assert_eq!(
            q("ns.zq.www.example.com.", RecordType::A).as_deref(),
            Some("zq.www.example.com.")
        );
        assert_eq!(
            q("zq.www.example.com.", RecordType::DS),
            None,
            "DS at the cut is the parent's"
        );
        assert_eq!(
            q("x.zq.www.example.com.", RecordType::DS).as_deref(),
            Some("zq.www.example.com.")
        );
        assert_eq!(q("www.example.com.", RecordType::A), None);
        assert_eq!(
            q("example.com.", RecordType::NS),
            None,
            "the apex is no cut"
        );
        assert_eq!(
            q("c.a.b.sub.example.com.", RecordType::A).as_deref(),
            Some("a.b.sub.example.com."),
            "the deepest cut"
        );
        let cut = cuts
            .find(
                &LowerName::from(Name::from_str("q.zq.www.example.com.").unwrap()),
                RecordType::TXT,
            )
            .unwrap();
        assert_eq!(cut.ns().len(), 2);
        let glue: Vec<String> = cut.glue().iter().map(|r| r.data.to_string()).collect();
        assert_eq!(
            glue,
            vec!["192.0.2.53", "2001:db8::53"],
            "in-zone glue only"
        );
    }
}
