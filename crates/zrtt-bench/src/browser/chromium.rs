//! One cold page load in headless Chromium inside the client's namespace
//! (a new profile each time: no cache, no session, no socket kept), and
//! the `zrtt proxy` it may go through (a new one for each load: no pooled
//! connection, no token), with the proxy's metrics read before it stops.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zrtt_lab::{Lab, LabChild};

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
    },
    /// Through `zrtt proxy` on [`PROXY`] (`--proxy-server`): the proxy
    /// resolves the names.
    Proxy,
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

/// Chromium's arguments for one cold load of `url`.
pub(super) fn chromium_args(
    profile: &Path,
    url: &str,
    route: &Route,
    screenshot: Option<&Path>,
    netlog: Option<&Path>,
) -> Vec<OsString> {
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
        "--dump-dom",
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
        } => {
            a.push(format!("--host-resolver-rules={resolver_rules}").into());
            a.push(format!("--ignore-certificate-errors-spki-list={spki}").into());
        }
        Route::Proxy => a.push(format!("--proxy-server=http://{PROXY}").into()),
    }
    if let Some(p) = screenshot {
        let mut s = OsString::from("--screenshot=");
        s.push(p);
        a.push(s);
    }
    if let Some(p) = netlog {
        let mut s = OsString::from("--log-net-log=");
        s.push(p);
        a.push(s);
    }
    a.push(url.into());
    a
}

/// Loads `url` once in a fresh Chromium with a fresh profile under `dir`;
/// the page's own timing. With `netlog`, Chromium writes its network log
/// there (`--log-net-log`, for a kept working directory).
pub(super) fn load(
    lab: &Lab,
    dir: &Path,
    url: &str,
    route: &Route,
    screenshot: Option<&Path>,
    netlog: Option<&Path>,
) -> Result<Timing> {
    let profile = dir.join("chromium-profile");
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile)?;
    let dom_file = dir.join("dom.html");
    let log_file = dir.join("chromium.log");
    let mut c = lab.command(CLIENT, "chromium")?;
    c.args(chromium_args(&profile, url, route, screenshot, netlog))
        // Chromium keeps its NSS database under $HOME: the profile's.
        .env("HOME", &profile)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom_file)?)
        .stderr(std::fs::File::create(&log_file)?);
    let child = lab.spawn(CLIENT, c)?;
    let status = child.wait_timeout(LOAD_TIMEOUT)?;
    if status.is_none() {
        let _ = child.kill();
    }
    let _ = std::fs::remove_dir_all(&profile);
    let dom = std::fs::read_to_string(&dom_file).unwrap_or_default();
    parse_timing(&dom).with_context(|| {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        let tail: String = log.lines().rev().take(8).collect::<Vec<_>>().join("\n");
        format!("chromium {url} ({status:?}); its stderr ends:\n{tail}")
    })
}

/// A running `zrtt proxy` for the sites' hosts.
pub(super) struct Proxy {
    child: LabChild,
}

impl Proxy {
    /// Starts `zrtt proxy` in the client on [`PROXY`]: the sites' key
    /// records (one certificate signs them all), their gateways at
    /// `gateways`, the client's provenance certificates (a copy of
    /// `pv_state`), no token state; waits until it listens.
    pub(super) fn start(
        bench: &Bench,
        lab: &Lab,
        dir: &Path,
        sites: &[Site],
        gateways: &[SocketAddr],
        pv_state: &Path,
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
        let a = chromium_args(Path::new("/p"), "http://x/", &Route::Proxy, None, None);
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into()).collect();
        assert!(a.contains(&"--proxy-server=http://127.0.0.1:18080".to_string()));
        assert!(a.contains(&"--user-data-dir=/p".to_string()));
        assert_eq!(a.last().unwrap(), "http://x/");
        let d = Route::Direct {
            resolver_rules: "MAP a 1.2.3.4".into(),
            spki: "h".into(),
        };
        let a = chromium_args(
            Path::new("/p"),
            "https://a/",
            &d,
            Some(Path::new("/s.png")),
            None,
        );
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into()).collect();
        assert!(a.contains(&"--host-resolver-rules=MAP a 1.2.3.4".to_string()));
        assert!(a.contains(&"--ignore-certificate-errors-spki-list=h".to_string()));
        assert!(a.contains(&"--screenshot=/s.png".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--proxy-server")));
    }
}
