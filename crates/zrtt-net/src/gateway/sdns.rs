//! The SDNS's I/O (`zrtt gateway --sdns ADDR`, docs/DNS.md §8.6): DNS on
//! UDP and TCP at each address, the answers planned by sdns_zone.rs and
//! the flights answered by shortcut.rs.
//!
//! A small loop over hickory-proto's `Message` rather than
//! hickory-server's `RequestHandler` (which `zrtt dns` uses): the SDNS
//! needs the query's exact length (the UDP answer is held to three times
//! it), must be able to send nothing at all (a flight being made: the
//! resolver retries), and builds every answer itself; a handler would
//! take all three from the server's encoder and response handle.
//!
//! Each UDP query and each TCP connection is a task of its socket's loop
//! (at most [`MAX_UDP_TASKS`] and [`MAX_TCP_CONNECTIONS`] at once); they
//! are aborted when the gateway stops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;
use zrtt_proto::shortcut::udp_response_budget;

use super::sdns_zone::{self, Plan, Sent};
use super::shortcut::{self, Outcome};
use super::shortcut_backend::Via;
use super::{Metrics, Shared};
use crate::error::{Error, Result};

/// UDP queries handled at once per socket (beyond: dropped, the resolver
/// retries).
pub(super) const MAX_UDP_TASKS: usize = 4096;
/// DNS-over-TCP connections served at once per socket (beyond: closed).
const MAX_TCP_CONNECTIONS: usize = 256;
/// A DNS-over-TCP connection with no query for this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Queries answered on one DNS-over-TCP connection at most.
const TCP_QUERIES: usize = 100;

/// One SDNS address: its UDP socket and its TCP listener (same port).
pub(super) struct SdnsSocket {
    pub(super) udp: UdpSocket,
    pub(super) tcp: TcpListener,
}

/// Bind UDP and TCP on `addr` (`SO_REUSEPORT`, so that a successor
/// started with `--handover` binds beside this process); with port 0 both
/// get the same free port.
pub(super) fn bind(addr: SocketAddr) -> Result<SdnsSocket> {
    let mut last = None;
    for _ in 0..16 {
        let udp = socket(addr, Type::DGRAM, Protocol::UDP)?;
        let bound = udp
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| Error::Config("SDNS socket has no address".into()))?;
        let tcp = match socket(bound, Type::STREAM, Protocol::TCP) {
            Ok(t) => t,
            Err(e) if addr.port() == 0 => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        tcp.listen(1024).map_err(Error::io("SDNS listen"))?;
        let udp = UdpSocket::from_std(udp.into()).map_err(Error::io("SDNS UDP socket"))?;
        let tcp = TcpListener::from_std(tcp.into()).map_err(Error::io("SDNS TCP socket"))?;
        return Ok(SdnsSocket { udp, tcp });
    }
    Err(last.unwrap_or_else(|| Error::Config(format!("SDNS {addr}: no port free"))))
}

fn socket(addr: SocketAddr, ty: Type, proto: Protocol) -> Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))
        .map_err(Error::io("SDNS socket"))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(true);
    }
    s.set_reuse_address(true)
        .map_err(Error::io("SO_REUSEADDR"))?;
    s.set_reuse_port(true).map_err(Error::io("SO_REUSEPORT"))?;
    s.set_nonblocking(true).map_err(Error::io("O_NONBLOCK"))?;
    s.bind(&addr.into())
        .map_err(Error::io(if ty == Type::DGRAM {
            "binding the SDNS UDP socket"
        } else {
            "binding the SDNS TCP socket"
        }))?;
    Ok(s)
}

/// Serve DNS on `sock` until the gateway stops.
pub(super) async fn serve(shared: Arc<Shared>, sock: SdnsSocket) {
    let udp = Arc::new(sock.udp);
    let mut tasks = JoinSet::new();
    tasks.spawn(udp_loop(shared.clone(), udp));
    tasks.spawn(tcp_loop(shared, sock.tcp));
    while tasks.join_next().await.is_some() {}
}

