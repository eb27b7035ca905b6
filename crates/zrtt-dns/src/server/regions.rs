//! Answers per client region (`[[region]]` in `zrtt dns`'s config): a
//! query whose source address falls in a region's prefixes is answered from
//! that region's view of the zone, where the A and AAAA records of the names
//! the region lists are replaced by the region's addresses (and the HTTPS
//! records' address hints follow them). Everything else, the key records
//! above all, is the same in every view.
//!
//! This is how the DNS shortcut's delegation sends resolvers to the nearest
//! gateway (docs/DNS.md §8.6, ASAP §3.3): the glue of `ns.zq.<site>` and the
//! site's own address differ per region. The source is the resolver's
//! address (no EDNS Client Subnet is read). Zone transfers carry the default
//! view only: a secondary answers every region alike unless it has its own
//! per-region mechanism (Knot's `geoip` module, BIND's views).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordSet, RecordType, RrKey};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, ZoneType};
use ipnet::IpNet;
use serde::Deserialize;

use super::ServerError;
use crate::records::{self, HttpsOptions};
use crate::zone::Zone;

/// TTL of a region's address records for a name the zone has no address for.
const DEFAULT_TTL: u32 = 60;

/// One region, as written in the config file:
///
/// ```toml
/// [[region]]
/// name = "asia"
/// sources = ["198.18.2.0/24", "2001:db8:2::/48"]
/// [region.addresses]
/// "www.example.com" = ["198.18.3.1"]
/// "ns.zq.www.example.com" = ["198.18.3.1"]
/// ```
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegionConfig {
    /// A name for logs and metrics.
    pub name: String,
    /// Source prefixes (CIDR) of the resolvers in this region.
    pub sources: Vec<String>,
    /// Names (in the zone) and the addresses answered for them here; each
    /// list replaces the zone's A and AAAA records of that name.
    #[serde(default)]
    pub addresses: BTreeMap<String, Vec<IpAddr>>,
}

/// One region's view: its prefixes, its zone and the handler serving it.
pub(super) struct View {
    pub(super) name: String,
    pub(super) nets: Vec<IpNet>,
    pub(super) zone: Zone,
    pub(super) handler: Arc<InMemoryZoneHandler>,
    /// HTTPS options per host (configuration order), with this view's hints.
    pub(super) opts: Vec<HttpsOptions>,
}

