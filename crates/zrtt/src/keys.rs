//! `zrtt keys`: semi-static keys and signed key records.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use zrtt_dns::{KeyStore, Policy};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::record::encodings::{self, SvcbRdata};
use zrtt_proto::record::{self, hex, Aead, KeyRecord, RecordBody, RecordFlags, RecordSigner};

use crate::util;

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Generate a semi-static X25519 key (file mode 0600) and print its public key and key id.
    Generate {
        /// Where to write the private key (PEM).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Sign a key record for a semi-static key with a certificate's private key.
    Sign(SignArgs),
    /// Print a record in human form.
    Show {
        /// Record file: binary, hex, or TXT text (`v=zrtt1 ...`).
        record: PathBuf,
    },
    /// Verify a record against the certificate that signs it; exit 0 if valid, 2 if refused.
    Verify {
        /// Record file: binary, hex, or TXT text.
        record: PathBuf,
        /// The signing certificate (PEM).
        #[arg(long)]
        cert: PathBuf,
        /// Host name the record must be for.
        #[arg(long)]
        name: String,
        /// Check validity at this time instead of now (unix seconds or RFC 3339).
        #[arg(long, value_parser = util::parse_time)]
        at: Option<u64>,
    },
    /// Print records in DNS encodings: zone-file lines or single encodings.
    Encode(EncodeArgs),
    /// Create a key store (certificate, its key, rotation policy) and its first key.
    Init(InitArgs),
    /// Rotate key stores now: create due keys, delete expired private keys.
    /// Idempotent; run it from a timer when no `zrtt dns` or gateway rotates.
    Rotate {
        /// Key store directory; repeatable.
        #[arg(long = "keystore", value_name = "DIR", required = true)]
        keystores: Vec<PathBuf>,
        /// Rotate as of this time instead of now (unix seconds or RFC 3339).
        #[arg(long, value_parser = util::parse_time)]
        at: Option<u64>,
    },
    /// Show a key store's schedule: keys, states, publication and expiry times.
    Status {
        /// Key store directory.
        #[arg(long, value_name = "DIR")]
        keystore: PathBuf,
        /// As of this time instead of now (unix seconds or RFC 3339).
        #[arg(long, value_parser = util::parse_time)]
        at: Option<u64>,
    },
    /// Publish a key store's current records into an existing authoritative
    /// server by RFC 2136 dynamic update with TSIG, replacing the old key
    /// records in one atomic update (other TXT records stay); or print them
    /// as a zone-file fragment.
    Publish(PublishArgs),
    /// Create a test CA and a certificate for a host name (for labs, demos and tests).
    Cert {
        /// Host name (subjectAltName).
        #[arg(long)]
        name: String,
        /// Key algorithm.
        #[arg(long, value_enum, default_value_t = CertAlg::EcdsaP256)]
        alg: CertAlg,
        /// Directory for ca.pem, cert.pem and cert.key.
        #[arg(long)]
        out_dir: PathBuf,
        /// Validity of the certificate from now, days.
        #[arg(long, default_value_t = 365)]
        days: u64,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CertAlg {
    /// ECDSA P-256 with SHA-256.
    EcdsaP256,
    /// Ed25519.
    Ed25519,
}

#[derive(Args, Debug)]
pub struct SignArgs {
    /// Semi-static key (from `zrtt keys generate`).
    #[arg(long)]
    key: PathBuf,
    /// The domain's certificate (PEM); its SHA-256 goes into the record.
    #[arg(long)]
    cert: PathBuf,
    /// The certificate's private key (PKCS#8 PEM, Ed25519, ECDSA P-256 or P-384, or RSA 2048-4096).
    #[arg(long)]
    cert_key: PathBuf,
    /// Host name the record is for.
    #[arg(long)]
    name: String,
    /// Start of validity (now, unix seconds or RFC 3339).
    #[arg(long, default_value = "now", value_parser = util::parse_time)]
    not_before: u64,
    #[command(flatten)]
    policy: RecordPolicyArgs,
    /// Where to write the binary record; without it, print hex.
    #[arg(long, short)]
    out: Option<PathBuf>,
}

/// What a key record promises, shared by `keys sign` and `keys init`.
#[derive(Args, Debug)]
pub struct RecordPolicyArgs {
    /// Key lifetime (ZTLS advises at most one hour; clients refuse more than 7 days).
    #[arg(long, default_value = "1h", value_parser = util::parse_duration)]
    lifetime: std::time::Duration,
    /// Largest request accepted in a first flight, bytes.
    #[arg(long, default_value_t = 16384)]
    max_early_data: u32,
    /// AEADs offered, in preference order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "chacha20poly1305,aes256gcm"
    )]
    aead: Vec<AeadArg>,
    /// Require a client static key (Noise IK).
    #[arg(long)]
    client_auth: bool,
    /// Advertise that the server issues address tokens.
    #[arg(long)]
    tokens: bool,
    /// Advertise that the gateway serves HTTP/2 inside the zrtt channel
    /// (clients may then offer ALPN h2 in their first flight). An advisory
    /// flag: clients built before advisory flags refuse such records, so
    /// set it once clients are upgraded.
    #[arg(long)]
    h2: bool,
    /// Provenance certificates needed for an answer before the TCP handshake (0 = none accepted).
    #[arg(long, default_value_t = 0)]
    quorum: u8,
    /// A provenance verifier (DNS name, repeatable, at most 4) the records
    /// name, so that clients can fetch certificates from it after a first
    /// contact (needs --quorum 1 or more; the gateway must trust it, e.g.
    /// `zrtt gateway --verifier-name`).
    #[arg(long = "verifier-name", value_name = "NAME")]
    verifier_names: Vec<String>,
}

