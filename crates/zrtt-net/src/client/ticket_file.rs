//! A token state file's tickets used once across processes and crashes
//! (docs/PROTOCOL.md §12.4): a ticket loaded from the file is struck from
//! it, under an exclusive lock on `FILE.lock`, before its flight is built;
//! a ticket already gone from the file was used by another process and is
//! not presented. Saving merges under the same lock: the file's tickets
//! minus those this process used or dropped, plus those granted to it and
//! never saved. A granted ticket, once saved, is "published": another
//! process may take it from the file, so this process takes it like a file
//! ticket (struck from the file, skipped if gone) and never writes it back.
//! Static keys and tokens merge per server name: this process's lines for
//! the names it changed since its last save, the file's for the others.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;
use zrtt_proto::handshake::ResumptionTicket;

use crate::error::{Error, Result};

/// Most tokens a [`super::TokenStore`] keeps (beyond, they start over; a
/// save keeps another process's only below it).
pub(super) const MAX_TOKENS: usize = 4096;

/// A state file a [`super::TokenStore`] was loaded from, and what this
/// process did with its tickets.
#[derive(Debug)]
pub(super) struct TicketFile {
    path: PathBuf,
    /// Tickets granted to this process (their bytes): never saved yet.
    granted: HashSet<Vec<u8>>,
    /// Tickets granted to this process and saved: in the file for any
    /// process to take, taken here like the file's.
    published: HashSet<Vec<u8>>,
    /// Server names whose static key or tokens this process changed since
    /// its last save: its lines win for them.
    changed: HashSet<String>,
    /// Tickets this process took or dropped: never written back.
    gone: HashSet<Vec<u8>>,
}

impl TicketFile {
    pub(super) fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            granted: HashSet::new(),
            published: HashSet::new(),
            changed: HashSet::new(),
            gone: HashSet::new(),
        }
    }

    /// This process changed `server`'s static key or tokens.
    pub(super) fn touch(&mut self, server: &str) {
        if !self.changed.contains(server) {
            self.changed.insert(server.to_owned());
        }
    }

    /// Whether this process's static key and tokens of `server` are saved
    /// (it changed them since its last save).
    pub(super) fn changed(&self, server: &str) -> bool {
        self.changed.contains(server)
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// `ticket` was dropped (expired, refused, evicted).
    pub(super) fn forget(&mut self, ticket: &ResumptionTicket) {
        self.gone.insert(ticket.ticket().to_vec());
    }

    /// `ticket` was granted to this process.
    pub(super) fn grant(&mut self, ticket: &ResumptionTicket) {
        self.granted.insert(ticket.ticket().to_vec());
    }

    /// The newest ticket of `list` (for `server`) this process may use:
    /// granted to it and never saved, or struck from the file by it now
    /// (a file ticket or a published one). Tickets another
    /// process struck first are dropped; if the file cannot be written,
    /// none is used (it could not be recorded as used).
    pub(super) fn take(
        &mut self,
        server: &str,
        list: &mut Vec<ResumptionTicket>,
    ) -> Option<ResumptionTicket> {
        while let Some(t) = list.pop() {
            self.forget(&t);
            if self.granted.remove(t.ticket()) {
                return Some(t);
            }
            self.published.remove(t.ticket());
            match claim(&self.path, server, t.ticket()) {
                Ok(true) => return Some(t),
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!("{}: {e}", self.path.display());
                    return None;
                }
            }
        }
        None
    }

    /// After a save (`written`: the file's tickets now; `memory`: this
    /// process's): granted tickets written are published (taken from the
    /// file from now on, never written back); the sets forget tickets
    /// this process no longer holds, so a long-running process (`zrtt
    /// proxy`) keeps them bounded by its tickets.
    pub(super) fn saved(
        &mut self,
        memory: &HashMap<String, Vec<ResumptionTicket>>,
        written: &HashMap<String, Vec<ResumptionTicket>>,
    ) {
        self.gone.clear();
        self.changed.clear();
        let held: HashSet<&[u8]> = memory.values().flatten().map(|t| t.ticket()).collect();
        let filed: HashSet<&[u8]> = written.values().flatten().map(|t| t.ticket()).collect();
        self.published.retain(|p| held.contains(p.as_slice()));
        for g in std::mem::take(&mut self.granted) {
            if filed.contains(g.as_slice()) {
                self.published.insert(g);
            } else if held.contains(g.as_slice()) {
                self.granted.insert(g);
            }
        }
    }

    /// What to save, with the file's lock, to be held while writing: the
    /// file's tickets minus those this process took or dropped, plus those
    /// granted to it and never saved (at most `max` per server, the
    /// newest); the file's static key and token lines of the servers this
    /// process did not change.
    pub(super) fn merged(
        &self,
        memory: &HashMap<String, Vec<ResumptionTicket>>,
        max: usize,
    ) -> Result<Merged> {
        let lock = lock(&self.path)?;
        let text = read(&self.path)?;
        let (mut others, mut tokens) =
            (Zeroizing::new(String::new()), Zeroizing::new(String::new()));
        let mut n_tokens = 0;
        for line in text.iter().flat_map(|t| t.lines()).map(str::trim) {
            match key_line_server(line) {
                Some(s) if !self.changed(s) => {
                    let to = if line.starts_with("token") {
                        n_tokens += 1;
                        &mut tokens
                    } else {
                        &mut others
                    };
                    to.push_str(line);
                    to.push('\n');
                }
                _ => {}
            }
        }
        // As in memory (`TokenStore::put`): past the bound, tokens start over.
        if n_tokens <= MAX_TOKENS {
            others.push_str(&tokens);
        }
        let mut merged: HashMap<String, Vec<ResumptionTicket>> = HashMap::new();
        for (server, t) in tickets(text.as_deref().map(String::as_str)) {
            if !self.gone.contains(t.ticket()) {
                merged.entry(server).or_default().push(t);
            }
        }
        for (server, list) in memory {
            for t in list.iter().filter(|t| self.granted.contains(t.ticket())) {
                let m = merged.entry(server.clone()).or_default();
                if !m.iter().any(|o| o.ticket() == t.ticket()) {
                    m.push(t.clone());
                }
            }
        }
        for list in merged.values_mut() {
            let excess = list.len().saturating_sub(max);
            list.drain(..excess);
        }
        Ok(Merged {
            _lock: lock,
            tickets: merged,
            others,
        })
    }
}

