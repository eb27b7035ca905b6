//! Several sites on one gateway (issue 13 item 2), with clients nobody here
//! wrote: curl and `openssl s_client` pick each site's certificate by
//! server name (ECDSA P-256 from `zrtt keys cert`, RSA 2048 and ECDSA P-384
//! made by openssl, which also sign those sites' key records), `zrtt get`
//! reaches every site over zrtt with its own key, each request reaches its
//! site's backend, and a request for a
//! host no site serves, or for another site than the connection was opened
//! for, gets 421.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// A self-signed certificate for `name` made by openssl with `newkey`
/// (e.g. `rsa:2048`, `ec` with `-pkeyopt`), in `<stem>.pem` and `<stem>.key`.
fn openssl_cert(dir: &Path, stem: &str, name: &str, newkey: &[&str]) {
    let st = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "2", "-subj"])
        .arg(format!("/CN={name}"))
        .arg("-addext")
        .arg(format!("subjectAltName=DNS:{name}"))
        .args(newkey)
        .args([
            "-keyout",
            &format!("{stem}.key"),
            "-out",
            &format!("{stem}.pem"),
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "openssl req for {name}");
    let st = Command::new("chmod")
        .args(["600", &format!("{stem}.key")])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success());
}

/// curl to `https://<name>:<port>/` with `ca`; `(body, http code)`.
fn curl(dir: &Path, port: u16, name: &str, ca: &str, extra: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", ca, "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .args(extra)
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://{name}:{port}/"))
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {name}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, code) = text.rsplit_once('\n').unwrap();
    (body.to_owned(), code.to_owned())
}

/// The key size openssl s_client reports for the certificate served to `sni`.
fn served_key(dir: &Path, port: u16, sni: &str) -> String {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            sni,
        ])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("Server public key is "))
        .unwrap_or_else(|| panic!("no key size in {text}"))
        .to_owned()
}

