//! RFC 1035 zone files, parsed by hickory's parser, with errors that name
//! the file, the line and the reason.
//!
//! hickory's parser reports what is wrong but not where. To find the line,
//! the file is split into entries (a record may span lines inside
//! parentheses or quotes) and the shortest failing prefix of whole entries
//! is found by bisection: parsing stops at the first bad entry, so a prefix
//! fails exactly when it contains it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hickory_proto::rr::{Name, RData, RecordSet, RecordType, RrKey};
use hickory_proto::serialize::txt::Parser;

/// A zone file that cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneError {
    /// The file cannot be read.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A syntax error at a line.
    #[error("{path}:{line}: {reason}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line where the bad entry starts.
        line: usize,
        /// hickory's reason.
        reason: String,
    },
    /// The zone parses but cannot be served (no SOA, names outside the origin…).
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// A parsed zone.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The origin (fully qualified).
    pub origin: Name,
    /// Its RRsets.
    pub records: BTreeMap<RrKey, RecordSet>,
    /// The SOA serial.
    pub serial: u32,
}

impl Zone {
    /// Addresses of `name` in the zone (for the HTTPS hints).
    pub fn addresses(&self, name: &Name) -> (Vec<std::net::Ipv4Addr>, Vec<std::net::Ipv6Addr>) {
        let lower = hickory_proto::rr::LowerName::new(name);
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for (rt, out4) in [(RecordType::A, true), (RecordType::AAAA, false)] {
            if let Some(set) = self.records.get(&RrKey::new(lower.clone(), rt)) {
                for r in set.records_without_rrsigs() {
                    match &r.data {
                        RData::A(a) if out4 => v4.push(a.0),
                        RData::AAAA(a) if !out4 => v6.push(a.0),
                        _ => {}
                    }
                }
            }
        }
        (v4, v6)
    }
}

/// Read and parse a zone file. `origin` is used when the file has no
/// `$ORIGIN`. Checks that there is exactly one SOA, at the origin, and that
/// every name is inside the origin.
pub fn load(path: &Path, origin: Option<&str>) -> Result<Zone, ZoneError> {
    let text = std::fs::read_to_string(path).map_err(|error| ZoneError::Io {
        path: path.to_owned(),
        error,
    })?;
    parse(&text, Some(path), origin)
}

/// Parse zone-file text; `path` names it in errors and anchors `$INCLUDE`.
pub fn parse(text: &str, path: Option<&Path>, origin: Option<&str>) -> Result<Zone, ZoneError> {
    let shown = path.map_or_else(|| PathBuf::from("<zone>"), Path::to_owned);
    let invalid = |reason: String| ZoneError::Invalid {
        path: shown.clone(),
        reason,
    };
    let origin = origin
        .map(|o| {
            let mut n = Name::from_ascii(o).map_err(|e| invalid(format!("origin {o:?}: {e}")))?;
            n.set_fqdn(true);
            Ok::<_, ZoneError>(n)
        })
        .transpose()?;
    let run = |t: &str| Parser::new(t, path.map(Path::to_owned), origin.clone()).parse();
    let (origin, records) = match run(text) {
        Ok(v) => v,
        Err(e) => {
            let (line, reason) = locate(text, &e.to_string(), &run);
            return Err(ZoneError::Syntax {
                path: shown,
                line,
                reason,
            });
        }
    };
    let mut serial = None;
    for (key, set) in &records {
        let name: Name = key.name().into();
        if !origin.zone_of(&name) {
            return Err(invalid(format!("{name} is outside the zone {origin}")));
        }
        if key.record_type == RecordType::SOA {
            if name != origin {
                return Err(invalid(format!(
                    "SOA at {name}, not at the origin {origin}"
                )));
            }
            if let Some(RData::SOA(soa)) = set.records_without_rrsigs().next().map(|r| &r.data) {
                serial = Some(soa.serial);
            }
        }
    }
    let serial = serial.ok_or_else(|| invalid(format!("no SOA record at the origin {origin}")))?;
    Ok(Zone {
        origin,
        records,
        serial,
    })
}

