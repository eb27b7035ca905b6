//! One cold page load in headless Chromium inside the client's namespace
//! (a new profile each time: no cache, no session, no socket kept), and
//! the `zrtt proxy` it may go through (a new one for each load: no pooled
//! connection, no token), with the proxy's metrics read before it stops.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use zrtt_lab::{Lab, LabChild};

use super::cdp::{self, Cdp};
use super::page::{parse_timing, Timing};
use crate::proc::{run_capture, wait_listening};
use crate::stack::Site;
use crate::Bench;

const CLIENT: &str = "client";
/// Longest a page load may take before Chromium is killed.
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// `zrtt proxy`'s port and its metrics page, on the client's loopback.
pub(super) const PROXY: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    18080,
));
const PROXY_ADMIN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    19155,
));

/// How Chromium reaches the origins.
pub(super) enum Route {
    /// Straight to the servers: host names mapped to the lab's addresses
    /// (`--host-resolver-rules`, no DNS), the certificate's public key
    /// trusted by its SPKI hash.
    Direct {
        resolver_rules: String,
        spki: String,
        /// HTTP/2 when the server offers it; else `--disable-http2`
        /// (HTTP/1.1, six connections per host).
        http2: bool,
    },
    /// Through `zrtt proxy` on [`PROXY`] (`--proxy-server`): the proxy
    /// resolves the names. With `tls`, an HTTPS proxy (the SPKI hash of
    /// its certificate trusted), to which Chromium speaks HTTP/2: every
    /// request of the page on one connection, none queued behind six per
    /// host; without, plain HTTP/1.1 to the proxy.
    Proxy { tls: Option<String> },
}

/// `chromium --version`'s line, e.g. "Chromium 156.0.8078.108 built on
/// Debian GNU/Linux 12 (bookworm)".
pub(super) fn version() -> String {
    Command::new("chromium")
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "chromium (version unknown)".into())
}

/// Chromium policies for the client host (what an administrator sets in
/// `/etc/chromium/policies/managed/`): no HTTPS-Upgrades (Chromium would
/// first try every `http://` navigation as `https://`, which through a
/// proxy is a `CONNECT` tunnel that bypasses zrtt, and straight to nginx
/// would load the plain-HTTP row over TLS), and none of the browser's own
/// background requests (component updates, network time, sign-in), which
/// would otherwise go through the proxy beside the page.
const POLICIES: &str = r#"{
  "HttpsUpgradesEnabled": false,
  "HttpsOnlyMode": "disallowed",
  "ComponentUpdatesEnabled": false,
  "BrowserNetworkTimeQueriesEnabled": false,
  "BrowserSignin": 0,
  "MetricsReportingEnabled": false,
  "SafeBrowsingProtectionLevel": 0,
  "SearchSuggestEnabled": false,
  "BackgroundModeEnabled": false
}
"#;

/// Gives Chromium in the client host [`POLICIES`]: `ip netns exec` mounts
/// `/etc/netns/<netns>/chromium` over `/etc/chromium` (with a copy of the
/// distribution's `master_preferences`), and the directory goes with the
/// namespace.
pub(super) fn install_policies(lab: &Lab) -> Result<()> {
    let etc = Path::new(zrtt_lab::ETC_NETNS)
        .join(lab.netns(CLIENT)?)
        .join("chromium");
    let managed = etc.join("policies/managed");
    std::fs::create_dir_all(&managed).with_context(|| format!("creating {}", managed.display()))?;
    let prefs = Path::new("/etc/chromium/master_preferences");
    if prefs.exists() {
        std::fs::copy(prefs, etc.join("master_preferences"))?;
    }
    std::fs::write(managed.join("zrtt-lab.json"), POLICIES)?;
    Ok(())
}

