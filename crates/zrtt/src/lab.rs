//! `zrtt lab`: flags for the emulated wide-area lab (crate `zrtt-lab`) and
//! its scenarios (crate `zrtt-bench`). Defaults come from the libraries'
//! option structs.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Subcommand;
use zrtt_bench::asap::AsapOpts;
use zrtt_bench::browser::BrowserOpts;
use zrtt_bench::faults::{Fault, FaultsOpts};
use zrtt_bench::fleet::FleetOpts;
use zrtt_bench::ladder::LadderOpts;
use zrtt_bench::plt::PltOpts;
use zrtt_bench::sidecar::SidecarOpts;
use zrtt_bench::soak::SoakOpts;
use zrtt_bench::throughput::ThroughputOpts;
use zrtt_bench::ztls::ZtlsOpts;
use zrtt_bench::{Bench, Console, Report};
use zrtt_lab::CheckOptions;

/// A default list as the flag takes it: `20,100,200`.
fn csv<T: std::fmt::Display>(v: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    v.join(",")
}

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Measure the lab's own accuracy: UDP echo and TCP connect times through
    /// the delay hub against the configured RTT (target: within 1% + 0.5 ms).
    /// Exits 1 if any RTT misses the target.
    Check {
        /// Round-trip times to check, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = csv(CheckOptions::default().rtts.iter().map(|d| d.as_millis())))]
        rtt: Vec<u64>,
        /// UDP echo probes per RTT.
        #[arg(long, default_value_t = CheckOptions::default().probes)]
        probes: usize,
        /// TCP handshakes per RTT (0 disables the TCP rows).
        #[arg(long, default_value_t = CheckOptions::default().tcp_connects)]
        tcp_connects: usize,
        /// How long before a deadline the hub stops sleeping and spins, microseconds.
        #[arg(long, default_value_t = CheckOptions::default().spin_margin.as_micros() as u64)]
        spin_us: u64,
        /// Do not give the hub real-time (SCHED_FIFO) priority, to see what it buys.
        #[arg(long)]
        no_realtime: bool,
    },
    /// Idempotent HTTPS requests (zrtt client, TLS fallback, a new
    /// connection each) against a gateway and a small backend under each
    /// fault in turn: loss, reordering, duplication, SYN-data middleboxes, a
    /// TLS-only middlebox, backend down or slow, gateway restart under load.
    /// Counts (200, 502, failed, retries, TLS fallbacks, early answers) and
    /// the time penalty per fault. Writes faults.md/.svg/.json.
    Faults {
        /// Round-trip time, milliseconds.
        #[arg(long, default_value_t = FaultsOpts::default().rtt_ms)]
        rtt: u64,
        /// Requests per fault and client (new client per request, kept client).
        #[arg(long, default_value_t = FaultsOpts::default().requests)]
        requests: usize,
        /// Requests in flight.
        #[arg(long, default_value_t = FaultsOpts::default().concurrency)]
        concurrency: usize,
        /// Faults to run, in order.
        #[arg(long, value_delimiter = ',', default_value = csv(FaultsOpts::default().faults.iter().map(|f| f.id())), value_parser = parse_fault)]
        faults: Vec<Fault>,
        /// Response body size, bytes.
        #[arg(long, default_value_t = FaultsOpts::default().body_bytes)]
        body: usize,
        /// The slow backend's delay, milliseconds.
        #[arg(long, default_value_t = FaultsOpts::default().slow_ms)]
        slow_ms: u64,
        /// Retries of a request that got no HTTP answer at all.
        #[arg(long, default_value_t = FaultsOpts::default().retries)]
        retries: u32,
        #[command(flatten)]
        out: OutArgs,
    },
    /// New connections at a fixed rate (open loop; zrtt with TLS fallback,
    /// new and returning clients) against a gateway whose keys rotate, whose
    /// token keys rotate and whose certificate is replaced every period,
    /// while its memory and open files are sampled. Writes
    /// soak.md/.svg/.json; exits 1 unless 0 requests failed, the memory
    /// drift is within --max-drift and every rotation was served.
    Soak {
        /// New connections per second (open loop: started when due).
        #[arg(long, default_value_t = SoakOpts::default().rate)]
        rate: f64,
        /// Length of the run (e.g. 10m, 20s).
        #[arg(long, default_value = "10m", value_parser = crate::util::parse_duration)]
        duration: Duration,
        /// Period of key rotation, token-key rotation and certificate
        /// replacement (at least 4s).
        #[arg(long, default_value = "60s", value_parser = crate::util::parse_duration)]
        period: Duration,
        /// Round-trip time, milliseconds.
        #[arg(long, default_value_t = SoakOpts::default().rtt_ms)]
        rtt: u64,
        /// Load and events from the server's own host over the kernel's
        /// loopback path (no hub, no RTT): for rates the lab's hub cannot
        /// carry (about 300 new connections/s on two cores).
        #[arg(long, conflicts_with = "rtt")]
        colocated: bool,
        /// Share of requests from clients that keep their state (tokens), 0-1.
        #[arg(long, default_value_t = SoakOpts::default().kept_share)]
        kept_share: f64,
        /// Response body size, bytes.
        #[arg(long, default_value_t = SoakOpts::default().body_bytes)]
        body: usize,
        /// Requests in flight beyond which a due request is skipped (and counted).
        #[arg(long, default_value_t = SoakOpts::default().max_in_flight)]
        max_in_flight: usize,
        /// Largest memory drift that passes, % (last window against the first).
        #[arg(long, default_value_t = SoakOpts::default().max_drift_pct)]
        max_drift: f64,
        #[command(flatten)]
        out: OutArgs,
    },
    /// A fleet: three gateways behind one anycast address (ECMP in the
    /// hub), a three-node Redis Cluster as shared replay store, new
    /// connections at a target rate; during the run replays of served
    /// flights to another gateway, a gateway SIGKILLed and restarted, a
    /// Redis master killed and restarted, a key rotation. Needs
    /// redis-server. Writes fleet.md/.svg/.json (docs/FLEET.md).
    Fleet {
        /// Target new connections per second.
        #[arg(long, default_value_t = FleetOpts::default().rate)]
        rate: f64,
        /// Seconds of load.
        #[arg(long, default_value_t = FleetOpts::default().seconds)]
        seconds: f64,
        /// Replays sent (each a served flight, to another gateway).
        #[arg(long, default_value_t = FleetOpts::default().replays)]
        replays: usize,
        /// Round-trip time client to gateways, milliseconds.
        #[arg(long, default_value_t = FleetOpts::default().rtt_ms)]
        rtt: u64,
        /// Requests running at once at most.
        #[arg(long, default_value_t = FleetOpts::default().max_in_flight)]
        max_in_flight: usize,
        /// The gateways' --replay-store-timeout, milliseconds.
        #[arg(long, default_value_t = FleetOpts::default().store_timeout_ms)]
        store_timeout_ms: f64,
        /// The gateways' --replay-store-skew, seconds.
        #[arg(long, default_value_t = FleetOpts::default().store_skew_s)]
        store_skew: u64,
        /// Retries of a request that got no HTTP 200.
        #[arg(long, default_value_t = FleetOpts::default().retries)]
        retries: u32,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Remove namespaces left by crashed lab runs (those whose owner process is gone).
    Clean,
    /// Time to first response byte (no DNS) for HTTP, TLS 1.2, TLS 1.3,
    /// TLS 1.3 + TFO, TLS 1.3 0-RTT (openssl), HTTP/3 (ngtcp2) and zrtt, with
    /// the reference lab's figures beside. Writes ladder.md/.svg/.json.
    Ladder {
        /// Round-trip times, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = csv(LadderOpts::default().rtts_ms))]
        rtt: Vec<u64>,
        /// Runs per stack and RTT (the tables show medians).
        #[arg(long, default_value_t = LadderOpts::default().samples)]
        samples: usize,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Transfer time by object size (ASAP §5): TCP + TLS 1.3 against zrtt on
    /// first contact, one RTT, many trials, with the distribution at 11.18 KB.
    /// Writes asap.md/.svg/.json.
    Asap {
        /// Round-trip time, milliseconds.
        #[arg(long, default_value_t = AsapOpts::default().rtt_ms)]
        rtt: u64,
        /// Object sizes, KB (11.18, ASAP's median object, is always added).
        #[arg(long, value_delimiter = ',', default_value = csv(AsapOpts::default().sizes_kb))]
        sizes: Vec<f64>,
        /// Fetches per size and stack (medians; ASAP-style: at least 200).
        #[arg(long, default_value_t = AsapOpts::default().trials)]
        trials: usize,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Page-load time of a generated 31-object page on three hosts, loaded
    /// like a browser (6 connections per host): TCP, TCP + TFO, TLS 1.3,
    /// zrtt, beside the TFO reproduction's table. Writes plt.md/.svg/.json.
    Plt {
        /// Round-trip times, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = csv(PltOpts::default().rtts_ms))]
        rtt: Vec<u64>,
        /// Measured page loads per stack and RTT.
        #[arg(long, default_value_t = PltOpts::default().loads)]
        loads: usize,
        /// Pause before each page load but the first [default: 1500ms].
        #[arg(long, value_parser = crate::util::parse_duration)]
        think: Option<std::time::Duration>,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Sidecars for unmodified applications (the DZone article's HAProxy
    /// pair with TFO, TLS 1.3 and 0-RTT) against `zrtt proxy --map` and a
    /// gateway: first and later connections at several RTTs. Writes
    /// sidecar.md/.svg/.json.
    Sidecar {
        /// Round-trip times, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = csv(SidecarOpts::default().rtts_ms))]
        rtt: Vec<u64>,
        /// Requests per stack, RTT and connection kind.
        #[arg(long, default_value_t = SidecarOpts::default().samples)]
        samples: usize,
        #[command(flatten)]
        out: OutArgs,
    },
    /// The plt page (31 objects, three hosts) in headless Chromium, cold (a
    /// new profile each load): http:// and https:// (TLS 1.3) straight to
    /// nginx, and http:// through `zrtt proxy` over zrtt to gateways in front
    /// of the same nginx; page-load time from the browser's Navigation
    /// Timing. Needs chromium. Writes browser.md/.svg/.json and a
    /// screenshot, browser.png.
    Browser {
        /// Round-trip times, milliseconds.
        #[arg(long, value_delimiter = ',', default_value = csv(BrowserOpts::default().rtts_ms))]
        rtt: Vec<u64>,
        /// Cold page loads per mode and RTT (medians reported).
        #[arg(long, default_value_t = BrowserOpts::default().samples)]
        samples: usize,
        /// Pause before each page load, milliseconds.
        #[arg(long, default_value_t = BrowserOpts::default().think.as_millis() as u64)]
        think_ms: u64,
        #[command(flatten)]
        out: OutArgs,
    },
    /// New connections per second and server CPU per request on one core:
    /// nginx plain HTTP, nginx TLS 1.3 (full and resumed) and the zrtt
    /// gateway, on loopback, servers on CPU 0, load on CPU 1, beside
    /// HTTPCrypt's figures. Writes throughput.md/.svg/.json.
    Throughput {
        /// Response sizes, KB.
        #[arg(long, value_delimiter = ',', default_value = csv(ThroughputOpts::default().sizes_kb))]
        sizes: Vec<usize>,
        /// Measured seconds per cell (after a warm-up of a quarter of that, 0.5-2 s).
        #[arg(long, default_value_t = ThroughputOpts::default().seconds)]
        seconds: f64,
        /// Connections in flight (each request on a new connection).
        #[arg(long, default_value_t = ThroughputOpts::default().concurrency)]
        concurrency: usize,
        /// Fixed rates of new connections per second measured besides
        /// saturation (nginx TLS full and resumed, the gateway, the gateway
        /// serving files; smallest size); `--rates` with no value for none.
        #[arg(long, value_delimiter = ',', num_args = 0.., default_value = csv(ThroughputOpts::default().rates))]
        rates: Vec<f64>,
        #[command(flatten)]
        out: OutArgs,
    },
    /// ZTLS Table 3: first response with DNS (unbound on the client, in its
    /// LAN, or public; `zrtt dns` authoritative) to servers at Seoul, Tokyo
    /// and Ohio distances, cold and warm: TLS 1.3 against zrtt. Writes
    /// ztls.md/.svg/.json.
    Ztls {
        /// Fetches per cell (the tables show medians).
        #[arg(long, default_value_t = ZtlsOpts::default().samples)]
        samples: usize,
        /// RTT from every resolver to the authoritative server, ms (cold lookups).
        #[arg(long, default_value_t = ZtlsOpts::default().auth_rtt_ms)]
        auth_rtt: f64,
        /// The DNS shortcut's rows instead (docs/DNS.md §8): the address
        /// cold at the resolver, the key record held; zrtt against zrtt
        /// with --dns-shortcut, unbound with QNAME minimisation on and off
        /// and rate-limiting. Writes ztls_shortcut.md/.json.
        #[arg(long)]
        shortcut: bool,
        #[command(flatten)]
        out: OutArgs,
    },
}

fn parse_fault(s: &str) -> Result<Fault> {
    Fault::parse(s)
}

/// Where scenario results go.
#[derive(clap::Args, Debug)]
pub struct OutArgs {
    /// Directory for the markdown, SVG and JSON results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Keep the working directory (configs, keys, logs) for inspection.
    #[arg(long)]
    keep: bool,
}

/// Scenarios run this binary in the lab's hosts; progress goes to stderr.
pub fn bench() -> Result<Bench> {
    let tty = std::io::stderr().is_terminal();
    Ok(Bench::new(std::env::current_exe()?).with_console(Console::new(std::io::stderr(), tty)))
}

fn finish(report: Result<Report>, out: &OutArgs) -> Result<ExitCode> {
    let report = report?;
    let files = report.write(&out.out)?;
    println!("{}", report.markdown());
    for f in files {
        tracing::info!("wrote {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    if !zrtt_lab::is_root() {
        bail!("the lab creates network namespaces and TUN devices: run it as root");
    }
    match cmd {
        LabCommand::Check {
            rtt,
            probes,
            tcp_connects,
            spin_us,
            no_realtime,
        } => {
            let mut opts = CheckOptions {
                rtts: rtt.into_iter().map(Duration::from_millis).collect(),
                probes,
                tcp_connects,
                spin_margin: Duration::from_micros(spin_us),
                ..CheckOptions::default()
            };
            if no_realtime {
                opts.realtime_priority = None;
            }
            tracing::info!(
                "lab check: {} RTT(s), {} probes each ...",
                opts.rtts.len(),
                opts.probes
            );
            let report = zrtt_lab::run_check(opts)?;
            println!("{report}");
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        LabCommand::Ladder { rtt, samples, out } => {
            let o = LadderOpts {
                rtts_ms: rtt,
                samples,
                keep: out.keep,
            };
            finish(zrtt_bench::ladder::run(&bench()?, &o), &out)
        }
        LabCommand::Asap {
            rtt,
            sizes,
            trials,
            out,
        } => {
            let o = AsapOpts {
                rtt_ms: rtt,
                sizes_kb: sizes,
                trials,
                keep: out.keep,
            };
            finish(zrtt_bench::asap::run(&bench()?, &o), &out)
        }
        LabCommand::Plt {
            rtt,
            loads,
            think,
            out,
        } => {
            let o = PltOpts {
                rtts_ms: rtt,
                loads,
                think: think.unwrap_or(PltOpts::default().think),
                keep: out.keep,
            };
            finish(zrtt_bench::plt::run(&bench()?, &o), &out)
        }
        LabCommand::Sidecar { rtt, samples, out } => {
            let o = SidecarOpts {
                rtts_ms: rtt,
                samples,
                keep: out.keep,
            };
            finish(zrtt_bench::sidecar::run(&bench()?, &o), &out)
        }
        LabCommand::Browser {
            rtt,
            samples,
            think_ms,
            out,
        } => {
            let o = BrowserOpts {
                rtts_ms: rtt,
                samples,
                think: Duration::from_millis(think_ms),
                screenshot: Some(out.out.join("browser.png")),
                keep: out.keep,
            };
            finish(zrtt_bench::browser::run(&bench()?, &o), &out)
        }
        LabCommand::Ztls {
            samples,
            auth_rtt,
            shortcut,
            out,
        } => {
            let o = ZtlsOpts {
                samples,
                auth_rtt_ms: auth_rtt,
                keep: out.keep,
                shortcut,
            };
            finish(zrtt_bench::ztls::run(&bench()?, &o), &out)
        }
        LabCommand::Throughput {
            sizes,
            seconds,
            concurrency,
            rates,
            out,
        } => {
            let o = ThroughputOpts {
                sizes_kb: sizes,
                seconds,
                concurrency,
                rates,
                keep: out.keep,
            };
            finish(zrtt_bench::throughput::run(&bench()?, &o), &out)
        }
        LabCommand::Faults {
            rtt,
            requests,
            concurrency,
            faults,
            body,
            slow_ms,
            retries,
            out,
        } => {
            let o = FaultsOpts {
                rtt_ms: rtt,
                requests,
                concurrency,
                faults,
                body_bytes: body,
                slow_ms,
                retries,
                keep: out.keep,
            };
            finish(zrtt_bench::faults::run(&bench()?, &o), &out)
        }
        LabCommand::Soak {
            rate,
            duration,
            period,
            rtt,
            colocated,
            kept_share,
            body,
            max_in_flight,
            max_drift,
            out,
        } => {
            let o = SoakOpts {
                rate,
                duration,
                period,
                rtt_ms: rtt,
                colocated,
                kept_share,
                body_bytes: body,
                max_in_flight,
                max_drift_pct: max_drift,
                keep: out.keep,
                ..SoakOpts::default()
            };
            let outcome = zrtt_bench::soak::run(&bench()?, &o)?;
            finish(Ok(outcome.report), &out)?;
            Ok(if outcome.passed {
                ExitCode::SUCCESS
            } else {
                tracing::error!("soak: a verdict failed (see the report)");
                ExitCode::from(1)
            })
        }
        LabCommand::Fleet {
            rate,
            seconds,
            replays,
            rtt,
            max_in_flight,
            store_timeout_ms,
            store_skew,
            retries,
            out,
        } => {
            let o = FleetOpts {
                rate,
                seconds,
                replays,
                rtt_ms: rtt,
                max_in_flight,
                store_timeout_ms,
                store_skew_s: store_skew,
                retries,
                keep: out.keep,
            };
            finish(zrtt_bench::fleet::run(&bench()?, &o), &out)
        }
        LabCommand::Clean => {
            let removed = zrtt_lab::cleanup_stale_namespaces()?;
            if removed.is_empty() {
                println!("no stale zrtt namespaces");
            } else {
                println!("removed {}", removed.join(" "));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
