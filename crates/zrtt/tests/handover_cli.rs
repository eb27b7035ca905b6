//! Restart without a blackout (`zrtt gateway --handover PATH`, issue 13
//! item 3), with the real binary on loopback: a new gateway process takes
//! the running one's listening sockets and replay filter, so
//! - every flight sent while the processes change hands gets an answer
//!   (none meets a closed port or a reset);
//! - a flight the old process accepted is refused as a replay by the new
//!   one, and a fresh flight is accepted at once (no restart refusal);
//! - the old process drains and exits by itself;
//! - a successor that fails before it says READY leaves the old process
//!   serving with its filter intact; one with another address is refused.
//!
//! Checks answers, exit statuses and counters, never timings.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, Frame, RejectReason,
};
use zrtt_proto::record::{KeyRecord, VerifiedKeyRecord};
use zrtt_proto::UnixTime;

const HOST: &str = "www.example.com";
/// Bound on waits for what takes milliseconds (a process starting or
/// draining): only a broken setup reaches it.
const PATIENCE: Duration = Duration::from_secs(60);

fn record(dir: &Path) -> KeyRecord {
    KeyRecord::decode(&std::fs::read(dir.join("k1.rec")).unwrap()).unwrap()
}

fn now() -> UnixTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    UnixTime::from_millis(d.as_millis() as u64)
}

