//! `zrtt get URL`: a curl-like client: zrtt in the SYN when the host has a
//! verified key record, TLS 1.3 otherwise.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use zrtt_dns::resolver::{ResolveError, Resolved, Resolver, ResolverConfig, Trust};
use zrtt_net::client::{
    CertKeySource, ClientConfig, ConnInfo, DnsKeySource, KeySource, Target, ZrttStream,
};

use crate::dnskeys::{parse_dns_server, ClientFlags};
use crate::get_send::{h2_request, shortcut_lookup, Sender};
use crate::{keys, util};

/// Exit codes (curl's numbers where curl has one).
pub const EXIT_HELP: &str = "\
Exit codes (curl's numbers):
  0   success (any HTTP status, unless --fail)
  1   internal error
  3   malformed URL
  6   could not resolve the host
  7   could not connect (refused, no answer, zrtt impossible and --zrtt-only)
  22  HTTP status >= 400 with --fail
  23  could not write the output
  28  timed out (--max-time)
  35  TLS or zrtt handshake failed
  56  failure while receiving the response
  77  could not read --cacert, --cert or --record files";

#[derive(Args, Debug)]
#[command(after_help = EXIT_HELP)]
pub struct GetArgs {
    /// `https://host[:port]/path` (zrtt and TLS share the port; default 443).
    url: String,
    /// Write the body to FILE instead of stdout.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Extra request header, `Name: value`; repeatable.
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request method (default GET, or POST with -d).
    #[arg(short = 'X', long = "request")]
    method: Option<String>,
    /// Request body (`@FILE` reads a file).
    #[arg(short = 'd', long = "data")]
    data: Option<String>,
    /// Describe the connection and print the headers on stderr.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Use ADDR for HOST:PORT (`HOST:PORT:ADDR`); repeatable.
    #[arg(long)]
    resolve: Vec<String>,
    /// CA certificates (PEM) for TLS and for the certificate that signs
    /// key records from DNS; default the system's roots (SSL_CERT_FILE, SSL_CERT_DIR, else the distribution's bundle).
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// DNS server for the key and address lookup (`ADDR[:PORT]`); default
    /// the nameservers of /etc/resolv.conf. Used when no --record is given.
    #[arg(long, value_parser = parse_dns_server)]
    dns_server: Option<SocketAddr>,
    /// Do not look up key records in DNS (TLS unless --record is given).
    #[arg(long)]
    no_dns: bool,
    /// Provenance state (from `zrtt verifier fetch`, or learned): certificates
    /// for this host's address (and their static key) let a gateway that
    /// trusts the verifiers answer before the TCP handshake completes.
    /// Default `provenance` in the state directory (see --token-state;
    /// none with --no-state). When a key record names verifiers and the
    /// state holds no valid certificates, `get` fetches some from them
    /// after the response (port 4480 of the names' addresses; --resolve
    /// NAME:4480:ADDR applies), so the next first contact is proven.
    #[arg(long, alias = "pv-state")]
    provenance_state: Option<PathBuf>,
    /// After the transfer print FORMAT: %{time_namelookup} %{time_connect}
    /// %{time_appconnect} %{time_starttransfer} %{time_total} %{http_code}
    /// %{size_download} %{zrtt_mode} %{round_trips} %{rtt} %{syn_data}; `\n` is a newline.
    #[arg(short = 'w', long = "write-out")]
    write_out: Option<String>,
    /// Key record file(s) for the host, instead of looking them up in DNS.
    #[arg(long = "record")]
    records: Vec<PathBuf>,
    /// The certificate (PEM) that signs the records; with DNS, pinned for
    /// the host (TLSA is then not needed).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// Wait for the key records before connecting. By default, when the
    /// address comes before the keys (a QNAME-minimising resolver answers
    /// the keys of a name it has not seen one round trip later), TLS starts
    /// at once and the keys win only if they come before its handshake
    /// finished (docs/DNS.md "Keys later than the address").
    #[arg(long)]
    no_key_race: bool,
    #[command(flatten)]
    flags: ClientFlags,
    /// Exit 22 on HTTP status >= 400.
    #[arg(short = 'f', long)]
    fail: bool,
    /// Give up after this long.
    #[arg(short = 'm', long, default_value = "30s", value_parser = util::parse_duration)]
    max_time: Duration,
}

