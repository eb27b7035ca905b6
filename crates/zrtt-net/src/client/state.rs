//! Client state kept across connections (and, saved to files, across
//! runs): address tokens and resumption tickets ([`TokenStore`]) and
//! provenance certificates ([`ProvenanceStore`]). Both hold private keys;
//! their files are written owner-only.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use zrtt_proto::crypto::{SecureRandom, X25519KeyPair};
use zrtt_proto::handshake::ResumptionTicket;
use zrtt_proto::provenance::{decode_certificates, encode_certificates, Certificate};
use zrtt_proto::record::VerifiedKeyRecord;
use zrtt_proto::UnixTime;

use super::ticket_file::{TicketFile, MAX_TOKENS};
use crate::error::{Error, Result};
use crate::verifier::fetch_certificate;
use zeroize::Zeroizing;

/// The client's tokens and static keys: one static key per server name (so
/// servers cannot link a client across names), one token per (server name,
/// local address).
#[derive(Default)]
pub struct TokenStore {
    inner: Mutex<StoreInner>,
}

#[derive(Default)]
struct StoreInner {
    /// Tickets kept per server name (0: [`MAX_TICKETS_PER_SERVER`]).
    max_tickets: usize,
    statics: HashMap<String, X25519KeyPair>,
    tokens: HashMap<(String, IpAddr), Vec<u8>>,
    /// Resumption tickets per server name, oldest first (docs/PROTOCOL.md §12.4).
    tickets: HashMap<String, Vec<ResumptionTicket>>,
    /// The state file this store was loaded from: tickets taken from it
    /// are struck from it first, saving merges (`ticket_file.rs`).
    file: Option<TicketFile>,
}

/// Most resumption tickets kept per server name.
pub const MAX_TICKETS_PER_SERVER: usize = 4;

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("TokenStore")
            .field("servers", &inner.statics.len())
            .field("tokens", &inner.tokens.len())
            .field(
                "tickets",
                &inner.tickets.values().map(Vec::len).sum::<usize>(),
            )
            .finish()
    }
}

impl TokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping up to `n` resumption tickets per server
    /// (default [`MAX_TICKETS_PER_SERVER`]): a client with more connections
    /// to one server at once, such as a load generator, needs one per
    /// connection in flight to resume them all.
    pub fn with_tickets_per_server(n: usize) -> Self {
        let s = Self::default();
        s.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .max_tickets = n.max(1);
        s
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
        if let Some(f) = &mut inner.file {
            f.touch(server);
        }
        Ok(k)
    }

    /// The token for `server` seen from `local`, if any.
    pub fn token(&self, server: &str, local: IpAddr) -> Option<Vec<u8>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .tokens
            .get(&(server.to_owned(), local.to_canonical()))
            .cloned()
    }

    /// Store a token `server` issued to us at `local`.
    pub fn put(&self, server: &str, local: IpAddr, token: Vec<u8>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.tokens.len() >= MAX_TOKENS {
            inner.tokens.clear();
        }
        if let Some(f) = &mut inner.file {
            f.touch(server);
        }
        inner
            .tokens
            .insert((server.to_owned(), local.to_canonical()), token);
    }
}

