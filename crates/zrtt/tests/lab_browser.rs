//! `zrtt lab browser` as a smoke test: one RTT, one cold Chromium load per
//! mode, driven over the DevTools pipe. Asserts facts only (the page and
//! all its objects loaded, through the proxy over zrtt and not its TLS
//! fallback, the browser's timings parsed, a screenshot written), never a
//! timing. Needs root, nginx, chromium and openssl; says why it skips.

mod common;
use common::lab_skip as skip;

use std::process::{Command, Stdio};

#[test]
fn browser_loads_the_page_through_zrtt_proxy() {
    if skip(
        "browser_loads_the_page_through_zrtt_proxy",
        &["nginx", "chromium", "openssl"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["lab", "browser", "--rtt", "100", "--samples", "1"])
        .args(["--think-ms", "500", "--out"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "zrtt lab browser failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&format!("zrtt-{pid}-")),
        "namespaces left behind"
    );
    assert!(
        !std::path::Path::new(&format!("/etc/netns/zrtt-{pid}-client")).exists(),
        "the client's Chromium policies left behind"
    );
    for ext in ["md", "svg", "png"] {
        let f = dir.path().join(format!("browser.{ext}"));
        assert!(f.metadata().is_ok_and(|m| m.len() > 0), "{f:?}");
    }
    let png = std::fs::read(dir.path().join("browser.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let text = std::fs::read_to_string(dir.path().join("browser.json")).unwrap();
    let js: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rtt = &js["data"]["rtts"][0];
    assert_eq!(rtt["rtt_ms"], 100);
    let modes = rtt["modes"].as_array().unwrap();
    let ids: Vec<&str> = modes.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["http", "tls13", "tls13-h2", "zrtt-proxy", "zrtt-proxy-h2"]
    );
    for m in modes {
        let id = m["id"].as_str().unwrap();
        let samples = m["samples"].as_array().unwrap();
        assert_eq!(samples.len(), 1, "{id}");
        let s = &samples[0];
        eprintln!("{id}: {s}");
        // Every object fetched and decoded, the browser's timing parsed,
        // and the page is the one asked for (no HTTPS upgrade).
        assert_eq!(s["resources"], 30, "{id}");
        assert_eq!(s["images"], 30, "{id}");
        assert_eq!(s["images_loaded"], 30, "{id}");
        assert!(s["load_ms"].as_f64().unwrap() > 0.0, "{id}");
        assert_eq!(s["page"]["url"], m["url"], "{id}");
        // HTTP/2 where it was offered and not disabled: nginx over TLS,
        // and the HTTPS proxy (through a proxy, the protocol to it).
        let h2 = id.ends_with("-h2");
        let proto = if h2 { "h2" } else { "http/1.1" };
        assert_eq!(s["page"]["next_hop_protocol"], proto, "{id}");
        // Navigated through DevTools after the browser's start, with the
        // machine's load measured around it.
        assert!(s["settled"].is_boolean(), "{id}");
        assert!(s["settle_ms"].is_u64(), "{id}");
        let busy = s["cpu_busy"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&busy), "{id}: {busy}");
        let proxy = &s["proxy"];
        if !id.starts_with("zrtt-proxy") {
            assert!(proxy.is_null(), "{id}");
            continue;
        }
        // The HTML and its 30 objects (and the favicon, if asked) went to
        // the zrtt hosts, on zrtt connections, never the TLS fallback.
        let n = |k: &str| proxy[k].as_u64().unwrap();
        assert!(n("zrtt_requests") >= 31, "{proxy}");
        assert_eq!(n("zrtt_connections_tls_fallback"), 0, "{proxy}");
        assert!(
            n("zrtt_connections_zrtt_early") + n("zrtt_connections_zrtt_gated") >= 3,
            "a zrtt connection to each of the three hosts: {proxy}"
        );
        // Chromium spoke HTTP/2 to the HTTPS proxy, and only to it. The
        // lab's readiness probe (connected, closed without a byte) is not
        // a failed handshake; a handshake Chromium abandons would be, so
        // tls_failures is Chromium's choice and not asserted.
        if h2 {
            assert!(n("h2_connections") >= 1, "{id}: {proxy}");
            assert!(n("tls_unused") >= 1, "{id}: {proxy}");
        } else {
            assert_eq!(n("h2_connections"), 0, "{id}: {proxy}");
        }
    }
}