impl RecordPolicyArgs {
    fn flags(&self) -> RecordFlags {
        let mut bits = 0;
        if self.client_auth {
            bits |= RecordFlags::CLIENT_AUTH_REQUIRED;
        }
        if self.tokens {
            bits |= RecordFlags::ISSUES_TOKENS;
        }
        if self.h2 {
            bits |= RecordFlags::HTTP2;
        }
        RecordFlags::from_bits(bits).unwrap_or_default()
    }
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Key store directory to create (mode 0700).
    #[arg(long, value_name = "DIR")]
    keystore: PathBuf,
    /// Host name the keys are for; the certificate must cover it.
    #[arg(long)]
    name: String,
    /// The domain's certificate (PEM); copied into the store.
    #[arg(long)]
    cert: PathBuf,
    /// Its private key (PKCS#8 PEM, Ed25519, ECDSA P-256 or P-384, or RSA 2048-4096); copied with mode 0600.
    #[arg(long)]
    cert_key: PathBuf,
    #[command(flatten)]
    policy: RecordPolicyArgs,
    /// TTL T of the DNS records carrying keys.
    #[arg(long, default_value = "5m", value_parser = util::parse_duration)]
    ttl: std::time::Duration,
    /// Rotation period R (default L - 4T; must not exceed it).
    #[arg(long, value_parser = util::parse_duration)]
    rotation: Option<std::time::Duration>,
    /// Do not create the first key now.
    #[arg(long)]
    no_key: bool,
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// Key store directory.
    #[arg(long, value_name = "DIR")]
    keystore: PathBuf,
    /// Authoritative server to update (ADDR:PORT). Required unless --zone-fragment.
    #[arg(long)]
    server: Option<std::net::SocketAddr>,
    /// Zone to update (default: the host name minus its first label).
    #[arg(long)]
    zone: Option<String>,
    /// TSIG key file: BIND `key "name" { algorithm ..; secret ".."; };`,
    /// Knot `keymgr -t` output, or one `[hmac-sha256:]name:secret` line.
    #[arg(long, conflicts_with = "tsig")]
    tsig_key: Option<PathBuf>,
    /// TSIG key inline as `[hmac-sha256:]name:base64secret` (visible in `ps`;
    /// prefer --tsig-key).
    #[arg(long, env = "ZRTT_TSIG")]
    tsig: Option<String>,
    /// Print the records as a zone-file fragment instead of updating a server.
    #[arg(long)]
    zone_fragment: bool,
    /// Rotate the store first (as `zrtt keys rotate`).
    #[arg(long)]
    rotate: bool,
    /// ALPN ids for the HTTPS record.
    #[arg(long, value_delimiter = ',', default_value = "http/1.1")]
    alpn: Vec<String>,
    /// `port` parameter for the HTTPS record.
    #[arg(long)]
    https_port: Option<u16>,
    /// IPv4 hints (default: the host's A records on --server).
    #[arg(long, value_delimiter = ',')]
    ipv4hint: Vec<Ipv4Addr>,
    /// IPv6 hints (default: the host's AAAA records on --server).
    #[arg(long, value_delimiter = ',')]
    ipv6hint: Vec<Ipv6Addr>,
    /// As of this time instead of now (unix seconds or RFC 3339).
    #[arg(long, value_parser = util::parse_time)]
    at: Option<u64>,
    /// Timeout for each DNS exchange.
    #[arg(long, default_value = "5s", value_parser = util::parse_duration)]
    timeout: std::time::Duration,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum AeadArg {
    /// ChaCha20-Poly1305.
    Chacha20poly1305,
    /// AES-256-GCM.
    Aes256gcm,
}

#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// Record files (binary, hex or TXT text); several for a rotation overlap.
    #[arg(required = true)]
    records: Vec<PathBuf>,
    /// The signing certificate (PEM), for the TLSA record; needed by `zone` and `tlsa`.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Zone)]
    format: Format,
    /// TTL for zone-file lines, seconds; must be below the records' remaining validity.
    #[arg(long, default_value_t = 300)]
    ttl: u32,
    /// ALPN ids for the HTTPS record.
    #[arg(long, value_delimiter = ',', default_value = "http/1.1")]
    alpn: Vec<String>,
    /// IPv4 address hints for the HTTPS record.
    #[arg(long, value_delimiter = ',')]
    ipv4hint: Vec<Ipv4Addr>,
    /// IPv6 address hints for the HTTPS record.
    #[arg(long, value_delimiter = ',')]
    ipv6hint: Vec<Ipv6Addr>,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Zone-file lines for every encoding (HTTPS, TXT, AAAA tunnel, TLSA).
    Zone,
    /// HTTPS RDATA in RFC 9460 presentation form.
    Svcb,
    /// HTTPS RDATA in RFC 3597 generic form.
    SvcbGeneric,
    /// TXT presentation (quoted strings of at most 255 bytes).
    Txt,
    /// AAAA tunnel addresses, one per line.
    Aaaa,
    /// TLSA 3 0 0 presentation.
    Tlsa,
    /// The binary record list as hex.
    Hex,
}