struct Failure(u8, String);

/// The rest of a DNS resolution still under way (the key records).
type PendingResolution =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Resolved, ResolveError>> + Send>>;

/// What the DNS lookup found before the connection starts.
enum Lookup {
    /// Everything: addresses and keys.
    Done(Arc<Resolver>, Resolved),
    /// The addresses; the key records are still coming.
    AddressesFirst(Arc<Resolver>, Vec<IpAddr>, PendingResolution),
}

/// Look `host` up in DNS: addresses and verified keys (unless the addresses
/// come first and `--no-key-race` is not given, see [`Lookup`]). `Err`
/// only for configuration errors (exit code, message); lookup failures are
/// notes.
async fn dns_lookup(
    a: &GetArgs,
    host: &str,
    notes: &mut Vec<String>,
) -> Result<Option<Lookup>, Failure> {
    let cfg = match a.dns_server {
        Some(s) => ResolverConfig::new(s),
        None => match ResolverConfig::system() {
            Ok(c) => c,
            Err(e) => {
                notes.push(format!("no DNS key lookup: {e}"));
                return Ok(None);
            }
        },
    };
    let trust = match &a.cacert {
        Some(p) => match Trust::from_pem_file(p) {
            Ok(t) => t,
            Err(e) => return fail(77, e.to_string()),
        },
        None => Trust::system(),
    };
    let server = cfg
        .servers
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let resolver = Arc::new(Resolver::new(cfg, trust));
    if let Some(p) = &a.cert {
        match util::load_cert(p) {
            Ok(c) => resolver.pin_cert(host, c.to_vec()),
            Err(e) => return fail(77, format!("{e:#}")),
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut full: PendingResolution = {
        let resolver = resolver.clone();
        let host = host.to_owned();
        Box::pin(async move {
            resolver
                .resolve_addresses_first(&host, zrtt_net::client::system_clock(), move |found| {
                    let _ = tx.send(found);
                })
                .await
        })
    };
    let t_dns = Instant::now();
    // Everything cached completes in the first poll, so `full` wins then.
    let outcome = tokio::select! {
        biased;
        r = &mut full => r,
        Ok(found) = rx, if !a.no_key_race => {
            // Keys only a little behind the address still win without a
            // TLS handshake for nothing: the raced ClientHello waits
            // KEY_RACE_GRACE (`establish_when_keys`).
            notes.push(format!(
                "DNS {server}: {} address(es) in {:.1} ms, key records still coming \
                 (TLS starts beside them)",
                found.len(),
                t_dns.elapsed().as_secs_f64() * 1000.0
            ));
            return Ok(Some(Lookup::AddressesFirst(resolver, found, full)));
        }
    };
    Ok(lookup_done(resolver, outcome, &server, notes))
}

/// The notes of a finished DNS lookup, and what it found.
fn lookup_done(
    resolver: Arc<Resolver>,
    outcome: Result<Resolved, ResolveError>,
    server: &str,
    notes: &mut Vec<String>,
) -> Option<Lookup> {
    match outcome {
        Ok(r) => {
            notes.push(format!(
                "DNS {server}: {} quer{} in {:.1} ms, {} address(es), {} verified key(s){}",
                r.lookups,
                if r.lookups == 1 { "y" } else { "ies" },
                r.elapsed.as_secs_f64() * 1000.0,
                r.addrs.len(),
                r.keys.len(),
                r.key_encoding
                    .map(|e| format!(" from {e}"))
                    .unwrap_or_default()
            ));
            for k in &r.keys {
                notes.push(format!(
                    "key {:#010x} valid until {}",
                    k.body().key_id,
                    zrtt_dns::fmt_time(k.body().not_after)
                ));
            }
            for f in &r.refused {
                notes.push(format!("refused {f}"));
            }
            for (t, e) in &r.failed {
                notes.push(format!("DNS {t} lookup failed: {e}"));
            }
            Some(Lookup::Done(resolver, r))
        }
        Err(e) => {
            notes.push(format!("DNS lookup failed: {e}"));
            None
        }
    }
}

fn fail<T>(code: u8, msg: impl Into<String>) -> Result<T, Failure> {
    Err(Failure(code, msg.into()))
}

pub fn run(a: GetArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let max = a.max_time;
    let result = rt.block_on(async {
        match tokio::time::timeout(max, get(&a)).await {
            Ok(r) => r,
            Err(_) => fail(28, format!("timed out after {max:?}")),
        }
    });
    match result {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(Failure(code, msg)) => {
            eprintln!("zrtt get: {msg}");
            Ok(ExitCode::from(code))
        }
    }
}

fn load_roots(a: &GetArgs) -> Result<rustls::RootCertStore, Failure> {
    util::load_roots(a.cacert.as_deref()).map_err(|e| Failure(77, format!("{e:#}")))
}

fn classify(e: &(dyn std::error::Error + 'static)) -> (u8, String) {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut msg = e.to_string();
    while let Some(err) = cur {
        if let Some(z) = err.downcast_ref::<zrtt_net::Error>() {
            let code = match z {
                zrtt_net::Error::Timeout(_) => 28,
                zrtt_net::Error::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    7
                }
                zrtt_net::Error::Io { .. } | zrtt_net::Error::NoAnswer => 7,
                zrtt_net::Error::Config(_) => 7,
                _ => 35,
            };
            return (code, z.to_string());
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            msg = io.to_string();
            if let Some(inner) = io.get_ref() {
                cur = Some(inner);
                continue;
            }
            let code = match io.kind() {
                std::io::ErrorKind::TimedOut => 28,
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotConnected => 7,
                _ => 56,
            };
            return (code, msg);
        }
        cur = err.source();
    }
    (56, msg)
}

async fn get(a: &GetArgs) -> Result<u8, Failure> {
    let t0 = Instant::now();
    let uri: hyper::Uri = match a.url.parse() {
        Ok(u) => u,
        Err(e) => return fail(3, format!("malformed URL {:?}: {e}", a.url)),
    };
    if uri.scheme_str().is_some_and(|s| s != "https") {
        return fail(3, "only https:// URLs (zrtt or TLS 1.3)");
    }
    let Some(host) = uri.host().map(|h| h.trim_matches(['[', ']']).to_owned()) else {
        return fail(3, format!("no host in {:?}", a.url));
    };
    let port = uri.port_u16().unwrap_or(443);
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();

    // Name lookup: --resolve, then DNS (addresses and keys in one batch)
    // unless records come from files, then the system's resolver.
    let mut addr = match resolve_override(&a.resolve, &host, port) {
        Ok(a) => a,
        Err(e) => return fail(3, e),
    };
    let mut dns_notes = Vec::new();
    let use_dns = a.records.is_empty() && !a.no_dns && host.parse::<IpAddr>().is_err();
    let dns = if use_dns {
        dns_lookup(a, &host, &mut dns_notes).await?
    } else {
        None
    };
    if addr.is_none() {
        addr = match &dns {
            Some(Lookup::Done(_, r)) => r.addrs.first(),
            Some(Lookup::AddressesFirst(_, found, _)) => found.first(),
            None => None,
        }
        .map(|ip| SocketAddr::new(*ip, port));
    }
    // --dns-shortcut with --record: the address lookup races the shortcut.
    let shortcut = a.flags.dns_shortcut()
        && !use_dns
        && !a.records.is_empty()
        && addr.is_none()
        && host.parse::<IpAddr>().is_err();
    if a.flags.dns_shortcut() && !shortcut {
        let why = "needs --record and --cert (a key record held) and a name without --resolve";
        dns_notes.push(format!("DNS shortcut not used: it {why}"));
    }
    let addr = match addr {
        Some(a) => a,
        None if shortcut => SocketAddr::from(([0, 0, 0, 0], port)),
        None => match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(mut it) => match it.next() {
                Some(a) => a,
                None => return fail(6, format!("could not resolve {host}")),
            },
            Err(e) => return fail(6, format!("could not resolve {host}: {e}")),
        },
    };
    let t_lookup = t0.elapsed();

    // Keys and TLS trust.
    let mut records = Vec::new();
    for p in &a.records {
        match keys::load_records(p) {
            Ok(r) => records.extend(r),
            Err(e) => return fail(77, format!("{e:#}")),
        }
    }
    let roots = load_roots(a)?;
    let mut pending_keys = None;
    let key_source: Arc<dyn KeySource> = match dns {
        Some(Lookup::Done(resolver, _)) => Arc::new(DnsKeySource::new(resolver)),
        Some(Lookup::AddressesFirst(resolver, _, rest)) => {
            pending_keys = Some(rest);
            Arc::new(DnsKeySource::new(resolver))
        }
        None => {
            let cert_der = match (&a.cert, records.is_empty()) {
                (Some(p), _) => match util::load_cert(p) {
                    Ok(c) => c.to_vec(),
                    Err(e) => return fail(77, format!("{e:#}")),
                },
                (None, false) => {
                    return fail(77, "--record needs --cert (the certificate that signs it)")
                }
                (None, true) => Vec::new(),
            };
            if a.verbose {
                // Why a --record file's key will not be used (the client
                // only logs it at debug level).
                for r in &records {
                    if let Err(e) = r.verify(&cert_der, &host, util::now()) {
                        dns_notes.push(format!("refused key {:#010x}: {e}", r.body.key_id));
                    }
                }
            }
            Arc::new(CertKeySource::new(cert_der, records))
        }
    };
    let mut cfg = match ClientConfig::builder(key_source).with_root_certificates(roots) {
        Ok(c) => c,
        Err(e) => return fail(1, e.to_string()),
    };
    a.flags.apply(&mut cfg);
    let pv_path = match &a.provenance_state {
        Some(p) => Some(p.clone()),
        None => a
            .flags
            .provenance_state()
            .map_err(|e| Failure(23, format!("creating the state directory: {e}")))?,
    };
    let provenance = match &pv_path {
        Some(p) => {
            let store = zrtt_net::verifier::ProvenanceStore::load(p)
                .map_err(|e| Failure(77, format!("{}: {e}", p.display())))?;
            let store = Arc::new(store);
            cfg.provenance = Some(store.clone());
            Some((p.clone(), store))
        }
        None => None,
    };
    let token_state = a
        .flags
        .token_state()
        .map_err(|e| Failure(23, format!("creating the state directory: {e}")))?;
    let tokens = match token_state {
        Some(p) => {
            let store = zrtt_net::client::TokenStore::load(&p).map_err(|e| {
                Failure(
                    77,
                    format!("{}: {e} (--no-state to ignore it)", p.display()),
                )
            })?;
            let store = Arc::new(store);
            cfg.tokens = Some(store.clone());
            Some((p, store))
        }
        None => None,
    };

    // The request.
    let body = match &a.data {
        Some(d) if d.starts_with('@') => match std::fs::read(&d[1..]) {
            Ok(b) => Bytes::from(b),
            Err(e) => return fail(1, format!("reading {}: {e}", &d[1..])),
        },
        Some(d) => Bytes::from(d.clone()),
        None => Bytes::new(),
    };
    let method = a
        .method
        .clone()
        .unwrap_or_else(|| if a.data.is_some() { "POST" } else { "GET" }.to_owned());
    let authority = if port == 443 {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let mut req = hyper::Request::builder()
        .method(method.as_str())
        .uri(path.as_str())
        .header("host", authority)
        .header("user-agent", concat!("zrtt/", env!("CARGO_PKG_VERSION")))
        .header("accept", "*/*");
    for h in &a.headers {
        let Some((n, v)) = h.split_once(':') else {
            return fail(1, format!("-H {h:?}: use 'Name: value'"));
        };
        // A header given on the command line replaces the default one of
        // that name (Host, User-Agent, Accept), as curl's -H does.
        let name = n.trim();
        if let Some(h) = req.headers_mut() {
            if let Ok(name) = hyper::header::HeaderName::from_bytes(name.as_bytes()) {
                h.remove(name);
            }
        }
        req = req.header(name, v.trim());
    }
    if a.data.is_some() {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    let req = match req.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => return fail(1, format!("invalid request: {e}")),
    };
    if a.verbose {
        for n in &dns_notes {
            eprintln!("* {n}");
        }
        let to = match shortcut {
            true => "address lookup raced by the DNS shortcut".to_owned(),
            false => addr.to_string(),
        };
        eprintln!("* connecting to {host} ({to})");
        eprintln!("> {} {} HTTP/1.1", req.method(), req.uri());
        for (n, v) in req.headers() {
            eprintln!("> {n}: {}", v.to_str().unwrap_or("<binary>"));
        }
    }

    // Connect and send.
    let target = Target {
        host: host.clone(),
        addr,
    };
    let cert = a
        .cert
        .as_ref()
        .and_then(|p| util::load_cert(p).ok())
        .map(|c| c.to_vec());
    let lookup = shortcut.then(|| shortcut_lookup(a.dns_server, &host, port, cert));
    let stream = match (pending_keys, lookup) {
        (_, Some(l)) => {
            let l = l.map_err(|e| Failure(6, format!("--dns-shortcut: {e}")))?;
            ZrttStream::with_shortcut(Arc::new(cfg), host.clone(), port, l)
        }
        (Some(rest), None) => ZrttStream::with_pending_keys(
            Arc::new(cfg),
            target,
            Box::pin(async move {
                if let Err(e) = rest.await {
                    tracing::debug!("key lookup: {e}");
                }
            }),
        ),
        (None, None) => ZrttStream::new(Arc::new(cfg), target),
    };
    let info_handle = stream.info();
    let t_start = t0.elapsed();
    let h2 = stream.negotiated_h2();
    let req = if h2 {
        h2_request(req, &host, port)
    } else {
        req
    };
    let (mut sender, conn) = match Sender::handshake(stream, h2).await {
        Ok(v) => v,
        Err(e) => return Err(Failure(classify(&e).0, classify(&e).1)),
    };
    let resp = match sender.send(req).await {
        Ok(r) => r,
        Err(e) => {
            let (code, msg) = classify(&e);
            return fail(code, msg);
        }
    };
    let t_first = t0.elapsed();
    let info: Option<ConnInfo> = info_handle
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let status = resp.status();
    if a.verbose {
        if let Some(i) = &info {
            eprintln!(
                "* mode {} ({:?}, SYN data acked: {}, early data: {}, resumed: {}, rtt {:?}, {} round trips)",
                i.mode.as_str(),
                i.connect_mode,
                i.syn_data_acked,
                i.early_data,
                i.resumed,
                i.rtt,
                i.round_trips
            );
            for n in &i.notes {
                eprintln!("* {n}");
            }
        }
        eprintln!("< {:?} {status}", resp.version());
        for (n, v) in resp.headers() {
            eprintln!("< {n}: {}", v.to_str().unwrap_or("<binary>"));
        }
    }
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Box::new(std::io::BufWriter::new(f)),
            Err(e) => return fail(23, format!("{}: {e}", p.display())),
        },
        None => Box::new(std::io::stdout().lock()),
    };
    let mut size = 0usize;
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                let (_, msg) = classify(&e);
                return fail(56, format!("receiving the body: {msg}"));
            }
        };
        if let Some(chunk) = frame.data_ref() {
            size += chunk.len();
            if let Err(e) = out.write_all(chunk) {
                return fail(23, format!("writing output: {e}"));
            }
        }
    }
    if let Err(e) = out.flush() {
        return fail(23, format!("writing output: {e}"));
    }
    drop(out);
    let t_total = t0.elapsed();
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
    if let Some((p, store)) = &tokens {
        if let Err(e) = store.save(p) {
            tracing::warn!("saving {}: {e}", p.display());
        }
    }
    if let (Some((p, store)), Some(i)) = (&provenance, &info) {
        learn_provenance(a, p, store, i).await;
    }

    if let Some(fmt) = &a.write_out {
        let secs = |d: Duration| format!("{:.6}", d.as_secs_f64());
        let (connect, appconnect, mode, rts, rtt, syn) = match &info {
            Some(i) => (
                secs(t_start + i.time_connect),
                secs(t_start + i.time_appconnect),
                i.mode.as_str(),
                i.round_trips.to_string(),
                secs(i.rtt),
                i.syn_data_acked.to_string(),
            ),
            None => (
                secs(t_start),
                secs(t_start),
                "none",
                "0".into(),
                secs(Duration::ZERO),
                "false".into(),
            ),
        };
        let text = fmt
            .replace("\\n", "\n")
            .replace("%{time_namelookup}", &secs(t_lookup))
            .replace("%{time_connect}", &connect)
            .replace("%{time_appconnect}", &appconnect)
            .replace("%{time_starttransfer}", &secs(t_first))
            .replace("%{time_total}", &secs(t_total))
            .replace("%{http_code}", status.as_str())
            .replace("%{size_download}", &size.to_string())
            .replace("%{zrtt_mode}", mode)
            .replace("%{round_trips}", &rts)
            .replace("%{rtt}", &rtt)
            .replace("%{syn_data}", &syn);
        print!("{text}");
        let _ = std::io::stdout().flush();
    }
    if a.fail && status.as_u16() >= 400 {
        return fail(22, format!("HTTP status {status}"));
    }
    Ok(0)
}