/// `zrtt gateway` on a free loopback port with the default site a.example
/// (k1, cert.pem) in front of `backend` and `extra` flags; it and its port.
fn gateway(dir: &Path, backend: &str, extra: &[&str]) -> (Guard, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--backend", backend])
        .args([
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
        ])
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The listening line (an `admin ADDR` line may come first).
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.is_empty() || line.starts_with("admin ") {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    let gw = Guard(child);
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .port();
    (gw, port)
}

#[test]
fn one_gateway_serves_three_sites_each_with_its_certificate_keys_and_backend() {
    if !have("curl") || !have("openssl") {
        eprintln!("one_gateway_serves_three_sites: skipped: needs curl and openssl (scripts/install-deps.sh)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Site a: zrtt's own certificate (ca.pem signs it), key k1.
    key_and_record(dir, "a.example");
    // Site b: an RSA certificate, which also signs its key record
    // (RSASSA-PSS); site c: ECDSA P-384, the same.
    openssl_cert(dir, "b-rsa", "b.example", &["-newkey", "rsa:2048"]);
    openssl_cert(
        dir,
        "c-p384",
        "c.example",
        &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
    );
    for (k, cert, name) in [("k2", "b-rsa", "b.example"), ("k3", "c-p384", "c.example")] {
        let (key, rec) = (format!("{k}.key"), format!("{k}.rec"));
        let (pem, pkey) = (format!("{cert}.pem"), format!("{cert}.key"));
        ok(dir, &["keys", "generate", "--out", &key]);
        ok(
            dir,
            &[
                "keys",
                "sign",
                "--key",
                &key,
                "--cert",
                &pem,
                "--cert-key",
                &pkey,
                "--name",
                name,
                "--out",
                &rec,
            ],
        );
    }
    let show = ok(dir, &["keys", "show", "k2.rec"]);
    assert!(show.contains("rsa-pss-sha256"), "{show}");
    let (ba, bb, bc) = (
        backend_saying("site a"),
        backend_saying("site b"),
        backend_saying("site c"),
    );
    let site_b = format!("cert=b-rsa.pem,cert-key=b-rsa.key,key=k2.key,record=k2.rec,backend={bb}");
    let site_c = format!(
        "cert=c-p384.pem,cert-key=c-p384.key,key=k3.key,record=k3.rec,alias=www.c.example,backend={bc}"
    );
    let (_gw, port) = gateway(
        dir,
        &ba.to_string(),
        &["--site", &site_b, "--site", &site_c],
    );

    // TLS: each name gets its certificate (curl verifies it) and its backend.
    assert_eq!(
        curl(dir, port, "a.example", "ca.pem", &[]),
        ("site a".into(), "200".into())
    );
    assert_eq!(
        curl(dir, port, "b.example", "b-rsa.pem", &[]),
        ("site b".into(), "200".into())
    );
    assert_eq!(
        curl(dir, port, "c.example", "c-p384.pem", &[]),
        ("site c".into(), "200".into())
    );
    assert!(served_key(dir, port, "b.example").starts_with("2048"));
    assert!(served_key(dir, port, "c.example").starts_with("384"));
    // A host no site serves, and a request for site a on a connection
    // opened for site b: 421.
    let (_, code) = curl(
        dir,
        port,
        "b.example",
        "b-rsa.pem",
        &["-H", "Host: z.example"],
    );
    assert_eq!(code, "421");
    let (_, code) = curl(
        dir,
        port,
        "b.example",
        "b-rsa.pem",
        &["-H", "Host: a.example"],
    );
    assert_eq!(code, "421");

    // zrtt: site b's key reaches site b's backend, site a's key site a's.
    // The replay filter refuses flights stamped in the gateway's first seconds.
    std::thread::sleep(std::time::Duration::from_secs(3));
    for (name, rec, cert, want) in [
        ("b.example", "k2.rec", "b-rsa.pem", "site b"),
        ("c.example", "k3.rec", "c-p384.pem", "site c"),
        ("a.example", "k1.rec", "cert.pem", "site a"),
    ] {
        let out = zrtt(
            dir,
            &[
                "get",
                "--zrtt-only",
                "--no-state",
                "-m",
                "20s",
                "--record",
                rec,
                "--cert",
                cert,
                "--cacert",
                "ca.pem",
                "--resolve",
                &format!("{name}:{port}:127.0.0.1"),
                "-w",
                "%{zrtt_mode}",
                &format!("https://{name}:{port}/"),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "zrtt get {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.starts_with(want), "{name}: {text}");
        assert!(text.contains("0rtt"), "{name} over zrtt: {text}");
    }
    // A flight encrypted to site b's key carries no request for site a:
    // 421, and site a's backend is not reached.
    let out = zrtt(
        dir,
        &[
            "get",
            "--zrtt-only",
            "--no-state",
            "-m",
            "20s",
            "--record",
            "k2.rec",
            "--cert",
            "b-rsa.pem",
            "--resolve",
            &format!("b.example:{port}:127.0.0.1"),
            "-H",
            "Host: a.example",
            "-w",
            "%{http_code} %{zrtt_mode}",
            &format!("https://b.example:{port}/"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.ends_with("421 0rtt-gated") || text.ends_with("421 0rtt-early"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Backends by Unix socket, by host name and over h2c, with nginx as the
/// backend (issue 13 item 4): each site's requests reach nginx over its
/// transport and HTTP version, which nginx reports back.
#[test]
fn backends_by_unix_socket_host_name_and_h2c_reach_nginx() {
    if !have("curl") || !have("nginx") {
        eprintln!("backends_by_unix_socket_host_name_and_h2c: skipped: needs curl and nginx (scripts/install-deps.sh)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    openssl_cert(dir, "b", "b.example", &["-newkey", "rsa:2048"]);
    openssl_cert(dir, "c", "c.example", &["-newkey", "rsa:2048"]);
    let tcp_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
events {{ worker_connections 64; }}\n\
http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
  server {{ listen unix:{d}/h1.sock; location / {{ return 200 \"unix $server_protocol $host\"; }} }}\n\
  server {{ listen unix:{d}/h2.sock http2; location / {{ return 200 \"unix $server_protocol $host\"; }} }}\n\
  server {{ listen 127.0.0.1:{tcp_port} http2; location / {{ return 200 \"tcp $server_protocol $host\"; }} }}\n\
}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let _nginx = Guard(
        Command::new("nginx")
            .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf"), "-e"])
            .arg(format!("{d}/error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(dir.join("h2.sock").exists()
        && std::net::TcpStream::connect(("127.0.0.1", tcp_port)).is_ok())
    {
        assert!(std::time::Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let site_b = format!("cert=b.pem,cert-key=b.key,alias=b.example,backend=h2c+unix:{d}/h2.sock");
    let site_c =
        format!("cert=c.pem,cert-key=c.key,alias=c.example,backend=h2c://localhost:{tcp_port}");
    let (_gw, port) = gateway(
        dir,
        &format!("unix:{d}/h1.sock"),
        &["--site", &site_b, "--site", &site_c],
    );
    let (body, code) = curl(dir, port, "a.example", "ca.pem", &[]);
    assert_eq!(
        (body.as_str(), code.as_str()),
        ("unix HTTP/1.1 a.example", "200")
    );
    let (body, code) = curl(dir, port, "b.example", "b.pem", &[]);
    assert_eq!(
        (body.as_str(), code.as_str()),
        ("unix HTTP/2.0 b.example", "200"),
        "{}",
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
    let (body, code) = curl(dir, port, "c.example", "c.pem", &["--http1.1"]);
    assert_eq!(
        (body.as_str(), code.as_str()),
        ("tcp HTTP/2.0 c.example", "200")
    );
}

/// A site's own health settings (`--site ...,health=PATH`) apply to its
/// backends alone: its dead backend is taken down by its checks
/// (`backend_up` 0), while another site with the same kind of backend and
/// the gateway's settings (no checks; a lone backend is never marked down
/// passively) keeps it up.
#[test]
fn a_site_checks_its_backends_with_its_own_settings() {
    if !have("curl") || !have("openssl") {
        eprintln!(
            "a_site_checks_its_backends: skipped: needs curl and openssl (scripts/install-deps.sh)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    openssl_cert(dir, "b", "b.example", &["-newkey", "rsa:2048"]);
    openssl_cert(dir, "c", "c.example", &["-newkey", "rsa:2048"]);
    // Nothing listens there.
    let dead = format!("127.0.0.1:{}", free_port());
    let site_b = format!(
        "cert=b.pem,cert-key=b.key,alias=b.example,backend={dead},health=/up,health-interval=100ms,health-fall=1"
    );
    let site_c = format!("cert=c.pem,cert-key=c.key,alias=c.example,backend={dead}");
    let admin = format!("127.0.0.1:{}", free_port());
    let (_gw, port) = gateway(
        dir,
        &backend_saying("site a").to_string(),
        &["--site", &site_b, "--site", &site_c, "--admin", &admin],
    );
    wait_listening(&admin);
    assert_eq!(
        curl(dir, port, "a.example", "ca.pem", &[]),
        ("site a".into(), "200".into())
    );
    let up = |site: &str| {
        let key = format!("zrtt_gateway_backend_up{{site=\"{site}\",backend=\"{dead}\"}} ");
        let m = admin_metrics(&admin);
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap_or_else(|| panic!("no {key} in {m}"))
            .trim()
            .to_owned()
    };
    let start = std::time::Instant::now();
    while up("b.example") != "0" {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "site b's checks never took its backend down"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (body, code) = curl(dir, port, "b.example", "b.pem", &[]);
    assert_eq!(
        (body.trim(), code.as_str()),
        ("no backend of this site is up", "502")
    );
    let (_, code) = curl(dir, port, "c.example", "c.pem", &[]);
    assert_eq!(code, "502");
    assert_eq!(up("c.example"), "1", "site c has no checks");
}
