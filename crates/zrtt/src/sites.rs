//! `zrtt gateway --site`: further sites on one gateway, each with its names,
//! keys, certificate and backend (docs/GATEWAY.md, Sites). The command
//! line's `--keystore`/`--key`, `--cert` and `--backend` are the default
//! site.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use zrtt_net::gateway::{BackendHealth, HealthCheck};

use crate::gateway::ShortDuration;

/// One `--site` value: `backend=ADDR` (repeatable: several backends) or
/// `root=DIR` (its files, served by the gateway), and either `keystore=DIR` or
/// `cert=FILE,cert-key=FILE` with any number of `key=FILE,record=FILE`
/// (TLS only when none), plus `alias=NAME` for more names, and the site's
/// own backend health settings (`max-fails=N`, `fail-timeout=D`,
/// `health=PATH|off`, `health-interval=D`, `health-timeout=D`,
/// `health-rise=N`, `health-fall=N`; unset ones are the gateway's);
/// comma-separated.
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
    /// Its own backend health settings.
    pub health: SiteHealth,
}

/// A site's own backend health settings, each over the gateway's flag of
/// the same name (`--backend-max-fails`, `--backend-health`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteHealth {
    max_fails: Option<u32>,
    fail_timeout: Option<Duration>,
    /// A path, or `None` inside for `health=off`.
    check: Option<Option<String>>,
    interval: Option<Duration>,
    timeout: Option<Duration>,
    rise: Option<u32>,
    fall: Option<u32>,
}

impl SiteHealth {
    /// Take `key=v` if it is a health setting: `Ok(false)` if it is not.
    fn set(&mut self, key: &str, v: &str) -> Result<bool, String> {
        fn once<T>(slot: &mut Option<T>, key: &str, v: T) -> Result<(), String> {
            if slot.replace(v).is_some() {
                return Err(format!("{key} given twice"));
            }
            Ok(())
        }
        let count = |v: &str| v.parse::<u32>().map_err(|e| format!("{key}: {e}"));
        let time = |v: &str| {
            let d = v
                .parse::<ShortDuration>()
                .map_err(|e| format!("{key}: {e}"))?
                .0;
            if d.is_zero() {
                return Err(format!("{key} must be above 0"));
            }
            Ok(d)
        };
        match key {
            "max-fails" => once(&mut self.max_fails, key, count(v)?)?,
            "fail-timeout" => once(&mut self.fail_timeout, key, time(v)?)?,
            "health" if v == "off" => once(&mut self.check, key, None)?,
            "health" if v.starts_with('/') => once(&mut self.check, key, Some(v.to_owned()))?,
            "health" => return Err(format!("health={v}: a path starting with /, or off")),
            "health-interval" => once(&mut self.interval, key, time(v)?)?,
            "health-timeout" => once(&mut self.timeout, key, time(v)?)?,
            "health-rise" => once(&mut self.rise, key, count(v)?)?,
            "health-fall" => once(&mut self.fall, key, count(v)?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The site's settings: `base` (the gateway's) with these over it;
    /// `None` when the site sets none.
    pub fn over(&self, base: &BackendHealth) -> Result<Option<BackendHealth>, String> {
        if *self == Self::default() {
            return Ok(None);
        }
        let mut h = base.clone();
        h.max_fails = self.max_fails.unwrap_or(h.max_fails);
        h.fail_timeout = self.fail_timeout.unwrap_or(h.fail_timeout);
        match &self.check {
            Some(None) => h.check = None,
            Some(Some(path)) => {
                let mut c = h
                    .check
                    .take()
                    .unwrap_or_else(|| HealthCheck::new(path.clone()));
                c.path.clone_from(path);
                h.check = Some(c);
            }
            None => {}
        }
        let tuned = [self.interval, self.timeout].iter().any(Option::is_some)
            || [self.rise, self.fall].iter().any(Option::is_some);
        match h.check.as_mut() {
            Some(c) => {
                c.interval = self.interval.unwrap_or(c.interval);
                c.timeout = self.timeout.unwrap_or(c.timeout);
                c.rise = self.rise.unwrap_or(c.rise);
                c.fall = self.fall.unwrap_or(c.fall);
            }
            None if tuned => {
                return Err(
                    "health-interval, -timeout, -rise and -fall need checks: health=PATH here or --backend-health".into(),
                )
            }
            None => {}
        }
        Ok(Some(h))
    }
}

impl FromStr for SiteSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (mut backends, mut keystore, mut cert, mut cert_key) = (Vec::new(), None, None, None);
        let (mut keys, mut records, mut aliases) = (Vec::new(), Vec::new(), Vec::new());
        let mut health = SiteHealth::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(format!("{part:?}: use KEY=VALUE"));
            };
            let (k, v) = (k.trim(), v.trim());
            if health.set(k, v)? {
                continue;
            }
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
                        "{k:?}: a site takes backend, root, keystore, cert, cert-key, key, record, alias, and health settings"
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
            health,
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
            (
                "backend=1.2.3.4:80,keystore=/k,health=healthz",
                "starting with /",
            ),
            (
                "backend=1.2.3.4:80,keystore=/k,health-interval=0s",
                "above 0",
            ),
            (
                "backend=1.2.3.4:80,keystore=/k,max-fails=2,max-fails=3",
                "twice",
            ),
            (
                "backend=1.2.3.4:80,keystore=/k,health-fall=x",
                "health-fall",
            ),
        ] {
            let e = bad.parse::<SiteSpec>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_site_sets_its_own_health_over_the_gateways() {
        let spec = |s: &str| format!("keystore=/k,backend=1.2.3.4:80,{s}").parse::<SiteSpec>();
        let mut gw = BackendHealth::default();
        gw.max_fails = 4;
        assert_eq!(spec("").unwrap().health.over(&gw), Ok(None));
        let h = spec("health=/up,health-rise=5,fail-timeout=30s").unwrap();
        let h = h.health.over(&gw).unwrap().unwrap();
        assert_eq!(h.max_fails, 4, "the gateway's");
        assert_eq!(h.fail_timeout, Duration::from_secs(30));
        let c = h.check.unwrap();
        assert_eq!((c.path.as_str(), c.rise), ("/up", 5));
        assert_eq!(c.interval, HealthCheck::new("/").interval);
        // The gateway checks every backend: a site turns its checks off,
        // or keeps them with another interval.
        gw.check = Some(HealthCheck::new("/healthz"));
        let off = spec("health=off")
            .unwrap()
            .health
            .over(&gw)
            .unwrap()
            .unwrap();
        assert!(off.check.is_none());
        let slow = spec("health-interval=10s")
            .unwrap()
            .health
            .over(&gw)
            .unwrap()
            .unwrap();
        let c = slow.check.unwrap();
        assert_eq!(
            (c.path.as_str(), c.interval),
            ("/healthz", Duration::from_secs(10))
        );
        gw.check = None;
        let e = spec("health-fall=9").unwrap().health.over(&gw).unwrap_err();
        assert!(e.contains("need checks"), "{e}");
    }
}