impl TokenStore {
    /// Take a resumption ticket for `server` usable at `now` with `record`
    /// (the current verified record: same name and certificate as the
    /// ticket's binding), the newest first. Taken means used: a ticket is
    /// never presented twice (docs/PROTOCOL.md §12.4). Tickets that can no
    /// longer be used (expired, another certificate) are dropped. A store
    /// loaded from a file strikes a ticket from the file before handing it
    /// out, and skips one another process struck first (`ticket_file.rs`).
    pub fn take_ticket(
        &self,
        server: &str,
        record: &VerifiedKeyRecord,
        now: UnixTime,
    ) -> Option<ResumptionTicket> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let inner = &mut *guard;
        let list = inner.tickets.get_mut(server)?;
        list.retain(|t| {
            let ok = t.usable(record, now);
            if let (false, Some(f)) = (ok, &mut inner.file) {
                f.forget(t);
            }
            ok
        });
        let taken = match &mut inner.file {
            Some(f) => f.take(server, list),
            None => list.pop(),
        };
        if list.is_empty() {
            inner.tickets.remove(server);
        }
        taken
    }

    /// Drop every ticket held for `server` sealed under the ticket key
    /// `key_id` (after a Reject 9 for one of them: that server would
    /// refuse them all); how many were dropped.
    pub fn drop_tickets_of_key(&self, server: &str, key_id: u32) -> usize {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let inner = &mut *guard;
        let Some(list) = inner.tickets.get_mut(server) else {
            return 0;
        };
        let before = list.len();
        list.retain(|t| {
            let keep = zrtt_proto::handshake::resume::ticket_key_id(t.ticket()) != Some(key_id);
            if let (false, Some(f)) = (keep, &mut inner.file) {
                f.forget(t);
            }
            keep
        });
        let dropped = before - list.len();
        if list.is_empty() {
            inner.tickets.remove(server);
        }
        dropped
    }

    /// Keep a ticket `server` granted (the oldest goes beyond
    /// [`MAX_TICKETS_PER_SERVER`]).
    pub fn put_ticket(&self, server: &str, ticket: ResumptionTicket) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.tickets.len() >= 4096 && !inner.tickets.contains_key(server) {
            inner.tickets.clear();
        }
        let max = match inner.max_tickets {
            0 => MAX_TICKETS_PER_SERVER,
            n => n,
        };
        if let Some(f) = &mut inner.file {
            f.grant(&ticket);
        }
        let list = inner.tickets.entry(server.to_owned()).or_default();
        list.push(ticket);
        if list.len() > max {
            list.remove(0);
        }
    }

    /// The ticket key ids of the tickets held for `server` (a ticket's
    /// first four bytes: the token key that sealed it).
    pub fn ticket_key_ids(&self, server: &str) -> Vec<u32> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tickets.get(server).map_or(Vec::new(), |l| {
            l.iter()
                .filter_map(|t| zrtt_proto::handshake::resume::ticket_key_id(t.ticket()))
                .collect()
        })
    }

    /// Tickets held for `server`.
    pub fn tickets(&self, server: &str) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tickets.get(server).map_or(0, Vec::len)
    }

    /// Save to a file (owner-only, it holds private keys), one line per
    /// entry: `static SERVER KEY-HEX`, `token SERVER IP TOKEN-HEX` and
    /// `ticket SERVER TICKET-HEX` (the ticket's stored form, its `psk`
    /// included). To the file it was loaded from: under the file's lock,
    /// the file's tickets minus those this store took or dropped, plus
    /// those granted to it and never saved; static keys and tokens of the
    /// servers it changed since its last save, the file's for the others
    /// (another process's changes are kept; `ticket_file.rs`).
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let inner = &mut *guard;
        match &inner.file {
            Some(f) if f.path() == path => {
                let max = match inner.max_tickets {
                    0 => MAX_TICKETS_PER_SERVER,
                    n => n,
                };
                let m = f.merged(&inner.tickets, max)?;
                let text = render(inner, &m.tickets, Some((f, m.others.as_str())));
                write_private(path, &text, "writing the token state")?;
                if let Some(f) = &mut inner.file {
                    f.saved(&inner.tickets, &m.tickets);
                }
                Ok(())
            }
            _ => write_private(
                path,
                &render(inner, &inner.tickets, None),
                "writing the token state",
            ),
        }
    }

    /// The text [`Self::save`] writes to a file it was not loaded from.
    fn render_text(&self) -> Zeroizing<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        render(&inner, &inner.tickets, None)
    }

    /// Load a file written by [`Self::save`]; a missing file is an empty store.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let store = match read_private(path, "reading the token state")? {
            Some(text) => Self::parse(&text)?,
            None => Self::new(),
        };
        store.inner.lock().unwrap_or_else(|p| p.into_inner()).file = Some(TicketFile::new(path));
        Ok(store)
    }

    /// Parse the text of a file written by [`Self::save`].
    pub fn parse(text: &str) -> Result<Self> {
        let store = Self::new();
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
                    let key = key_from_hex(key).ok_or_else(bad)?;
                    inner.statics.insert((*server).to_owned(), key);
                }
                ["token", server, ip, token] => {
                    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
                    let token = zrtt_proto::record::unhex(token).ok_or_else(bad)?;
                    inner
                        .tokens
                        .insert(((*server).to_owned(), ip.to_canonical()), token);
                }
                ["ticket", server, ticket] => {
                    let bytes = Zeroizing::new(zrtt_proto::record::unhex(ticket).ok_or_else(bad)?);
                    let t = ResumptionTicket::decode(&bytes).map_err(|_| bad())?;
                    let list = inner.tickets.entry((*server).to_owned()).or_default();
                    list.push(t);
                    if list.len() > MAX_TICKETS_PER_SERVER {
                        list.remove(0);
                    }
                }
                _ => return Err(bad()),
            }
        }
        drop(inner);
        Ok(store)
    }
}

