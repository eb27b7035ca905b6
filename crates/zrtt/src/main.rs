//! `zrtt`: one binary, a subcommand per role. Roles are thin shells over
//! `zrtt-proto`; see docs/ARCHITECTURE.md.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod admin;
mod config;
mod demo;
mod dns;
mod dnskeys;
mod gateway;
mod get;
mod get_send;
mod keys;
mod keys_cert;
mod lab;
mod logging;
mod proxy;
mod reload;
mod replay_state;
mod sites;
mod util;
mod verifier;

/// zrtt: the first secure request to a server in one network round trip.
#[derive(Parser, Debug)]
#[command(name = "zrtt", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Semi-static keys and signed key records: generate, sign, verify, show, encode for DNS.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// The emulated wide-area lab: network namespaces joined by a delay hub (needs root).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Serve zrtt and TLS 1.3 on one Fast Open port in front of an HTTP/1.1 backend.
    Gateway(Box<gateway::GatewayArgs>),
    /// Fetch a URL like curl: zrtt in the SYN when the host has a key, else TLS 1.3.
    Get(get::GetArgs),
    /// Local HTTP forward proxy: http:// requests to zrtt hosts go over zrtt, the rest unchanged.
    Proxy(proxy::ProxyArgs),
    /// Authoritative DNS for a zone file plus rotating key records (HTTPS, TXT, AAAA, TLSA).
    Dns(dns::DnsArgs),
    /// The main job: an emulated WAN, nginx, zrtt gateways, and the same page fetched over TLS 1.3 and zrtt (root).
    Demo(demo::DemoArgs),
    /// Provenance verifiers: keys, the certificate service, and fetching certificates.
    #[command(subcommand, alias = "pv")]
    Verifier(verifier::VerifierCommand),
}

impl Command {
    /// The log level a subcommand asked for, and how its lines look.
    fn logging(&self) -> (tracing::Level, logging::Style) {
        use logging::Style;
        match self {
            Command::Gateway(a) => (a.log_level, Style::Service),
            Command::Dns(a) => (a.log_level, Style::Service),
            Command::Proxy(_) | Command::Verifier(verifier::VerifierCommand::Serve { .. }) => {
                (tracing::Level::INFO, Style::Service)
            }
            _ => (tracing::Level::INFO, Style::Command),
        }
    }
}

fn main() -> ExitCode {
    // `--config FILE` settings become flags before the command line's.
    let command = config::configurable(Cli::command());
    let args = match config::expand(&command, std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("zrtt: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::from_arg_matches(&command.get_matches_from(args)) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let (level, style) = cli.command.logging();
    if let Err(e) = logging::init(level, style) {
        eprintln!("zrtt: error: {e:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Keys(cmd) => keys::run(cmd),
        Command::Lab(cmd) => lab::run(cmd),
        Command::Gateway(args) => gateway::run(*args),
        Command::Get(args) => get::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Dns(args) => dns::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Verifier(cmd) => verifier::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zrtt: error: {e:#}");
            ExitCode::from(failure_code(&e))
        }
    }
}

/// The exit code of a failed command: 2 for a configuration refused before
/// anything ran (a private key file others can read), else 1.
fn failure_code(e: &anyhow::Error) -> u8 {
    let exposed = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<zrtt_dns::KeyStoreError>(),
            Some(zrtt_dns::KeyStoreError::Permissions { .. })
        )
    });
    if exposed {
        2
    } else {
        1
    }
}
