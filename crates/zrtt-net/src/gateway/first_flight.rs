//! Where a first flight is accepted: read it, let the admission policy
//! decide whether to decrypt it, decrypt and check it for replay, then
//! decide whether its address is proven and how many bytes it may get
//! before the handshake (the policy itself is sans-IO:
//! [`zrtt_proto::admission`]).

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zrtt_proto::admission::{
    canonical_ip, Decision, FlightEvidence, Proof, ProvenanceOutcome, Withheld,
};
use zrtt_proto::handshake::{
    encode_reject, ext, read_frame, Expect, Extensions, Frame, Pattern, RejectReason, Transport,
};
use zrtt_proto::replay::ReplayFilter;
use zrtt_proto::ReplayError;

use super::early_answer::{EarlyAnswer, EarlyCtl, EarlyUse, Grant, TokenIssue};
use super::gate::Gate;
use super::listener::SourceSlot;
use super::replay_store::StoreVerdict;
use super::{early_rules, relay, Metrics, Shared};
use crate::error::{Error, Result};

async fn read_first_flight(
    tcp: &mut TcpStream,
    fd: &OwnedFd,
    t: &super::Timeouts,
) -> Result<(Vec<u8>, usize)> {
    let mut buf = Vec::with_capacity(2048);
    let read = async {
        loop {
            match read_frame(&buf, Expect::FirstFlight) {
                Ok(Some((_, used))) => return Ok(used),
                Ok(None) => {}
                Err(_) => return Err(Error::Protocol("not a first flight")),
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tcp
                .read(&mut chunk)
                .await
                .map_err(Error::io("reading first flight"))?;
            if n == 0 {
                return Err(Error::NoAnswer);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let used = super::gate::read_within(fd.as_fd(), t.gate, t.first_flight, read)
        .await
        .ok_or(Error::Timeout("first flight"))??;
    Ok((buf, used))
}

/// Send a refusal once the handshake has completed (an unproven address
/// gets nothing before), then close.
async fn send_gated(tcp: &mut TcpStream, gate: &Gate, bytes: &[u8], metrics: &Metrics) {
    if gate.wait_to_send().await.is_err() {
        Metrics::inc(&metrics.gate_timeouts);
        return;
    }
    let _ = tcp.write_all(bytes).await;
    let _ = tcp.shutdown().await;
}

/// Count what the admission decision checked and concluded.
fn record(m: &Metrics, d: &Decision, peer: SocketAddr) {
    match &d.token {
        Some(Ok(())) => Metrics::inc(&m.tokens_accepted),
        Some(Err(e)) => {
            Metrics::inc(&m.tokens_refused);
            tracing::debug!("token from {peer} refused: {e}");
        }
        None => {}
    }
    match &d.provenance {
        Some(ProvenanceOutcome::Accepted { signatures_checked }) => {
            Metrics::inc(&m.provenance_accepted);
            if *signatures_checked == 0 {
                Metrics::inc(&m.provenance_cache_hits);
            }
        }
        Some(ProvenanceOutcome::Refused(e)) => {
            Metrics::inc(&m.provenance_refused);
            tracing::debug!("provenance from {peer} refused: {e}");
        }
        Some(ProvenanceOutcome::SkippedUnderLoad) => Metrics::inc(&m.provenance_skipped),
        Some(ProvenanceOutcome::Overloaded) => {
            // Overload defence: served on the gated path, never refused.
            Metrics::inc(&m.provenance_overload);
            tracing::debug!("provenance check rate exceeded: {peer} answered after the handshake");
        }
        None => {}
    }
    if d.forced_gating {
        Metrics::inc(&m.zrtt_forced_gating);
    }
    match d.withheld {
        Some(Withheld::CoolingDown) => Metrics::inc(&m.early_withheld_cooldown),
        Some(_) => Metrics::inc(&m.early_withheld_budget),
        None => {}
    }
}

/// With a shared replay store (docs/FLEET.md): record the flight the
/// local filter accepted; the refusal to send if the store saw it before
/// (`Replay`) or cannot vouch for it (`Busy`: fail safe). The replay
/// filter's lock is not held here.
pub(super) async fn check_store(
    shared: &Shared,
    accepted: &zrtt_proto::handshake::Accepted,
    now: zrtt_proto::UnixTime,
) -> Option<zrtt_proto::handshake::Refusal> {
    let store = shared.cfg.replay_store.as_ref()?;
    let m = &shared.metrics;
    let t0 = Instant::now();
    let verdict = store
        .check(
            accepted.header.key_id,
            &accepted.client_ephemeral,
            accepted.timestamp,
        )
        .await;
    m.latency.replay_store.observe(t0.elapsed().as_secs_f64());
    let error = match verdict {
        StoreVerdict::Fresh => return None,
        StoreVerdict::Replayed => {
            Metrics::inc(&m.replay_store_replays);
            ReplayError::Replayed
        }
        StoreVerdict::Unavailable(why) => {
            Metrics::inc(&m.replay_store_unavailable);
            tracing::debug!("replay store: {why}");
            ReplayError::StoreUnavailable
        }
    };
    let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
    Some(keys.replay_refusal(error, now))
}

/// Serve one zrtt connection (`active` connections open, this one included).
pub(super) async fn serve(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    gate_fd: Arc<OwnedFd>,
    active: usize,
    slot: Arc<SourceSlot>,
) -> Result<()> {
    let m = &shared.metrics;
    let t = shared.cfg.timeouts;
    let (buf, used) = match read_first_flight(&mut tcp, &gate_fd, &t).await {
        Ok(v) => v,
        Err(e) => {
            Metrics::inc(&m.zrtt_silent_drops);
            return Err(e);
        }
    };
    Metrics::inc(&m.zrtt_flights);
    let frame = match read_frame(&buf[..used], Expect::FirstFlight) {
        Ok(Some((f, _))) => f,
        _ => return Err(Error::Protocol("first flight")),
    };
    // A shortcut flight (docs/DNS.md §8) is never relayed as a channel:
    // its answer stream, once the handshake completed, then close.
    if matches!(&frame, Frame::FirstFlight { header, .. } if header.pattern == Pattern::Shortcut) {
        super::shortcut::serve_tcp(shared, tcp, peer, gate_fd, slot, &buf[..used]).await;
        return Ok(());
    }
    let intake = shared.admission.intake(active, Instant::now());
    if intake.is_busy() {
        Metrics::inc(&m.zrtt_busy);
        let gate = Gate::new(gate_fd, false, t.gate)?;
        send_gated(&mut tcp, &gate, &encode_reject(RejectReason::Busy, &[]), m).await;
        return Ok(());
    }
    let now = (shared.cfg.clock)();
    let (result, bound) = {
        let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
        // Locked per call, not across decryption (zrtt_proto::replay: the
        // `ReplayFilter` impl of `&Mutex`): accepts on several cores decrypt
        // in parallel; of copies of one flight at most one is recorded.
        let mut replay: &std::sync::Mutex<dyn ReplayFilter> = &shared.cfg.replay;
        let result = keys.accept(
            &frame,
            Transport::Tcp,
            now,
            &mut replay,
            shared.cfg.rng.as_ref(),
        );
        // The site the flight was encrypted for: its key record's name
        // (a resumed flight: its ticket's, which a live record matched).
        let bound = result.as_ref().ok().and_then(|a| match &a.resumed {
            Some(r) => Some(r.binding.name.clone()),
            None => keys
                .keys()
                .iter()
                .find(|k| k.record.body.key_id == a.header.key_id)
                .map(|k| k.record.body.name.clone()),
        });
        (result, bound)
    };
    if result.as_ref().is_ok_and(|a| a.on_previous_record) {
        Metrics::inc(&m.zrtt_on_previous_record);
    }
    match &result {
        Ok(a) if a.resumed.is_some() => Metrics::inc(&m.zrtt_resumed),
        Err(r)
            if matches!(
                r.error,
                zrtt_proto::Error::Handshake(zrtt_proto::HandshakeError::TicketRefused(_))
            ) =>
        {
            Metrics::inc(&m.zrtt_tickets_refused)
        }
        _ => {}
    }
    let accepted = match result {
        Ok(a) => match check_store(shared, &a, now).await {
            None => a,
            Some(refusal) => {
                tracing::debug!("first flight from {peer} refused: {}", refusal.error);
                if let Some(bytes) = refusal.reply {
                    Metrics::inc(&m.zrtt_rejects_sent);
                    let gate = Gate::new(gate_fd, false, t.gate)?;
                    send_gated(&mut tcp, &gate, &bytes, m).await;
                }
                return Ok(());
            }
        },
        Err(refusal) => {
            tracing::debug!("first flight from {peer} refused: {}", refusal.error);
            match refusal.reply {
                Some(bytes) => {
                    Metrics::inc(&m.zrtt_rejects_sent);
                    let gate = Gate::new(gate_fd, false, t.gate)?;
                    send_gated(&mut tcp, &gate, &bytes, m).await;
                }
                None => Metrics::inc(&m.zrtt_silent_drops),
            }
            return Ok(());
        }
    };
    // The application protocol the flight asked for (docs/PROTOCOL.md
    // §4.2): one this gateway does not serve is refused like an
    // unsupported AEAD, with the current records.
    let Some(protocol) = early_rules::flight_protocol(&accepted.extensions, shared.cfg.zrtt_http2)
    else {
        tracing::debug!("first flight from {peer}: ALPN not served");
        Metrics::inc(&m.zrtt_rejects_sent);
        let records = {
            let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
            keys.retry_records(now)
        };
        let gate = Gate::new(gate_fd, false, t.gate)?;
        let reject = encode_reject(RejectReason::Unsupported, &records);
        send_gated(&mut tcp, &gate, &reject, m).await;
        return Ok(());
    };
    Metrics::inc(&m.zrtt_accepted);
    if protocol == relay::Protocol::Http2 {
        Metrics::inc(&m.zrtt_h2_connections);
    }
    let policy = shared
        .cfg
        .provenance
        .as_ref()
        .map(|p| p.read().unwrap_or_else(|p| p.into_inner()).clone());
    // A resumed flight from the address its ticket was issued to is as
    // proven as a token's (docs/PROTOCOL.md §12.5).
    let ticket_proves = accepted
        .resumed
        .as_ref()
        .is_some_and(|r| r.address == canonical_ip(peer.ip()));
    let decision = if ticket_proves {
        shared
            .admission
            .decide_proven(intake, peer.ip(), Proof::ZrttTicket, used, Instant::now())
    } else {
        shared.admission.decide(
            intake,
            &FlightEvidence::of(&accepted, peer.ip(), used),
            policy.as_deref(),
            now,
            Instant::now(),
        )
    };
    record(m, &decision, peer);
    // A proven source is real before its handshake completes; an unproven
    // one takes its place once it has (in the relay).
    // A grant that will not be used goes back (admission, released).
    let release = |budget: Option<zrtt_proto::admission::AmplificationBudget>| {
        if let Some(b) = budget {
            shared
                .admission
                .early_answer_released(peer.ip(), b.unused(), Instant::now());
        }
    };
    if decision.answers_early() && !slot.claim() {
        Metrics::inc(&m.source_limited);
        release(decision.budget);
        return Ok(());
    }
    let gate = match Gate::new(gate_fd, decision.answers_early(), t.gate) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            release(decision.budget);
            return Err(e);
        }
    };
    let issue = match (&shared.cfg.admission.tokens, accepted.client_static) {
        (Some(ring), Some(client_static)) => Some(TokenIssue {
            // The key in force when the flight was accepted seals its token.
            key: ring.keys().current().clone(),
            ip: peer.ip(),
            client_static,
            rng: shared.cfg.rng.clone(),
            clock: shared.cfg.clock,
        }),
        _ => None,
    };
    let mut reply_exts = Extensions::new();
    if accepted.ticket_requested() {
        let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
        match keys.grant_ticket(&accepted, peer.ip(), now, shared.cfg.rng.as_ref()) {
            Ok(Some(grant)) => {
                reply_exts.set(ext::RESUMPTION, grant);
                Metrics::inc(&m.zrtt_tickets_granted);
            }
            Ok(None) => {}
            Err(e) => tracing::debug!("resumption ticket for {peer}: {e}"),
        }
    }
    // How many requests began in the replayable bytes (at most one on
    // HTTP/1.1; HTTP/2: the HEADERS frames that started there).
    let (early_use, early_requests) = match protocol {
        relay::Protocol::Http1 => {
            let u = early_rules::early_use(&accepted.early_data);
            let served = !accepted.early_data.is_empty() && u == EarlyUse::Serve;
            (u, usize::from(served))
        }
        relay::Protocol::Http2 => early_rules::early_use_h2(&accepted.early_data),
    };
    if !accepted.early_data.is_empty() && early_use == EarlyUse::Hold {
        Metrics::inc(&m.early_data_held);
    }
    let ctl = Arc::new(EarlyCtl::default());
    // The address the client reached (a PROXY v2 header's destination).
    let local = tcp
        .local_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let leftover = buf[used..].to_vec();
    let stream = EarlyAnswer::new(
        tcp,
        accepted,
        leftover,
        gate.clone(),
        m.clone(),
        (issue, reply_exts),
        decision.budget,
        early_use,
        ctl.clone(),
        t.first_flight,
        decision.budget.map(|_| Grant {
            admission: shared.admission.clone(),
            peer: peer.ip(),
        }),
    );
    // The Reply leaves within REPLY_BOUND of when it may (reply_timer.rs).
    let timer = (early_requests > 0).then(|| (gate.clone(), ctl.clone()));
    let serve = relay::serve_http(
        shared.clone(),
        stream,
        (peer, local),
        gate,
        early_requests,
        Some(ctl),
        slot,
        protocol,
        "zrtt",
        bound,
    );
    super::reply_timer::serve_bounded(timer, serve).await;
    Ok(())
}
