//! `zrtt get` resolving address and key through DNS (`zrtt dns` on
//! loopback), with the real binary end to end: `zrtt dns`, `zrtt gateway`
//! with the same key store, a tiny HTTP backend, and `zrtt get`.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";
const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster ( 1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 127.0.0.1\nwww IN A 127.0.0.1\n";

fn get(dir: &Path, url: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "get",
        "-v",
        "-m",
        "20s",
        "-o",
        "body.txt",
        "-w",
        "%{zrtt_mode} %{time_namelookup}",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let out = zrtt(dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "zrtt get failed: {stderr}");
    assert_eq!(std::fs::read_to_string(dir.join("body.txt")).unwrap(), "ok");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

#[test]
fn get_resolves_key_and_address_through_dns_and_falls_back_with_reasons() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    ok(dir, &["keys", "cert", "--name", HOST, "--out-dir", "pki2"]);
    keystore(dir, HOST, "pki", &[]);
    std::fs::write(dir.join("example.com.zone"), ZONE).unwrap();
    let mut dns = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args([
                "dns",
                "--zone",
                "example.com.zone",
                "--keystore",
                "ks",
                "--no-rotate",
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "warn",
            ])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(dns.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let dns_addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp="))
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();

    let gw_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gw_listen = format!("127.0.0.1:{gw_port}");
    let _gw = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args([
                "gateway",
                "--listen",
                &gw_listen,
                "--backend",
                &backend().to_string(),
                "--keystore",
                "ks",
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&gw_listen).is_err() {
        assert!(Instant::now() < deadline, "gateway did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The gateway's replay filter refuses flights stamped within its
    // first seconds (a restart must not reopen old flights).
    std::thread::sleep(Duration::from_secs(3));
    let url = format!("https://{HOST}:{gw_port}/");

    // Address and key from DNS; the TLSA certificate chains to --cacert.
    let (out, err) = get(
        dir,
        &url,
        &[
            "--dns-server",
            &dns_addr,
            "--cacert",
            "pki/ca.pem",
            "--no-key-race",
        ],
    );
    assert!(out.starts_with("0rtt-"), "{out}\n{err}");
    assert!(
        err.contains("4 queries") && err.contains("1 verified key(s) from HTTPS key65380"),
        "{err}"
    );
    let lookup: f64 = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(lookup > 0.0, "{out}");

    // A pinned certificate that did not sign the records: the key is
    // refused, -v says why, and TLS still works.
    let (out, err) = get(
        dir,
        &url,
        &[
            "--dns-server",
            &dns_addr,
            "--cacert",
            "pki/ca.pem",
            "--cert",
            "pki2/cert.pem",
            "--no-key-race",
        ],
    );
    assert!(out.starts_with("tls-fallback"), "{out}\n{err}");
    assert!(
        err.contains("refused key 0x") && err.contains("neither pinned nor in TLSA"),
        "{err}"
    );

    // The TLSA certificate does not chain to the CA given (TLS then fails
    // too, exit 35): the refusal names the certificate and the reason.
    let out = zrtt(
        dir,
        &[
            "get",
            "-v",
            "-m",
            "20s",
            "--dns-server",
            &dns_addr,
            "--cacert",
            "pki2/ca.pem",
            "--no-key-race",
            &url,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused TLSA certificate") && err.contains("chain check failed"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(35), "{err}");

    // Key records a second behind the address (as a QNAME-minimising
    // resolver answers them for a name it has not seen): TLS starts on the
    // address, finishes first and carries the request.
    let slow = DelayingDns::start(
        &dns_addr,
        &[RTYPE_HTTPS, RTYPE_TLSA],
        Duration::from_secs(3),
    );
    let (out, err) = get(
        dir,
        &url,
        &["--dns-server", &slow.addr, "--cacert", "pki/ca.pem"],
    );
    assert!(out.starts_with("tls-fallback"), "{out}\n{err}");
    assert!(
        err.contains("key records still coming") && err.contains("before the key records came"),
        "{err}"
    );
    drop(slow);

    // An unmodified client through `zrtt proxy`: keys and address from DNS,
    // the request goes over zrtt to the gateway.
    let proxy_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let proxy_listen = format!("127.0.0.1:{proxy_port}");
    let mut proxy = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args([
                "proxy",
                "--listen",
                &proxy_listen,
                "--dns-server",
                &dns_addr,
                "--cacert",
                "pki/ca.pem",
                "--zrtt-port",
                &format!("{HOST}={gw_port}"),
            ])
            .current_dir(dir)
            // Token state of this test only (the clients keep it by default).
            .env("XDG_STATE_HOME", dir.join(".state"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&proxy_listen).is_err() {
        assert!(Instant::now() < deadline, "proxy did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let curl = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-x",
            &format!("http://{proxy_listen}"),
            &format!("http://{HOST}/via-proxy"),
        ])
        .output();
    match curl {
        Ok(c) => {
            assert!(
                c.status.success(),
                "curl through the proxy: {}",
                String::from_utf8_lossy(&c.stderr)
            );
            // Stop the proxy and read its counters: the request went over zrtt.
            let _ = Command::new("kill")
                .args(["-TERM", &proxy.0.id().to_string()])
                .status();
            let mut report = String::new();
            std::io::Read::read_to_string(&mut proxy.0.stderr.take().unwrap(), &mut report)
                .unwrap();
            assert!(report.contains("zrtt_requests=1"), "{report}");
        }
        Err(e) => eprintln!("proxy part skipped: curl not available ({e})"),
    }
}

#[test]
fn get_falls_back_when_dns_does_not_answer() {
    let d = tempfile::tempdir().unwrap();
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = zrtt(
        d.path(),
        &[
            "get",
            "-v",
            "-m",
            "10s",
            "--dns-server",
            &silent.local_addr().unwrap().to_string(),
            "--resolve",
            "www.example.com:1:127.0.0.1",
            "https://www.example.com:1/",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // Nothing listens on port 1: the point is that the DNS failure is a
    // note and the client goes on to connect.
    assert!(err.contains("DNS lookup failed"), "{err}");
    assert!(
        err.contains("connecting to www.example.com (127.0.0.1:1)"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(7), "{err}");
}

const RTYPE_TLSA: u16 = 52;
const RTYPE_HTTPS: u16 = 65;

/// A UDP DNS relay in front of `upstream` that holds the answers to the
/// given query types for `delay`; stops when dropped.
struct DelayingDns {
    addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DelayingDns {
    fn start(upstream: &str, slow: &[u16], delay: Duration) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let addr = sock.local_addr().unwrap().to_string();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (upstream, slow, flag) = (upstream.to_owned(), slow.to_vec(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !flag.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let query = buf[..n].to_vec();
                let held = qtype(&query).is_some_and(|t| slow.contains(&t));
                let (sock, upstream) = (sock.try_clone().unwrap(), upstream.clone());
                std::thread::spawn(move || {
                    let up = UdpSocket::bind("127.0.0.1:0").unwrap();
                    up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    up.send_to(&query, &upstream).unwrap();
                    let mut ans = [0u8; 4096];
                    if let Ok(m) = up.recv(&mut ans) {
                        if held {
                            std::thread::sleep(delay);
                        }
                        let _ = sock.send_to(&ans[..m], from);
                    }
                });
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DelayingDns {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The QTYPE of a DNS query (uncompressed question, as clients send it).
fn qtype(msg: &[u8]) -> Option<u16> {
    let mut i = 12;
    while *msg.get(i)? != 0 {
        i += 1 + usize::from(msg[i]);
    }
    Some(u16::from_be_bytes([*msg.get(i + 1)?, *msg.get(i + 2)?]))
}
