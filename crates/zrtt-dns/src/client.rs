//! A minimal stub DNS client: one message to one server over UDP or TCP,
//! blocking, with a timeout. Publishing, the tests and the load measurement
//! use it; verified resolution for clients is a separate module.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

/// The EDNS UDP payload size zrtt advertises and serves within (DNS Flag
/// Day 2020: fits an IPv6 path MTU of 1280 without fragmentation).
pub const EDNS_PAYLOAD: u16 = 1232;

/// How to reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsTransport {
    /// One datagram each way.
    Udp,
    /// Two-byte length prefix on a TCP connection.
    Tcp,
}

/// A failed exchange.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Socket error.
    #[error("{server}: {error}")]
    Io {
        /// The server.
        server: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// No answer in time.
    #[error("{server}: no answer within {timeout:?}")]
    Timeout {
        /// The server.
        server: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// An answer that does not parse or does not match the question.
    #[error("{server}: bad answer: {reason}")]
    BadAnswer {
        /// The server.
        server: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The question could not be built.
    #[error("bad question: {0}")]
    BadQuestion(String),
}

/// A random message id.
pub fn random_id() -> u16 {
    let mut b = [0u8; 2];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u16::from_be_bytes(b)
}

/// A query for `name`/`rtype` with EDNS ([`EDNS_PAYLOAD`]), RD clear.
pub fn query_message(name: &str, rtype: RecordType) -> Result<Message, ClientError> {
    let mut n = Name::from_ascii(name).map_err(|e| ClientError::BadQuestion(e.to_string()))?;
    n.set_fqdn(true);
    let mut m = Message::new(random_id(), MessageType::Query, OpCode::Query);
    m.add_query(Query::query(n, rtype));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    m.set_edns(edns);
    Ok(m)
}

/// Send raw message bytes and return the raw answer whose id matches.
pub fn exchange_bytes(
    server: SocketAddr,
    request: &[u8],
    transport: DnsTransport,
    timeout: Duration,
) -> Result<Vec<u8>, ClientError> {
    let io = |error| ClientError::Io { server, error };
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(ClientError::Timeout { server, timeout })
    };
    let timed_out = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            ClientError::Timeout { server, timeout }
        }
        _ => ClientError::Io { server, error: e },
    };
    let id = request
        .get(..2)
        .ok_or_else(|| ClientError::BadQuestion("short message".into()))?;
    match transport {
        DnsTransport::Udp => {
            let bind: SocketAddr = if server.is_ipv4() {
                "0.0.0.0:0"
                    .parse()
                    .map_err(|_| ClientError::BadQuestion("bind".into()))?
            } else {
                "[::]:0"
                    .parse()
                    .map_err(|_| ClientError::BadQuestion("bind".into()))?
            };
            let sock = UdpSocket::bind(bind).map_err(io)?;
            sock.connect(server).map_err(io)?;
            sock.send(request).map_err(io)?;
            let mut buf = vec![0u8; 65535];
            loop {
                sock.set_read_timeout(Some(left()?)).map_err(io)?;
                let n = sock.recv(&mut buf).map_err(timed_out)?;
                // Ignore stray datagrams with another id.
                if n >= 12 && buf[..2] == *id {
                    buf.truncate(n);
                    return Ok(buf);
                }
            }
        }
        DnsTransport::Tcp => {
            let mut s = TcpStream::connect_timeout(&server, left()?).map_err(timed_out)?;
            let len = u16::try_from(request.len())
                .map_err(|_| ClientError::BadQuestion("message over 65535 bytes".into()))?;
            let mut framed = len.to_be_bytes().to_vec();
            framed.extend_from_slice(request);
            s.set_write_timeout(Some(left()?)).map_err(io)?;
            s.write_all(&framed).map_err(timed_out)?;
            loop {
                s.set_read_timeout(Some(left()?)).map_err(io)?;
                let mut lb = [0u8; 2];
                s.read_exact(&mut lb).map_err(timed_out)?;
                let mut buf = vec![0u8; usize::from(u16::from_be_bytes(lb))];
                s.set_read_timeout(Some(left()?)).map_err(io)?;
                s.read_exact(&mut buf).map_err(timed_out)?;
                if buf.len() >= 12 && buf[..2] == *id {
                    return Ok(buf);
                }
            }
        }
    }
}

/// Send a message; return the parsed answer and its size in bytes. Checks
/// that it is a response to the same question.
pub fn exchange(
    server: SocketAddr,
    request: &Message,
    transport: DnsTransport,
    timeout: Duration,
) -> Result<(Message, usize), ClientError> {
    let bytes = request
        .to_vec()
        .map_err(|e| ClientError::BadQuestion(e.to_string()))?;
    let answer = exchange_bytes(server, &bytes, transport, timeout)?;
    let bad = |reason: String| ClientError::BadAnswer { server, reason };
    let msg = Message::from_vec(&answer).map_err(|e| bad(e.to_string()))?;
    if msg.metadata.message_type != MessageType::Response {
        return Err(bad("not a response".into()));
    }
    if msg.queries != request.queries {
        return Err(bad("answer to another question".into()));
    }
    Ok((msg, answer.len()))
}

/// Query `name`/`rtype` over `transport`.
pub fn query(
    server: SocketAddr,
    name: &str,
    rtype: RecordType,
    transport: DnsTransport,
    timeout: Duration,
) -> Result<(Message, usize), ClientError> {
    exchange(server, &query_message(name, rtype)?, transport, timeout)
}
