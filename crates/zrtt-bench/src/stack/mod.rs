//! The server side of every lab run, built one way. A [`SiteStack`] is one
//! site in one lab host: nginx as the backend (plain HTTP on the host's
//! loopback), optional nginx listeners facing the client (plain HTTP, the
//! TLS baseline), and `zrtt gateway`s in front of the backend, each with its
//! own [`Gateway`] options; [`Verifiers`] are the provenance verifiers those
//! gateways may trust. Every scenario and the demo build their servers here.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zrtt_lab::{Lab, LabChild, Topology};

mod nginx;
mod site;

pub(crate) use nginx::{Nginx, NginxServer, NginxTls};
pub(crate) use site::Site;

use crate::proc::{run_capture, wait_listening, Children};
use crate::Bench;

/// Where every gateway finds its backend: nginx plain HTTP on the loopback
/// of the gateway's host.
pub(crate) const BACKEND: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080));

/// The lab host running the provenance verifiers, and the client that
/// fetches their certificates.
const VERIFIER_HOST: &str = "verifier";
const CLIENT_HOST: &str = "client";
/// The verifiers' ports: two verifiers, a quorum of two.
const VERIFIER_PORTS: [u16; 2] = [4480, 4481];

/// The usual WAN: `client` and `server` `rtt` apart, and a `verifier` host
/// 10 ms from the client and `rtt` from the server.
pub(crate) fn wan_with_verifier(rtt: Duration) -> Topology {
    Topology::new()
        .host(CLIENT_HOST)
        .host("server")
        .host(VERIFIER_HOST)
        .rtt(CLIENT_HOST, "server", rtt)
        .rtt(CLIENT_HOST, VERIFIER_HOST, Duration::from_millis(10))
        .rtt("server", VERIFIER_HOST, rtt)
}

/// How one `zrtt gateway` of a site runs (everything else at the gateway's
/// defaults).
#[derive(Clone, Debug)]
pub(crate) struct Gateway {
    pub(crate) listen: SocketAddr,
    /// A trusted network (`--trust <ip>/32`: answered before the handshake).
    pub(crate) trust: Option<Ipv4Addr>,
    /// Provenance verifier public keys (hex), all of them required (quorum).
    pub(crate) verifiers: Vec<String>,
    /// Token sealing key file: the gateway issues address tokens.
    pub(crate) token_key: Option<PathBuf>,
    /// `--strict-amplification`: three times the flight before the
    /// handshake, not the default initial window.
    pub(crate) strict: bool,
    /// `--admin`: the metrics page.
    pub(crate) admin: Option<SocketAddr>,
    /// Where its stderr goes (default: discarded).
    pub(crate) log: Option<PathBuf>,
    /// `--replay-state`: where the replay filter is kept across restarts.
    pub(crate) replay_state: Option<PathBuf>,
    /// `--root`: serve this directory's files instead of `BACKEND`.
    pub(crate) root: Option<PathBuf>,
    /// `--replay-store`: the shared replay store's URL (docs/FLEET.md).
    pub(crate) replay_store: Option<String>,
    /// `--sdns`: answer the DNS shortcut's zones there (docs/DNS.md §8).
    pub(crate) sdns: Option<SocketAddr>,
}

impl Gateway {
    /// A gateway on `listen` with the defaults: no address proof but the
    /// TCP handshake.
    pub(crate) fn new(listen: SocketAddr) -> Gateway {
        Gateway {
            listen,
            trust: None,
            verifiers: Vec::new(),
            token_key: None,
            strict: false,
            admin: None,
            log: None,
            replay_state: None,
            root: None,
            replay_store: None,
            sdns: None,
        }
    }

    /// The same, trusting `verifiers`' certificates.
    pub(crate) fn proven_by(listen: SocketAddr, verifiers: &Verifiers) -> Gateway {
        Gateway {
            verifiers: verifiers.keys.clone(),
            ..Gateway::new(listen)
        }
    }

    /// `zrtt` arguments for this gateway in front of `BACKEND` (or serving
    /// `root`).
    pub(crate) fn args(&self, keystore: &Path) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "gateway".into(),
            "--listen".into(),
            self.listen.to_string().into(),
            "--backend".into(),
            BACKEND.to_string().into(),
            "--keystore".into(),
            keystore.into(),
        ];
        if let Some(root) = &self.root {
            a[3] = "--root".into();
            a[4] = root.into();
        }
        if self.strict {
            a.push("--strict-amplification".into());
        }
        let mut flag = |k: &str, v: OsString| {
            a.push(k.into());
            a.push(v);
        };
        if let Some(ip) = self.trust {
            flag("--trust", format!("{ip}/32").into());
        }
        for v in &self.verifiers {
            flag("--verifier", v.into());
        }
        if !self.verifiers.is_empty() {
            flag("--quorum", self.verifiers.len().to_string().into());
        }
        if let Some(k) = &self.token_key {
            flag("--token-key", k.into());
        }
        if let Some(admin) = self.admin {
            flag("--admin", admin.to_string().into());
        }
        if let Some(p) = &self.replay_state {
            flag("--replay-state", p.into());
        }
        if let Some(url) = &self.replay_store {
            flag("--replay-store", url.into());
        }
        if let Some(sdns) = self.sdns {
            flag("--sdns", sdns.to_string().into());
        }
        a
    }
}