/// The text [`TokenStore::save`] writes: `inner`'s keys and tokens (with
/// `file`: only of the servers it changed, then the file's other lines),
/// and `tickets`.
fn render(
    inner: &StoreInner,
    tickets: &HashMap<String, Vec<ResumptionTicket>>,
    file: Option<(&TicketFile, &str)>,
) -> Zeroizing<String> {
    let mine = |server: &str| file.is_none_or(|(f, _)| f.changed(server));
    use std::fmt::Write as _;
    // It holds private keys: wiped once written.
    let mut s = Zeroizing::new(String::from(
        "# zrtt token state: static keys per server, tokens per server and local address\n",
    ));
    for (server, key) in inner.statics.iter().filter(|(s, _)| mine(s)) {
        let _ = writeln!(
            s,
            "static {server} {}",
            *Zeroizing::new(zrtt_proto::record::hex(key.private()))
        );
    }
    for ((server, ip), token) in inner.tokens.iter().filter(|((s, _), _)| mine(s)) {
        let _ = writeln!(s, "token {server} {ip} {}", zrtt_proto::record::hex(token));
    }
    if let Some((_, others)) = file {
        s.push_str(others);
    }
    for (server, list) in tickets {
        for t in list {
            let _ = writeln!(
                s,
                "ticket {server} {}",
                *Zeroizing::new(zrtt_proto::record::hex(&t.encode()))
            );
        }
    }
    s
}

/// A client's certificates, per local address, each address with its own
/// static key (ASAP's privacy note: a key does not follow the client from
/// network to network).
///
/// The store remembers which verifier (by address) issued which
/// certificate, so a refresh presents each verifier its own certificate
/// and replaces it, also when the verifier rotated to a key with another id.
#[derive(Debug, Default)]
pub struct ProvenanceStore {
    by_local: Mutex<HashMap<IpAddr, (X25519KeyPair, Vec<Certificate>)>>,
    /// The verifier id of the certificate each verifier last issued.
    issued_by: Mutex<HashMap<SocketAddr, u32>>,
    /// Verifiers (DNS names) that key records of servers this client
    /// contacted name ([`Self::note_named`]).
    named: Mutex<std::collections::BTreeSet<String>>,
}

/// Prefix of the state file lines that record which verifier issued which
/// certificate (a comment to readers that do not know it).
const ISSUER_LINE: &str = "#zrtt-issuer ";

