//! Static-file mode (issue 15 item 4), with clients nobody here wrote:
//! curl over TLS (HTTP/1.1 and HTTP/2) gets files with their content type,
//! byte ranges (206, 416), HEAD, 304 for `If-None-Match` and
//! `If-Modified-Since`, 405 for POST, and 404/403 for a directory, `..`
//! (plain and percent-encoded, sent as is) and a link leaving the root;
//! `zrtt get` over zrtt gets a file in the answer to its first flight (the
//! request was early data), from a gateway configured by a TOML file whose
//! `root` is relative to the file.

mod common;
use common::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn tools() -> bool {
    if !have("curl") {
        eprintln!("skipped: curl is not installed");
        return false;
    }
    true
}

/// `dir/www`: `a.txt`, `page.html`, `sub/index.html`, and `out`, a link
/// to `dir/secret.txt` (outside the root).
fn site(dir: &Path) {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("sub")).unwrap();
    std::fs::write(www.join("a.txt"), "0123456789abcdef").unwrap();
    std::fs::write(www.join("page.html"), "<p>hi</p>\n").unwrap();
    std::fs::write(www.join("sub/index.html"), "sub index\n").unwrap();
    std::fs::write(dir.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), www.join("out")).unwrap();
}

/// `zrtt gateway` in `dir` with `args` and an admin endpoint; it, its port
/// and the admin address.
fn gateway(dir: &Path, args: &[&str]) -> (Guard, u16, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .arg("gateway")
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let gw = Guard(child);
    let (mut port, mut admin) = (None, None);
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let line = line.trim();
        if let Some(a) = line.strip_prefix("listening ") {
            port = a.parse::<std::net::SocketAddr>().ok().map(|a| a.port());
        }
        if let Some(a) = line.strip_prefix("admin ") {
            admin = Some(a.to_owned());
        }
    }
    (
        gw,
        port.expect("no listening line"),
        admin.expect("no admin line"),
    )
}

/// curl `path` (sent as is) on a.example over TLS with `extra`; (headers
/// and body, `http_code http_version`).
fn curl(dir: &Path, port: u16, path: &str, extra: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            "ca.pem",
            "--path-as-is",
        ])
        .arg("--resolve")
        .arg(format!("a.example:{port}:127.0.0.1"))
        .args(extra)
        .args(["-w", "\n%{http_code} %{http_version}"])
        .arg(format!("https://a.example:{port}{path}"))
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl {path}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, tail) = text.rsplit_once('\n').unwrap();
    (body.to_owned(), tail.to_owned())
}

/// The value of header `name` in curl's `-D -` output.
fn header<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn curl_gets_files_ranges_and_conditions_and_no_traversal() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    site(dir);
    let (_gw, port, _) = gateway(
        dir,
        &[
            "--root",
            "www",
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
        ],
    );
    for version in ["--http1.1", "--http2"] {
        let want = if version == "--http2" { "2" } else { "1.1" };
        let (text, status) = curl(dir, port, "/a.txt", &[version, "-D", "-"]);
        assert_eq!(status, format!("200 {want}"), "{text}");
        assert!(text.ends_with("\r\n\r\n0123456789abcdef"), "{text}");
        assert_eq!(header(&text, "content-type"), Some("text/plain"));
        assert_eq!(header(&text, "accept-ranges"), Some("bytes"));
        let etag = header(&text, "etag").expect("an ETag").to_owned();
        let modified = header(&text, "last-modified")
            .expect("Last-Modified")
            .to_owned();

        let (body, status) = curl(dir, port, "/a.txt", &[version, "-r", "2-5"]);
        assert_eq!((body.as_str(), status), ("2345", format!("206 {want}")));
        let (text, _) = curl(dir, port, "/a.txt", &[version, "-r", "10-", "-D", "-"]);
        assert_eq!(header(&text, "content-range"), Some("bytes 10-15/16"));
        assert!(text.ends_with("abcdef"), "{text}");
        let (_, status) = curl(dir, port, "/a.txt", &[version, "-r", "100-200"]);
        assert_eq!(status, format!("416 {want}"));

        let (text, status) = curl(dir, port, "/page.html", &[version, "-I"]);
        assert_eq!(status, format!("200 {want}"));
        assert_eq!(header(&text, "content-length"), Some("10"));
        assert_eq!(header(&text, "content-type"), Some("text/html"));
        assert!(text.ends_with("\r\n\r\n"), "HEAD has no body: {text}");

        let inm = format!("If-None-Match: {etag}");
        let (body, status) = curl(dir, port, "/a.txt", &[version, "-H", &inm]);
        assert_eq!((body.as_str(), status), ("", format!("304 {want}")));
        let ims = format!("If-Modified-Since: {modified}");
        let (body, status) = curl(dir, port, "/a.txt", &[version, "-H", &ims]);
        assert_eq!((body.as_str(), status), ("", format!("304 {want}")));
        let (_, status) = curl(
            dir,
            port,
            "/a.txt",
            &[version, "-H", "If-None-Match: \"x\""],
        );
        assert_eq!(status, format!("200 {want}"));

        let (text, status) = curl(dir, port, "/a.txt", &[version, "-X", "POST", "-D", "-"]);
        assert_eq!(status, format!("405 {want}"));
        assert_eq!(header(&text, "allow"), Some("GET,HEAD"));

        for (path, code) in [
            ("/", "404"),
            ("/sub/", "404"),
            ("/sub", "404"),
            ("/nothing", "404"),
            ("/../secret.txt", "404"),
            ("/sub/../../secret.txt", "404"),
            ("/%2e%2e/secret.txt", "404"),
            ("/sub/%2E%2E/%2e%2e/secret.txt", "404"),
            ("/..%2fsecret.txt", "404"),
            ("/out", "403"),
        ] {
            let (body, status) = curl(dir, port, path, &[version]);
            assert_eq!(status, format!("{code} {want}"), "{path}");
            assert!(!body.contains("secret"), "{path}: {body}");
        }
    }
}