impl View {
    /// Build the view of `region` over `zone`; `hosts` are the hosts' names
    /// and default HTTPS options (configuration order).
    pub(super) fn new(
        region: &RegionConfig,
        zone: &Zone,
        hosts: &[(Name, &HttpsOptions)],
    ) -> Result<Self, ServerError> {
        let bad = |what: String| ServerError::Config(format!("region {}: {what}", region.name));
        if region.sources.is_empty() {
            return Err(bad("no sources".into()));
        }
        let nets = region
            .sources
            .iter()
            .map(|s| {
                s.parse::<IpNet>().map(|n| n.trunc()).map_err(|e| {
                    bad(format!(
                        "source {s:?}: {e} (want a prefix like 192.0.2.0/24)"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut view = zone.clone();
        for (host, addrs) in &region.addresses {
            let name = records::fqdn(host).map_err(|e| bad(e.to_string()))?;
            if !zone.origin.zone_of(&name) {
                return Err(bad(format!("{host} is not in the zone {}", zone.origin)));
            }
            if addrs.is_empty() {
                return Err(bad(format!("{host}: no addresses")));
            }
            let lower = LowerName::new(&name);
            for rtype in [RecordType::A, RecordType::AAAA] {
                let key = RrKey::new(lower.clone(), rtype);
                let ttl = zone
                    .records
                    .get(&key)
                    .or_else(|| zone.records.get(&RrKey::new(lower.clone(), RecordType::A)))
                    .or_else(|| {
                        zone.records
                            .get(&RrKey::new(lower.clone(), RecordType::AAAA))
                    })
                    .map_or(DEFAULT_TTL, |s| s.ttl());
                view.records.remove(&key);
                let mut set = RecordSet::with_ttl(name.clone(), rtype, ttl);
                for ip in addrs {
                    let data = match (rtype, ip) {
                        (RecordType::A, IpAddr::V4(a)) => RData::A(A(*a)),
                        (RecordType::AAAA, IpAddr::V6(a)) => RData::AAAA(AAAA(*a)),
                        _ => continue,
                    };
                    set.insert(Record::from_rdata(name.clone(), ttl, data), zone.serial);
                }
                if !set.is_empty() {
                    view.records.insert(key, set);
                }
            }
        }
        let opts = hosts
            .iter()
            .map(|(host, o)| {
                let (v4, v6) = view.addresses(host);
                HttpsOptions {
                    ipv4_hints: v4,
                    ipv6_hints: v6,
                    ..(*o).clone()
                }
            })
            .collect();
        let handler = InMemoryZoneHandler::new(
            view.origin.clone(),
            view.records.clone(),
            ZoneType::Primary,
            AxfrPolicy::AllowAll,
        )
        .map_err(|e| bad(format!("zone {}: {e}", view.origin)))?;
        Ok(Self {
            name: region.name.clone(),
            nets,
            zone: view,
            handler: Arc::new(handler),
            opts,
        })
    }
}

/// Which of `views` answers a query from `src`: the one with the longest
/// prefix containing it (the first listed on a tie); `None` for the
/// default view.
pub(super) fn pick<T>(views: &[(Vec<IpNet>, T)], src: IpAddr) -> Option<&T> {
    let mut best: Option<(u8, &T)> = None;
    for (nets, v) in views {
        for n in nets {
            if n.contains(&src) && best.is_none_or(|(len, _)| n.prefix_len() > len) {
                best = Some((n.prefix_len(), v));
            }
        }
    }
    best.map(|(_, v)| v)
}

/// Install `updates` (RRsets to set, `None` to remove) in `handler` and bump
/// its SOA serial at `now_secs`; returns the new serial, if it changed.
pub(super) async fn apply(
    handler: &InMemoryZoneHandler,
    origin: &Name,
    updates: &[BTreeMap<RrKey, Option<RecordSet>>],
    now_secs: u32,
) -> Option<u32> {
    let mut map = handler.records_mut().await;
    for sets in updates {
        for (k, set) in sets {
            match set {
                Some(s) => {
                    map.insert(k.clone(), Arc::new(s.clone()));
                }
                None => {
                    map.remove(k);
                }
            }
        }
    }
    // Secondaries transfer only a newer serial.
    let key = crate::transfer::soa_key(origin);
    let (soa, serial) = map
        .get(&key)
        .and_then(|s| crate::transfer::bumped_soa(s, now_secs))?;
    map.insert(key, Arc::new(soa));
    Some(serial)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn the_longest_prefix_wins_and_outsiders_get_the_default() {
        let views = vec![
            (nets(&["10.0.0.0/8"]), "wide"),
            (nets(&["10.1.0.0/16", "2001:db8::/32"]), "narrow"),
            (nets(&["10.1.0.0/16"]), "tie"),
        ];
        let at = |s: &str| pick(&views, s.parse().unwrap()).copied();
        assert_eq!(at("10.2.3.4"), Some("wide"));
        assert_eq!(at("10.1.3.4"), Some("narrow"));
        assert_eq!(at("2001:db8::1"), Some("narrow"));
        assert_eq!(at("192.0.2.1"), None);
        assert_eq!(at("::1"), None);
    }

    #[test]
    fn a_view_replaces_the_listed_names_addresses_and_their_hints() {
        let zone = crate::zone::parse(
            "$ORIGIN example.com.\n$TTL 300\n@ IN SOA ns1 h 1 7200 900 1209600 5\n  IN NS ns1\nns1 IN A 192.0.2.1\nwww 120 IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\n",
            None,
            None,
        )
        .unwrap();
        let region = RegionConfig {
            name: "asia".into(),
            sources: vec!["198.18.2.7/24".into()],
            addresses: BTreeMap::from([
                (
                    "www.example.com".into(),
                    vec!["198.51.100.7".parse().unwrap()],
                ),
                (
                    "ns.zq.www.example.com".into(),
                    vec!["198.51.100.8".parse().unwrap()],
                ),
            ]),
        };
        let www = records::fqdn("www.example.com").unwrap();
        let opts = HttpsOptions {
            alpn: vec!["h2".into()],
            port: None,
            ipv4_hints: vec!["192.0.2.10".parse().unwrap()],
            ipv6_hints: vec!["2001:db8::10".parse().unwrap()],
        };
        let v = View::new(&region, &zone, &[(www.clone(), &opts)]).unwrap();
        assert_eq!(v.nets, nets(&["198.18.2.0/24"]));
        // Only the listed family is answered: the AAAA is gone.
        assert_eq!(
            v.zone.addresses(&www),
            (vec!["198.51.100.7".parse().unwrap()], vec![])
        );
        let a = v
            .zone
            .records
            .get(&RrKey::new(LowerName::new(&www), RecordType::A))
            .unwrap();
        assert_eq!(a.ttl(), 120, "the zone's TTL for the name is kept");
        let ns = records::fqdn("ns.zq.www.example.com").unwrap();
        let glue = v
            .zone
            .records
            .get(&RrKey::new(LowerName::new(&ns), RecordType::A))
            .unwrap();
        assert_eq!(glue.ttl(), DEFAULT_TTL);
        assert_eq!(
            v.opts[0].ipv4_hints,
            vec!["198.51.100.7".parse::<std::net::Ipv4Addr>().unwrap()]
        );
        assert!(v.opts[0].ipv6_hints.is_empty());
        assert_eq!(v.opts[0].alpn, vec!["h2".to_owned()]);
        // The default zone is untouched.
        assert_eq!(
            zone.addresses(&www).0,
            vec!["192.0.2.10".parse::<std::net::Ipv4Addr>().unwrap()]
        );
    }

    #[test]
    fn regions_are_read_from_the_config_file() {
        let c: super::super::DnsConfig = toml::from_str(
            "zone = \"z\"\n[[region]]\nname = \"asia\"\nsources = [\"198.18.2.0/24\"]\n[region.addresses]\n\"www.example.com\" = [\"198.18.3.1\", \"2001:db8::1\"]\n",
        )
        .unwrap();
        assert_eq!(c.regions.len(), 1);
        assert_eq!(c.regions[0].name, "asia");
        assert_eq!(c.regions[0].addresses["www.example.com"].len(), 2);
        let typo = toml::from_str::<super::super::DnsConfig>(
            "[[region]]\nname = \"a\"\nsource = [\"10.0.0.0/8\"]\n",
        );
        assert!(typo.unwrap_err().to_string().contains("source"));
    }

    #[test]
    fn bad_regions_say_what_is_wrong() {
        let zone = crate::zone::parse(
            "$ORIGIN example.com.\n@ 300 IN SOA ns1 h 1 7200 900 1209600 5\n",
            None,
            None,
        )
        .unwrap();
        let r = |sources: Vec<&str>, host: &str, addrs: Vec<&str>| RegionConfig {
            name: "r".into(),
            sources: sources.into_iter().map(Into::into).collect(),
            addresses: BTreeMap::from([(
                host.to_owned(),
                addrs.into_iter().map(|a| a.parse().unwrap()).collect(),
            )]),
        };
        let err = |c: RegionConfig| View::new(&c, &zone, &[]).err().unwrap().to_string();
        assert!(err(r(vec![], "www.example.com", vec!["192.0.2.1"])).contains("no sources"));
        assert!(
            err(r(vec!["10.0.0.0/33"], "www.example.com", vec!["192.0.2.1"]))
                .contains("source \"10.0.0.0/33\"")
        );
        assert!(
            err(r(vec!["10.0.0.0/8"], "www.example.org", vec!["192.0.2.1"]))
                .contains("not in the zone")
        );
        assert!(err(r(vec!["10.0.0.0/8"], "www.example.com", vec![])).contains("no addresses"));
    }
}
