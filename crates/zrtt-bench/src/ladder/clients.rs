//! The ladder's clients: curl, `openssl s_client` (with a TFO shim), ngtcp2's
//! `gtlsclient` and `zrtt get`, one measurement each, and the sessions the
//! resumption rows start from.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use zrtt_lab::Lab;

use super::{Stack, GW_PROVEN, GW_TOKENS, HTTP_PORT, NAME, TLS_PORT};

/// The gateway whose TLS path the gateway rows use (any gateway would do).
const GW_TLS_PORT: u16 = GW_TOKENS;
use crate::client::{self, secs_field, write_out, ModeNotes, ZRTT_ONLY};
use crate::proc::{run_capture, time_client, Marker, Stream};
use crate::stack::Site;
use crate::Bench;

/// The shim that gives `openssl s_client` TCP Fast Open (it has no flag).
const TFO_PRELOAD_C: &str = include_str!("tfo_preload.c");

/// What every measurement needs.
pub(super) struct Env<'a> {
    pub(super) bench: &'a Bench,
    pub(super) lab: &'a Lab,
    pub(super) site: &'a Site,
    pub(super) modes: ModeNotes,
    pub(super) server: Ipv4Addr,
    pub(super) preload: Option<PathBuf>,
    pub(super) provenance_state: PathBuf,
    /// `XDG_STATE_HOME` of the revisit rows' client (its default token state).
    pub(super) state_home: PathBuf,
    pub(super) sess: PathBuf,
    /// The openssl session for the gateway's TLS path.
    pub(super) gw_sess: PathBuf,
    pub(super) h3_sess: PathBuf,
    pub(super) h3_tp: PathBuf,
    pub(super) request: PathBuf,
}

fn curl(env: &Env, s: Stack) -> Result<Command> {
    let mut c = env.lab.command("client", "curl")?;
    c.args(["-sS", "-o", "/dev/null", "--max-time", "15"]);
    let url = match s {
        Stack::Http => format!("http://{NAME}/"),
        _ => format!("https://{NAME}/"),
    };
    match s {
        Stack::Tls12 => {
            c.args(["--tlsv1.2", "--tls-max", "1.2"]);
        }
        Stack::Http => {}
        _ => {
            c.arg("--tlsv1.3");
        }
    }
    if matches!(s, Stack::Tls13TfoFirst | Stack::Tls13TfoRevisit) {
        c.arg("--tcp-fastopen");
    }
    let port = if s == Stack::Http {
        HTTP_PORT
    } else {
        TLS_PORT
    };
    c.arg("--cacert").arg(&env.site.ca).args([
        "--resolve",
        &format!("{NAME}:{port}:{}", env.server),
        "-w",
        "%{time_starttransfer} %{http_code}",
        &url,
    ]);
    Ok(c)
}

/// Where an openssl row connects: nginx's TLS port, or a zrtt gateway's
/// TLS path; with its own session file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum TlsServer {
    Nginx,
    Gateway,
}

fn s_client(env: &Env, server: TlsServer, tfo: bool, early: bool) -> Result<Command> {
    let mut c = env.lab.command("client", "env")?;
    if tfo {
        let p = env.preload.as_ref().context("no TFO shim (cc missing?)")?;
        c.arg(format!("LD_PRELOAD={}", p.display()));
    }
    let (port, sess) = match server {
        TlsServer::Nginx => (TLS_PORT, &env.sess),
        TlsServer::Gateway => (GW_TLS_PORT, &env.gw_sess),
    };
    // Measured runs print their session details (-ign_eof, not -quiet):
    // they say whether the server accepted the early data.
    let verbosity = if early { "-ign_eof" } else { "-quiet" };
    c.args(["openssl", "s_client", "-connect"])
        .arg(format!("{}:{port}", env.server))
        .args(["-servername", NAME, "-tls1_3", verbosity, "-CAfile"])
        .arg(&env.site.ca)
        .arg("-sess_out")
        .arg(sess);
    if early {
        c.arg("-sess_in")
            .arg(sess)
            .arg("-early_data")
            .arg(&env.request);
    }
    Ok(c)
}

