//! The TLS path on the zrtt port: TLS clients (and zrtt clients that fell
//! back) get the same backend, over HTTP/2 or HTTP/1.1 (ALPN).
//!
//! A ClientHello that rode in the SYN (TCP Fast Open) is processed at once,
//! but nothing goes back before the TCP handshake completes unless the
//! client resumes a session issued to the address it comes from
//! ([`sessions`]): then, within the admission policy's budgets, the server
//! flight and the answer to one safe early request go out as for a proven
//! zrtt client, one round trip in all, as nginx does for TLS 1.3 0-RTT
//! with a Fast Open cookie ([`stream`]).

mod session_cache;
pub(crate) use session_cache::SessionCache;
mod sessions;
mod stream;

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;
use zrtt_proto::admission::Proof;

use super::early_answer::{EarlyCtl, Grant};
use super::gate::Gate;
use super::listener::SourceSlot;
use super::{relay, Metrics, Shared};
use sessions::{Binding, SessionView};
use stream::EarlyTls;

/// Serve one TLS connection (`active` connections open, this one included).
pub(super) async fn serve(
    shared: &Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    gate_fd: Arc<OwnedFd>,
    active: usize,
    slot: Arc<SourceSlot>,
) {
    let t = &shared.cfg.timeouts;
    let m = &shared.metrics;
    Metrics::inc(&m.tls_connections);
    let gate = match Gate::new(gate_fd, false, t.gate) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            tracing::warn!("TLS {peer}: {e}");
            return;
        }
    };
    // Each connection sees the session cache through its own address.
    // The address the client reached (a PROXY v2 header's destination).
    let local = tcp
        .local_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let view = SessionView::new(shared.cfg.tls.session_storage.clone(), peer.ip());
    let binding = view.binding_handle();
    let mut config = (*shared.cfg.tls).clone();
    config.session_storage = Arc::new(view);
    let conn = match rustls::ServerConnection::new(Arc::new(config)) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("TLS {peer}: {e}");
            return;
        }
    };
    let ctl = Arc::new(EarlyCtl::default());
    let mut tls = EarlyTls::new(tcp, conn, gate.clone(), m.clone(), ctl.clone());
    tls.finish_within(t.gate);
    let hello = super::gate::read_within(
        gate.socket(),
        t.gate,
        t.first_flight,
        tls.read_client_hello(),
    )
    .await;
    match hello {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::debug!("TLS {peer}: {e}");
            return;
        }
        None => return,
    }
    let resumed = tls.connection().handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    if resumed {
        Metrics::inc(&m.tls_resumed);
    }
    // Answer before the TCP handshake only a session issued to this address.
    let binding = sessions::decode(binding.load(Ordering::Acquire));
    let bound = binding == Binding::Bound;
    tracing::debug!(
        "TLS {peer}: resumed {resumed} ({binding:?}), TCP handshake complete {:?}, {} bytes before the first flight",
        gate.handshake_complete(),
        tls.received()
    );
    if bound && !gate.handshake_complete().unwrap_or(false) {
        let intake = shared.admission.intake(active, Instant::now());
        let d = shared.admission.decide_proven(
            intake,
            peer.ip(),
            Proof::TlsTicket,
            tls.received(),
            Instant::now(),
        );
        match d.budget {
            Some(budget) if slot.claim() => {
                gate.set_proven();
                Metrics::inc(&m.tls_answered_early);
                tls.answer_early(
                    budget,
                    Grant {
                        admission: shared.admission.clone(),
                        peer: peer.ip(),
                    },
                );
            }
            Some(_) => {
                Metrics::inc(&m.source_limited);
                return;
            }
            None if d.withheld.is_some() => Metrics::inc(&m.early_withheld_budget),
            None => Metrics::inc(&m.zrtt_forced_gating),
        }
    }
    let protocol = match tls.connection().alpn_protocol() {
        Some(b"h2") => relay::Protocol::Http2,
        _ => relay::Protocol::Http1,
    };
    if protocol == relay::Protocol::Http2 {
        Metrics::inc(&m.tls_h2_connections);
    }
    let early = tls.early_data_accepted();
    if early {
        Metrics::inc(&m.tls_early_data);
        // One safe HTTP/1.1 request may be served from early data; HTTP/2
        // early data waits for the client's Finished.
        if protocol == relay::Protocol::Http1 {
            tls.serve_early_request();
        }
    }
    let bound = tls.connection().server_name().map(str::to_owned);
    relay::serve_http(
        shared.clone(),
        tls,
        (peer, local),
        gate,
        usize::from(early && protocol == relay::Protocol::Http1),
        Some(ctl),
        slot,
        protocol,
        "tls",
        bound,
    )
    .await;
}