/// After a zrtt contact whose key record names provenance verifiers: if the
/// state holds no valid certificates for this local address, fetch some
/// from those verifiers (at most 3 s; failures are only reported with -v)
/// and save them, so the next first contact with any gateway that trusts
/// them is answered before the TCP handshake completes.
async fn learn_provenance(
    a: &GetArgs,
    path: &std::path::Path,
    store: &zrtt_net::verifier::ProvenanceStore,
    info: &ConnInfo,
) {
    let Some(local) = info.local_addr.map(|l| l.ip()) else {
        return;
    };
    if info.verifiers.is_empty() || !store.needs_refresh(local, util::now()) {
        return;
    }
    let mut addrs = Vec::new();
    for name in &info.verifiers {
        match resolve_verifier(a, name).await {
            Some(addr) => addrs.push(addr),
            None if a.verbose => eprintln!("* verifier {name}: could not resolve it"),
            None => {}
        }
    }
    let rng = ring::rand::SystemRandom::new();
    let fetch = store.refresh(local, &addrs, 86_400, Duration::from_secs(3), &rng);
    match tokio::time::timeout(Duration::from_secs(3), fetch).await {
        Ok(Ok(report)) => {
            if a.verbose {
                for (v, r) in &report {
                    match r {
                        Ok(d) => eprintln!("* verifier {v}: certificate for {local}, valid {d} s"),
                        Err(e) => eprintln!("* verifier {v}: {e}"),
                    }
                }
            }
            if let Err(e) = store.save(path) {
                tracing::warn!("saving {}: {e}", path.display());
            }
        }
        Ok(Err(e)) => tracing::info!("provenance certificates: {e}"),
        Err(_) => tracing::info!("provenance certificates: no answer within 3 s"),
    }
}