fn gtlsclient(env: &Env, resume: bool) -> Command {
    let mut c = match env.lab.command("client", "gtlsclient") {
        Ok(c) => c,
        Err(_) => Command::new("false"),
    };
    c.args([
        "--exit-on-all-streams-close",
        "--no-quic-dump",
        "--timeout=10s",
    ]);
    if resume {
        c.arg(format!("--session-file={}", env.h3_sess.display()))
            .arg(format!("--tp-file={}", env.h3_tp.display()));
    }
    c.arg(env.server.to_string())
        .arg(TLS_PORT.to_string())
        .arg(format!("https://{NAME}/index.html"));
    c
}

pub(super) fn zrtt_get(env: &Env, s: Stack) -> Result<Command> {
    let port = if s == Stack::ZrttProven {
        GW_PROVEN
    } else {
        GW_TOKENS
    };
    let mut c = client::zrtt_get(
        env.bench, env.lab, "client", env.site, env.server, port, "/",
    )?;
    c.args(ZRTT_ONLY).args([
        "-w",
        "%{time_starttransfer} %{http_code} %{zrtt_mode} %{syn_data}",
    ]);
    match s {
        Stack::ZrttProven => c.arg("--provenance-state").arg(&env.provenance_state),
        // The client's default token state, in a directory of this run.
        Stack::ZrttRevisit => c.env("XDG_STATE_HOME", &env.state_home),
        _ => &mut c,
    };
    if s != Stack::ZrttRevisit {
        c.arg("--no-state");
    }
    Ok(c)
}

/// One measurement of `s`: milliseconds to the first response byte.
/// A sample whose server refused the early data it was meant to measure.
#[derive(Debug)]
pub(super) struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server refused the early data")
    }
}

impl std::error::Error for Refused {}

pub(super) fn measure(env: &Env, s: Stack, rtt: Duration) -> Result<f64> {
    let timeout = Duration::from_secs(15);
    match s.tool() {
        "curl" => {
            if s == Stack::Tls13TfoFirst {
                // Forget Fast Open cookies: a first visit has none.
                let mut f = env.lab.command("client", "ip")?;
                f.args(["tcp_metrics", "flush", "all"]);
                run_capture(f).context("flushing TCP metrics")?;
            }
            let f = write_out(curl(env, s)?, "curl", 2, 1)?;
            secs_field(&f[0])
        }
        "zrtt" => {
            // zrtt only (no TLS fallback): mode 0rtt-early (answered before
            // the handshake) or 0rtt-gated (held until the ACK).
            let f = write_out(zrtt_get(env, s)?, "zrtt get", 4, 1)?;
            let expect = if s == Stack::ZrttUnproven {
                "0rtt-gated"
            } else {
                "0rtt-early"
            };
            env.modes.check(
                &f[2],
                expect,
                &format!("RTT {} ms {}", rtt.as_millis(), s.id()),
            )?;
            secs_field(&f[0])
        }
        "openssl" => {
            let server = match s {
                Stack::GwTls13ZeroRtt | Stack::GwTls13ZeroRttTfo => TlsServer::Gateway,
                _ => TlsServer::Nginx,
            };
            let tfo = matches!(s, Stack::Tls13ZeroRttTfo | Stack::GwTls13ZeroRttTfo);
            let cmd = s_client(env, server, tfo, true)?;
            // Linger after the answer so that the new session ticket
            // (sent when the client's Finished arrives) is saved.
            let linger = rtt + Duration::from_millis(100);
            let t = time_client(
                env.lab,
                "client",
                cmd,
                Marker {
                    stream: Stream::Stdout,
                    text: "HTTP/1.1 200",
                    probes: &["Early data was accepted"],
                },
                timeout,
                linger,
            )?;
            if !t.seen[0] {
                // The server's choice (a ticket it would not take for early
                // data): the sample did not measure 0-RTT; retaken.
                return Err(Refused.into());
            }
            Ok(t.ms)
        }
        _ => {
            if s == Stack::H3ZeroRtt {
                // A fresh ticket for every sample, as a browser would have:
                // GnuTLS's anti-replay refuses early data on a ticket used
                // before, and a measured run may exit before the next
                // ticket arrives. One unmeasured resumed connection saves it.
                let mut warm = gtlsclient(env, true);
                warm.stdout(Stdio::null()).stderr(Stdio::null());
                let _ = warm.status()?;
            }
            // ngtcp2's packet log names the packet type of every frame it
            // sends: the request went early only if a STREAM frame left in
            // a 0-RTT packet and the server did not reject it.
            let t = time_client(
                env.lab,
                "client",
                gtlsclient(env, s == Stack::H3ZeroRtt),
                Marker {
                    stream: Stream::Stderr,
                    text: "http: stream 0x0 body",
                    probes: &["Early data was rejected", " 0RTT STREAM("],
                },
                timeout,
                // It exits by itself once the stream closes, saving the session.
                2 * rtt + Duration::from_millis(500),
            )?;
            if s == Stack::H3ZeroRtt && (t.seen[0] || !t.seen[1]) {
                // The server's or the client's choice, not the network's:
                // the sample did not measure 0-RTT, so it is retaken, never
                // counted.
                return Err(Refused.into());
            }
            Ok(t.ms)
        }
    }
}

