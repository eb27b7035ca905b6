//! The server side every lab run needs, shared by `zrtt demo` and the
//! scenarios: a working directory, a certificate, a key store with signed
//! key records, nginx configurations, zrtt gateways and verifiers started in
//! lab hosts, and clients timed from their first packet.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use zrtt_dns::{KeyStore, Policy};
use zrtt_lab::{Lab, LabChild};

use crate::keys::{self, CertAlg};
use crate::util;

/// A temporary directory removed on drop unless kept.
pub struct WorkDir {
    pub path: PathBuf,
    pub keep: bool,
}

impl WorkDir {
    pub fn new(what: &str, keep: bool) -> Result<WorkDir> {
        let path = std::env::temp_dir().join(format!("zrtt-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Children terminated by PID even on early return; the lab's own teardown
/// would also catch them.
#[derive(Default)]
pub struct Children(pub Vec<LabChild>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = c.terminate(Duration::from_secs(2));
        }
    }
}

/// Fails unless every program in `tools` is on the PATH.
pub fn require_tools(tools: &[&str]) -> Result<()> {
    for tool in tools {
        if !have_tool(tool) {
            bail!("{tool} not found: run scripts/install-deps.sh as root");
        }
    }
    Ok(())
}

pub fn have_tool(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Certificate, key store and key records for one server name, in a
/// working directory.
pub struct Site {
    pub name: String,
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The key store directory (for `zrtt gateway --keystore`).
    pub keystore: PathBuf,
    /// Hex key record list (for `zrtt get --record`).
    pub records: PathBuf,
    /// Document root.
    pub www: PathBuf,
}

impl Site {
    /// An ECDSA P-256 certificate from a fresh CA, a key store with a
    /// current key, and an empty document root, under `dir`.
    pub fn create(dir: &Path, name: &str) -> Result<Site> {
        for sub in ["pki", "www", "nginx"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let site = Site {
            name: name.into(),
            dir: dir.into(),
            ca: dir.join("pki/ca.pem"),
            cert: dir.join("pki/cert.pem"),
            key: dir.join("pki/cert.key"),
            keystore: dir.join("ks"),
            records: dir.join("records.hex"),
            www: dir.join("www"),
        };
        let (ca, cert, key) = keys::test_certificate(name, CertAlg::EcdsaP256, 30)?;
        util::write_atomic(&site.ca, ca.as_bytes(), false)?;
        util::write_atomic(&site.cert, cert.as_bytes(), false)?;
        util::write_atomic(&site.key, key.as_bytes(), true)?;
        let mut ks = KeyStore::init(
            &site.keystore,
            name,
            &site.cert,
            &site.key,
            Policy::default(),
        )?;
        ks.rotate(util::now(), &ring::rand::SystemRandom::new())?;
        let records = ks.published_records(util::now());
        if records.is_empty() {
            bail!("the key store published no record");
        }
        let list = zrtt_proto::record::encode_record_list(&records);
        util::write_atomic(
            &site.records,
            zrtt_proto::record::hex(&list).as_bytes(),
            false,
        )?;
        Ok(site)
    }

    /// Writes a page of `size` bytes at `www/<path>`.
    pub fn page(&self, path: &str, size: usize) -> Result<PathBuf> {
        let p = self.www.join(path.trim_start_matches('/'));
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, page_bytes(&self.name, size))?;
        Ok(p)
    }
}

/// An HTML page of exactly `size` bytes (filler text after a short head).
pub fn page_bytes(name: &str, size: usize) -> Vec<u8> {
    let head = format!("<!doctype html><title>{name}</title><h1>Hello from {name}</h1><p>");
    let mut b = head.into_bytes();
    let filler = b"The first secure request in one round trip. ";
    while b.len() < size {
        let n = (size - b.len()).min(filler.len());
        b.extend_from_slice(&filler[..n]);
    }
    b.truncate(size);
    if size > 0 {
        b[size - 1] = b'\n';
    }
    b
}

/// TLS settings of an nginx listener.
#[derive(Clone, Debug)]
pub struct NginxTls {
    /// `ssl_protocols`, e.g. "TLSv1.2 TLSv1.3".
    pub protocols: &'static str,
    /// Session tickets and cache (resumption, 0-RTT) on.
    pub resumption: bool,
    /// `ssl_early_data on` (TLS 1.3 0-RTT; needs `resumption`).
    pub early_data: bool,
}

/// One nginx `server` block.
#[derive(Clone, Debug)]
pub struct NginxServer {
    pub listen: SocketAddr,
    pub tls: Option<NginxTls>,
    /// `fastopen=256` on the listen socket.
    pub fast_open: bool,
}

/// An nginx instance: one worker, no daemon, everything under `prefix`.
#[derive(Clone, Debug)]
pub struct Nginx {
    pub servers: Vec<NginxServer>,
    /// Keep-alive requests per connection (0 turns keep-alive off).
    pub keepalive_requests: u32,
}

impl Nginx {
    /// The configuration text for `site`, with pid and logs under `prefix`.
    pub fn conf(&self, site: &Site, prefix: &Path) -> String {
        let d = prefix.display();
        let mut s = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections 4096; }}\n\
http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  default_type text/html;\n  sendfile on;\n  tcp_nodelay on;\n"
        );
        if self.keepalive_requests == 0 {
            s.push_str("  keepalive_timeout 0;\n");
        } else {
            s.push_str(&format!(
                "  keepalive_requests {};\n",
                self.keepalive_requests
            ));
        }
        for srv in &self.servers {
            let fo = if srv.fast_open { " fastopen=256" } else { "" };
            match &srv.tls {
                None => s.push_str(&format!(
                    "  server {{ listen {}{fo}; root {}; }}\n",
                    srv.listen,
                    site.www.display()
                )),
                Some(t) => {
                    let res = if t.resumption {
                        "ssl_session_tickets on; ssl_session_cache shared:zrtt:1m;"
                    } else {
                        "ssl_session_tickets off; ssl_session_cache off;"
                    };
                    let ed = if t.early_data {
                        " ssl_early_data on;"
                    } else {
                        ""
                    };
                    s.push_str(&format!(
                        "  server {{ listen {} ssl{fo}; server_name {}; ssl_protocols {}; {res}{ed}\n    ssl_certificate {}; ssl_certificate_key {}; root {}; }}\n",
                        srv.listen,
                        site.name,
                        t.protocols,
                        site.cert.display(),
                        site.key.display(),
                        site.www.display()
                    ));
                }
            }
        }
        s.push_str("}\n");
        s
    }

