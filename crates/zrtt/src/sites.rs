//! `zrtt gateway --site`: further sites on one gateway, each with its names,
//! keys, certificate and backend (docs/GATEWAY.md, Sites). The command
//! line's `--keystore`/`--key`, `--cert` and `--backend` are the default
//! site.

use std::path::PathBuf;
use std::str::FromStr;

/// One `--site` value: `backend=ADDR` (repeatable: several backends) or
/// `root=DIR` (its files, served by the gateway), and either `keystore=DIR` or
/// `cert=FILE,cert-key=FILE` with any number of `key=FILE,record=FILE`
/// (TLS only when none), plus `alias=NAME` for more names; comma-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteSpec {
    /// The site's backends (as `--backend`), at least one.
    pub backends: Vec<zrtt_net::gateway::Backend>,
    /// Its key store (keys, records, certificate).
    pub keystore: Option<PathBuf>,
    /// Its certificate chain (PEM) without a key store.
    pub cert: Option<PathBuf>,
    /// The certificate's private key.
    pub cert_key: Option<PathBuf>,
    /// Semi-static key files.
    pub keys: Vec<PathBuf>,
    /// Record files for the keys.
    pub records: Vec<PathBuf>,
    /// Further names (the key store's or records' name, and the
    /// certificate's, come first).
    pub aliases: Vec<String>,
}

impl FromStr for SiteSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (mut backends, mut keystore, mut cert, mut cert_key) = (Vec::new(), None, None, None);
        let (mut keys, mut records, mut aliases) = (Vec::new(), Vec::new(), Vec::new());
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(format!("{part:?}: use KEY=VALUE"));
            };
            let (k, v) = (k.trim(), v.trim());
            let once = |slot: &mut Option<PathBuf>| {
                if slot.replace(PathBuf::from(v)).is_some() {
                    return Err(format!("{k} given twice"));
                }
                Ok(())
            };
            match k {
                "backend" => {
                    let a = v.parse().map_err(|e| format!("backend: {e}"))?;
                    if backends.contains(&a) {
                        return Err(format!("backend {a} given twice"));
                    }
                    backends.push(a);
                }
                // A directory served by the gateway (`backend=files:DIR`).
                "root" => {
                    backends.push(zrtt_net::gateway::StaticRoot::new(v).into());
                }
                "keystore" => once(&mut keystore)?,
                "cert" => once(&mut cert)?,
                "cert-key" | "cert_key" => once(&mut cert_key)?,
                "key" => keys.push(PathBuf::from(v)),
                "record" => records.push(PathBuf::from(v)),
                "alias" => aliases.push(zrtt_proto::record::normalize_name(v)),
                _ => {
                    return Err(format!(
                        "{k:?}: a site takes backend, root, keystore, cert, cert-key, key, record, alias"
                    ))
                }
            }
        }
        if backends.is_empty() {
            return Err("a site needs backend=ADDR:PORT or root=DIR".into());
        }
        match (&keystore, &cert, &cert_key) {
            (Some(_), None, None) if keys.is_empty() && records.is_empty() => {}
            (Some(_), _, _) => {
                return Err("keystore= holds the site's keys and certificate: no cert, cert-key, key or record with it".into())
            }
            (None, Some(_), Some(_)) => {}
            (None, _, _) => return Err("a site needs keystore=DIR, or cert=FILE and cert-key=FILE".into()),
        }
        if !keys.is_empty() && records.is_empty() {
            return Err("key= needs record= (the keys' signed records)".into());
        }
        Ok(Self {
            backends,
            keystore,
            cert,
            cert_key,
            keys,
            records,
            aliases,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn site_specs_parse_and_bad_ones_say_why() {
        let s: SiteSpec = "keystore=/ks/b, backend=127.0.0.1:8081,alias=WWW.B.example."
            .parse()
            .unwrap();
        assert_eq!(s.keystore, Some(PathBuf::from("/ks/b")));
        assert_eq!(s.aliases, vec!["www.b.example".to_owned()]);
        let s: SiteSpec = "cert=b.pem,cert-key=b.key,key=k.key,record=k.rec,backend=[::1]:80"
            .parse()
            .unwrap();
        assert_eq!(s.keys.len(), 1);
        let s: SiteSpec = "keystore=/ks/b,backend=127.0.0.1:8081,backend=proxy-v2+unix:/run/b.sock"
            .parse()
            .unwrap();
        assert_eq!(s.backends.len(), 2);
        assert!(s.backends[1].proxy_v2);
        let s: SiteSpec = "root=/srv/b,keystore=/ks/b".parse().unwrap();
        assert_eq!(s.backends[0].to_string(), "files:/srv/b");
        for (bad, why) in [
            ("keystore=/ks", "needs backend"),
            ("backend=1.2.3.4:80", "needs keystore"),
            ("backend=x,keystore=/k", "use HOST:PORT"),
            ("backend=1.2.3.4:80,keystore=/k,cert=c", "no cert"),
            (
                "backend=1.2.3.4:80,cert=c,cert-key=k,key=k1",
                "needs record",
            ),
            ("backend=1.2.3.4:80,keystore=/k,color=red", "a site takes"),
            ("backend=1.2.3.4:80,keystore=/k,keystore=/j", "twice"),
            ("backend=1.2.3.4:80,backend=1.2.3.4:80,keystore=/k", "twice"),
        ] {
            let e = bad.parse::<SiteSpec>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
