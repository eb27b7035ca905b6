//! Query names of shortcut flights: `<l1>.<l2>...<ln>.zq.<site>`, the labels
//! the base32 (RFC 4648 alphabet, lowercase, no padding) of the flight's DNS
//! form cut into 63 characters from the start.

use data_encoding::BASE32_NOPAD_NOCASE;

use super::{dns_form, tcp_form, ShortcutError, DNS_FORM_OVERHEAD, ZONE_LABEL};

/// Longest query name (characters, no trailing dot), as DNS allows.
pub const MAX_NAME_LEN: usize = 253;
/// Longest label.
const MAX_LABEL: usize = 63;

/// The shortcut zone of `site`: `zq.<site>` (no trailing dot).
pub fn zone_name(site: &str) -> String {
    format!("{ZONE_LABEL}.{}", trim_dot(site))
}

fn trim_dot(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// Characters of base32 without padding for `bytes` bytes.
fn base32_len(bytes: usize) -> usize {
    (bytes * 8).div_ceil(5)
}

/// Length (no trailing dot) of the query name of a DNS form of
/// `dns_form_len` bytes under `zone_len` characters of zone name.
fn name_len(dns_form_len: usize, zone_len: usize) -> usize {
    let chars = base32_len(dns_form_len);
    let labels = chars.div_ceil(MAX_LABEL);
    chars + labels + zone_len
}

/// Length (no trailing dot) of the query name under `site` of a DNS form
/// of `dns_form_len` bytes.
pub(crate) fn query_name_len(dns_form_len: usize, site: &str) -> usize {
    name_len(dns_form_len, zone_name(site).len())
}

/// Bytes the padding extension (`0xFFFF`) adds besides its value: its
/// type and length. Every flight made with a site to pad for carries it.
pub const PADDING_OVERHEAD: usize = 4;

/// The longest DNS form (bytes) whose query name under `site` fits
/// [`MAX_NAME_LEN`]: a padded flight's DNS form has exactly this length,
/// whatever its target (docs/PROTOCOL.md §13.1).
pub fn padded_dns_form_len(site: &str) -> usize {
    let zone_len = zone_name(site).len();
    let mut len = 0;
    while name_len(len + 1, zone_len) <= MAX_NAME_LEN {
        len += 1;
    }
    len
}

/// The longest target (bytes) whose padded shortcut flight's query name
/// under `site` fits [`MAX_NAME_LEN`] (the padding extension's 4 bytes
/// counted, its value empty); 0 when not even `/` fits.
pub fn max_target_len(site: &str) -> usize {
    padded_dns_form_len(site).saturating_sub(DNS_FORM_OVERHEAD + PADDING_OVERHEAD)
}

/// The query name of a shortcut flight given in its TCP form, under
/// `site`'s shortcut zone (no trailing dot).
pub fn query_name(frame: &[u8], site: &str) -> Result<String, ShortcutError> {
    let dns = dns_form(frame)?;
    let zone = zone_name(site);
    let len = name_len(dns.len(), zone.len());
    if len > MAX_NAME_LEN {
        return Err(ShortcutError::TooLong {
            len,
            max: MAX_NAME_LEN,
        });
    }
    let text = BASE32_NOPAD_NOCASE.encode(&dns).to_ascii_lowercase();
    let mut name = String::with_capacity(len);
    for label in text.as_bytes().chunks(MAX_LABEL) {
        // Base32 output is ASCII.
        name.extend(label.iter().map(|&b| char::from(b)));
        name.push('.');
    }
    name.push_str(&zone);
    Ok(name)
}

/// Where a query name falls relative to a site's shortcut zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameMatch {
    /// Not in the zone `zq.<site>`.
    Outside,
    /// The zone's apex, `zq.<site>` itself.
    Apex,
    /// In the zone but not a whole flight's name: a partial name (QNAME
    /// minimisation), a malformed one, or one that does not decode to a
    /// shortcut flight.
    NotFlight,
    /// A flight's name; the flight in its TCP form.
    Flight(Vec<u8>),
}

/// Match `qname` (any case, trailing dot or not) against `site`'s shortcut
/// zone and decode the flight it names. Only the canonical name of a flight
/// decodes (labels of 63 characters but the last, canonical base32), so one
/// flight has one name up to case.
pub fn parse_query_name(qname: &str, site: &str) -> NameMatch {
    let q = trim_dot(qname).as_bytes();
    let zone = zone_name(site);
    let z = zone.as_bytes();
    if q.eq_ignore_ascii_case(z) {
        return NameMatch::Apex;
    }
    let Some(cut) = q.len().checked_sub(z.len() + 1) else {
        return NameMatch::Outside;
    };
    if q[cut] != b'.' || !q[cut + 1..].eq_ignore_ascii_case(z) {
        return NameMatch::Outside;
    }
    if q.len() > MAX_NAME_LEN {
        return NameMatch::NotFlight;
    }
    match decode_labels(&q[..cut]) {
        Some(frame) => NameMatch::Flight(frame),
        None => NameMatch::NotFlight,
    }
}

fn decode_labels(labels: &[u8]) -> Option<Vec<u8>> {
    let mut text = Vec::with_capacity(labels.len());
    let mut parts = labels.split(|&b| b == b'.').peekable();
    while let Some(label) = parts.next() {
        let last = parts.peek().is_none();
        let ok = match last {
            true => (1..=MAX_LABEL).contains(&label.len()),
            false => label.len() == MAX_LABEL,
        };
        if !ok {
            return None;
        }
        text.extend_from_slice(label);
    }
    let dns = BASE32_NOPAD_NOCASE.decode(&text).ok()?;
    tcp_form(&dns).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_lengths() {
        // 229 characters: 4 labels (3 dots) + ".zq.www.example.com" (19).
        assert_eq!(base32_len(143), 229);
        assert_eq!(name_len(143, "zq.www.example.com".len()), 229 + 4 + 18);
        assert_eq!(zone_name("www.example.com."), "zq.www.example.com");
    }

    #[test]
    fn zone_matching() {
        let site = "www.example.com";
        assert_eq!(
            parse_query_name("ZQ.www.Example.com.", site),
            NameMatch::Apex
        );
        assert_eq!(
            parse_query_name("www.example.com", site),
            NameMatch::Outside
        );
        assert_eq!(
            parse_query_name("xzq.www.example.com", site),
            NameMatch::Outside
        );
        assert_eq!(
            parse_query_name("a.zq.www.example.com", site),
            NameMatch::NotFlight
        );
        assert_eq!(
            parse_query_name("..zq.www.example.com", site),
            NameMatch::NotFlight
        );
        assert_eq!(
            parse_query_name("é.zq.www.example.com", site),
            NameMatch::NotFlight
        );
        assert_eq!(parse_query_name("", site), NameMatch::Outside);
        assert_eq!(parse_query_name(".", site), NameMatch::Outside);
    }
}