/// A verifier's address: `--resolve NAME:4480:ADDR`, else the system's
/// resolver.
async fn resolve_verifier(a: &GetArgs, name: &str) -> Option<SocketAddr> {
    let port = zrtt_net::verifier::VERIFIER_PORT;
    if let Ok(Some(addr)) = resolve_override(&a.resolve, name, port) {
        return Some(addr);
    }
    tokio::net::lookup_host((name, port)).await.ok()?.next()
}

/// The address `--resolve HOST:PORT:ADDR` gives `host`:`port` (the last
/// matching entry), or why an entry is malformed.
fn resolve_override(
    entries: &[String],
    host: &str,
    port: u16,
) -> std::result::Result<Option<SocketAddr>, String> {
    let mut addr = None;
    for r in entries {
        let mut it = r.splitn(3, ':');
        let (Some(h), Some(p), Some(ad)) = (it.next(), it.next(), it.next()) else {
            return Err(format!("--resolve {r:?}: use HOST:PORT:ADDR"));
        };
        if h.eq_ignore_ascii_case(host) && p.parse() == Ok(port) {
            let ip: IpAddr = ad
                .trim_matches(['[', ']'])
                .parse()
                .map_err(|_| format!("--resolve {r:?}: bad address"))?;
            addr = Some(SocketAddr::new(ip, port));
        }
    }
    Ok(addr)
}