impl ProvenanceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remember the verifiers a server's key record names (the client's
    /// connection does this after every zrtt contact), for a refresh loop
    /// to fetch certificates from ([`Self::named`]); at most 16 kept.
    pub fn note_named(&self, names: &[String]) {
        let mut n = lock(&self.named);
        for name in names {
            if n.len() >= 16 {
                break;
            }
            n.insert(name.clone());
        }
    }

    /// The verifier names noted so far ([`Self::note_named`]).
    pub fn named(&self) -> Vec<String> {
        lock(&self.named).iter().cloned().collect()
    }

    /// Obtain (or refresh) certificates for `local` from every verifier in
    /// parallel. Verifiers that fail are skipped (reported in the result);
    /// the store keeps what succeeded. A new local address gets a new key.
    pub async fn refresh(
        &self,
        local: IpAddr,
        verifiers: &[SocketAddr],
        requested_secs: u32,
        timeout: Duration,
        rng: &dyn SecureRandom,
    ) -> Result<Vec<(SocketAddr, Result<u32>)>> {
        let (key, previous) = {
            let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
            if !m.contains_key(&local) {
                // Address changed (or first use): drop the others, fresh key.
                m.clear();
                lock(&self.issued_by).clear();
                m.insert(local, (X25519KeyPair::generate(rng)?, Vec::new()));
            }
            let (k, c) = m.get(&local).ok_or(Error::Protocol("provenance store"))?;
            (k.clone(), c.clone())
        };
        let issued_by = lock(&self.issued_by).clone();
        let jobs = verifiers.iter().map(|v| {
            let key = key.clone();
            // Refresh the certificate this verifier issued; when that is not
            // known (an older state file), one no other verifier claims.
            let mine = match issued_by.get(v) {
                Some(id) => previous.iter().find(|c| c.verifier_id == *id).cloned(),
                None => previous
                    .iter()
                    .find(|c| !issued_by.values().any(|id| *id == c.verifier_id))
                    .cloned(),
            };
            let v = *v;
            async move {
                let r = fetch_certificate(v, &key, requested_secs, mine.as_ref(), timeout).await;
                (v, r)
            }
        });
        let results = futures_join_all(jobs).await;
        let mut fresh = Vec::new();
        let mut report = Vec::new();
        for (v, r) in results {
            match r {
                Ok(c) => {
                    report.push((v, Ok(c.duration)));
                    fresh.push((v, c));
                }
                Err(e) => report.push((v, Err(e))),
            }
        }
        let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let mut issued_by = lock(&self.issued_by);
        if let Some((_, certs)) = m.get_mut(&local) {
            for (v, c) in fresh {
                // The verifier's previous certificate goes, whatever key signed it.
                let before = issued_by.insert(v, c.verifier_id);
                certs.retain(|o| o.verifier_id != c.verifier_id && Some(o.verifier_id) != before);
                certs.push(c);
            }
        }
        Ok(report)
    }

    /// Whether `local` needs new certificates at `now`: none held for it (or
    /// the client moved), or one has less than half its duration left, so
    /// refreshing (which doubles the duration) happens well before expiry.
    pub fn needs_refresh(&self, local: IpAddr, now: UnixTime) -> bool {
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let Some((_, certs)) = m.get(&local) else {
            return true;
        };
        let now = now.as_secs();
        certs.is_empty()
            || certs
                .iter()
                .any(|c| now.saturating_add(u64::from(c.duration) / 2) >= c.end())
    }

    /// Put certificates for `local` directly (e.g. obtained out of band);
    /// replaces what the store held for any address.
    pub fn insert(&self, local: IpAddr, key: X25519KeyPair, certs: Vec<Certificate>) {
        let mut m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        m.clear();
        lock(&self.issued_by).clear();
        m.insert(local, (key, certs));
    }

    /// The static key and the PROVENANCE extension value for `local`, with
    /// the certificates still valid at `now`.
    pub fn for_local(&self, local: IpAddr, now: UnixTime) -> Option<(X25519KeyPair, Vec<u8>)> {
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        let (key, certs) = m.get(&local)?;
        let valid: Vec<Certificate> = certs
            .iter()
            .filter(|c| c.start <= now.as_secs() && now.as_secs() < c.end())
            .cloned()
            .collect();
        (!valid.is_empty()).then(|| (key.clone(), encode_certificates(&valid)))
    }

    /// Save to a file (owner-only): `ip key-hex cert-hex...` per line.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        write_private(path, &self.render(), "writing the provenance state")
    }

    /// The text [`Self::save`] writes.
    fn render(&self) -> Zeroizing<String> {
        use std::fmt::Write as _;
        let m = self.by_local.lock().unwrap_or_else(|p| p.into_inner());
        // It holds private keys: wiped once written.
        let mut s = Zeroizing::new(String::from(
            "# zrtt provenance state: local address, static key, certificates\n",
        ));
        for (ip, (key, certs)) in m.iter() {
            let key_hex = Zeroizing::new(zrtt_proto::record::hex(key.private()));
            let _ = write!(s, "{ip} {}", *key_hex);
            for c in certs {
                let mut b = Vec::new();
                c.encode(&mut b);
                let _ = write!(s, " {}", zrtt_proto::record::hex(&b));
            }
            s.push('\n');
        }
        for (v, id) in lock(&self.issued_by).iter() {
            let _ = writeln!(s, "{ISSUER_LINE}{v} {id:08x}");
        }
        s
    }

    /// Load a file written by [`Self::save`]; a missing file is an empty store.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        match read_private(path, "reading the provenance state")? {
            Some(text) => Self::parse(&text),
            None => Ok(Self::new()),
        }
    }

    /// Parse the text of a file written by [`Self::save`].
    pub fn parse(text: &str) -> Result<Self> {
        let store = Self::new();
        let bad = || Error::Protocol("malformed provenance state file");
        let mut m = store.by_local.lock().unwrap_or_else(|p| p.into_inner());
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(ISSUER_LINE) {
                let mut parts = rest.split_whitespace();
                let v: Option<SocketAddr> = parts.next().and_then(|p| p.parse().ok());
                let id = parts.next().and_then(|p| u32::from_str_radix(p, 16).ok());
                if let (Some(v), Some(id)) = (v, id) {
                    lock(&store.issued_by).insert(v, id);
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let ip: IpAddr = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
            let key = parts.next().and_then(key_from_hex).ok_or_else(bad)?;
            let mut certs = Vec::new();
            for c in parts {
                let mut wrapped = vec![1u8];
                wrapped.extend_from_slice(&zrtt_proto::record::unhex(c).ok_or_else(bad)?);
                certs.extend(decode_certificates(&wrapped).map_err(|_| bad())?);
            }
            m.insert(ip, (key, certs));
        }
        drop(m);
        Ok(store)
    }
}