async fn udp_loop(shared: Arc<Shared>, sock: Arc<UdpSocket>) {
    let mut stop = shared.shutdown.subscribe();
    let local = sock
        .local_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; 65_535];
    loop {
        tokio::select! {
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            r = sock.recv_from(&mut buf) => {
                let (n, src) = match r {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::debug!("SDNS UDP: {e}");
                        continue;
                    }
                };
                if tasks.len() >= MAX_UDP_TASKS {
                    Metrics::inc(&shared.metrics.sdns_dropped);
                    continue;
                }
                let query = buf[..n].to_vec();
                let (shared, sock) = (shared.clone(), sock.clone());
                tasks.spawn(async move {
                    if let Some(resp) = handle(&shared, &query, src, local, true).await {
                        let _ = sock.send_to(&resp, src).await;
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
}

async fn tcp_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut stop = shared.shutdown.subscribe();
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            r = listener.accept() => match r {
                Ok((tcp, peer)) => {
                    if tasks.len() >= MAX_TCP_CONNECTIONS {
                        Metrics::inc(&shared.metrics.sdns_dropped);
                        continue;
                    }
                    tasks.spawn(tcp_connection(shared.clone(), tcp, peer));
                }
                Err(e) => {
                    tracing::debug!("SDNS TCP accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    tasks.shutdown().await;
}

/// DNS over TCP (RFC 7766): length-prefixed messages, answered in order.
async fn tcp_connection(shared: Arc<Shared>, mut tcp: TcpStream, peer: SocketAddr) {
    let local = tcp
        .local_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    for _ in 0..TCP_QUERIES {
        let read = async {
            let len = tcp.read_u16().await?;
            let mut q = vec![0u8; usize::from(len)];
            tcp.read_exact(&mut q).await?;
            std::io::Result::Ok(q)
        };
        let Ok(Ok(query)) = tokio::time::timeout(TCP_IDLE, read).await else {
            return;
        };
        let Some(resp) = handle(&shared, &query, peer, local, false).await else {
            return;
        };
        let Ok(len) = u16::try_from(resp.len()) else {
            return;
        };
        let mut out = Vec::with_capacity(2 + resp.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&resp);
        if tcp.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// The answer to one query from `src` (`None`: send nothing). On UDP the
/// answer is held to [`udp_response_budget`]; over TCP a
/// flight being made is waited for.
async fn handle(
    shared: &Arc<Shared>,
    bytes: &[u8],
    src: SocketAddr,
    local: SocketAddr,
    udp: bool,
) -> Option<Vec<u8>> {
    let m = &shared.metrics;
    Metrics::inc(&m.sdns_queries);
    let query = match Message::from_vec(bytes) {
        Ok(q) => q,
        Err(e) => {
            tracing::debug!("SDNS query from {src}: {e}");
            return None;
        }
    };
    let budget = if udp {
        udp_response_budget(bytes.len(), query.edns.as_ref().map(|e| e.max_payload()))
    } else {
        usize::from(u16::MAX)
    };
    let sites = site_names(shared);
    let zone = &shared.shortcuts.zone;
    match zone.plan(&query, &sites) {
        Plan::Drop => None,
        Plan::Reply(r) => {
            count_rcode(m, r.metadata.response_code);
            Some(sdns_zone::encode(&r, &query, budget))
        }
        Plan::Flight { site, frame } => {
            let via = Via::Dns {
                resolver: src,
                local,
            };
            match super::shortcut::answer(shared, &frame, Some(&site), via, !udp).await {
                Outcome::Answer(a) => {
                    let (b, sent) = sdns_zone::flight_answer(&query, &a, budget);
                    count_sent(m, sent);
                    Some(b)
                }
                // Over a bound for unproven queriers: FETCH without a run,
                // the client's TCP form runs it from its own address.
                Outcome::Deferred(why) => {
                    tracing::debug!("shortcut flight from {src} not run: {why:?}");
                    Metrics::inc(&m.shortcut_deferred);
                    let (b, sent) = sdns_zone::flight_answer(&query, &shortcut::fetch(), budget);
                    count_sent(m, sent);
                    Some(b)
                }
                Outcome::Running => None,
                Outcome::NotFlight => {
                    Metrics::inc(&m.sdns_nxdomain);
                    Some(sdns_zone::encode(
                        &zone.nxdomain(&query, &site),
                        &query,
                        budget,
                    ))
                }
            }
        }
    }
}

fn count_sent(m: &Metrics, sent: Sent) {
    Metrics::inc(match sent {
        Sent::Answer => &m.shortcut_answers,
        Sent::Fetch => &m.shortcut_fetch,
        Sent::Reject => &m.shortcut_rejects,
        Sent::Truncated => &m.sdns_truncated,
    });
}

fn count_rcode(m: &Metrics, rcode: ResponseCode) {
    match rcode {
        ResponseCode::NXDomain => Metrics::inc(&m.sdns_nxdomain),
        ResponseCode::Refused => Metrics::inc(&m.sdns_refused),
        _ => {}
    }
}

/// The sites whose shortcut zones are served: the key records' names,
/// but those whose shortcut is off.
fn site_names(shared: &Shared) -> Vec<String> {
    let keys = shared.cfg.keys.read().unwrap_or_else(|p| p.into_inner());
    let mut out: Vec<String> = Vec::new();
    for k in keys.keys() {
        let n = &k.record.body.name;
        if shared.shortcuts.serves(n) && !out.iter().any(|o| o.eq_ignore_ascii_case(n)) {
            out.push(n.clone());
        }
    }
    out
}
