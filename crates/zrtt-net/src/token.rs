//! The client's side of address tokens: the static key it uses towards
//! each server and the tokens servers issued to it, kept across runs.
//! Tokens themselves (sealing and checking) are the gateway's business and
//! live in the core ([`zrtt_proto::admission::TokenKey`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use zrtt_proto::admission::canonical_ip as canonical;
use zrtt_proto::crypto::{SecureRandom, X25519KeyPair};

/// The client's tokens and static keys: one static key per server name (so
/// servers cannot link a client across names), one token per (server name,
/// local address).
#[derive(Default)]
pub struct TokenStore {
    inner: Mutex<StoreInner>,
}

#[derive(Default)]
struct StoreInner {
    statics: HashMap<String, X25519KeyPair>,
    tokens: HashMap<(String, IpAddr), Vec<u8>>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("TokenStore")
            .field("servers", &inner.statics.len())
            .field("tokens", &inner.tokens.len())
            .finish()
    }
}

impl TokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The static key used towards `server` (created on first use).
    pub fn static_key(
        &self,
        server: &str,
        rng: &dyn SecureRandom,
    ) -> Result<X25519KeyPair, zrtt_proto::Error> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = inner.statics.get(server) {
            return Ok(k.clone());
        }
        let k = X25519KeyPair::generate(rng)?;
        inner.statics.insert(server.to_owned(), k.clone());
        Ok(k)
    }

    /// The token for `server` seen from `local`, if any.
    pub fn token(&self, server: &str, local: IpAddr) -> Option<Vec<u8>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .tokens
            .get(&(server.to_owned(), canonical(local)))
            .cloned()
    }

    /// Store a token `server` issued to us at `local`.
    pub fn put(&self, server: &str, local: IpAddr, token: Vec<u8>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.tokens.len() >= 4096 {
            inner.tokens.clear();
        }
        inner
            .tokens
            .insert((server.to_owned(), canonical(local)), token);
    }
}

impl TokenStore {
    /// Save to a file (owner-only, it holds private keys), one line per
    /// entry: `static SERVER KEY-HEX` and `token SERVER IP TOKEN-HEX`.
    pub fn save(&self, path: &std::path::Path) -> crate::error::Result<()> {
        use std::fmt::Write as _;
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = String::from(
            "# zrtt token state: static keys per server, tokens per server and local address\n",
        );
        for (server, key) in &inner.statics {
            let _ = writeln!(
                s,
                "static {server} {}",
                zrtt_proto::record::hex(key.private())
            );
        }
        for ((server, ip), token) in &inner.tokens {
            let _ = writeln!(s, "token {server} {ip} {}", zrtt_proto::record::hex(token));
        }
        crate::error::write_private(path, s.as_bytes())
            .map_err(crate::error::Error::io("writing the token state"))
    }

    /// Load a file written by [`Self::save`]; a missing file is an empty store.
    pub fn load(path: &std::path::Path) -> crate::error::Result<Self> {
        use crate::error::Error;
        let store = Self::new();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(store),
            Err(e) => return Err(Error::io("reading the token state")(e)),
        };
        let bad = || Error::Protocol("malformed token state file");
        let mut inner = store.inner.lock().unwrap_or_else(|p| p.into_inner());
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["static", server, key] => {
                    let key: [u8; 32] = zrtt_proto::record::unhex(key)
                        .and_then(|k| k.try_into().ok())
                        .ok_or_else(bad)?;
                    inner
                        .statics
                        .insert((*server).to_owned(), X25519KeyPair::from_private(key));
                }
                ["token", server, ip, token] => {
                    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
                    let token = zrtt_proto::record::unhex(token).ok_or_else(bad)?;
                    inner
                        .tokens
                        .insert(((*server).to_owned(), canonical(ip)), token);
                }
                _ => return Err(bad()),
            }
        }
        drop(inner);
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn store_saves_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        let rng = ring::rand::SystemRandom::new();
        let store = TokenStore::new();
        let k = store.static_key("www.example.com", &rng).unwrap();
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        store.put("www.example.com", ip, vec![1, 2, 3]);
        store.save(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "state holds private keys: {mode:o}");
        let back = TokenStore::load(&path).unwrap();
        assert_eq!(back.token("www.example.com", ip), Some(vec![1, 2, 3]));
        assert_eq!(back.token("other.example", ip), None);
        let k2 = back.static_key("www.example.com", &rng).unwrap();
        assert_eq!(k2.public(), k.public());
        assert!(TokenStore::load(&dir.path().join("missing")).is_ok());
        for bad in [
            "token www 1.2.3.4",
            "static www zz",
            "token www nonip 00",
            "junk",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(TokenStore::load(&path).is_err(), "{bad}");
        }
    }
}
