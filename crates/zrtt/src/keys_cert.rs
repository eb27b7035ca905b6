//! `zrtt keys cert`: a test CA and a leaf certificate for labs, demos and
//! tests (rcgen).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::keys::CertAlg;
use crate::util;

pub fn make_cert(name: &str, alg: CertAlg, out_dir: &Path, days: u64) -> Result<ExitCode> {
    let (ca_pem, cert_pem, key_pem) = test_certificate(name, alg, days)?;
    util::write_atomic(&out_dir.join("ca.pem"), ca_pem.as_bytes(), false)?;
    util::write_atomic(&out_dir.join("cert.pem"), cert_pem.as_bytes(), false)?;
    util::write_atomic(&out_dir.join("cert.key"), key_pem.as_bytes(), true)?;
    println!(
        "wrote {0}/ca.pem, {0}/cert.pem, {0}/cert.key (for {name})",
        out_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn ymd(secs: u64) -> Result<(i32, u8, u8)> {
    let (y, mo, d, ..) = zrtt_proto::time::civil_from_unix(secs);
    Ok((i32::try_from(y)?, u8::try_from(mo)?, u8::try_from(d)?))
}

/// A fresh test CA and a leaf certificate for `name`, valid from yesterday's
/// midnight (UTC) to the midnight that follows `days` days from now, so at
/// least `days` whole days whatever the time of day: (CA PEM, leaf PEM,
/// leaf PKCS#8 PEM).
pub fn test_certificate(name: &str, alg: CertAlg, days: u64) -> Result<(String, String, String)> {
    let now = util::now().as_secs();
    let (y, m, d) = ymd(now.saturating_sub(86400))?;
    let not_before = rcgen::date_time_ymd(y, m, d);
    // Dates are whole days: round the end up to the next midnight (at 23:30
    // "one day" must not end 30 minutes later).
    let (y, m, d) = ymd(now.saturating_add(days.saturating_add(1).saturating_mul(86400)))?;
    let not_after = rcgen::date_time_ymd(y, m, d);
    let sig_alg = match alg {
        CertAlg::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        CertAlg::Ed25519 => &rcgen::PKCS_ED25519,
    };
    let ca_key = rcgen::KeyPair::generate_for(sig_alg)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
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
    params.not_before = not_before;
    params.not_after = not_after;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}