/// Find the line of the first bad entry: (line, reason).
fn locate<T, E: ToString>(
    text: &str,
    full_reason: &str,
    run: &dyn Fn(&str) -> Result<T, E>,
) -> (usize, String) {
    let entries = entry_ends(text);
    // Invariant: prefix up to entries[lo-1] parses, up to entries[hi-1] fails.
    let (mut lo, mut hi) = (0usize, entries.len());
    let fails = |k: usize| {
        let end = if k == 0 { 0 } else { entries[k - 1].1 };
        run(&text[..end]).is_err()
    };
    if hi == 0 || !fails(hi) {
        // The failure is not tied to an entry (e.g. no $ORIGIN): last line.
        return (text.lines().count().max(1), full_reason.to_owned());
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fails(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let (line, end) = entries[hi - 1];
    // The reason for that entry alone is the most precise; fall back to the
    // whole file's.
    let reason = match run(&text[..end]) {
        Err(e) => e.to_string(),
        Ok(_) => full_reason.to_owned(),
    };
    (line, reason)
}

/// Split zone text into entries: (first line number of the entry, byte
/// offset just past its terminating newline). An entry ends at a newline
/// outside parentheses and quotes; `;` comments run to the end of the line.
fn entry_ends(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quoted = false;
    let mut comment = false;
    let mut escaped = false;
    let mut line = 1usize;
    let mut entry_line = 1usize;
    let mut has_content = false;
    for (i, c) in text.char_indices() {
        if c == '\n' {
            line += 1;
            comment = false;
            if depth == 0 && !quoted {
                if has_content {
                    out.push((entry_line, i + 1));
                }
                has_content = false;
                entry_line = line;
            }
            escaped = false;
            continue;
        }
        if comment {
            continue;
        }
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => comment = true,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
        if !c.is_whitespace() && !comment {
            if !has_content && depth == 0 {
                entry_line = line;
            }
            has_content = true;
        }
    }
    if has_content {
        out.push((entry_line, text.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONE: &str = "$ORIGIN example.com.\n$TTL 3600\n@ IN SOA ns1 hostmaster (\n  1 7200 900 1209600 300 )\n  IN NS ns1\nns1 IN A 192.0.2.1\n; comment\nwww IN A 192.0.2.10\nwww IN AAAA 2001:db8::10\nwww IN TXT \"v=spf1 -all\"\n";

    #[test]
    fn parses_and_finds_hints() {
        let z = parse(ZONE, None, None).unwrap();
        assert_eq!(z.serial, 1);
        let (v4, v6) = z.addresses(&Name::from_ascii("www.example.com.").unwrap());
        assert_eq!(
            v4,
            vec!["192.0.2.10".parse::<std::net::Ipv4Addr>().unwrap()]
        );
        assert_eq!(v6.len(), 1);
    }

    #[test]
    fn bad_line_is_named() {
        let bad = ZONE.replace("www IN A 192.0.2.10", "www IN A 192.0.2.300");
        let e = parse(&bad, Some(Path::new("zones/example.com.zone")), None).unwrap_err();
        let ZoneError::Syntax {
            line, ref reason, ..
        } = e
        else {
            panic!("{e}")
        };
        assert_eq!(line, 8, "{e}");
        assert!(
            e.to_string().starts_with("zones/example.com.zone:8: "),
            "{e}"
        );
        assert!(!reason.is_empty());

        let bad = ZONE.replace("ns1 IN A", "ns1 IN BOGUSTYPE");
        let e = parse(&bad, None, None).unwrap_err();
        assert!(matches!(e, ZoneError::Syntax { line: 6, .. }), "{e}");

        // An error inside a multi-line SOA is reported at its first line.
        let bad = ZONE.replace("1 7200 900", "1 7200 x900");
        let e = parse(&bad, None, None).unwrap_err();
        assert!(matches!(e, ZoneError::Syntax { line: 3, .. }), "{e}");
    }

    #[test]
    fn semantic_errors() {
        let no_soa = "$ORIGIN example.com.\nwww 300 IN A 192.0.2.1\n";
        let e = parse(no_soa, None, None).unwrap_err();
        assert!(e.to_string().contains("no SOA"), "{e}");
        let outside = format!("{ZONE}www.example.net. IN A 192.0.2.1\n");
        let e = parse(&outside, None, None).unwrap_err();
        assert!(e.to_string().contains("outside the zone"), "{e}");
    }
}