/// A save's merge with the file ([`TicketFile::merged`]).
pub(super) struct Merged {
    /// The file's lock, held until the merge is written.
    _lock: File,
    /// The tickets to write.
    pub(super) tickets: HashMap<String, Vec<ResumptionTicket>>,
    /// The file's `static` and `token` lines to keep.
    pub(super) others: Zeroizing<String>,
}

/// The server of a well-formed `static SERVER KEY-HEX` or `token SERVER IP
/// TOKEN-HEX` line.
fn key_line_server(line: &str) -> Option<&str> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let hex = |h: &str| zrtt_proto::record::unhex(h).map(Zeroizing::new);
    match f.as_slice() {
        ["static", server, key] if hex(key).is_some_and(|k| k.len() == 32) => Some(server),
        ["token", server, ip, token]
            if ip.parse::<std::net::IpAddr>().is_ok() && hex(token).is_some() =>
        {
            Some(server)
        }
        _ => None,
    }
}

/// The lock file beside `path` (`FILE.lock`, owner-only, left in place).
fn lock_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Hold the exclusive lock of the state file `path` until dropped (waits
/// for another process holding it: held for a read and a write only).
fn lock(path: &Path) -> Result<File> {
    let dir = zrtt_dns::fsutil::parent_dir(path);
    std::fs::create_dir_all(dir).map_err(Error::io("creating the state directory"))?;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_path(path))
        .map_err(Error::io("opening the token state lock"))?;
    f.lock().map_err(Error::io("locking the token state"))?;
    Ok(f)
}

/// The file's text, `None` when there is none.
fn read(path: &Path) -> Result<Option<Zeroizing<String>>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(Zeroizing::new(t))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading the token state")(e)),
    }
}

/// A `ticket SERVER HEX` line's server and ticket.
fn ticket_line(line: &str) -> Option<(&str, ResumptionTicket)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        ["ticket", server, hex] => {
            let bytes = Zeroizing::new(zrtt_proto::record::unhex(hex)?);
            Some((server, ResumptionTicket::decode(&bytes).ok()?))
        }
        _ => None,
    }
}