pub fn run(cmd: KeysCommand) -> Result<ExitCode> {
    match cmd {
        KeysCommand::Generate { out } => generate(&out),
        KeysCommand::Sign(args) => sign(args),
        KeysCommand::Show { record } => {
            for r in load_records(&record)? {
                print!("{}", describe(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::Verify {
            record,
            cert,
            name,
            at,
        } => {
            let cert = util::load_cert(&cert)?;
            let at = at
                .map(zrtt_proto::UnixTime::from_secs)
                .unwrap_or_else(util::now);
            let mut ok = true;
            // Unreadable: an error (exit 1). Malformed: refused (exit 2).
            let data =
                std::fs::read(&record).with_context(|| format!("reading {}", record.display()))?;
            let records = match parse_records(&data) {
                Ok(r) => r,
                Err(e) => {
                    println!("{}: refused: malformed record: {e:#}", record.display());
                    return Ok(ExitCode::from(2));
                }
            };
            for r in records {
                match r.verify(&cert, &name, at) {
                    Ok(_) => println!(
                        "key {:08x}: valid for {name} until {}",
                        r.body.key_id,
                        util::fmt_time(r.body.not_after)
                    ),
                    Err(e) => {
                        ok = false;
                        println!("key {:08x}: refused: {e}", r.body.key_id);
                    }
                }
            }
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        KeysCommand::Encode(args) => encode(args),
        KeysCommand::Cert {
            name,
            alg,
            out_dir,
            days,
        } => crate::keys_cert::make_cert(&name, alg, &out_dir, days),
        KeysCommand::Init(args) => init(args),
        KeysCommand::Rotate { keystores, at } => {
            let now = at_or_now(at);
            let rng = ring::rand::SystemRandom::new();
            for dir in &keystores {
                let mut ks = KeyStore::open(dir)?;
                let r = ks.rotate(now, &rng)?;
                println!("{} ({}): {r}", ks.name(), dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::Status { keystore, at } => {
            let ks = KeyStore::open(&keystore)?;
            print!("{}", ks.status(at_or_now(at)));
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::Publish(args) => publish(args),
    }
}

fn at_or_now(at: Option<u64>) -> zrtt_proto::UnixTime {
    at.map(zrtt_proto::UnixTime::from_secs)
        .unwrap_or_else(util::now)
}

fn aeads_of(args: &[AeadArg]) -> Vec<Aead> {
    let mut aeads: Vec<Aead> = Vec::new();
    for x in args {
        let v = match x {
            AeadArg::Chacha20poly1305 => Aead::ChaChaPoly,
            AeadArg::Aes256gcm => Aead::AesGcm,
        };
        if !aeads.contains(&v) {
            aeads.push(v);
        }
    }
    aeads
}

fn init(a: InitArgs) -> Result<ExitCode> {
    let p = &a.policy;
    let policy = Policy {
        lifetime: p.lifetime,
        record_ttl: a.ttl,
        rotation_period: a.rotation,
        max_early_data_bytes: p.max_early_data,
        aeads: aeads_of(&p.aead),
        flags: p.flags(),
        provenance_quorum: p.quorum,
        verifiers: p
            .verifier_names
            .iter()
            .map(|n| record::normalize_name(n))
            .collect(),
    };
    let mut ks = KeyStore::init(&a.keystore, &a.name, &a.cert, &a.cert_key, policy)?;
    println!(
        "created key store {} for {}",
        a.keystore.display(),
        ks.name()
    );
    let now = util::now();
    if !a.no_key {
        let r = ks.rotate(now, &ring::rand::SystemRandom::new())?;
        println!("{r}");
    }
    print!("{}", ks.status(now));
    Ok(ExitCode::SUCCESS)
}

fn publish(a: PublishArgs) -> Result<ExitCode> {
    let now = at_or_now(a.at);
    let mut ks = KeyStore::open(&a.keystore)?;
    if a.rotate {
        let r = ks.rotate(now, &ring::rand::SystemRandom::new())?;
        tracing::info!("{}: {r}", ks.name());
    }
    let published = ks.published_records(now);
    if published.is_empty() {
        bail!(
            "{}: no record to publish at this time; run `zrtt keys rotate` (or pass --rotate)",
            a.keystore.display()
        );
    }
    let ttl = ks.record_ttl(now);
    let mut opts = zrtt_dns::records::HttpsOptions {
        alpn: a.alpn.clone(),
        port: a.https_port,
        ipv4_hints: a.ipv4hint.clone(),
        ipv6_hints: a.ipv6hint.clone(),
    };
    if a.zone_fragment {
        print!(
            "{}",
            zrtt_dns::records::zone_fragment(ks.name(), &published, ks.cert_der(), ttl, &opts)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(server) = a.server else {
        bail!("--server ADDR:PORT is needed (or --zone-fragment)");
    };
    let key = match (&a.tsig_key, &a.tsig) {
        (Some(p), _) => Some(zrtt_dns::publish::TsigKey::from_file(p)?),
        (None, Some(spec)) => Some(zrtt_dns::publish::TsigKey::parse(spec)?),
        (None, None) => {
            tracing::warn!("no TSIG key; the update is unsigned");
            None
        }
    };
    let zone = match &a.zone {
        Some(z) => z.clone(),
        None => ks
            .name()
            .split_once('.')
            .map(|(_, z)| z.to_owned())
            .context("cannot guess the zone of a one-label name; pass --zone")?,
    };
    if opts.ipv4_hints.is_empty() && opts.ipv6_hints.is_empty() {
        let (v4, v6) = zrtt_dns::publish::lookup_hints(server, ks.name(), a.timeout)
            .context("looking up address hints (pass --ipv4hint/--ipv6hint to skip)")?;
        opts.ipv4_hints = v4;
        opts.ipv6_hints = v6;
    }
    let hr = zrtt_dns::records::host_records(ks.name(), &published, ks.cert_der(), ttl, &opts)?;
    let r = zrtt_dns::publish::publish(server, &zone, &hr, key.as_ref(), util::now(), a.timeout)?;
    let ids: Vec<String> = published
        .iter()
        .map(|r| format!("{:08x}", r.body.key_id))
        .collect();
    println!(
        "published {} key(s) [{}] for {} to {server} (zone {zone}): {} records added, {} old zrtt TXT removed, ttl {ttl} s, {} bytes, {} attempt(s)",
        published.len(),
        ids.join(", "),
        ks.name(),
        r.added,
        r.removed_txt,
        r.message_bytes,
        r.attempts
    );
    Ok(ExitCode::SUCCESS)
}

/// Write a semi-static key (PEM, atomically, mode 0600); one implementation
/// with the key store (`zrtt_dns::keyfile`).
pub fn write_key(path: &Path, key: &X25519KeyPair) -> Result<()> {
    Ok(zrtt_dns::keyfile::write_key(path, key)?)
}

/// Read a semi-static key.
pub fn read_key(path: &Path) -> Result<X25519KeyPair> {
    Ok(zrtt_dns::keyfile::read_key(path)?)
}

fn generate(out: &Path) -> Result<ExitCode> {
    let rng = ring::rand::SystemRandom::new();
    let key = X25519KeyPair::generate(&rng)?;
    write_key(out, &key)?;
    println!("wrote {} (mode 0600)", out.display());
    println!("public key: {}", hex(key.public()));
    println!("key id:     {:08x}", record::key_id_for(key.public()));
    Ok(ExitCode::SUCCESS)
}

fn sign(a: SignArgs) -> Result<ExitCode> {
    let rng = ring::rand::SystemRandom::new();
    let key = read_key(&a.key)?;
    let cert = util::load_cert(&a.cert)?;
    let signer = RecordSigner::from_pkcs8(&util::load_pkcs8(&a.cert_key)?, &rng)
        .with_context(|| format!("loading {}", a.cert_key.display()))?;
    let p = &a.policy;
    let name = record::normalize_name(&a.name);
    let body = RecordBody {
        key_id: record::key_id_for(key.public()),
        public_key: *key.public(),
        not_before: a.not_before,
        not_after: a.not_before.saturating_add(p.lifetime.as_secs()),
        max_early_data_bytes: p.max_early_data,
        aeads: aeads_of(&p.aead),
        flags: p.flags(),
        provenance_quorum: p.quorum,
        verifiers: p
            .verifier_names
            .iter()
            .map(|n| record::normalize_name(n))
            .collect(),
        name: name.clone(),
        cert_sha256: record::sha256(&cert),
    };
    let rec = body.sign(&signer, &rng)?;
    // Sign-then-verify: catches a certificate key that does not match the
    // certificate, or a certificate that does not cover the name.
    rec.verify(
        &cert,
        &name,
        zrtt_proto::UnixTime::from_secs(rec.body.not_before),
    )
    .context("the signed record does not verify against the certificate")?;
    let bytes = rec.encode();
    match a.out {
        Some(p) => {
            util::write_atomic(&p, &bytes, false)?;
            tracing::info!("wrote {} ({} bytes)", p.display(), bytes.len());
        }
        None => println!("{}", hex(&bytes)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Load records from a file holding binary, hex, a record list, or TXT text.
pub fn load_records(path: &Path) -> Result<Vec<KeyRecord>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse_records(&data).with_context(|| format!("{}: not a zrtt record", path.display()))
}

fn parse_records(data: &[u8]) -> Result<Vec<KeyRecord>> {
    let trimmed = data.trim_ascii();
    if trimmed.starts_with(b"v=zrtt") {
        return Ok(vec![encodings::decode_txt_text(trimmed)?]);
    }
    let bytes = std::str::from_utf8(trimmed)
        .ok()
        .and_then(record::unhex)
        .unwrap_or_else(|| data.to_vec());
    match KeyRecord::decode(&bytes) {
        Ok(r) => Ok(vec![r]),
        Err(single) => match record::decode_record_list(&bytes) {
            Ok(list) => Ok(list),
            Err(_) => bail!(single),
        },
    }
}

/// Human form of a record.
pub fn describe(r: &KeyRecord) -> String {
    let b = &r.body;
    let aeads: Vec<&str> = b.aeads.iter().map(|a| a.name()).collect();
    format!(
        "zrtt key record v{}\n  name:             {}\n  key id:           {:08x}\n  public key:       {}\n  not before:       {} ({})\n  not after:        {} ({})\n  lifetime:         {} s\n  max early data:   {} bytes\n  aeads:            {}\n  client auth:      {}\n  issues tokens:    {}\n  http/2 in zrtt:   {}\n  provenance:       {}\n  certificate:      sha256 {}\n  signature:        {} ({} bytes)\n  encoded size:     {} bytes\n",
        record::RECORD_VERSION,
        b.name,
        b.key_id,
        hex(&b.public_key),
        util::fmt_time(b.not_before),
        b.not_before,
        util::fmt_time(b.not_after),
        b.not_after,
        b.not_after.saturating_sub(b.not_before),
        b.max_early_data_bytes,
        aeads.join(", "),
        if b.flags.client_auth_required() { "required" } else { "not required" },
        if b.flags.issues_tokens() { "yes" } else { "no" },
        if b.flags.http2() { "yes" } else { "no" },
        match (b.provenance_quorum, b.verifiers.is_empty()) {
            (0, _) => "not accepted".to_owned(),
            (q, true) => format!("{q} certificate(s) needed"),
            (q, false) => format!("{q} certificate(s) needed; verifiers: {}", b.verifiers.join(", ")),
        },
        hex(&b.cert_sha256),
        r.sig_alg.name(),
        r.signature.len(),
        r.encode().len(),
    )
}

fn encode(a: EncodeArgs) -> Result<ExitCode> {
    let mut records = Vec::new();
    for p in &a.records {
        records.extend(load_records(p)?);
    }
    let list = record::encode_record_list(&records);
    record::decode_record_list(&list).context("record set")?;
    let name = records[0].body.name.clone();
    if records.iter().any(|r| r.body.name != name) {
        bail!("all records must be for the same name");
    }
    let cert = a.cert.as_deref().map(util::load_cert).transpose()?;
    if let Some(c) = &cert {
        if records
            .iter()
            .any(|r| r.body.cert_sha256 != record::sha256(c))
        {
            bail!("the certificate is not the one the records name");
        }
    }
    let now = util::now().as_secs();
    let min_left = records
        .iter()
        .map(|r| r.body.not_after.saturating_sub(now))
        .min()
        .unwrap_or(0);
    if a.format == Format::Zone && u64::from(a.ttl) >= min_left {
        tracing::warn!(
            "TTL {} s is not below the shortest remaining validity ({} s)",
            a.ttl,
            min_left
        );
    }
    let alpn: Vec<&str> = a.alpn.iter().map(String::as_str).collect();
    let svcb = SvcbRdata::service(&alpn, &a.ipv4hint, &a.ipv6hint, &records);
    let tlsa = || {
        cert.as_ref()
            .map(|c| encodings::tlsa_presentation(c))
            .context("--cert is needed for TLSA")
    };
    match a.format {
        Format::Zone => {
            let ttl = a.ttl;
            println!("; zrtt key records for {name}: {} key(s)", records.len());
            println!("{name}. {ttl} IN HTTPS {}", svcb.to_presentation());
            for r in &records {
                println!("{name}. {ttl} IN TXT {}", encodings::txt_presentation(r));
            }
            for addr in encodings::aaaa_tunnel(&records) {
                println!(
                    "{}. {ttl} IN AAAA {addr}",
                    encodings::aaaa_tunnel_owner(&name)
                );
            }
            if cert.is_some() {
                println!("{name}. {ttl} IN TLSA {}", tlsa()?);
            }
        }
        Format::Svcb => println!("{}", svcb.to_presentation()),
        Format::SvcbGeneric => println!("{}", svcb.to_generic()),
        Format::Txt => {
            for r in &records {
                println!("{}", encodings::txt_presentation(r));
            }
        }
        Format::Aaaa => {
            for addr in encodings::aaaa_tunnel(&records) {
                println!("{addr}");
            }
        }
        Format::Tlsa => println!("{}", tlsa()?),
        Format::Hex => println!("{}", hex(&list)),
    }
    Ok(ExitCode::SUCCESS)
}
