//! `zrtt dns`'s configuration: the zone file, the hosts whose key stores
//! it publishes, the verifier stores, listen addresses (docs/DNS.md).

use super::*;

/// One host whose keys the server publishes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Its key store directory (the host name is the store's `name`).
    pub keystore: PathBuf,
    /// ALPN ids for its HTTPS record.
    #[serde(default = "default_alpn")]
    pub alpn: Vec<String>,
    /// `port` for its HTTPS record, when the gateway is not on 443.
    #[serde(default)]
    pub port: Option<u16>,
}

/// One provenance verifier whose keys the server publishes.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct VerifierConfig {
    /// Its verifier key store directory (the verifier name is the store's
    /// `name`, which must be in the zone).
    pub keystore: PathBuf,
}

fn default_alpn() -> Vec<String> {
    vec!["http/1.1".to_owned()]
}

fn default_true() -> bool {
    true
}

/// The `--config` file of `zrtt dns`; command-line flags override it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// Zone file.
    pub zone: Option<PathBuf>,
    /// Origin, when the zone file has no `$ORIGIN`.
    pub origin: Option<String>,
    /// Addresses to serve on (UDP and TCP each).
    #[serde(default)]
    pub listen: Vec<SocketAddr>,
    /// Rotate the key stores (default true).
    #[serde(default = "default_true_opt")]
    pub rotate: Option<bool>,
    /// Hosts.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostConfig>,
    /// Provenance verifiers.
    #[serde(default, rename = "verifier")]
    pub verifiers: Vec<VerifierConfig>,
    /// Addresses of secondaries allowed to transfer the zone (AXFR).
    #[serde(default)]
    pub allow_transfer: Vec<std::net::IpAddr>,
    /// Secondaries (ADDR:PORT) sent NOTIFY when the records change.
    #[serde(default)]
    pub notify: Vec<SocketAddr>,
    /// The admin endpoint (`/metrics`, `/healthz`, `/readyz`).
    #[serde(default)]
    pub admin: Option<SocketAddr>,
    /// Answers per client region (`[[region]]` tables; regions.rs).
    #[serde(default, rename = "region")]
    pub regions: Vec<RegionConfig>,
}

fn default_true_opt() -> Option<bool> {
    Some(default_true())
}

impl DnsConfig {
    /// Read a TOML config file (its `[dns]` section when it has one, as the
    /// config file shared by every role does); relative paths in it are
    /// taken relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<Self, ServerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServerError::Config(format!("{}: {e}", path.display())))?;
        let bad = |e: toml::de::Error| ServerError::Config(format!("{}: {e}", path.display()));
        // The shared config file of every role has a [dns] section; a file
        // of its own is the section's content.
        let mut table: toml::Table = toml::from_str(&text).map_err(bad)?;
        if let Some(toml::Value::Table(dns)) = table.remove("dns") {
            table = dns;
        }
        let mut c: Self = table.try_into().map_err(bad)?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(z) = &mut c.zone {
            *z = base.join(&*z);
        }
        for h in &mut c.hosts {
            h.keystore = base.join(&h.keystore);
        }
        for v in &mut c.verifiers {
            v.keystore = base.join(&v.keystore);
        }
        Ok(c)
    }
}