/// Strike `ticket` (for `server`) from the state file `path`: `true` when
/// it was there (this process may use it), `false` when another process
/// took it first (or the file is gone).
fn claim(path: &Path, server: &str, ticket: &[u8]) -> Result<bool> {
    let _lock = lock(path)?;
    let Some(text) = read(path)? else {
        return Ok(false);
    };
    let mut found = false;
    let mut kept = Zeroizing::new(String::with_capacity(text.len()));
    for line in text.lines() {
        let this = !found
            && ticket_line(line.trim()).is_some_and(|(s, t)| s == server && t.ticket() == ticket);
        if this {
            found = true;
        } else {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    if found {
        zrtt_dns::fsutil::write_atomic(path, kept.as_bytes(), true)
            .map_err(Error::io("writing the token state"))?;
    }
    Ok(found)
}

/// The tickets in a state file's `text` (read under its lock), in file
/// order; unreadable lines are skipped.
fn tickets(text: Option<&str>) -> Vec<(String, ResumptionTicket)> {
    text.map_or(Vec::new(), |text| {
        text.lines()
            .filter_map(|l| ticket_line(l.trim()).map(|(s, t)| (s.to_owned(), t)))
            .collect()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::client::TokenStore;
    use zrtt_proto::testing::{fuzz_fixture, fuzz_now, fuzz_ticket_with};

    const HOST: &str = "www.example.com";

    #[test]
    fn tickets_are_kept_used_once_saved_and_dropped_when_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        let store = TokenStore::new();
        let tickets: Vec<_> = (10..15).map(fuzz_ticket_with).collect();
        for t in &tickets {
            store.put_ticket("www.example.com", t.clone());
        }
        assert_eq!(
            store.tickets("www.example.com"),
            crate::client::state::MAX_TICKETS_PER_SERVER
        );
        store.save(&path).unwrap();
        let back = TokenStore::load(&path).unwrap();
        assert_eq!(
            back.tickets("www.example.com"),
            crate::client::state::MAX_TICKETS_PER_SERVER
        );
        let rec = &fuzz_fixture().record;
        // The newest first, each once.
        assert_eq!(
            back.take_ticket("www.example.com", rec, fuzz_now())
                .as_ref(),
            Some(&tickets[4])
        );
        assert_eq!(back.tickets("www.example.com"), 3);
        assert!(back.take_ticket("other.example", rec, fuzz_now()).is_none());
        // Expired: dropped, none used.
        let later = fuzz_now().saturating_add(std::time::Duration::from_secs(3600));
        assert!(back.take_ticket("www.example.com", rec, later).is_none());
        assert_eq!(back.tickets("www.example.com"), 0);
        std::fs::write(&path, "ticket www 00").unwrap();
        assert!(TokenStore::load(&path).is_err());
    }

    /// Two processes (two stores) loading one file never present the same
    /// ticket, and a crash after taking one (no save) does not bring it
    /// back; saving keeps what another process granted meanwhile.
    #[test]
    fn a_ticket_in_a_state_file_is_used_once_across_stores_and_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let rec = &fuzz_fixture().record;
        let store = TokenStore::new();
        for i in 10..13 {
            store.put_ticket(HOST, fuzz_ticket_with(i));
        }
        store.save(&path).unwrap();
        let one = TokenStore::load(&path).unwrap();
        let two = TokenStore::load(&path).unwrap();
        let a = one.take_ticket(HOST, rec, fuzz_now()).unwrap();
        // `two` loaded the same three; the newest is struck: it gets the next.
        let b = two.take_ticket(HOST, rec, fuzz_now()).unwrap();
        assert_ne!(a.ticket(), b.ticket());
        // `one` crashes here (never saves); a third process sees one left.
        let three = TokenStore::load(&path).unwrap();
        assert_eq!(three.tickets(HOST), 1);
        // `two` gets a new ticket and saves: the file keeps the untouched
        // one and the new one, never `a` or `b`.
        two.put_ticket(HOST, fuzz_ticket_with(20));
        two.save(&path).unwrap();
        let back = TokenStore::load(&path).unwrap();
        assert_eq!(back.tickets(HOST), 2);
        let mut seen = Vec::new();
        while let Some(t) = back.take_ticket(HOST, rec, fuzz_now()) {
            assert_ne!(t.ticket(), a.ticket());
            assert_ne!(t.ticket(), b.ticket());
            seen.push(t);
        }
        assert_eq!(seen.len(), 2);
        assert_eq!(TokenStore::load(&path).unwrap().tickets(HOST), 0);
    }

    /// A long-running process (the proxy) granted a ticket and saved it:
    /// another process takes it from the file; the proxy's later saves
    /// never write it back and the proxy does not use it either. One it
    /// saved and nobody took, the proxy still uses (struck from the file).
    #[test]
    fn a_granted_ticket_once_saved_is_used_once_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let rec = &fuzz_fixture().record;
        let proxy = TokenStore::load(&path).unwrap();
        proxy.put_ticket(HOST, fuzz_ticket_with(30));
        proxy.save(&path).unwrap();
        let mut uses = 0;
        for _ in 0..3 {
            let get = TokenStore::load(&path).unwrap();
            if let Some(t) = get.take_ticket(HOST, rec, fuzz_now()) {
                assert_eq!(t.ticket(), fuzz_ticket_with(30).ticket());
                uses += 1;
            }
            get.save(&path).unwrap();
            proxy.save(&path).unwrap(); // the proxy's periodic save
        }
        assert_eq!(uses, 1, "presented once by other processes");
        assert!(proxy.take_ticket(HOST, rec, fuzz_now()).is_none());
        assert_eq!(TokenStore::load(&path).unwrap().tickets(HOST), 0);

        proxy.put_ticket(HOST, fuzz_ticket_with(31));
        proxy.save(&path).unwrap();
        proxy.save(&path).unwrap();
        let t = proxy.take_ticket(HOST, rec, fuzz_now()).unwrap();
        assert_eq!(t.ticket(), fuzz_ticket_with(31).ticket());
        assert_eq!(TokenStore::load(&path).unwrap().tickets(HOST), 0, "struck");
        proxy.save(&path).unwrap();
        assert_eq!(TokenStore::load(&path).unwrap().tickets(HOST), 0);
    }

    /// Two processes saving one file keep each other's static keys and
    /// tokens: each one's lines win only for the servers it changed.
    #[test]
    fn saving_merges_static_keys_and_tokens_per_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let rng = ring::rand::SystemRandom::new();
        let ip: std::net::IpAddr = "198.18.0.1".parse().unwrap();
        let first = TokenStore::new();
        let k = first.static_key(HOST, &rng).unwrap();
        first.put(HOST, ip, vec![1]);
        first.save(&path).unwrap();
        let one = TokenStore::load(&path).unwrap();
        let two = TokenStore::load(&path).unwrap();
        let ka = one.static_key("a.example", &rng).unwrap();
        one.put("a.example", ip, vec![2]);
        let kb = two.static_key("b.example", &rng).unwrap();
        two.put("b.example", ip, vec![3]);
        two.put(HOST, ip, vec![4]); // `two` changed HOST's token
        two.save(&path).unwrap();
        one.save(&path).unwrap(); // `one` did not change HOST
        let back = TokenStore::load(&path).unwrap();
        assert_eq!(back.token("a.example", ip), Some(vec![2]));
        assert_eq!(back.token("b.example", ip), Some(vec![3]));
        assert_eq!(back.token(HOST, ip), Some(vec![4]), "two's change kept");
        for (server, key) in [("a.example", &ka), ("b.example", &kb), (HOST, &k)] {
            let got = back.static_key(server, &rng).unwrap();
            assert_eq!(got.public(), key.public(), "{server}");
        }
        // Saved: `one`'s later save keeps another process's later change.
        let three = TokenStore::load(&path).unwrap();
        three.put("a.example", ip, vec![5]);
        three.save(&path).unwrap();
        one.save(&path).unwrap();
        let back = TokenStore::load(&path).unwrap();
        assert_eq!(back.token("a.example", ip), Some(vec![5]));
    }
}
