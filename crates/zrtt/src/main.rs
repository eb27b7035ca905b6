//! `zrtt`: one binary, a subcommand per role. Roles are thin shells over
//! `zrtt-proto`; see docs/ARCHITECTURE.md.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod keys;
mod lab;
mod util;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Keys(cmd) => keys::run(cmd),
        Command::Lab(cmd) => lab::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("zrtt: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
