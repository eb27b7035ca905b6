//! A store's config file (`keystore.toml`, `verifier.toml`): TOML with the
//! `name` the keys are for and the policy fields, every one optional;
//! durations as seconds or text like `90s`, `30m`, `1h`, `2d`.

use std::path::Path;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use zrtt_proto::record;

use super::{Engine, KeyStoreError};

/// A duration in a config file: seconds, or text like `90s`, `30m`, `1h`, `2d`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DurationSpec {
    /// Whole seconds.
    Secs(u64),
    /// With a unit suffix.
    Text(String),
}

impl DurationSpec {
    /// The duration, or why it does not parse.
    pub fn to_duration(&self) -> Result<Duration, String> {
        match self {
            Self::Secs(s) => Ok(Duration::from_secs(*s)),
            Self::Text(s) => parse_duration(s),
        }
    }
}

/// Parse a duration: plain seconds (`90`) or humantime's units (`90s`,
/// `1500ms`, `30m`, `1h`, `2d`, `1h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}): use e.g. 90s, 1500ms, 30m, 1h, 2d"))
}

/// The `name` key of a policy file.
#[derive(Deserialize)]
struct NameOnly {
    name: Option<String>,
}

/// The name and policy in a store's policy file `path` (its text): the
/// policy is every key but `name`, deserialised as `P` (its defaults for
/// what the file leaves out) and checked. Errors name the file.
pub(crate) fn read_policy_file<P: Engine>(
    path: &Path,
    text: &str,
) -> Result<(String, P), KeyStoreError> {
    let error = |reason: String| KeyStoreError::Config {
        path: path.to_owned(),
        reason,
    };
    let with_input = |mut e: toml::de::Error| {
        e.set_input(Some(text));
        error(e.to_string())
    };
    // The name first (syntax errors too), then every other key as `P`,
    // from the parsed document so that errors keep their line.
    let NameOnly { name } = toml::from_str(text).map_err(with_input)?;
    let mut doc = toml::de::DeTable::parse(text).map_err(with_input)?;
    doc.get_mut().remove("name");
    let policy = P::deserialize(toml::de::Deserializer::from(doc)).map_err(with_input)?;
    let name = name.ok_or_else(|| error(format!("`name` ({}) is missing", P::NAMES.name_is)))?;
    let name = record::normalize_name(&name);
    record::validate_name(&name).map_err(|e| error(format!("name {name:?}: {e}")))?;
    policy.check().map_err(|e| error(e.to_string()))?;
    Ok((name, policy))
}

/// Deserialise a [`DurationSpec`] field.
pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    DurationSpec::deserialize(d)?
        .to_duration()
        .map_err(D::Error::custom)
}

/// Deserialise an optional [`DurationSpec`] field.
pub(crate) fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// An error for a policy that breaks a rule.
pub(crate) fn bad_policy<T>(reason: String) -> Result<T, KeyStoreError> {
    Err(KeyStoreError::Policy(reason))
}

/// The check both policies start with: `T >= 1 s`.
pub(crate) fn check_ttl(record_ttl: Duration) -> Result<u64, KeyStoreError> {
    match record_ttl.as_secs() {
        0 => bad_policy("ttl must be at least 1 s".into()),
        t => Ok(t),
    }
}