/// The base64 SHA-256 of a PEM certificate's SubjectPublicKeyInfo, as
/// `--ignore-certificate-errors-spki-list` takes it (the recipe Chromium's
/// documentation gives, with openssl).
pub(super) fn spki_hash(cert: &Path) -> Result<String> {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(
            "openssl x509 -in \"$1\" -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
        )
        .arg("sh")
        .arg(cert);
    let out = run_capture(c).context("hashing the certificate's public key")?;
    let h = out.trim().to_string();
    if h.len() != 44 {
        bail!("unexpected SPKI hash {h:?}");
    }
    Ok(h)
}

/// Chromium's arguments: a new profile under `profile`, the route to the
/// origins, DevTools on the pipe (descriptors 3 and 4), and `about:blank`
/// until [`load`] navigates.
pub(super) fn chromium_args(profile: &Path, route: &Route, netlog: Option<&Path>) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--headless=new",
        "--no-sandbox", // root in the lab; nothing but the lab's pages is loaded
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-extensions",
        "--disable-sync",
        "--window-size=1000,760",
        "--remote-debugging-pipe",
    ]
    .map(OsString::from)
    .into();
    let mut dir = OsString::from("--user-data-dir=");
    dir.push(profile);
    a.push(dir);
    match route {
        Route::Direct {
            resolver_rules,
            spki,
            http2,
        } => {
            a.push(format!("--host-resolver-rules={resolver_rules}").into());
            a.push(format!("--ignore-certificate-errors-spki-list={spki}").into());
            if !http2 {
                a.push("--disable-http2".into());
            }
        }
        Route::Proxy { tls: None } => a.push(format!("--proxy-server=http://{PROXY}").into()),
        Route::Proxy { tls: Some(spki) } => {
            a.push(format!("--proxy-server=https://{PROXY}").into());
            a.push(format!("--ignore-certificate-errors-spki-list={spki}").into());
        }
    }
    if let Some(p) = netlog {
        let mut s = OsString::from("--log-net-log=");
        s.push(p);
        a.push(s);
    }
    a.push("about:blank".into());
    a
}

/// The machine counts as quiet once its CPUs were at most this busy over
/// [`QUIET_WINDOW`] (the lab's hub and servers idle at a few per cent).
pub(super) const QUIET_BUSY: f64 = 0.25;
pub(super) const QUIET_WINDOW: Duration = Duration::from_millis(200);
/// Longest wait for a quiet machine after Chromium starts.
pub(super) const SETTLE_MAX: Duration = Duration::from_secs(10);
/// How long DevTools commands other than the load may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// Busy and total clock ticks of all CPUs (`/proc/stat`'s `cpu` line; busy
/// is everything but idle and iowait).
fn cpu_ticks(proc_stat: &str) -> Option<(u64, u64)> {
    let v = crate::proc::proc_stat_cpu(proc_stat, "cpu")?;
    let total: u64 = v.iter().sum();
    Some((total - v[3] - v[4], total))
}

