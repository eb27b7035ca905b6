//! `zrtt keys`: semi-static keys and signed key records.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};
use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::record::encodings::{self, SvcbRdata};
use zrtt_proto::record::{self, hex, Aead, KeyRecord, RecordBody, RecordFlags, RecordSigner};

use crate::util;

/// PEM label of a semi-static key file.
pub const KEY_PEM_LABEL: &str = "ZRTT X25519 PRIVATE KEY";

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
    /// The certificate's private key (PKCS#8 PEM, ECDSA P-256 or Ed25519).
    #[arg(long)]
    cert_key: PathBuf,
    /// Host name the record is for.
    #[arg(long)]
    name: String,
    /// Start of validity (now, unix seconds or RFC 3339).
    #[arg(long, default_value = "now", value_parser = util::parse_time)]
    not_before: u64,
    /// Length of validity (ZTLS advises at most one hour).
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
    /// Provenance certificates needed for an answer before the TCP handshake (0 = none accepted).
    #[arg(long, default_value_t = 0)]
    quorum: u8,
    /// Where to write the binary record; without it, print hex.
    #[arg(long, short)]
    out: Option<PathBuf>,
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
            for r in load_records(&record)? {
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
        KeysCommand::Cert { name, alg, out_dir } => make_cert(&name, alg, &out_dir),
    }
}

/// Write a semi-static key.
pub fn write_key(path: &Path, key: &X25519KeyPair) -> Result<()> {
    let pem = pem_encode(KEY_PEM_LABEL, key.private());
    util::write_atomic(path, pem.as_bytes(), true)
}

/// Read a semi-static key.
pub fn read_key(path: &Path) -> Result<X25519KeyPair> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("-----BEGIN {KEY_PEM_LABEL}-----")))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .with_context(|| format!("{}: not a zrtt key file", path.display()))?;
    let private: [u8; 32] = bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("{}: key must be 32 bytes", path.display()))?;
    Ok(X25519KeyPair::from_private(private))
}

fn pem_encode(label: &str, data: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
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
    let mut flags = 0;
    if a.client_auth {
        flags |= RecordFlags::CLIENT_AUTH_REQUIRED;
    }
    if a.tokens {
        flags |= RecordFlags::ISSUES_TOKENS;
    }
    let mut aeads: Vec<Aead> = Vec::new();
    for x in &a.aead {
        let v = match x {
            AeadArg::Chacha20poly1305 => Aead::ChaChaPoly,
            AeadArg::Aes256gcm => Aead::AesGcm,
        };
        if !aeads.contains(&v) {
            aeads.push(v);
        }
    }
    let name = record::normalize_name(&a.name);
    let body = RecordBody {
        key_id: record::key_id_for(key.public()),
        public_key: *key.public(),
        not_before: a.not_before,
        not_after: a.not_before.saturating_add(a.lifetime.as_secs()),
        max_early_data_bytes: a.max_early_data,
        aeads,
        flags: RecordFlags::from_bits(flags).unwrap_or_default(),
        provenance_quorum: a.quorum,
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
            eprintln!("wrote {} ({} bytes)", p.display(), bytes.len());
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
        "zrtt key record v{}\n  name:             {}\n  key id:           {:08x}\n  public key:       {}\n  not before:       {} ({})\n  not after:        {} ({})\n  lifetime:         {} s\n  max early data:   {} bytes\n  aeads:            {}\n  client auth:      {}\n  issues tokens:    {}\n  provenance:       {}\n  certificate:      sha256 {}\n  signature:        {} ({} bytes)\n  encoded size:     {} bytes\n",
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
        if b.provenance_quorum == 0 { "not accepted".to_owned() } else { format!("{} certificate(s) needed", b.provenance_quorum) },
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
        eprintln!(
            "zrtt: warning: TTL {} s is not below the shortest remaining validity ({} s)",
            a.ttl, min_left
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

fn make_cert(name: &str, alg: CertAlg, out_dir: &Path) -> Result<ExitCode> {
    let (ca_pem, cert_pem, key_pem) = test_certificate(name, alg)?;
    util::write_atomic(&out_dir.join("ca.pem"), ca_pem.as_bytes(), false)?;
    util::write_atomic(&out_dir.join("cert.pem"), cert_pem.as_bytes(), false)?;
    util::write_atomic(&out_dir.join("cert.key"), key_pem.as_bytes(), true)?;
    println!(
        "wrote {0}/ca.pem, {0}/cert.pem, {0}/cert.key (for {name})",
        out_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A fresh test CA and a leaf certificate for `name`: (CA PEM, leaf PEM, leaf PKCS#8 PEM).
pub fn test_certificate(name: &str, alg: CertAlg) -> Result<(String, String, String)> {
    let sig_alg = match alg {
        CertAlg::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        CertAlg::Ed25519 => &rcgen::PKCS_ED25519,
    };
    let ca_key = rcgen::KeyPair::generate_for(sig_alg)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("zrtt test CA for {name}"),
    );
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let key = rcgen::KeyPair::generate_for(sig_alg)?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}
