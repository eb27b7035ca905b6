//! A configuration reload on SIGHUP that keeps every connection (issue 13
//! item 3), with the real binary: with `--handover`, SIGHUP starts a new
//! gateway process that reads the TOML file again and takes the sockets
//! over; a broken file leaves the running gateway serving and says why.
//! systemd's notification protocol is checked on a datagram socket of the
//! test (`NOTIFY_SOCKET`): each serving process says `MAINPID=` and
//! `READY=1`. Checks bodies, PIDs, messages and exit statuses, never timings.

mod common;
use common::*;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOST: &str = "www.example.com";
const PATIENCE: Duration = Duration::from_secs(60);

fn config(dir: &Path, listen: &str, backend: &str) {
    let text = format!(
        "[gateway]\nlisten = \"{listen}\"\nbackend = \"{backend}\"\nkey = [\"k1.key\"]\nrecord = [\"k1.rec\"]\ncert = \"cert.pem\"\ncert_key = \"cert.key\"\nhandover = \"run/gateway.sock\"\npid_file = \"run/gateway.pid\"\n"
    );
    std::fs::write(dir.join("zrtt.toml"), text).unwrap();
}

fn pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("run/gateway.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < PATIENCE, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(sig: &str, pid: u32) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// The body of `/` through the gateway (zrtt, or TLS when the new
/// process's restart guard refuses the flight).
fn body(dir: &Path, listen: &str) -> String {
    let port = listen.rsplit(':').next().unwrap();
    let out = zrtt(
        dir,
        &[
            "get",
            "-m",
            "20s",
            "--record",
            "k1.rec",
            "--cert",
            "cert.pem",
            "--cacert",
            "ca.pem",
            "--resolve",
            &format!("{HOST}:{port}:127.0.0.1"),
            &format!("https://{HOST}:{port}/"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One notification datagram (`KEY=value` lines).
fn notification(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Kills the last serving process (by the PID it wrote) at the end.
struct Last<'a>(&'a Path);

impl Drop for Last<'_> {
    fn drop(&mut self) {
        if let Some(p) = pid(self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &p.to_string()])
                .status();
        }
    }
}

#[test]
fn sighup_reloads_the_configuration_in_a_successor_and_a_broken_one_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    std::fs::create_dir(dir.join("run")).unwrap();
    let (one, two) = (backend_saying("one"), backend_saying("two"));
    let listen = format!("127.0.0.1:{}", free_port());
    config(dir, &listen, &one.to_string());
    let notify = UnixDatagram::bind(dir.join("notify.sock")).unwrap();
    notify.set_read_timeout(Some(PATIENCE)).unwrap();
    let log = std::fs::File::create(dir.join("gateway.log")).unwrap();
    let mut first = Guard(
        Command::new(env!("CARGO_BIN_EXE_zrtt"))
            .args(["gateway", "--config", "zrtt.toml"])
            .current_dir(dir)
            .env("NOTIFY_SOCKET", dir.join("notify.sock"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let _last = Last(dir);
    let first_pid = first.0.id();
    let msg = notification(&notify);
    assert!(
        msg.contains(&format!("MAINPID={first_pid}")) && msg.contains("READY=1"),
        "{msg}"
    );
    assert_eq!(wait_for("pid file", || pid(dir)), first_pid);
    assert_eq!(body(dir, &listen), "one");

    // A new backend in the file, then SIGHUP: a successor serves it.
    config(dir, &listen, &two.to_string());
    signal("-HUP", first_pid);
    let msg = notification(&notify);
    let second_pid = wait_for("the successor's pid file", || {
        pid(dir).filter(|&p| p != first_pid)
    });
    assert!(
        msg.contains(&format!("MAINPID={second_pid}")) && msg.contains("READY=1"),
        "{msg}"
    );
    let st = wait_for("the first process's exit", || first.0.try_wait().unwrap());
    assert!(
        st.success(),
        "the first process exits 0 after the hand-over"
    );
    assert_eq!(body(dir, &listen), "two");

    // A broken file: the successor fails, the running process says so and
    // serves on with the previous configuration.
    std::fs::write(dir.join("zrtt.toml"), "[gateway]\nlisten = \n").unwrap();
    signal("-HUP", second_pid);
    wait_for("the failed reload logged", || {
        std::fs::read_to_string(dir.join("gateway.log"))
            .unwrap()
            .contains("without taking over")
            .then_some(())
    });
    let log = std::fs::read_to_string(dir.join("gateway.log")).unwrap();
    assert!(
        log.contains("zrtt.toml"),
        "the reason names the file: {log}"
    );
    assert_eq!(pid(dir), Some(second_pid));
    assert_eq!(body(dir, &listen), "two");

    signal("-TERM", second_pid);
    wait_for("the pid file removed at exit", || {
        (!dir.join("run/gateway.pid").exists()).then_some(())
    });
}