/// Builds the TFO shim for `openssl s_client` with the system C compiler.
pub(super) fn build_preload(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("tfo_preload.c");
    let so = dir.join("tfo_preload.so");
    std::fs::write(&src, TFO_PRELOAD_C)?;
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl");
    run_capture(cc).context("compiling the TFO shim")?;
    Ok(so)
}

/// Sessions for the resumption rows: one full connection each, and a check
/// that the server accepts the early data.
pub(super) fn warm_sessions(env: &Env, notes: &mut Vec<String>) -> Result<()> {
    warm_tls(env, TlsServer::Gateway, notes)?;
    warm_tls(env, TlsServer::Nginx, notes)?;
    // HTTP/3: one full connection saves the session and transport parameters.
    let mut h = gtlsclient(env, true);
    h.stdout(Stdio::null()).stderr(Stdio::null());
    let _ = h.status()?;
    if !env.h3_sess.exists() || !env.h3_tp.exists() {
        bail!("gtlsclient saved no session or transport parameters");
    }
    Ok(())
}

/// A session for one TLS server's resumption rows: one full connection,
/// and a check that the server accepts the early data.
fn warm_tls(env: &Env, server: TlsServer, notes: &mut Vec<String>) -> Result<()> {
    let (port, sess, who) = match server {
        TlsServer::Nginx => (TLS_PORT, &env.sess, "nginx"),
        TlsServer::Gateway => (GW_TLS_PORT, &env.gw_sess, "the zrtt gateway"),
    };
    let mut c = s_client(env, server, false, false)?;
    c.stdin(Stdio::piped());
    // A full handshake plus a request; the ticket arrives with the answer.
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("stdin")?;
        stdin.write_all(&std::fs::read(&env.request)?)?;
        std::thread::sleep(Duration::from_millis(1500));
    }
    let _ = child.kill();
    let _ = child.wait();
    if !sess.exists() {
        bail!("openssl s_client saved no session");
    }
    // Is early data accepted? s_client says so when not quiet.
    let mut c = env.lab.command("client", "timeout")?;
    c.args(["3", "openssl", "s_client", "-connect"])
        .arg(format!("{}:{port}", env.server))
        .args(["-servername", NAME, "-tls1_3", "-ign_eof", "-CAfile"])
        .arg(&env.site.ca)
        .arg("-sess_in")
        .arg(sess)
        .arg("-sess_out")
        .arg(sess)
        .arg("-early_data")
        .arg(&env.request);
    let out = c.stdin(Stdio::null()).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let accepted = text.contains("Early data was accepted");
    notes.push(format!(
        "openssl s_client early data check: {}",
        if accepted {
            format!("{who} accepted the 0-RTT request")
        } else {
            format!("{who} did NOT accept early data (its 0-RTT rows then show 2 RTT)")
        }
    ));
    Ok(())
}