/// Fuzz entry point (fuzz/fuzz_targets/state_files.rs): the token and
/// provenance state parsers on arbitrary text. What parses renders to a
/// text that parses to the same state.
#[doc(hidden)]
#[allow(clippy::expect_used)] // a fuzz entry point panics on a broken invariant
pub fn fuzz_state_files(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    fn lines(s: &str) -> Vec<String> {
        let mut v: Vec<String> = s.lines().map(str::to_owned).collect();
        v.sort_unstable();
        v
    }
    if let Ok(t) = TokenStore::parse(text) {
        let once = t.render_text();
        let again = TokenStore::parse(&once).expect("rendered token state parses");
        assert_eq!(lines(&again.render_text()), lines(&once));
    }
    if let Ok(p) = ProvenanceStore::parse(text) {
        let once = p.render();
        let again = ProvenanceStore::parse(&once).expect("rendered provenance state parses");
        assert_eq!(lines(&again.render()), lines(&once));
    }
}

async fn futures_join_all<F, T>(jobs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut n = 0;
    for (i, j) in jobs.enumerate() {
        set.spawn(async move { (i, j.await) });
        n += 1;
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    while let Some(Ok((i, v))) = set.join_next().await {
        out[i] = Some(v);
    }
    out.into_iter().flatten().collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A state file's text (it holds private keys: wiped when dropped); `None`
/// when there is no file.
fn read_private(path: &std::path::Path, what: &'static str) -> Result<Option<Zeroizing<String>>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(Zeroizing::new(t))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(what)(e)),
    }
}

/// A private key from 64 hex digits; the decoded bytes are wiped.
fn key_from_hex(hex: &str) -> Option<X25519KeyPair> {
    let bytes = Zeroizing::new(zrtt_proto::record::unhex(hex)?);
    let key: Zeroizing<[u8; 32]> = Zeroizing::new(bytes.as_slice().try_into().ok()?);
    Some(X25519KeyPair::from_private(*key))
}

/// Writes a state file holding private keys: owner-only, atomically, never
/// through a symlink (`zrtt_dns::fsutil::write_atomic`).
fn write_private(path: &std::path::Path, text: &str, what: &'static str) -> Result<()> {
    zrtt_dns::fsutil::write_atomic(path, text.as_bytes(), true).map_err(Error::io(what))
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The state parsers never panic, and what they accept round-trips.
        #[test]
        fn state_parsers_never_panic(
            lines in proptest::collection::vec(
                proptest::string::string_regex(
                    "(#zrtt-issuer |static |token |)[0-9a-f.:\\[\\] ]{0,80}"
                ).unwrap(),
                0..6,
            )
        ) {
            fuzz_state_files(lines.join("\n").as_bytes());
        }
    }

    #[test]
    fn state_files_round_trip() {
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let tok = format!(
            "# c\nstatic www.example.com {}\ntoken www.example.com ::ffff:198.18.0.1 0102\n",
            "11".repeat(32)
        );
        fuzz_state_files(tok.as_bytes());
        let t = TokenStore::parse(&tok).unwrap();
        assert_eq!(t.token("www.example.com", ip), Some(vec![1, 2]));
        let cert = zrtt_proto::provenance::Certificate {
            verifier_id: 7,
            address: ip,
            start: 1,
            duration: 2,
            signature: [3; 64],
        };
        let mut b = Vec::new();
        cert.encode(&mut b);
        let pv = format!(
            "{ip} {} {}\n#zrtt-issuer 192.0.2.1:4433 00000007\n",
            "22".repeat(32),
            zrtt_proto::record::hex(&b)
        );
        fuzz_state_files(pv.as_bytes());
        let p = ProvenanceStore::parse(&pv).unwrap();
        assert!(p.for_local(ip, UnixTime::from_secs(2)).is_some());
        assert!(ProvenanceStore::parse("198.18.0.1 zz").is_err());
    }

    /// A state write follows no symlink (at the file or at any temporary
    /// name next to it) and never keeps an old file's mode.
    #[test]
    fn state_save_replaces_symlinks_and_old_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("tokens");
        for planted in [path.clone(), path.with_extension("tmp")] {
            std::os::unix::fs::symlink(&victim, &planted).unwrap();
        }
        let rng = ring::rand::SystemRandom::new();
        let store = TokenStore::new();
        store.static_key("www.example.com", &rng).unwrap();
        store.save(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "the symlink is replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(TokenStore::load(&path).is_ok());

        let pv = dir.path().join("pv");
        std::fs::write(&pv, "").unwrap();
        std::fs::set_permissions(&pv, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(pv.with_extension("tmp"), "").unwrap();
        std::fs::set_permissions(
            pv.with_extension("tmp"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        ProvenanceStore::new().save(&pv).unwrap();
        let mode = std::fs::metadata(&pv).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "an old 0644 file ends 0600");
    }
}
