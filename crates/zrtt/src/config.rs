//! `--config FILE`: one TOML file for the long-running roles.
//!
//! ```toml
//! [gateway]
//! listen = "0.0.0.0:443"
//! backend = "127.0.0.1:8080"
//! keystore = "/var/lib/zrtt/www"      # relative paths: from this file's directory
//! trust = ["10.0.0.0/8"]             # a repeatable flag takes a list
//! admin = "127.0.0.1:9090"
//!
//! [proxy]
//! listen = "127.0.0.1:3128"
//! admin = "127.0.0.1:9155"            # every role: /metrics, /healthz, /readyz
//!
//! [verifier]                          # zrtt verifier serve
//! listen = "0.0.0.0:4040"
//! key = "pv.key"
//! admin = "127.0.0.1:9154"
//!
//! [dns]                               # zrtt dns: its own format (docs/DNS.md)
//! zone = "example.com.zone"
//! admin = "127.0.0.1:9153"
//! ```
//!
//! A section holds the role's flags, named as on the command line (`-` or
//! `_`): a string or number for a flag with a value, `true` for a switch,
//! a list for a repeatable flag. Each becomes its flag before the command
//! line's, so a flag given on the command line replaces a single value
//! and adds to a list; defaults stay those of the flags (defined once).
//! Unknown sections and settings are refused with the file and the name.
//! `zrtt dns` reads `[dns]` (or a whole file in its format) itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::builder::ValueHint;
use clap::{ArgAction, Command};

/// Sections a config file may have, and the subcommand path each configures.
const SECTIONS: [(&str, &[&str]); 4] = [
    ("gateway", &["gateway"]),
    ("proxy", &["proxy"]),
    ("verifier", &["verifier", "serve"]),
    ("dns", &["dns"]),
];

/// The subcommands whose flags a config section holds (`args_override_self`
/// is set on them so the command line wins).
pub fn configurable(mut cli: Command) -> Command {
    for (_, path) in SECTIONS.iter().filter(|(s, _)| *s != "dns") {
        let present = cli
            .find_subcommand(path[0])
            .is_some_and(|c| path.len() == 1 || c.find_subcommand(path[1]).is_some());
        if !present {
            continue;
        }
        cli = match path {
            [one] => cli.mut_subcommand(*one, |c| c.args_override_self(true)),
            [outer, inner] => cli.mut_subcommand(*outer, |c| {
                c.mut_subcommand(*inner, |c| c.args_override_self(true))
            }),
            _ => cli,
        };
    }
    cli
}

/// The section and subcommand `args` run, if configurable; the number of
/// words the subcommand took.
fn role(cli: &Command, args: &[OsString]) -> Option<(&'static str, Command, usize)> {
    let words: Vec<&str> = args.iter().skip(1).map_while(|a| a.to_str()).collect();
    for (section, path) in SECTIONS {
        if section == "dns" {
            continue;
        }
        let mut cmd = cli.clone();
        let mut taken = 0;
        for (i, name) in path.iter().enumerate() {
            let word = *words.get(i)?;
            let sub = cmd
                .get_subcommands()
                .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))?
                .clone();
            if sub.get_name() != *name {
                break;
            }
            cmd = sub;
            taken += 1;
        }
        if taken == path.len() {
            return Some((section, cmd, taken));
        }
    }
    None
}

/// The `--config` value among `args`, if any.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_str()?;
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    None
}

/// `args` with the settings of the `--config` file's section inserted
/// after the subcommand (see the module docs); unchanged without
/// `--config` or for other subcommands.
pub fn expand(cli: &Command, args: Vec<OsString>) -> Result<Vec<OsString>> {
    let Some((section, cmd, taken)) = role(cli, &args) else {
        return Ok(args);
    };
    let Some(path) = config_path(&args[1 + taken..]) else {
        return Ok(args);
    };
    let flags = section_flags(&path, section, &cmd)?;
    let mut out = args[..1 + taken].to_vec();
    out.extend(flags);
    out.extend_from_slice(&args[1 + taken..]);
    Ok(out)
}