/// One site's servers in one lab host, to be started with
/// [`SiteStack::start`].
pub(crate) struct SiteStack<'a> {
    bench: &'a Bench,
    host: String,
    site: &'a Site,
    nginx: Nginx,
    gateways: Vec<Gateway>,
    cpu: Option<usize>,
}

impl<'a> SiteStack<'a> {
    /// `site` in lab host `host`: nginx with the backend listener only
    /// (keep-alive 100 requests per connection), no gateway yet.
    pub(crate) fn new(bench: &'a Bench, host: &str, site: &'a Site) -> SiteStack<'a> {
        SiteStack {
            bench,
            host: host.into(),
            site,
            nginx: Nginx {
                servers: vec![NginxServer {
                    listen: BACKEND,
                    tls: None,
                    fast_open: false,
                }],
                keepalive_requests: 100,
            },
            gateways: Vec::new(),
            cpu: None,
        }
    }

    /// No backend listener (a host serving only nginx's own listeners).
    pub(crate) fn without_backend(mut self) -> Self {
        self.nginx.servers.retain(|s| s.listen != BACKEND);
        self
    }

    /// An nginx plain HTTP listener (`fast_open`: TFO on it).
    pub(crate) fn http(mut self, listen: SocketAddr, fast_open: bool) -> Self {
        self.nginx.servers.push(NginxServer {
            listen,
            tls: None,
            fast_open,
        });
        self
    }

    /// An nginx TLS listener.
    pub(crate) fn tls(mut self, listen: SocketAddr, tls: NginxTls, fast_open: bool) -> Self {
        self.nginx.servers.push(NginxServer {
            listen,
            tls: Some(tls),
            fast_open,
        });
        self
    }

    /// nginx's keep-alive requests per connection.
    pub(crate) fn keepalive_requests(mut self, n: u32) -> Self {
        self.nginx.keepalive_requests = n;
        self
    }

    /// A `zrtt gateway` in front of the backend.
    pub(crate) fn gateway(mut self, g: Gateway) -> Self {
        self.gateways.push(g);
        self
    }

    /// Every server process pinned to CPU `cpu` (`taskset -c`, which execs
    /// the server, so the child's PID is the server's).
    pub(crate) fn pinned_to(mut self, cpu: usize) -> Self {
        self.cpu = Some(cpu);
        self
    }

    fn command(&self, lab: &Lab, program: impl AsRef<std::ffi::OsStr>) -> Result<Command> {
        Ok(match self.cpu {
            Some(cpu) => {
                let mut c = lab.command(&self.host, "taskset")?;
                c.args(["-c", &cpu.to_string()]).arg(program);
                c
            }
            None => lab.command(&self.host, program)?,
        })
    }

    /// Starts nginx (configuration under `<site>/nginx`) and the gateways,
    /// then waits until each listens, seen from lab host `seen_from`
    /// (loopback listeners only when that is the site's own host).
    pub(crate) fn start(self, lab: &Lab, seen_from: &str) -> Result<RunningSite> {
        let mut children = Children::default();
        let mut nginx_pid = None;
        if !self.nginx.servers.is_empty() {
            let prefix = self.site.dir.join("nginx");
            std::fs::create_dir_all(&prefix)?;
            let conf = prefix.join("nginx.conf");
            std::fs::write(&conf, self.nginx.conf(self.site, &prefix))?;
            let mut c = self.command(lab, "nginx")?;
            c.arg("-p")
                .arg(&prefix)
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(prefix.join("error.log"))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = lab.spawn(&self.host, c)?;
            nginx_pid = Some(child.pid());
            children.0.push(child);
        }
        let mut gateway_pids = Vec::new();
        for g in &self.gateways {
            let mut c = self.command(lab, &self.bench.zrtt)?;
            c.args(g.args(&self.site.keystore)).stdout(Stdio::null());
            match &g.log {
                Some(p) => c
                    .arg("--log-level")
                    .arg("debug")
                    .stderr(std::fs::File::create(p)?),
                None => c.stderr(Stdio::null()),
            };
            let child = lab.spawn(&self.host, c)?;
            gateway_pids.push(child.pid());
            children.0.push(child);
        }
        let started = Instant::now();
        let listeners = self.nginx.servers.iter().map(|s| s.listen);
        let gateways = self
            .gateways
            .iter()
            .flat_map(|g| std::iter::once(g.listen).chain(g.admin));
        for addr in listeners.chain(gateways) {
            if !addr.ip().is_loopback() || seen_from == self.host {
                wait_listening(lab, seen_from, addr)?;
            }
        }
        Ok(RunningSite {
            children,
            nginx_pid,
            gateway_pids,
            started,
        })
    }
}

