//! The misbehaving DNS proxy of the resolver tests: it sits in front of
//! `zrtt dns`, counts the queries it sees and can strip the private
//! SvcParam, set TC on UDP, serve another host's records, tamper with a
//! record, put a forged copy first or answer SERVFAIL.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use zrtt_dns::client::{self, DnsTransport};
use zrtt_proto::record::encodings::{self, SvcbRdata, SVC_PARAM_KEY};

/// How the proxy misbehaves.
#[derive(Clone, Default)]
pub struct Misbehave {
    /// Remove `key65380` from HTTPS answers (a resolver that strips unknown keys).
    pub strip_key: bool,
    /// Answer every UDP query with an empty TC response.
    pub tc_on_udp: bool,
    /// Answer questions for `.0` with the upstream's records for `.1`.
    pub rename: Option<(String, String)>,
    /// Flip a bit of the public key inside the HTTPS record list.
    pub tamper: bool,
    /// Put a forged copy (same key id, flipped public key bit) of the first
    /// zrtt TXT record before it.
    pub forged_txt_first: bool,
    /// Answer every query with SERVFAIL.
    pub servfail: bool,
}

/// A DNS proxy in front of the server, counting what it receives.
pub struct Proxy {
    pub addr: SocketAddr,
    pub udp: Arc<AtomicUsize>,
    pub tcp: Arc<AtomicUsize>,
    pub stop: Arc<AtomicBool>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
}

impl Proxy {
    pub fn queries(&self) -> usize {
        self.udp.load(Ordering::SeqCst) + self.tcp.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub fn rewrite(req: &[u8], udp: bool, upstream: SocketAddr, mb: &Misbehave) -> Option<Vec<u8>> {
    let req = Message::from_vec(req).ok()?;
    if mb.servfail {
        let mut r = req.clone();
        r.metadata.message_type = MessageType::Response;
        r.metadata.response_code = ResponseCode::ServFail;
        return r.to_vec().ok();
    }
    if udp && mb.tc_on_udp {
        let mut r = req.clone();
        r.metadata.message_type = MessageType::Response;
        r.metadata.truncation = true;
        return r.to_vec().ok();
    }
    let mut up = req.clone();
    if let Some((asked, real)) = &mb.rename {
        for q in &mut up.queries {
            let n = q.name().to_ascii().replace(asked.as_str(), real.as_str());
            q.set_name(Name::from_ascii(n).ok()?);
        }
    }
    let bytes = up.to_vec().ok()?;
    let answer =
        client::exchange_bytes(upstream, &bytes, DnsTransport::Tcp, Duration::from_secs(3)).ok()?;
    let mut resp = Message::from_vec(&answer).ok()?;
    resp.queries = req.queries.clone();
    if let Some((asked, real)) = &mb.rename {
        for r in resp.answers.iter_mut() {
            let n = r.name.to_ascii().replace(real.as_str(), asked.as_str());
            r.name = Name::from_ascii(n).ok()?;
        }
    }
    if mb.forged_txt_first {
        let genuine = resp.answers.iter().find_map(|r| {
            let rd = r.data.to_bytes().ok()?;
            (r.record_type() == RecordType::TXT && encodings::txt_is_zrtt(&rd))
                .then(|| (r.clone(), encodings::decode_txt_rdata(&rd).ok()))
        });
        if let Some((rr, Some(mut rec))) = genuine {
            rec.body.public_key[0] ^= 1;
            let mut forged = rr.clone();
            forged.data =
                zrtt_dns::records::rdata(RecordType::TXT, &encodings::txt_rdata(&rec)).ok()?;
            resp.answers.insert(0, forged);
        }
    }
    for r in resp.answers.iter_mut() {
        if r.record_type() != RecordType::HTTPS || !(mb.strip_key || mb.tamper) {
            continue;
        }
        let mut svcb = SvcbRdata::decode(&r.data.to_bytes().ok()?).ok()?;
        if mb.strip_key {
            svcb.params.retain(|(k, _)| *k != SVC_PARAM_KEY);
        }
        if mb.tamper {
            let mut list = svcb.zrtt_records().ok()??;
            list[0].body.public_key[0] ^= 1;
            for p in svcb.params.iter_mut() {
                if p.0 == SVC_PARAM_KEY {
                    p.1 = encodings::svc_param_value(&list);
                }
            }
        }
        r.data = zrtt_dns::records::rdata(RecordType::HTTPS, &svcb.encode()).ok()?;
    }
    resp.to_vec().ok()
}

pub fn start_proxy(upstream: SocketAddr, mb: Misbehave) -> Proxy {
    // One port for UDP and TCP: the UDP port the kernel picks may be taken
    // for TCP by another test running in parallel, so try a few (bounded).
    let (udp_sock, addr, tcp_l) = (0..50)
        .find_map(|_| {
            let u = UdpSocket::bind("127.0.0.1:0").ok()?;
            let a = u.local_addr().ok()?;
            let t = TcpListener::bind(a).ok()?;
            Some((u, a, t))
        })
        .expect("no port free for both UDP and TCP");
    udp_sock
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    tcp_l.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (udp_n, tcp_n) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut threads = Vec::new();
    {
        let (stop, n, mb) = (stop.clone(), udp_n.clone(), mb.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::SeqCst) {
                let Ok((len, from)) = udp_sock.recv_from(&mut buf) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                if let Some(out) = rewrite(&buf[..len], true, upstream, &mb) {
                    let _ = udp_sock.send_to(&out, from);
                }
            }
        }));
    }
    {
        let (stop, n) = (stop.clone(), tcp_n.clone());
        threads.push(std::thread::spawn(move || {
            use std::io::{Read, Write};
            while !stop.load(Ordering::SeqCst) {
                let Ok((mut s, _)) = tcp_l.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut lb = [0u8; 2];
                if s.read_exact(&mut lb).is_err() {
                    continue;
                }
                let mut req = vec![0u8; usize::from(u16::from_be_bytes(lb))];
                if s.read_exact(&mut req).is_err() {
                    continue;
                }
                n.fetch_add(1, Ordering::SeqCst);
                if let Some(out) = rewrite(&req, false, upstream, &mb) {
                    let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&out);
                    let _ = s.write_all(&framed);
                }
            }
        }));
    }
    Proxy {
        addr,
        udp: udp_n,
        tcp: tcp_n,
        stop,
        threads,
    }
}
