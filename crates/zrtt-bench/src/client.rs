//! The client side shared by the scenarios: `zrtt get` commands for a
//! site, the check of the mode it reports, and curl-style timings.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use zrtt_lab::Lab;

use crate::proc::run_capture;
use crate::stack::Site;
use crate::Bench;

/// What the scenarios add to [`zrtt_get`]: zrtt or an error (no TLS
/// fallback), 30 s at most.
pub(crate) const ZRTT_ONLY: [&str; 3] = ["--zrtt-only", "-m", "30s"];

/// `zrtt get` in `host` for `https://<site>:<port><path>` at `server`,
/// with the site's key records from files (no DNS), the body discarded;
/// callers add a time limit, `-w` and state options.
pub(crate) fn zrtt_get(
    bench: &Bench,
    lab: &Lab,
    host: &str,
    site: &Site,
    server: Ipv4Addr,
    port: u16,
    path: &str,
) -> Result<Command> {
    let mut c = lab.command(host, &bench.zrtt)?;
    c.args(["get", "-o", "/dev/null", "--cacert"])
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

/// Runs a client whose `-w` format prints `n` fields, field `status` the
/// HTTP status; the fields, or an error unless there are `n` and the
/// status is 200.
pub(crate) fn write_out(cmd: Command, what: &str, n: usize, status: usize) -> Result<Vec<String>> {
    let out = run_capture(cmd)?;
    let f: Vec<String> = out.split_whitespace().map(String::from).collect();
    if f.len() != n || f[status] != "200" {
        bail!("{what}: unexpected output {out:?}");
    }
    Ok(f)
}

/// Seconds as printed by curl's `-w` into milliseconds.
pub(crate) fn secs_field(s: &str) -> Result<f64> {
    s.parse::<f64>()
        .map(|v| v * 1000.0)
        .with_context(|| format!("bad timing {s:?}"))
}

/// The mode labels `zrtt get` reported that differ from the one a row
/// expects, collected over one run for the report's notes.
#[derive(Default)]
pub(crate) struct ModeNotes(Mutex<Vec<String>>);

impl ModeNotes {
    /// Checks the mode `zrtt get` reported against the one a row expects.
    /// The client infers early against gated from timing (a reply long
    /// after the SYN-ACK looks gated), which a busy machine can fool at
    /// small RTTs, so a mismatch is recorded for the report's notes rather
    /// than failing the sample; the sample's time shows which path it
    /// really took. Anything other than zrtt (a TLS fallback) is an error.
    pub(crate) fn check(&self, got: &str, expect: &str, what: &str) -> Result<()> {
        if !got.starts_with("0rtt") {
            bail!("{what}: zrtt was not used (mode {got})");
        }
        if got != expect {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{what}: labelled {got}, expected {expect}"));
        }
        Ok(())
    }

    /// The mismatches recorded, as one report note.
    pub(crate) fn note(&self) -> Option<String> {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (!v.is_empty()).then(|| {
            // Counted per distinct message, in first-seen order.
            let mut counts: Vec<(&str, usize)> = Vec::new();
            for m in v.iter() {
                match counts.iter_mut().find(|(k, _)| *k == m.as_str()) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((m, 1)),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_notes_count_mismatches() {
        let m = ModeNotes::default();
        assert!(m.note().is_none());
        m.check("0rtt-early", "0rtt-early", "a").unwrap();
        assert!(m.note().is_none());
        m.check("0rtt-gated", "0rtt-early", "a").unwrap();
        m.check("0rtt-gated", "0rtt-early", "a").unwrap();
        m.check("0rtt-early", "0rtt-gated", "b").unwrap();
        let n = m.note().unwrap();
        assert!(n.starts_with("Mode labels that differ from the row's path (3 samples;"));
        assert!(n.ends_with(
            "a: labelled 0rtt-gated, expected 0rtt-early (2x); b: labelled 0rtt-early, expected 0rtt-gated (1x)."
        ));
        assert!(m.check("tls1.3", "0rtt-early", "c").is_err());
    }

    #[test]
    fn write_out_checks_count_and_status() {
        let echo = |out: &str| {
            let mut c = Command::new("echo");
            c.args(out.split(' '));
            c
        };
        let f = write_out(echo("0.0201 200 0rtt-early"), "x", 3, 1).unwrap();
        assert_eq!(f, ["0.0201", "200", "0rtt-early"]);
        assert_eq!(secs_field(&f[0]).unwrap(), 20.1);
        let e = write_out(echo("0.0201 404 0rtt-early"), "zrtt get", 3, 1).unwrap_err();
        assert!(
            e.to_string().starts_with("zrtt get: unexpected output"),
            "{e}"
        );
        assert!(write_out(echo("0.0201 200"), "x", 3, 1).is_err());
        assert!(secs_field("x").is_err());
    }
}
