//! The request handler of `zrtt dns`: per-region views (regions.rs),
//! referrals below zone cuts (referral.rs), zone transfers refused per
//! source (transfer.rs), then hickory's catalog, with UDP answers held to
//! [`EDNS_PAYLOAD`].

use std::sync::{Arc, LazyLock};

use hickory_proto::op::Edns;
use hickory_server::net::runtime::Time;
use hickory_server::net::NetError;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{Catalog, MessageResponse};

use super::{referral, regions, DnsMetrics, TransferPolicy, EDNS_PAYLOAD};
use hickory_proto::rr::Record;

/// The request handler: hickory's catalog, with UDP answers held to
/// [`EDNS_PAYLOAD`].
pub struct Handler {
    /// The zone and its delegations (referral.rs).
    pub(super) default: (Catalog, referral::Cuts),
    /// Per-region views, by source prefixes (regions.rs).
    pub(super) views: Vec<(Vec<ipnet::IpNet>, (Catalog, referral::Cuts))>,
    pub(super) transfer: Arc<TransferPolicy>,
    pub(super) metrics: Arc<DnsMetrics>,
}

static EDNS_ADVERTISED: LazyLock<Edns> = LazyLock::new(|| {
    let mut e = Edns::new();
    e.set_max_payload(EDNS_PAYLOAD);
    e
});

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        let started = std::time::Instant::now();
        let info = self.answer::<R, T>(request, response_handle).await;
        self.metrics.answered(request, &info, started.elapsed());
        info
    }
}

impl Handler {
    async fn answer<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        let transfer = request
            .queries
            .queries()
            .iter()
            .any(|q| crate::transfer::is_transfer(q.query_type()));
        if transfer && !self.transfer.allows(request.src().ip()) {
            tracing::info!("zone transfer from {} refused", request.src());
            let response =
                hickory_server::zone_handler::MessageResponseBuilder::new(&request.queries, None)
                    .error_msg(&request.metadata, hickory_proto::op::ResponseCode::Refused);
            let mut h = response_handle;
            return match h.send_response(response).await {
                Ok(r) => r,
                Err(_) => unsent(request, hickory_proto::op::ResponseCode::Refused),
            };
        }
        let (catalog, cuts) =
            regions::pick(&self.views, request.src().ip()).unwrap_or(&self.default);
        if let [q] = request.queries.queries() {
            if let Some(cut) = cuts.find(q.name(), q.query_type()) {
                return refer(request, cut, response_handle).await;
            }
        }
        catalog
            .handle_request::<_, T>(request, ClampPayload(response_handle))
            .await
    }
}

/// A referral to `cut` (referral.rs): no answer, AA clear, NS and glue.
async fn refer<R: ResponseHandler>(
    request: &Request,
    cut: &referral::Cut,
    response_handle: R,
) -> ResponseInfo {
    let mut metadata = hickory_proto::op::Metadata::response_from_request(&request.metadata);
    metadata.authoritative = false;
    metadata.response_code = hickory_proto::op::ResponseCode::NoError;
    let edns = request.edns.as_ref().map(|_| &*EDNS_ADVERTISED);
    let response = hickory_server::zone_handler::MessageResponseBuilder::new(
        &request.queries,
        edns,
    )
    .build(metadata, [], cut.ns(), [], cut.glue());
    let mut h = ClampPayload(response_handle);
    match h.send_response(response).await {
        Ok(info) => info,
        Err(_) => unsent(request, hickory_proto::op::ResponseCode::ServFail),
    }
}

/// What the metrics record for an answer that could not be sent.
fn unsent(request: &Request, rcode: hickory_proto::op::ResponseCode) -> ResponseInfo {
    let mut metadata = hickory_proto::op::Metadata::new(
        request.metadata.id,
        hickory_proto::op::MessageType::Response,
        request.metadata.op_code,
    );
    metadata.response_code = rcode;
    ResponseInfo::from(hickory_proto::op::Header {
        metadata,
        counts: Default::default(),
    })
}

/// Replaces a response's OPT record advertising more than
/// [`EDNS_PAYLOAD`] with one advertising exactly that, which also makes the
/// encoder truncate (TC) UDP answers at that size.
#[derive(Clone)]
struct ClampPayload<R>(R);

#[async_trait::async_trait]
impl<R: ResponseHandler> ResponseHandler for ClampPayload<R> {
    async fn send_response<'a>(
        &mut self,
        mut response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        if let Some(e) = response.edns() {
            if e.max_payload() > EDNS_PAYLOAD
                && e.rcode_high() == 0
                && e.options().as_ref().is_empty()
            {
                response.set_edns(&EDNS_ADVERTISED);
            }
        }
        self.0.send_response(response).await
    }
}