/// A started [`SiteStack`]: its processes are stopped when it is dropped.
pub(crate) struct RunningSite {
    children: Children,
    pub(crate) nginx_pid: Option<u32>,
    /// In the order the gateways were added.
    pub(crate) gateway_pids: Vec<u32>,
    started: Instant,
}

impl RunningSite {
    /// Another process of the site, stopped with it.
    pub(crate) fn adopt(&mut self, child: LabChild) {
        self.children.0.push(child);
    }

    /// A fresh gateway's replay filter refuses flights stamped before its
    /// start plus 2 s (docs/PROTOCOL.md §7): sleeps until 2.5 s after the
    /// gateways started.
    pub(crate) fn settle(&self) {
        std::thread::sleep(Duration::from_millis(2500).saturating_sub(self.started.elapsed()));
    }
}

/// Two provenance verifiers (`zrtt verifier serve`) on the `verifier` host, and
/// the certificates the `client` host obtained from them once (`zrtt verifier
/// fetch`), as when it gets its address; they serve first contact with any
/// gateway trusting the verifiers. Stopped when dropped.
pub(crate) struct Verifiers {
    /// The verifiers' public keys (hex), for [`Gateway::verifiers`].
    pub(crate) keys: Vec<String>,
    /// The client's certificates (`zrtt get --provenance-state`).
    pub(crate) state: PathBuf,
    _children: Children,
}

impl Verifiers {
    /// Starts the verifiers with fresh keys under `dir`, waits until they
    /// listen, and fetches certificates into `<dir>/pv.state`.
    pub(crate) fn start(bench: &Bench, lab: &Lab, dir: &Path) -> Result<Verifiers> {
        let ip = lab.addr(VERIFIER_HOST)?;
        let mut children = Children::default();
        let mut keys = Vec::new();
        for port in VERIFIER_PORTS {
            let key_file = dir.join(format!("pv{port}.key"));
            let mut keygen = Command::new(&bench.zrtt);
            keygen.args(["verifier", "keygen", "--out"]).arg(&key_file);
            let out = run_capture(keygen).context("a verifier key")?;
            let public = out
                .lines()
                .find_map(|l| l.strip_prefix("public key:"))
                .map(|k| k.trim().to_string())
                .context("`zrtt verifier keygen` printed no public key")?;
            let mut p = lab.command(VERIFIER_HOST, &bench.zrtt)?;
            p.args([
                "verifier",
                "serve",
                "--listen",
                &format!("{ip}:{port}"),
                "--key",
            ])
            .arg(&key_file);
            p.stdout(Stdio::null()).stderr(Stdio::null());
            children.0.push(lab.spawn(VERIFIER_HOST, p)?);
            keys.push(public);
        }
        let state = dir.join("pv.state");
        let mut fetch = lab.command(CLIENT_HOST, &bench.zrtt)?;
        fetch.args(["verifier", "fetch", "--state"]).arg(&state);
        for port in VERIFIER_PORTS {
            wait_listening(lab, CLIENT_HOST, SocketAddr::from((ip, port)))?;
            fetch.args(["--verifier", &format!("{ip}:{port}")]);
        }
        run_capture(fetch).context("obtaining provenance certificates")?;
        Ok(Verifiers {
            keys,
            state,
            _children: children,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_arguments() {
        let listen: SocketAddr = "198.18.0.2:4435".parse().unwrap();
        let plain = Gateway::new(listen).args(Path::new("/ks"));
        assert_eq!(
            plain,
            [
                "gateway",
                "--listen",
                "198.18.0.2:4435",
                "--backend",
                "127.0.0.1:8080",
                "--keystore",
                "/ks"
            ]
            .map(OsString::from)
        );
        let all = Gateway {
            trust: Some(Ipv4Addr::LOCALHOST),
            verifiers: vec!["aa".into(), "bb".into()],
            token_key: Some("/t.key".into()),
            strict: true,
            admin: Some("127.0.0.1:9090".parse().unwrap()),
            ..Gateway::new(listen)
        }
        .args(Path::new("/ks"));
        let all: Vec<String> = all.iter().map(|a| a.to_string_lossy().into()).collect();
        let tail = &all[7..];
        assert_eq!(
            tail,
            [
                "--strict-amplification",
                "--trust",
                "127.0.0.1/32",
                "--verifier",
                "aa",
                "--verifier",
                "bb",
                "--quorum",
                "2",
                "--token-key",
                "/t.key",
                "--admin",
                "127.0.0.1:9090"
            ]
        );
    }
}