/// A new first flight carrying one GET.
fn flight(rec: &KeyRecord) -> Vec<u8> {
    let v = VerifiedKeyRecord::dangerous_assume_verified(rec.clone());
    let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    ClientHandshake::start(
        &v,
        &ClientParams::default(),
        req.as_bytes(),
        now(),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap()
    .1
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Answer {
    Reply,
    Reject(RejectReason),
    /// Connection refused, reset or closed without a frame.
    Nothing,
}

/// Send `flight` on a new connection and read the first frame back.
fn answer(addr: &str, flight: &[u8]) -> Answer {
    let Ok(mut tcp) = TcpStream::connect(addr) else {
        return Answer::Nothing;
    };
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    if tcp.write_all(flight).is_err() {
        return Answer::Nothing;
    }
    let mut buf = Vec::new();
    loop {
        match read_frame(&buf, Expect::ReplyOrReject) {
            Ok(Some((Frame::Reply { .. }, _))) => return Answer::Reply,
            Ok(Some((Frame::Reject { reason, .. }, _))) => return Answer::Reject(reason),
            Ok(Some((other, _))) => panic!("unexpected {other:?}"),
            Ok(None) => {}
            Err(e) => panic!("{e}"),
        }
        let mut chunk = [0u8; 16384];
        match tcp.read(&mut chunk) {
            Ok(0) | Err(_) => return Answer::Nothing,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A flight the gateway at `addr` accepted: a gateway refuses flights
/// stamped in its first seconds (its restart guard), so new flights are
/// sent until one is accepted.
fn accepted_flight(addr: &str, rec: &KeyRecord) -> Vec<u8> {
    let start = Instant::now();
    loop {
        let f = flight(rec);
        match answer(addr, &f) {
            Answer::Reply => return f,
            Answer::Reject(RejectReason::Busy) => {}
            other => panic!("{other:?}"),
        }
        assert!(start.elapsed() < PATIENCE, "never accepted");
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Gw {
    guard: Guard,
    stdout: BufReader<std::process::ChildStdout>,
}

/// `zrtt gateway` on `listen` with the test's key, record and certificate
/// and `--handover sock` (and `--admin` if given).
fn gateway_args<'a>(
    listen: &'a str,
    backend: &'a str,
    admin: Option<&'a str>,
    sock: &'a str,
) -> Vec<&'a str> {
    let mut args = vec![
        "gateway",
        "--listen",
        listen,
        "--backend",
        backend,
        "--key",
        "k1.key",
        "--record",
        "k1.rec",
        "--cert",
        "cert.pem",
        "--cert-key",
        "cert.key",
        "--handover",
        sock,
    ];
    if let Some(a) = admin {
        args.extend(["--admin", a]);
    }
    args
}

fn start(dir: &Path, listen: &str, admin: &str, backend: &str, sock: &str) -> Gw {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zrtt"))
        .args(gateway_args(listen, backend, Some(admin), sock))
        .args(["--replay-state", "replay.state"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    Gw {
        guard: Guard(child),
        stdout,
    }
}

/// Reads the gateway's stdout until its `listening` line.
fn until_listening(gw: &mut Gw) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            gw.stdout.read_line(&mut line).unwrap() > 0,
            "exited before listening"
        );
        if line.starts_with("listening ") {
            return;
        }
    }
}

fn inode(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.ino())
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_status(gw: &mut Gw) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = gw.guard.0.try_wait().unwrap() {
            return s;
        }
        assert!(start.elapsed() < PATIENCE, "did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_new_gateway_takes_the_sockets_and_the_replay_filter_without_a_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let rec = record(dir);
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let backend = backend().to_string();
    let sock = dir.join("gateway.handover");
    let sock_s = sock.to_str().unwrap().to_owned();

    let mut old = start(dir, &listen, &admin, &backend, &sock_s);
    until_listening(&mut old);
    wait_for("the hand-over socket", || inode(&sock).is_some());
    let first_sock = inode(&sock);
    let seen_by_old = accepted_flight(&listen, &rec);

    // Flights sent all through the change of hands.
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Vec::new()));
    let load = {
        let (stop, answers, listen, rec) =
            (stop.clone(), answers.clone(), listen.clone(), rec.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < PATIENCE {
                let a = answer(&listen, &flight(&rec));
                answers.lock().unwrap().push(a);
            }
        })
    };
    wait_for("load running", || answers.lock().unwrap().len() >= 20);

    let mut new = start(dir, &listen, &admin, &backend, &sock_s);
    until_listening(&mut new);
    wait_for("the successor's hand-over socket", || {
        inode(&sock) != first_sock
    });
    // The old process drains and exits by itself, successfully.
    assert!(exit_status(&mut old).success());
    let during = answers.lock().unwrap().len();
    wait_for("load after the hand-over", || {
        answers.lock().unwrap().len() >= during + 20
    });
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    let answers = answers.lock().unwrap().clone();
    let nothing = answers.iter().filter(|a| **a == Answer::Nothing).count();
    let replies = answers.iter().filter(|a| **a == Answer::Reply).count();
    let other: Vec<_> = answers
        .iter()
        .filter(|a| !matches!(a, Answer::Reply | Answer::Reject(RejectReason::Busy)))
        .collect();
    eprintln!(
        "{} flights during the hand-over: {replies} accepted, {} refused Busy (sealed in the old process), {nothing} unanswered",
        answers.len(),
        answers.len() - replies - nothing
    );
    assert_eq!(nothing, 0, "a flight met a closed port or a reset");
    assert!(other.is_empty(), "{other:?}");

    // The successor holds the old filter: the old flight is a replay, and a
    // fresh one is accepted at once (no restart refusal).
    assert_eq!(
        answer(&listen, &seen_by_old),
        Answer::Reject(RejectReason::Replay)
    );
    assert_eq!(answer(&listen, &flight(&rec)), Answer::Reply);
    // The admin socket came along: the successor's counters answer there.
    assert!(gateway_counter(&admin, "zrtt_accepted") >= 1);
    assert_eq!(
        new.guard.0.try_wait().unwrap(),
        None,
        "the successor serves on"
    );

    // The old process saved nothing (its filter was sealed); the successor
    // took the state file's generation, so its own snapshot at exit is
    // the one the next start restores.
    let state = dir.join("replay.state");
    assert!(!state.exists(), "a sealed filter is never saved");
    terminate(&mut new);
    assert!(state.exists(), "the successor saved its filter");
}

fn terminate(gw: &mut Gw) {
    let st = Command::new("kill")
        .args(["-TERM", &gw.guard.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(exit_status(gw).success());
}

#[test]
fn a_failed_or_mismatched_successor_leaves_the_running_gateway_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    key_and_record(dir, HOST);
    let rec = record(dir);
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let backend = backend().to_string();
    let sock = dir.join("gateway.handover");
    let sock_s = sock.to_str().unwrap().to_owned();
    let mut old = start(dir, &listen, &admin, &backend, &sock_s);
    until_listening(&mut old);
    wait_for("the hand-over socket", || inode(&sock).is_some());
    let seen = accepted_flight(&listen, &rec);

    // Another listen address: refused before anything is paused.
    let other = format!("127.0.0.1:{}", free_port());
    let out = zrtt(dir, &gateway_args(&other, &backend, None, &sock_s));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused") && err.contains(&other), "{err}");

    // The same address, but its admin address is taken: it fails after the
    // old process sealed its filter and before READY.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_admin = taken.local_addr().unwrap().to_string();
    let out = zrtt(
        dir,
        &gateway_args(&listen, &backend, Some(&busy_admin), &sock_s),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("admin"), "{err}");

    // The old process accepts again, with its filter intact.
    let t0 = Instant::now();
    loop {
        match answer(&listen, &flight(&rec)) {
            Answer::Reply => break,
            // The abort is noticed when the successor's connection closes.
            Answer::Reject(RejectReason::Busy) => {}
            other => panic!("{other:?}"),
        }
        assert!(t0.elapsed() < PATIENCE, "never accepted again");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answer(&listen, &seen), Answer::Reject(RejectReason::Replay));
    assert_eq!(old.guard.0.try_wait().unwrap(), None, "still serving");
    assert!(gateway_counter(&admin, "zrtt_accepted") >= 2);
    // The failed successors took no generation of the state file: the old
    // process's snapshot is saved at its exit and restored by the next start.
    terminate(&mut old);
    assert!(dir.join("replay.state").exists());
    let mut next = start(dir, &listen, &admin, &backend, &sock_s);
    until_listening(&mut next);
    wait_for("restored", || !dir.join("replay.state").exists());
    assert_eq!(answer(&listen, &seen), Answer::Reject(RejectReason::Replay));
    assert_eq!(
        answer(&listen, &flight(&rec)),
        Answer::Reply,
        "no restart refusal"
    );
}