    /// Writes the configuration under `<site.dir>/<tag>` and starts nginx
    /// in `host` (tracked by the lab).
    pub fn spawn(&self, lab: &Lab, host: &str, site: &Site, tag: &str) -> Result<LabChild> {
        let prefix = site.dir.join(tag);
        std::fs::create_dir_all(&prefix)?;
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, self.conf(site, &prefix))?;
        let mut cmd = lab.command(host, "nginx")?;
        cmd.arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(prefix.join("error.log"));
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        lab.spawn(host, cmd)
    }
}

/// How a `zrtt gateway` is started.
#[derive(Clone, Debug, Default)]
pub struct GatewayOpts {
    pub listen: Option<SocketAddr>,
    pub backend: Option<SocketAddr>,
    /// A trusted network (answered before the handshake).
    pub trust: Option<Ipv4Addr>,
    /// Provenance verifier public keys (hex) and their quorum (all of them).
    pub verifiers: Vec<String>,
    /// Token sealing key file: the gateway issues address tokens.
    pub token_key: Option<PathBuf>,
    /// `--proven-window` (default: the gateway's own, one initial window).
    pub proven_window: Option<usize>,
}

/// Starts `zrtt gateway` in `host` for `site`.
pub fn spawn_gateway(lab: &Lab, host: &str, site: &Site, o: &GatewayOpts) -> Result<LabChild> {
    let exe = std::env::current_exe()?;
    let listen = o.listen.context("gateway needs a listen address")?;
    let backend = o
        .backend
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
    let mut g = lab.command(host, &exe)?;
    g.args([
        "gateway",
        "--listen",
        &listen.to_string(),
        "--backend",
        &backend.to_string(),
        "--keystore",
    ])
    .arg(&site.keystore);
    if let Some(ip) = o.trust {
        g.args(["--trust", &format!("{ip}/32")]);
    }
    for v in &o.verifiers {
        g.args(["--verifier", v]);
    }
    if !o.verifiers.is_empty() {
        g.args(["--quorum", &o.verifiers.len().to_string()]);
    }
    if let Some(k) = &o.token_key {
        g.arg("--token-key").arg(k);
    }
    if let Some(w) = o.proven_window {
        g.args(["--proven-window", &w.to_string()]);
    }
    g.stdout(Stdio::null()).stderr(Stdio::null());
    lab.spawn(host, g)
}

