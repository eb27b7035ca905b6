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

mod client_hello;
mod limits;
pub use limits::SessionLimits;
mod seal;
mod session_cache;
pub(crate) use session_cache::SessionCache;
mod sessions;
mod shared;
pub use shared::{TlsSessions, DEFAULT_SESSION_TTL};
mod stream;

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;
use zrtt_proto::admission::Proof;

use super::early_answer::{EarlyCtl, Grant};
use super::gate::{read_within, Gate};
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
    let sessions = &shared.cfg.tls_sessions;
    let mut tcp = tcp;
    // In a fleet, the session a ClientHello offers is taken from the
    // fleet's store before rustls sees the ClientHello (shared.rs).
    // One deadline for the ClientHello: read here (in a fleet), then by
    // rustls.
    let hello_deadline = Instant::now() + t.first_flight;
    let mut hello = Vec::new();
    let mut fetched = None;
    if sessions.fleet() {
        let read = read_within(
            gate.socket(),
            t.gate,
            t.first_flight,
            read_hello(&mut tcp, &mut hello),
        )
        .await;
        match read {
            Some(Ok(Some(ticket))) => {
                let early = !gate.handshake_complete().unwrap_or(false);
                fetched = sessions.fetch(&ticket, peer.ip(), early, m).await;
            }
            Some(Ok(None)) => {}
            Some(Err(e)) => {
                tracing::debug!("TLS {peer}: {e}");
                return;
            }
            None => return,
        }
    }
    let early_ok = fetched.as_ref().is_none_or(|f| f.early);
    let view = SessionView::new(sessions.clone(), m.clone(), peer.ip(), fetched);
    let binding = view.binding_handle();
    let mut config = (*shared.cfg.tls).clone();
    config.session_storage = Arc::new(view);
    if sessions.fleet() {
        // Each ticket is a session in the fleet's store (docs/FLEET.md,
        // Capacity): one per handshake.
        config.send_tls13_tickets = 1;
    }
    if !early_ok {
        // Issued before the store's last failure: resumed, without 0-RTT.
        config.max_early_data_size = 0;
    }
    let conn = match rustls::ServerConnection::new(Arc::new(config)) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("TLS {peer}: {e}");
            return;
        }
    };
    let ctl = Arc::new(EarlyCtl::default());
    let mut tls = EarlyTls::new(tcp, conn, gate.clone(), m.clone(), ctl.clone());
    tls.feed(hello);
    tls.finish_within(t.gate);
    let hello = read_within(
        gate.socket(),
        t.gate,
        hello_deadline.saturating_duration_since(Instant::now()),
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
                    super::gate::within_first_window(budget, gate.socket()),
                    Grant {
                        admission: shared.admission.clone(),
                        peer: peer.ip(),
                    },
                );
            }
            Some(budget) => {
                Metrics::inc(&m.source_limited);
                // The grant goes back: nothing was sent on it.
                shared
                    .admission
                    .early_answer_released(peer.ip(), budget.unused(), Instant::now());
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

/// Read the ClientHello into `buf` (without processing it); the first PSK
/// identity it offers, if any.
async fn read_hello(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    loop {
        match client_hello::parse(buf) {
            client_hello::Hello::Complete(id) => return Ok(id),
            client_hello::Hello::Other => return Ok(None),
            client_hello::Hello::Partial => {}
        }
        let mut chunk = [0u8; 4096];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Fuzz entry point (fuzz/fuzz_targets/tls_sessions.rs): the ClientHello
/// reader, and a restart's sealed sessions, on arbitrary bytes.
#[doc(hidden)]
pub fn fuzz_tls_sessions(data: &[u8]) {
    use zrtt_proto::admission::{TokenKey, TokenKeyRing, TokenKeys};
    let _ = client_hello::parse(data);
    let sessions = TlsSessions::new(4, DEFAULT_SESSION_TTL);
    let key = TokenKey::new(&[1; 32], std::time::Duration::from_secs(60));
    sessions.attach(
        Some(TokenKeyRing::new(TokenKeys::single(key))),
        None,
        crate::client::system_clock,
        Arc::new(ring::rand::SystemRandom::new()),
    );
    sessions.adopt(data);
}
