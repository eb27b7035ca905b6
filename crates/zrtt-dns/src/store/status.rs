//! What a store reports: what a rotation did ([`RotationReport`]) and its
//! schedule at an instant ([`StoreStatus`], printed as a table).

use core::fmt;
use std::path::PathBuf;

use super::Kind;
use crate::fmt_time;

/// What one [`Store::rotate`](super::Store::rotate) call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationReport {
    /// Keys created (key ids).
    pub created: Vec<u32>,
    /// Keys whose private key was deleted because they expired.
    pub deleted_private_keys: Vec<u32>,
    /// Expired records removed (one lifetime after expiry).
    pub removed_records: Vec<u32>,
    /// Records re-signed because the certificate changed.
    pub resigned: Vec<u32>,
    /// Orphaned private keys (no record, left by an interrupted rotation) removed.
    pub removed_orphans: Vec<PathBuf>,
    /// When the next key is due, seconds since the epoch.
    pub next_rotation: u64,
}

impl RotationReport {
    /// Whether the call changed anything on disk.
    pub fn changed(&self) -> bool {
        !(self.created.is_empty()
            && self.deleted_private_keys.is_empty()
            && self.removed_records.is_empty()
            && self.resigned.is_empty()
            && self.removed_orphans.is_empty())
    }
}

impl fmt::Display for RotationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |v: &[u32]| {
            v.iter()
                .map(|k| format!("{k:08x}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.changed() {
            write!(f, "nothing to do")?;
        }
        let lists = [
            ("created", &self.created, ""),
            (
                "deleted expired private key(s)",
                &self.deleted_private_keys,
                "",
            ),
            ("removed old record(s)", &self.removed_records, ""),
            ("re-signed", &self.resigned, " for the new certificate"),
        ];
        let mut parts: Vec<String> = lists
            .iter()
            .filter(|(_, v, _)| !v.is_empty())
            .map(|(what, v, tail)| format!("{what} {}{tail}", ids(v)))
            .collect();
        if !self.removed_orphans.is_empty() {
            let n = self.removed_orphans.len();
            parts.push(format!("removed {n} orphaned private key(s)"));
        }
        write!(f, "{}", parts.join("; "))?;
        write!(f, "; next key due {}", fmt_time(self.next_rotation))
    }
}

/// The state of a stored key at an instant. A key store's keys are
/// pending, published, retired and expired; a verifier store's are next,
/// current, retired and expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// A key store's key not valid yet (`now < not_before`).
    Pending,
    /// A key store's key in DNS now.
    Published,
    /// A verifier key published but not signing yet: gateways are learning
    /// it.
    Next,
    /// A verifier key published and signing certificates.
    Current,
    /// Out of use but still needed: a key store's key no longer in DNS
    /// whose private key still takes first flights from clients with cached
    /// records; a verifier key no longer signing, still published because
    /// certificates it signed are still valid.
    Retired,
    /// Past `not_after`: its private key is (or is about to be) deleted; a
    /// verifier key is no longer published.
    Expired,
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::Published => "published",
            Self::Next => "next",
            Self::Current => "current",
            Self::Retired => "retired",
            Self::Expired => "expired",
        })
    }
}

/// One key's line in a [`StoreStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStatus {
    /// Key id (for verifier keys, the verifier id certificates carry).
    pub key_id: u32,
    /// State at the status instant.
    pub state: KeyState,
    /// Start of validity.
    pub not_before: u64,
    /// End of publication: `not_after - 2T` for the key store's keys;
    /// verifier keys are published until `not_after`.
    pub publish_until: u64,
    /// End of validity; the private key is deleted then.
    pub not_after: u64,
    /// Whether the private key is on disk.
    pub private_key_held: bool,
}

/// The schedule of a store at an instant; `Display` prints a table.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStatus<K: Kind> {
    /// The name the keys are for.
    pub name: String,
    /// The instant.
    pub now: u64,
    /// Policy in force.
    pub policy: K,
    /// Every stored key, oldest first.
    pub keys: Vec<KeyStatus>,
    /// TTL DNS gives the records now.
    pub record_ttl: u32,
    /// When the next key is due.
    pub next_rotation: u64,
    /// Problems worth an operator's attention.
    pub warnings: Vec<String>,
}

impl<K: Kind> fmt::Display for StoreStatus<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = K::NAMES;
        let name = &self.name;
        writeln!(
            f,
            "{} store for {name} at {}",
            names.key,
            fmt_time(self.now)
        )?;
        writeln!(f, "policy: {}", self.policy.summary(self.record_ttl, name))?;
        // The publication window has a column of its own when it ends
        // before the validity.
        let publish_column = self.policy.schedule().publish_margin > 0;
        let mut heads = vec![names.id_heading, "state", "not before"];
        let mut widths = vec![8, names.state_width, 20];
        if publish_column {
            heads.push("published until");
            widths.push(20);
        }
        heads.push("not after");
        widths.push(20);
        row(f, &heads, &widths, "private key")?;
        for k in &self.keys {
            let mut cells = vec![format!("{:08x}", k.key_id), k.state.to_string()];
            let mut times = vec![k.not_before];
            if publish_column {
                times.push(k.publish_until);
            }
            times.push(k.not_after);
            cells.extend(times.into_iter().map(fmt_time));
            let held = if k.private_key_held {
                "held"
            } else {
                "deleted"
            };
            row(f, &cells, &widths, held)?;
        }
        if self.keys.is_empty() {
            writeln!(f, "(no keys: run `{}`)", names.rotate_command)?;
        }
        let due = if self.next_rotation <= self.now {
            "now (overdue)".to_owned()
        } else {
            format!(
                "{} (in {} s)",
                fmt_time(self.next_rotation),
                self.next_rotation - self.now
            )
        };
        writeln!(f, "next key due: {due}")?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

/// One table line: `cells` padded to `widths`, two spaces apart, then `last`.
fn row<C: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    cells: &[C],
    widths: &[usize],
    last: &str,
) -> fmt::Result {
    for (c, w) in cells.iter().zip(widths) {
        write!(f, "{c:<w$}  ")?;
    }
    writeln!(f, "{last}")
}