fn machine_ticks() -> Option<(u64, u64)> {
    cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Share of the CPUs' time that was busy between two [`machine_ticks`].
fn busy_between(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<f64> {
    let ((b0, t0), (b1, t1)) = (a?, b?);
    (t1 > t0).then(|| (b1.saturating_sub(b0)) as f64 / (t1 - t0) as f64)
}

/// Waits until the machine is quiet (Chromium has finished starting):
/// how long that took, and whether it happened within [`SETTLE_MAX`].
fn settle() -> (Duration, bool) {
    let t0 = Instant::now();
    let mut last = machine_ticks();
    while t0.elapsed() < SETTLE_MAX {
        std::thread::sleep(QUIET_WINDOW);
        let now = machine_ticks();
        if busy_between(last, now).is_some_and(|b| b <= QUIET_BUSY) {
            return (t0.elapsed(), true);
        }
        last = now;
    }
    (t0.elapsed(), false)
}

/// One page load, and the state of the machine around it.
pub(super) struct Load {
    pub(super) timing: Timing,
    /// From Chromium answering on its pipe to the quiet machine the
    /// navigation started on.
    pub(super) settle: Duration,
    /// The machine became quiet within [`SETTLE_MAX`].
    pub(super) settled: bool,
    /// Share of all CPUs busy from the navigation to the load event.
    pub(super) cpu_busy: Option<f64>,
}

/// Loads `url` once in a fresh Chromium with a fresh profile under `dir`
/// (no cache, no cookies, no socket kept): the browser starts on
/// `about:blank`, and once the machine is quiet again (its start-up done:
/// a running browser, as a reader has) it navigates through DevTools;
/// then the page's own timing, from its DOM, which goes to `dom.html`.
/// With `screenshot`, a PNG of the loaded page; with `netlog`, Chromium
/// writes its network log there (`--log-net-log`, for a kept working
/// directory).
pub(super) fn load(
    lab: &Lab,
    dir: &Path,
    url: &str,
    route: &Route,
    screenshot: Option<&Path>,
    netlog: Option<&Path>,
) -> Result<Load> {
    let profile = dir.join("chromium-profile");
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile)?;
    let log_file = dir.join("chromium.log");
    // The shell hands our pipes to Chromium as its descriptors 3 (commands)
    // and 4 (answers) and execs it: the PID the lab tracks is Chromium's.
    let mut c = lab.command(CLIENT, "sh")?;
    c.arg("-c")
        .arg("exec \"$@\" 3<&0 4>&1 0</dev/null 1>/dev/null")
        .arg("sh")
        .arg("chromium")
        .args(chromium_args(&profile, route, netlog))
        // Chromium keeps its NSS database under $HOME: the profile's.
        .env("HOME", &profile)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_file)?);
    let mut child = lab.spawn(CLIENT, c)?;
    let r = drive(&mut child, dir, url, screenshot);
    if child.wait_timeout(Duration::from_secs(10))?.is_none() {
        let _ = child.kill();
    }
    let _ = std::fs::remove_dir_all(&profile);
    r.with_context(|| {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        let tail: String = log.lines().rev().take(8).collect::<Vec<_>>().join("\n");
        format!("chromium {url}; its stderr ends:\n{tail}")
    })
}

