//! First flights made by hand (zrtt-proto's `ClientHandshake`) and sent
//! from a chosen source port, so that the flow reaches a chosen gateway
//! behind the anycast address: the lab predicts the member with the hub's
//! own hash ([`Lab::anycast_route`]). Used to see whether a gateway serves
//! zrtt (readiness, the new key after a rotation) and to replay a served
//! flight, byte for byte, to another gateway.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_lab::Lab;
use zrtt_net::client::system_clock;
use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, Frame, RejectReason,
};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};

use super::{CLIENT, GW_PORT, HOST, VIP};

/// What a gateway answered a flight with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// Accepted: the early request ran and the answer came.
    Reply,
    /// Refused, with its reason.
    Reject(RejectReason),
    /// Closed or reset without a frame.
    Closed(String),
}

impl Answer {
    pub(super) fn label(&self) -> String {
        match self {
            Answer::Reply => "reply".into(),
            Answer::Reject(r) => format!("reject {r:?}").to_lowercase(),
            Answer::Closed(e) => format!("closed ({e})"),
        }
    }
}

/// A first flight to `rec` whose early data is a GET of `path`.
pub(super) fn flight(rec: &KeyRecord, path: &str) -> Result<Vec<u8>> {
    let early = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    let (_hs, f) = ClientHandshake::start(
        &v,
        &ClientParams::default(),
        early.as_bytes(),
        system_clock(),
        &ring::rand::SystemRandom::new(),
    )?;
    Ok(f)
}

/// Source ports for hand-made flows: below the kernel's ephemeral range,
/// each used once per run (no clash with a TIME_WAIT of an earlier one).
pub(super) struct Ports {
    next: Cell<u16>,
}

impl Ports {
    pub(super) fn new() -> Ports {
        Ports {
            next: Cell::new(20_000),
        }
    }

    /// The next unused source port whose flow to the anycast address the
    /// hub gives to `gateway` now.
    pub(super) fn towards(&self, lab: &Lab, gateway: &str) -> Result<u16> {
        let client = lab.addr(CLIENT)?;
        for _ in 0..10_000 {
            let p = self.next.get();
            if p >= 32_000 {
                bail!("out of source ports for hand-made flights");
            }
            self.next.set(p + 1);
            if lab.anycast_route(VIP, SocketAddrV4::new(client, p), GW_PORT)? == gateway {
                return Ok(p);
            }
        }
        bail!("no source port reaches {gateway}")
    }
}

/// Sends `flight` from the client's port `port` to the anycast address
/// (a plain TCP connection, then the flight, as a replayer would; no
/// confirmation) and reads the first frame back.
pub(super) fn send(lab: &Lab, port: u16, flight: &[u8]) -> Result<Answer> {
    let client: Ipv4Addr = lab.addr(CLIENT)?;
    let dst = SocketAddr::from((lab.addr(VIP)?, GW_PORT));
    let flight = flight.to_vec();
    let r = lab.in_host(CLIENT, move || -> Result<Answer> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let sock = tokio::net::TcpSocket::new_v4()?;
            sock.set_reuseaddr(true)?;
            sock.bind(SocketAddr::from((client, port)))?;
            let tcp = tokio::time::timeout(Duration::from_secs(10), sock.connect(dst))
                .await
                .context("connect timed out")??;
            let std = tcp.into_std()?;
            std.set_nonblocking(false)?;
            read_answer(std, &flight)
        })
    })?;
    Ok(r.unwrap_or_else(|e| Answer::Closed(format!("{e:#}"))))
}

fn read_answer(mut tcp: TcpStream, flight: &[u8]) -> Result<Answer> {
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    tcp.write_all(flight)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match read_frame(&buf, Expect::ReplyOrReject) {
            Ok(Some((Frame::Reply { .. }, _))) => return Ok(Answer::Reply),
            Ok(Some((Frame::Reject { reason, .. }, _))) => return Ok(Answer::Reject(reason)),
            Ok(Some((other, _))) => bail!("unexpected frame {other:?}"),
            Ok(None) => {}
            Err(e) => bail!("{e}"),
        }
        match tcp.read(&mut chunk) {
            Ok(0) => return Ok(Answer::Closed("end of stream".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Ok(Answer::Closed(e.to_string())),
        }
    }
}

/// Sends fresh flights to `rec` (paths `<prefix>-<try>`) to `gateway`
/// until one is answered with a Reply or `patience` passes; the last
/// answer, the path of the answered flight and its bytes, and the tries.
pub(super) fn until_served(
    lab: &Lab,
    ports: &Ports,
    gateway: &str,
    rec: &KeyRecord,
    prefix: &str,
    patience: Duration,
) -> Result<Served> {
    let t0 = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let path = format!("{prefix}-{tries}");
        let f = flight(rec, &path)?;
        let port = ports.towards(lab, gateway)?;
        let answer = send(lab, port, &f)?;
        if answer == Answer::Reply || t0.elapsed() > patience {
            return Ok(Served {
                answer,
                path,
                flight: f,
                tries,
                ms: t0.elapsed().as_secs_f64() * 1000.0,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What [`until_served`] got.
pub(super) struct Served {
    pub(super) answer: Answer,
    pub(super) path: String,
    pub(super) flight: Vec<u8>,
    pub(super) tries: u32,
    pub(super) ms: f64,
}