/// Starts `zrtt pv serve` in `host` on `listen` with a fresh key written
/// to `key_file`; returns the child and the verifier's public key (hex).
pub fn spawn_verifier(
    lab: &Lab,
    host: &str,
    listen: SocketAddr,
    key_file: &Path,
) -> Result<(LabChild, String)> {
    let exe = std::env::current_exe()?;
    let key = crate::pv::write_new_key(key_file)?;
    let mut p = lab.command(host, &exe)?;
    p.args(["pv", "serve", "--listen", &listen.to_string(), "--key"])
        .arg(key_file);
    p.stdout(Stdio::null()).stderr(Stdio::null());
    Ok((lab.spawn(host, p)?, zrtt_proto::record::hex(&key.public)))
}

/// Starts one verifier per port on `host` (fresh keys under `dir`), waits
/// until they listen (seen from `client`), and has `client` fetch
/// certificates from all of them into `state` (`zrtt pv fetch`). Returns
/// the verifier processes and public keys (hex), for `GatewayOpts::verifiers`.
pub fn verifiers_and_certificates(
    lab: &Lab,
    host: &str,
    ports: &[u16],
    dir: &Path,
    client: &str,
    state: &Path,
) -> Result<(Vec<LabChild>, Vec<String>)> {
    let ip = lab.addr(host)?;
    let mut children = Vec::new();
    let mut keys = Vec::new();
    for &port in ports {
        let (c, k) = spawn_verifier(
            lab,
            host,
            SocketAddr::from((ip, port)),
            &dir.join(format!("pv{port}.key")),
        )?;
        children.push(c);
        keys.push(k);
    }
    let exe = std::env::current_exe()?;
    let mut fetch = lab.command(client, &exe)?;
    fetch.args(["pv", "fetch", "--state"]).arg(state);
    for &port in ports {
        wait_listening(lab, client, SocketAddr::from((ip, port)))?;
        fetch.args(["--verifier", &format!("{ip}:{port}")]);
    }
    run_capture(fetch).context("obtaining provenance certificates")?;
    Ok((children, keys))
}

/// Writes a fresh 32-byte token sealing key (mode 0600) to `path`.
pub fn write_token_key(path: &Path) -> Result<()> {
    let mut b = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| anyhow::anyhow!("random number generator failed"))?;
    util::write_atomic(path, &b, true)
}

/// A fresh gateway's replay filter refuses flights stamped before its start
/// plus 2 s (docs/PROTOCOL.md §7): sleeps until 2.5 s after `started`.
pub fn settle_gateways(started: Instant) {
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
}

/// Sets `sysctl name=value` in each of `hosts`.
pub fn sysctl(lab: &Lab, hosts: &[&str], name: &str, value: &str) -> Result<()> {
    for h in hosts {
        let mut c = lab.command(h, "sysctl")?;
        c.args(["-q", "-w", &format!("{name}={value}")]);
        run_capture(c).with_context(|| format!("sysctl {name} in {h}"))?;
    }
    Ok(())
}

