//! One question to the configured name servers: UDP with EDNS0
//! ([`EDNS_PAYLOAD`]), TCP to the same server when the answer is truncated
//! (TC), every answer matched against the question and id.
//!
//! The servers are asked as glibc's stub resolver asks them
//! (resolv.conf(5)): in order, one try each per round, waiting
//! [`ResolverConfig::timeout`] for each, for at most
//! [`ResolverConfig::udp_attempts`] rounds. A server that stays silent is
//! asked again in the next round (its socket stays open, so a late answer
//! still counts); one that answers with an error code (SERVFAIL,
//! REFUSED…), cannot be reached or fails over TCP is not asked again for
//! this question. The first NOERROR or NXDOMAIN answer ends the exchange.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::{LookupError, ResolverConfig, EDNS_PAYLOAD};

/// Ask `cfg.servers` for `name`/`t`. Returns the answer (NOERROR or
/// NXDOMAIN) and the number of messages sent (UDP tries and TCP repeats).
pub(super) async fn query(
    cfg: &ResolverConfig,
    name: &Name,
    t: RecordType,
) -> (Result<Message, LookupError>, usize) {
    let Some(&first) = cfg.servers.first() else {
        return (Err(LookupError::NoServers), 0);
    };
    let q = question(name, t);
    let bytes = match q.to_vec() {
        Ok(b) => b,
        Err(e) => {
            let reason = format!("cannot encode the question: {e}");
            let e = LookupError::BadAnswer {
                server: first,
                reason,
            };
            return (Err(e), 0);
        }
    };
    let mut ex = Exchange {
        q: &q,
        bytes: &bytes,
        timeout: cfg.timeout,
        sent: 0,
    };
    let mut servers: Vec<Server> = cfg.servers.iter().map(|&a| Server::new(a)).collect();
    for _ in 0..cfg.udp_attempts.max(1) {
        let mut asked = false;
        for s in servers.iter_mut().filter(|s| s.failed.is_none()) {
            asked = true;
            if let Some(msg) = ex.try_server(s).await {
                return (Ok(msg), ex.sent);
            }
        }
        if !asked {
            break;
        }
    }
    let timeout = cfg.timeout;
    let mut errors: Vec<LookupError> = servers.into_iter().map(|s| s.error(timeout)).collect();
    let error = match errors.len() {
        1 => errors.remove(0),
        _ => LookupError::EveryServer(errors),
    };
    (Err(error), ex.sent)
}

/// A query for `name`/`t` with a random id, RD set, EDNS0.
fn question(name: &Name, t: RecordType) -> Message {
    let mut m = Message::new(
        crate::client::random_id(),
        MessageType::Query,
        OpCode::Query,
    );
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name.clone(), t));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    m.set_edns(edns);
    m
}

/// What one server did so far in one exchange.
struct Server {
    addr: SocketAddr,
    /// Bound and connected on the first try; kept for later rounds.
    sock: Option<UdpSocket>,
    tries: u32,
    /// The last answer that did not match the question, if any.
    bad: Option<LookupError>,
    /// Why this server is not asked again.
    failed: Option<LookupError>,
}

impl Server {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            sock: None,
            tries: 0,
            bad: None,
            failed: None,
        }
    }

    /// Why this server gave no usable answer.
    fn error(self, timeout: Duration) -> LookupError {
        self.failed.or(self.bad).unwrap_or(LookupError::Timeout {
            server: self.addr,
            attempts: self.tries,
            timeout,
        })
    }
}

/// One question on its way through the servers.
struct Exchange<'a> {
    q: &'a Message,
    bytes: &'a [u8],
    timeout: Duration,
    /// Messages sent so far.
    sent: usize,
}

