//! `zrtt dns`'s metrics (prometheus-client, under the `zrtt_dns` prefix):
//! queries by type, outcome and transport, answer latency, zone transfers,
//! NOTIFYs, key store reloads and rotations, the SOA serial. The binary
//! serves them on `--admin` (zrtt_net::admin; docs/DNS.md "Metrics").

use std::time::Duration;

use hickory_proto::op::{OpCode, ResponseCode};
use hickory_proto::rr::RecordType;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, ResponseInfo};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::RefreshReport;

/// A query's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    /// The question's type (`A`, `HTTPS`, `TXT`, ..., `Unknown`).
    pub r#type: &'static str,
    /// `answered` (NOERROR, records or none), `nxdomain`, `refused`,
    /// `truncated` (TC set), `error` (any other code).
    pub outcome: &'static str,
    /// `udp` or `tcp`.
    pub transport: &'static str,
}

/// A zone transfer's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransferLabels {
    /// `AXFR` or `IXFR`.
    pub r#type: &'static str,
    /// `served` or `refused`.
    pub outcome: &'static str,
}

/// An outcome label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `answered` or `failed`.
    pub outcome: &'static str,
}

/// A transport label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabels {
    /// `udp` or `tcp`.
    pub transport: &'static str,
}

/// Every metric of one `zrtt dns` process (cheap clones share the values).
#[derive(Debug)]
pub struct DnsMetrics {
    queries: Family<QueryLabels, Counter>,
    answer: Family<TransportLabels, Histogram>,
    transfers: Family<TransferLabels, Counter>,
    notifies: Family<OutcomeLabels, Counter>,
    reloads: Counter,
    rotations: Counter,
    updates: Counter,
    refresh_errors: Counter,
    serial: Gauge,
}

impl Default for DnsMetrics {
    fn default() -> Self {
        Self {
            queries: Family::default(),
            // 10 us doubling to about 0.65 s: most answers take tens of
            // microseconds (docs/DNS.md).
            answer: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_01, 2.0, 17))
            }),
            transfers: Family::default(),
            notifies: Family::default(),
            reloads: Counter::default(),
            rotations: Counter::default(),
            updates: Counter::default(),
            refresh_errors: Counter::default(),
            serial: Gauge::default(),
        }
    }
}

fn transport(p: Protocol) -> &'static str {
    match p {
        Protocol::Udp => "udp",
        _ => "tcp",
    }
}

impl DnsMetrics {
    /// Count one answered request and its latency (`elapsed`).
    pub(crate) fn answered(&self, request: &Request, info: &ResponseInfo, elapsed: Duration) {
        if request.metadata.op_code != OpCode::Query {
            return;
        }
        let transport = transport(request.protocol());
        let outcome = match info.response_code {
            _ if info.truncation => "truncated",
            ResponseCode::NoError => "answered",
            ResponseCode::NXDomain => "nxdomain",
            ResponseCode::Refused => "refused",
            _ => "error",
        };
        for q in request.queries.queries() {
            let qtype = q.query_type();
            if matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
                self.transfer(qtype, outcome != "refused");
            }
            self.queries
                .get_or_create(&QueryLabels {
                    r#type: qtype.into(),
                    outcome,
                    transport,
                })
                .inc();
        }
        self.answer
            .get_or_create(&TransportLabels { transport })
            .observe(elapsed.as_secs_f64());
    }

    fn transfer(&self, qtype: RecordType, served: bool) {
        self.transfers
            .get_or_create(&TransferLabels {
                r#type: qtype.into(),
                outcome: if served { "served" } else { "refused" },
            })
            .inc();
    }

    /// One NOTIFY sent: answered by the secondary or not.
    pub(crate) fn notified(&self, answered: bool) {
        let outcome = if answered { "answered" } else { "failed" };
        self.notifies
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// What a refresh of the key stores did; `serial` is the zone's.
    pub(crate) fn refreshed(&self, r: &RefreshReport, serial: u32) {
        self.reloads.inc_by(r.reloaded.len() as u64);
        self.rotations.inc_by(r.rotations.len() as u64);
        self.updates.inc_by(r.updated_hosts.len() as u64);
        self.refresh_errors.inc_by(r.errors.len() as u64);
        self.serial.set(i64::from(serial));
    }

    /// A registry holding every metric (shared, not copied), under the
    /// `zrtt_dns` prefix, with help texts.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("zrtt_dns");
        r.register(
            "queries",
            "Queries answered, by question type, outcome (answered, nxdomain, refused, truncated, error) and transport (udp, tcp)",
            self.queries.clone(),
        );
        r.register(
            "answer_seconds",
            "From a query's arrival to its answer being handed to the socket, by transport",
            self.answer.clone(),
        );
        r.register(
            "transfers",
            "Zone transfers (AXFR, IXFR) served or refused (source not in --allow-transfer)",
            self.transfers.clone(),
        );
        r.register(
            "notifies",
            "NOTIFY messages sent to secondaries after a serial change, answered or failed",
            self.notifies.clone(),
        );
        r.register(
            "keystore_reloads",
            "Key stores re-read because another process changed them",
            self.reloads.clone(),
        );
        r.register(
            "keystore_rotations",
            "Key store rotations that changed something (a key created, published or retired)",
            self.rotations.clone(),
        );
        r.register(
            "record_updates",
            "Key-carrying RRsets of a host or verifier replaced",
            self.updates.clone(),
        );
        r.register(
            "refresh_errors",
            "Key store reloads, rotations or record builds that failed (the previous records stay)",
            self.refresh_errors.clone(),
        );
        r.register(
            "serial",
            "The zone's current SOA serial",
            self.serial.clone(),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &DnsMetrics) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry()).unwrap_or_default();
        out
    }

    #[test]
    fn refresh_reports_and_notifies_are_counted() {
        let m = DnsMetrics::default();
        let r = RefreshReport {
            updated_hosts: vec!["www".into(), "verifier pv".into()],
            rotations: vec![("www".into(), "created 1".into())],
            reloaded: vec!["www".into()],
            errors: Vec::new(),
            serial: Some(1_800_000_000),
        };
        m.refreshed(&r, 1_800_000_000);
        m.notified(true);
        m.notified(false);
        m.transfer(RecordType::AXFR, false);
        let t = text(&m);
        for want in [
            "zrtt_dns_record_updates_total 2\n",
            "zrtt_dns_keystore_rotations_total 1\n",
            "zrtt_dns_keystore_reloads_total 1\n",
            "zrtt_dns_refresh_errors_total 0\n",
            "# TYPE zrtt_dns_serial gauge\n",
            "zrtt_dns_serial 1800000000\n",
            "zrtt_dns_notifies_total{outcome=\"answered\"} 1\n",
            "zrtt_dns_notifies_total{outcome=\"failed\"} 1\n",
            "zrtt_dns_transfers_total{type=\"AXFR\",outcome=\"refused\"} 1\n",
        ] {
            assert!(t.contains(want), "{want} in {t}");
        }
    }
}