#[test]
fn index_and_outside_links_only_when_asked() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    site(dir);
    let (_gw, port, _) = gateway(
        dir,
        &[
            "--root",
            "www",
            "--root-index",
            "--root-outside-links",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
        ],
    );
    let (body, status) = curl(dir, port, "/sub/", &[]);
    assert_eq!((body.as_str(), status.as_str()), ("sub index\n", "200 2"));
    let (body, status) = curl(dir, port, "/out", &[]);
    assert_eq!((body.as_str(), status.as_str()), ("secret\n", "200 2"));
    // Still no listing, and still no `..`.
    assert_eq!(curl(dir, port, "/", &[]).1, "404 2");
    assert_eq!(curl(dir, port, "/%2e%2e/secret.txt", &[]).1, "404 2");
}

#[test]
fn a_root_that_is_not_a_directory_is_refused_before_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    site(dir);
    for root in ["nothing", "www/a.txt"] {
        let out = zrtt(
            dir,
            &[
                "gateway",
                "--root",
                root,
                "--key",
                "k1.key",
                "--record",
                "k1.rec",
                "--cert",
                "cert.pem",
                "--cert-key",
                "cert.key",
                "--check-config",
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{root}");
        assert!(err.contains("not a directory"), "{root}: {err}");
    }
    let out = zrtt(
        dir,
        &["gateway", "--root", "www", "--backend", "127.0.0.1:1"],
    );
    assert!(!out.status.success());
}

#[test]
fn the_first_flight_is_answered_from_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    site(dir);
    std::fs::create_dir(dir.join("conf")).unwrap();
    // Paths in the file are relative to its directory.
    std::fs::write(
        dir.join("conf/gw.toml"),
        "[gateway]\nroot = \"../www\"\nkey = [\"../k1.key\"]\nrecord = [\"../k1.rec\"]\n\
         cert = \"../cert.pem\"\ncert_key = \"../cert.key\"\ntrust = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    let (_gw, port, admin) = gateway(dir, &["--config", "conf/gw.toml"]);
    let out = zrtt_get_retrying_busy(dir, port, "/page.html", "%{http_code}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text, "<p>hi</p>\n200");
    assert_eq!(gateway_counter(&admin, "early_requests"), 1);
    assert_eq!(gateway_counter(&admin, "requests"), 1);
}

/// A site of files beside a proxied one on the same gateway: each host
/// gets its own (the file site from a `--site` SPEC's `root=`).
#[test]
fn a_site_of_files_beside_a_proxied_site() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, "a.example");
    site(dir);
    ok(
        dir,
        &["keys", "cert", "--name", "b.example", "--out-dir", "b"],
    );
    let proxied = backend_saying("proxied").to_string();
    let (_gw, port, _) = gateway(
        dir,
        &[
            "--backend",
            &proxied,
            "--key",
            "k1.key",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cert-key",
            "cert.key",
            "--site",
            "cert=b/cert.pem,cert-key=b/cert.key,alias=b.example,root=www",
        ],
    );
    let (body, status) = curl(dir, port, "/a.txt", &[]);
    assert_eq!((body.as_str(), status.as_str()), ("proxied", "200 2"));
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            "b/ca.pem",
            "--resolve",
        ])
        .arg(format!("b.example:{port}:127.0.0.1"))
        .args(["-w", " %{http_code}"])
        .arg(format!("https://b.example:{port}/a.txt"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0123456789abcdef 200");
}