/// `zrtt get` in `host` for `https://<site>:<port><path>` at `server`,
/// zrtt only, with the site's key records from files (no DNS), the body
/// discarded; callers add `-w` and state options.
pub fn zrtt_get(
    lab: &Lab,
    host: &str,
    site: &Site,
    server: Ipv4Addr,
    port: u16,
    path: &str,
) -> Result<Command> {
    let mut c = lab.command(host, std::env::current_exe()?)?;
    c.args([
        "get",
        "-o",
        "/dev/null",
        "-m",
        "30s",
        "--zrtt-only",
        "--cacert",
    ])
    .arg(&site.ca)
    .arg("--cert")
    .arg(&site.cert)
    .arg("--record")
    .arg(&site.records)
    .args([
        "--resolve",
        &format!("{}:{port}:{server}", site.name),
        &format!("https://{}:{port}{path}", site.name),
    ]);
    Ok(c)
}

/// Waits (up to 15 s) until a TCP connect from `host` to `addr` succeeds.
pub fn wait_listening(lab: &Lab, host: &str, addr: SocketAddr) -> Result<()> {
    let ok = lab.in_host(host, move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    })?;
    if !ok {
        bail!("nothing listens on {addr} after 15 s");
    }
    Ok(())
}

/// Runs `cmd` to completion; its stdout, or an error with its output.
pub fn run_capture(mut cmd: Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}{}",
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

static MODE_NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Checks the mode `zrtt get` reported against the one a row expects. The
/// client infers early against gated from timing (a reply long after the
/// SYN-ACK looks gated), which a busy machine can fool at small RTTs, so a
/// mismatch is recorded for the report's notes rather than failing the
/// sample; the sample's time shows which path it really took. Anything
/// other than zrtt (a TLS fallback) is an error.
pub fn check_mode(got: &str, expect: &str, what: &str) -> Result<()> {
    if !got.starts_with("0rtt") {
        bail!("{what}: zrtt was not used (mode {got})");
    }
    if got != expect {
        MODE_NOTES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{what}: labelled {got}, expected {expect}"));
    }
    Ok(())
}

/// The mode mismatches recorded since the last call, as one report note.
pub fn take_mode_notes() -> Option<String> {
    let v = std::mem::take(&mut *MODE_NOTES.lock().unwrap_or_else(|e| e.into_inner()));
    (!v.is_empty()).then(|| {
        // Counted per distinct message, in first-seen order.
        let mut counts: Vec<(String, usize)> = Vec::new();
        for m in &v {
            match counts.iter_mut().find(|(k, _)| k == m) {
                Some((_, n)) => *n += 1,
                None => counts.push((m.clone(), 1)),
            }
        }
        let parts: Vec<String> = counts.iter().map(|(m, n)| format!("{m} ({n}x)")).collect();
        format!(
            "Mode labels that differ from the row's path ({} samples; `zrtt get` infers early against gated from timing, the times above are what was measured): {}.",
            v.len(),
            parts.join("; ")
        )
    })
}

/// Seconds as printed by curl's `-w` into milliseconds.
pub fn secs_field(s: &str) -> Result<f64> {
    s.parse::<f64>()
        .map(|v| v * 1000.0)
        .with_context(|| format!("bad timing {s:?}"))
}

/// Where a timed client's marker appears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Scans `r` for `marker`; sends the moment it is seen, then drains `r`
/// (keeping the last 4 KiB for error messages).
fn watch(mut r: impl Read, marker: Option<Vec<u8>>, tx: mpsc::Sender<Instant>) -> Vec<u8> {
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    let mut found = marker.is_none();
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        tail.extend_from_slice(&buf[..n]);
        if !found {
            if let Some(m) = &marker {
                if tail.windows(m.len()).any(|w| w == m.as_slice()) {
                    found = true;
                    let _ = tx.send(now);
                }
            }
        }
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    tail
}