/// The DevTools side of [`load`]: attach to the page, settle, navigate,
/// wait for the load event, read the DOM (and take the screenshot), close.
fn drive(child: &mut LabChild, dir: &Path, url: &str, screenshot: Option<&Path>) -> Result<Load> {
    let out = child.stdout.take().context("Chromium's answer pipe")?;
    let to = child.stdin.take().context("Chromium's command pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || cdp::reader(out, tx));
    let mut cdp = Cdp::new(to, rx);
    let started = Instant::now();
    let target = loop {
        let r = cdp.call(None, "Target.getTargets", json!({}), COMMAND_TIMEOUT)?;
        let page = r["targetInfos"].as_array().and_then(|t| {
            t.iter()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["targetId"].as_str().map(String::from))
        });
        match page {
            Some(p) => break p,
            None if started.elapsed() > COMMAND_TIMEOUT => bail!("Chromium opened no page"),
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let attached = cdp.call(
        None,
        "Target.attachToTarget",
        json!({"targetId": target, "flatten": true}),
        COMMAND_TIMEOUT,
    )?;
    let session = attached["sessionId"]
        .as_str()
        .context("attachToTarget without a sessionId")?
        .to_string();
    let s = Some(session.as_str());
    cdp.call(s, "Page.enable", json!({}), COMMAND_TIMEOUT)?;
    let (settle, settled) = settle();
    cdp.drain_events();
    let before = machine_ticks();
    let nav = cdp.call(s, "Page.navigate", json!({"url": url}), COMMAND_TIMEOUT)?;
    if let Some(e) = nav.get("errorText").and_then(Value::as_str) {
        bail!("navigating to {url}: {e}");
    }
    let deadline = Instant::now() + LOAD_TIMEOUT;
    cdp.wait_event(s, "Page.loadEventFired", deadline)?;
    let cpu_busy = busy_between(before, machine_ticks());
    // The page's script writes its result in the load event; read the DOM
    // until it is there.
    let dom = loop {
        let r = cdp.call(
            s,
            "Runtime.evaluate",
            json!({"expression": "document.documentElement.outerHTML", "returnByValue": true}),
            COMMAND_TIMEOUT,
        )?;
        let dom = r["result"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if dom.contains(super::page::MARKER) || Instant::now() > deadline {
            break dom;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::write(dir.join("dom.html"), &dom)?;
    let timing = parse_timing(&dom)?;
    if let Some(p) = screenshot {
        let r = cdp.call(
            s,
            "Page.captureScreenshot",
            json!({"format": "png"}),
            COMMAND_TIMEOUT,
        )?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().context("a screenshot without data")?)
            .context("the screenshot's base64")?;
        std::fs::write(p, png).with_context(|| format!("writing {}", p.display()))?;
    }
    let _ = cdp.call(None, "Browser.close", json!({}), COMMAND_TIMEOUT);
    Ok(Load {
        timing,
        settle,
        settled,
        cpu_busy,
    })
}

/// The HTTPS proxy's certificate (for 127.0.0.1, by `zrtt keys cert`)
/// and the SPKI hash Chromium trusts it by.
pub(super) struct ProxyCert {
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    pub(super) spki: String,
}

impl ProxyCert {
    /// Creates it under `dir/proxy-tls`.
    pub(super) fn create(bench: &Bench, dir: &Path) -> Result<ProxyCert> {
        let out = dir.join("proxy-tls");
        std::fs::create_dir_all(&out)?;
        let mut c = Command::new(&bench.zrtt);
        c.args(["keys", "cert", "--name", "127.0.0.1", "--out-dir"])
            .arg(&out);
        run_capture(c).context("creating the proxy's certificate")?;
        let cert = out.join("cert.pem");
        Ok(ProxyCert {
            spki: spki_hash(&cert)?,
            key: out.join("cert.key"),
            cert,
        })
    }
}

/// A running `zrtt proxy` for the sites' hosts.
pub(super) struct Proxy {
    child: LabChild,
}

impl Proxy {
    /// Starts `zrtt proxy` in the client on [`PROXY`]: the sites' key
    /// records (one certificate signs them all), their gateways at
    /// `gateways`, the client's provenance certificates (a copy of
    /// `pv_state`), no token state, over TLS with `tls` (certificate and
    /// key); waits until it listens.
    pub(super) fn start(
        bench: &Bench,
        lab: &Lab,
        dir: &Path,
        sites: &[Site],
        gateways: &[SocketAddr],
        pv_state: &Path,
        tls: Option<&ProxyCert>,
    ) -> Result<Proxy> {
        let pv = dir.join("proxy-pv.state");
        std::fs::copy(pv_state, &pv).context("copying the provenance state")?;
        let mut c = lab.command(CLIENT, &bench.zrtt)?;
        c.arg("proxy")
            .args(["--listen", &PROXY.to_string()])
            .args(["--admin", &PROXY_ADMIN.to_string()])
            .arg("--cert")
            .arg(&sites[0].cert)
            .arg("--cacert")
            .arg(&sites[0].ca)
            .arg("--provenance-state")
            .arg(&pv)
            .arg("--no-state");
        if let Some(t) = tls {
            c.arg("--tls-cert")
                .arg(&t.cert)
                .arg("--tls-key")
                .arg(&t.key);
        }
        for (s, gw) in sites.iter().zip(gateways) {
            c.arg("--record").arg(&s.records);
            c.args(["--zrtt-port", &format!("{}={}", s.name, gw.port())]);
            c.args([
                "--resolve",
                &format!("{}:{}:{}", s.name, gw.port(), gw.ip()),
            ]);
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("proxy.log"))?);
        let child = lab.spawn(CLIENT, c)?;
        let p = Proxy { child };
        wait_listening(lab, CLIENT, PROXY_ADMIN)?;
        wait_listening(lab, CLIENT, PROXY)?;
        Ok(p)
    }

    /// The proxy's counters (`/metrics`), then stops it (SIGTERM by PID).
    pub(super) fn finish(self, lab: &Lab) -> Result<BTreeMap<String, f64>> {
        let page = crate::admin_page::fetch(lab, CLIENT, PROXY_ADMIN);
        let _ = self.child.terminate(Duration::from_secs(2));
        Ok(parse_metrics(&page.context("reading the proxy's metrics")?))
    }
}

/// Counter and gauge samples of an OpenMetrics page (`name{labels}` →
/// value); histogram buckets are left out.
pub(super) fn parse_metrics(page: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_page() {
        let page = "HTTP/1.0 200 OK\r\n\r\n# TYPE x counter\nzrtt_proxy_zrtt_requests_total 31\n\
                    zrtt_proxy_zrtt_connections_total{mode=\"zrtt_early\"} 12\n\
                    zrtt_proxy_first_byte_seconds_bucket{le=\"0.5\"} 3\n# EOF\n";
        let m = parse_metrics(page);
        assert_eq!(m["zrtt_proxy_zrtt_requests_total"], 31.0);
        assert_eq!(
            m["zrtt_proxy_zrtt_connections_total{mode=\"zrtt_early\"}"],
            12.0
        );
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn chromium_arguments() {
        let a = chromium_args(Path::new("/p"), &Route::Proxy { tls: None }, None);
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into()).collect();
        assert!(a.contains(&"--proxy-server=http://127.0.0.1:18080".to_string()));
        assert!(!a
            .iter()
            .any(|x| x.starts_with("--ignore-certificate-errors")));
        let t = Route::Proxy {
            tls: Some("p".into()),
        };
        let t = chromium_args(Path::new("/p"), &t, None);
        let t: Vec<String> = t.iter().map(|s| s.to_string_lossy().into()).collect();
        assert!(t.contains(&"--proxy-server=https://127.0.0.1:18080".to_string()));
        assert!(t.contains(&"--ignore-certificate-errors-spki-list=p".to_string()));
        assert!(!t.iter().any(|x| x == "--disable-http2"));
        assert!(a.contains(&"--user-data-dir=/p".to_string()));
        assert!(a.contains(&"--remote-debugging-pipe".to_string()));
        assert_eq!(a.last().unwrap(), "about:blank");
        let d = Route::Direct {
            resolver_rules: "MAP a 1.2.3.4".into(),
            spki: "h".into(),
            http2: false,
        };
        let a = chromium_args(Path::new("/p"), &d, Some(Path::new("/n.json")));
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into()).collect();
        assert!(a.contains(&"--host-resolver-rules=MAP a 1.2.3.4".to_string()));
        assert!(a.contains(&"--ignore-certificate-errors-spki-list=h".to_string()));
        assert!(a.contains(&"--log-net-log=/n.json".to_string()));
        assert!(a.contains(&"--disable-http2".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--proxy-server")));
        assert!(!a.iter().any(|x| x == "--dump-dom"));
    }

    #[test]
    fn cpu_share_from_proc_stat() {
        let a = cpu_ticks("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n").unwrap();
        assert_eq!(a, (150, 1000));
        let b = cpu_ticks("cpu  160 0 90 900 50 0 0 0 0 0\n").unwrap();
        // 100 of 200 ticks busy; iowait counts as idle.
        assert_eq!(busy_between(Some(a), Some(b)), Some(0.5));
        assert_eq!(busy_between(Some(b), Some(b)), None);
        assert_eq!(cpu_ticks("intr 1 2 3\n"), None);
    }
}