/// The flags `[section]` of the file at `path` stands for.
fn section_flags(path: &Path, section: &str, cmd: &Command) -> Result<Vec<OsString>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}: not valid TOML", path.display()))?;
    for key in table.keys() {
        if !SECTIONS.iter().any(|(s, _)| s == key) {
            bail!(
                "{}: unknown section [{key}] (known: gateway, proxy, verifier, dns)",
                path.display()
            );
        }
    }
    let Some(values) = table.get(section) else {
        bail!("{}: no [{section}] section", path.display());
    };
    let Some(values) = values.as_table() else {
        bail!("{}: [{section}] must be a table", path.display());
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (key, value) in values {
        let long = key.replace('_', "-");
        let at = || format!("{}: [{section}] {key}", path.display());
        let arg = cmd
            .get_arguments()
            .find(|a| {
                a.get_long() == Some(long.as_str())
                    || a.get_all_aliases()
                        .is_some_and(|al| al.contains(&long.as_str()))
            })
            .filter(|_| long != "config" && long != "help")
            .ok_or_else(|| {
                anyhow!(
                    "{}: unknown setting (see zrtt {} --help)",
                    at(),
                    cmd.get_name()
                )
            })?;
        let flag = format!("--{}", arg.get_long().unwrap_or(&long));
        let is_path = matches!(
            arg.get_value_hint(),
            ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
        );
        let scalar = |v: &toml::Value| -> Result<OsString> {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => bail!("{}: expected a string or a number", at()),
            };
            Ok(if is_path && Path::new(&s).is_relative() {
                base.join(s).into_os_string()
            } else {
                OsString::from(s)
            })
        };
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(true)) => out.push(flag.into()),
            (ArgAction::SetTrue, toml::Value::Boolean(false)) => {}
            (ArgAction::SetTrue, _) => bail!("{}: expected true or false", at()),
            (ArgAction::Append, toml::Value::Array(items)) => {
                for v in items {
                    out.push(OsString::from(&flag));
                    out.push(scalar(v)?);
                }
            }
            (ArgAction::Set, toml::Value::Array(_)) => {
                bail!("{}: takes one value, not a list", at())
            }
            (ArgAction::Set | ArgAction::Append, v) => {
                out.push(OsString::from(&flag));
                out.push(scalar(v)?);
            }
            _ => bail!("{}: cannot be set in a config file", at()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Sub {
        Gateway {
            #[arg(long)]
            listen: String,
            #[arg(long)]
            key: Option<PathBuf>,
            #[arg(long = "trust")]
            trusted: Vec<String>,
            #[arg(long)]
            rotate: bool,
            #[arg(long, default_value = "10s")]
            refresh: String,
            #[arg(long)]
            config: Option<PathBuf>,
        },
        Get {
            #[arg(long)]
            config: Option<PathBuf>,
        },
    }

    fn parse(dir: &Path, toml: &str, cli_args: &[&str]) -> Result<Sub> {
        let file = dir.join("zrtt.toml");
        std::fs::write(&file, toml).unwrap();
        let cli = configurable(<Cli as clap::CommandFactory>::command());
        let mut args: Vec<OsString> = vec!["zrtt".into()];
        args.extend(cli_args.iter().map(OsString::from));
        args.push("--config".into());
        args.push(file.into());
        let args = expand(&cli, args)?;
        let m = cli.try_get_matches_from(args)?;
        Ok(<Cli as clap::FromArgMatches>::from_arg_matches(&m)?.cmd)
    }

    #[test]
    fn settings_become_flags_and_the_command_line_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let conf = "[gateway]\nlisten = \"0.0.0.0:443\"\nkey = \"k1.key\"\ntrust = [\"10.0.0.0/8\"]\nrotate = true\n[dns]\nzone = \"z\"\n";
        let Sub::Gateway {
            listen,
            key,
            trusted,
            rotate,
            refresh,
            ..
        } = parse(d, conf, &["gateway"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(listen, "0.0.0.0:443");
        assert_eq!(key.unwrap(), d.join("k1.key"), "relative to the file");
        assert_eq!(trusted, ["10.0.0.0/8"]);
        assert!(rotate);
        assert_eq!(refresh, "10s", "the flag's default");
        // The command line replaces single values and adds to lists.
        let Sub::Gateway {
            listen, trusted, ..
        } = parse(
            d,
            conf,
            &[
                "gateway",
                "--listen",
                "127.0.0.1:4433",
                "--trust",
                "192.0.2.0/24",
            ],
        )
        .unwrap()
        else {
            panic!()
        };
        assert_eq!(listen, "127.0.0.1:4433");
        assert_eq!(trusted, ["10.0.0.0/8", "192.0.2.0/24"]);
    }

    #[test]
    fn bad_files_are_refused_with_the_name() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let e = parse(
            d,
            "[gateway]\nlisten = \"x\"\nbakend = \"y\"\n",
            &["gateway"],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("[gateway] bakend: unknown setting"),
            "{e}"
        );
        let e = parse(d, "[gatway]\n", &["gateway"]).unwrap_err();
        assert!(e.to_string().contains("unknown section [gatway]"), "{e}");
        let e = parse(d, "[proxy]\n", &["gateway"]).unwrap_err();
        assert!(e.to_string().contains("no [gateway] section"), "{e}");
        let e = parse(d, "[gateway]\nlisten = [\"a\", \"b\"]\n", &["gateway"]).unwrap_err();
        assert!(e.to_string().contains("takes one value"), "{e}");
        let e = parse(
            d,
            "[gateway]\nlisten = \"a\"\nrotate = \"yes\"\n",
            &["gateway"],
        )
        .unwrap_err();
        assert!(e.to_string().contains("expected true or false"), "{e}");
        let e = parse(d, "not toml [", &["gateway"]).unwrap_err();
        assert!(e.to_string().contains("not valid TOML"), "{e}");
        // Other subcommands are left alone.
        assert!(parse(d, "[gateway]\n", &["get"]).is_ok());
    }
}