/// Runs a client program in `host` and times it from its first packet
/// (the lab's hub timestamps it as it leaves the host) to the moment
/// `marker` appears in its output: time to the first response byte without
/// the program's start-up. Once the marker is seen the program gets
/// `linger` to finish by itself (saving session state, say) before it is
/// stopped; without a marker it is stopped after `timeout`. Returns
/// milliseconds.
pub fn time_client(
    lab: &Lab,
    host: &str,
    mut cmd: Command,
    stream: Stream,
    marker: &str,
    timeout: Duration,
    linger: Duration,
) -> Result<f64> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    lab.arm_first_packet(host)?;
    let mut child = lab.spawn(host, cmd)?;
    let (tx, rx) = mpsc::channel();
    let m = marker.as_bytes().to_vec();
    let out = child.stdout.take().context("stdout")?;
    let err = child.stderr.take().context("stderr")?;
    let (mo, me) = match stream {
        Stream::Stdout => (Some(m), None),
        Stream::Stderr => (None, Some(m)),
    };
    let tx2 = tx.clone();
    let t_out = std::thread::spawn(move || watch(out, mo, tx));
    let t_err = std::thread::spawn(move || watch(err, me, tx2));
    let seen = rx.recv_timeout(timeout).ok();
    if seen.is_some() {
        let _ = child.wait_timeout(linger);
    }
    let _ = child.terminate(Duration::from_millis(500));
    let tail_out = t_out.join().unwrap_or_default();
    let tail_err = t_err.join().unwrap_or_default();
    let first = lab.first_packet(host)?;
    match (seen, first) {
        (Some(t), Some(f)) if t >= f => Ok(t.duration_since(f).as_secs_f64() * 1000.0),
        (Some(_), Some(_)) => bail!("marker {marker:?} seen before the first packet"),
        (Some(_), None) => bail!("marker {marker:?} seen but no packet left {host}"),
        (None, _) => bail!(
            "no {marker:?} within {timeout:?}; output: {}{}",
            String::from_utf8_lossy(&tail_out),
            String::from_utf8_lossy(&tail_err)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_have_exact_sizes() {
        for n in [1, 100, 1024, 11_448, 500 * 1024] {
            let p = page_bytes("www.example.com", n);
            assert_eq!(p.len(), n);
            assert_eq!(p[n - 1], b'\n');
        }
    }

    #[test]
    fn nginx_configuration() {
        let dir = Path::new("/srv/x");
        let site = Site {
            name: "www.example.com".into(),
            dir: dir.into(),
            ca: dir.join("ca"),
            cert: dir.join("c.pem"),
            key: dir.join("k.pem"),
            keystore: dir.join("ks"),
            records: dir.join("r"),
            www: dir.join("www"),
        };
        let n = Nginx {
            servers: vec![
                NginxServer {
                    listen: "198.18.0.2:80".parse().unwrap(),
                    tls: None,
                    fast_open: true,
                },
                NginxServer {
                    listen: "198.18.0.2:443".parse().unwrap(),
                    tls: Some(NginxTls {
                        protocols: "TLSv1.2 TLSv1.3",
                        resumption: true,
                        early_data: true,
                    }),
                    fast_open: false,
                },
            ],
            keepalive_requests: 0,
        };
        let c = n.conf(&site, Path::new("/p"));
        assert!(
            c.contains("listen 198.18.0.2:80 fastopen=256; root /srv/x/www;"),
            "{c}"
        );
        assert!(c.contains("listen 198.18.0.2:443 ssl; server_name www.example.com; ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on;"), "{c}");
        assert!(c.contains("ssl_early_data on;"));
        assert!(c.contains("keepalive_timeout 0;"));
        assert!(c.contains("pid /p/nginx.pid;"));
    }

    #[test]
    fn watch_finds_a_marker_split_across_reads() {
        struct Chunks(Vec<&'static [u8]>);
        impl Read for Chunks {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                let c = self.0.remove(0);
                buf[..c.len()].copy_from_slice(c);
                Ok(c.len())
            }
        }
        let (tx, rx) = mpsc::channel();
        let tail = watch(
            Chunks(vec![b"noise HTT", b"P/1.1 200 OK", b" more"]),
            Some(b"HTTP/1.1 200".to_vec()),
            tx,
        );
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err(), "reported once");
        assert_eq!(tail, b"noise HTTP/1.1 200 OK more");
        let (tx, rx) = mpsc::channel();
        watch(
            Chunks(vec![b"HTTP/1.0 404"]),
            Some(b"HTTP/1.1 200".to_vec()),
            tx,
        );
        assert!(rx.try_recv().is_err());
    }
}