impl Exchange<'_> {
    /// One try at `s`: the answer, or `None` (then `s` records why).
    async fn try_server(&mut self, s: &mut Server) -> Option<Message> {
        let answer = match self.udp(s).await {
            Ok(Some(msg)) if msg.metadata.truncation => {
                self.sent += 1;
                match tcp_exchange(s.addr, self.bytes, self.q, self.timeout).await {
                    Ok(msg) if msg.metadata.truncation => {
                        Err(LookupError::Truncated { server: s.addr })
                    }
                    other => other,
                }
            }
            Ok(Some(msg)) => Ok(msg),
            Ok(None) => return None,
            Err(e) => Err(e),
        };
        let answer = answer.and_then(|msg| match msg.metadata.response_code {
            ResponseCode::NoError | ResponseCode::NXDomain => Ok(msg),
            rcode => Err(LookupError::Rcode {
                server: s.addr,
                rcode,
            }),
        });
        match answer {
            Ok(msg) => Some(msg),
            Err(e) => {
                tracing::debug!("DNS {e}");
                s.failed = Some(e);
                None
            }
        }
    }

    /// Send the question to `s` once over UDP and wait up to the timeout
    /// for its answer: `Ok(None)` when none came in time.
    async fn udp(&mut self, s: &mut Server) -> Result<Option<Message>, LookupError> {
        let server = s.addr;
        let io = |e: std::io::Error| LookupError::Io {
            server,
            reason: e.to_string(),
        };
        let sock = match s.sock.take() {
            Some(sock) => sock,
            None => connect_udp(server).await.map_err(io)?,
        };
        sock.send(self.bytes).await.map_err(io)?;
        self.sent += 1;
        s.tries += 1;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let id = self.q.metadata.id.to_be_bytes();
        let mut buf = vec![0u8; 65535];
        let answer = loop {
            let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => break Ok(None),
                Ok(Err(e)) => break Err(io(e)),
                Ok(Ok(n)) => n,
            };
            let Some(got) = buf.get(..n) else { continue };
            // Datagrams with another id are strays (or spoofing attempts).
            if got.len() < 12 || got[..2] != id {
                continue;
            }
            match check_answer(server, got, self.q) {
                Ok(m) => break Ok(Some(m)),
                Err(e) => s.bad = Some(e),
            }
        };
        s.sock = Some(sock);
        answer
    }
}

/// A UDP socket connected to `server`.
async fn connect_udp(server: SocketAddr) -> std::io::Result<UdpSocket> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    Ok(sock)
}

/// Parse and check an answer against the question.
fn check_answer(server: SocketAddr, bytes: &[u8], q: &Message) -> Result<Message, LookupError> {
    let bad = |reason: String| LookupError::BadAnswer { server, reason };
    let msg = Message::from_vec(bytes).map_err(|e| bad(e.to_string()))?;
    if msg.metadata.message_type != MessageType::Response {
        return Err(bad("not a response".into()));
    }
    if msg.queries != q.queries {
        return Err(bad("answer to another question".into()));
    }
    Ok(msg)
}

async fn tcp_exchange(
    server: SocketAddr,
    bytes: &[u8],
    q: &Message,
    timeout: Duration,
) -> Result<Message, LookupError> {
    let io = |e: std::io::Error| LookupError::Io {
        server,
        reason: e.to_string(),
    };
    let work = async {
        let mut s = TcpStream::connect(server).await.map_err(io)?;
        let len = u16::try_from(bytes.len()).map_err(|_| LookupError::BadAnswer {
            server,
            reason: "question over 65535 bytes".into(),
        })?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(bytes);
        s.write_all(&framed).await.map_err(io)?;
        loop {
            let mut lb = [0u8; 2];
            s.read_exact(&mut lb).await.map_err(io)?;
            let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lb))];
            s.read_exact(&mut buf).await.map_err(io)?;
            if buf.len() >= 12 && buf[..2] == q.metadata.id.to_be_bytes() {
                return check_answer(server, &buf, q);
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| LookupError::Timeout {
            server,
            attempts: 1,
            timeout,
        })?
}
