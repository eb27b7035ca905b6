//! A provenance verifier's published keys: TXT and TLSA at
//! `_zrttpv.<name>`, each `v=zrttpv1` record verified against the pinned
//! certificate or a TLSA certificate that chains to the roots and covers
//! the name.

use std::time::Instant;

use hickory_proto::rr::{RData, RecordType};
use zrtt_proto::record::encodings;
use zrtt_proto::record::{VerifiedVerifierKeyRecord, VerifierKeyRecord};
use zrtt_proto::UnixTime;

use super::assemble::{decode_txt, records, refuse_duplicate_ids, Certs};
use super::cache::Answer;
use super::{
    checked_name, owner_fqdn, Encoding, RecordRefusal, Refused, ResolveError, ResolvedVerifier,
    Resolver,
};

impl Resolver {
    /// The published keys of the provenance verifier `name` at `now`: TXT
    /// and (unless a certificate is pinned for `name`) TLSA at
    /// `_zrttpv.<name>`, in parallel, from the cache where possible. Each
    /// verifier key record is verified against the pinned certificate or a
    /// TLSA certificate that chains to the roots and covers `name`; nothing
    /// unverifiable, expired or not yet valid is returned. Fails only when
    /// the TXT lookup itself fails.
    pub async fn resolve_verifier(
        &self,
        name: &str,
        now: UnixTime,
    ) -> Result<ResolvedVerifier, ResolveError> {
        let t0 = Instant::now();
        let name_n = checked_name(name)?;
        let owner = owner_fqdn(name, &encodings::verifier_owner(&name_n))?;
        let pinned = self.pinned(&name_n);
        let now_s = now.as_secs();
        let cached = |t| self.cache.get(&owner, t, now_s, 0);
        let (txt, tlsa) = tokio::join!(
            self.fetch(&owner, RecordType::TXT, cached(RecordType::TXT), now_s),
            async {
                if pinned.is_none() {
                    Some(
                        self.fetch(&owner, RecordType::TLSA, cached(RecordType::TLSA), now_s)
                            .await,
                    )
                } else {
                    None
                }
            }
        );
        let mut lookups = txt.1;
        let txt = match txt.0 {
            Ok(Answer::Records(v)) => v,
            Ok(Answer::Negative) => Vec::new(),
            Err(error) => {
                return Err(ResolveError::Lookup {
                    host: name_n,
                    error,
                })
            }
        };
        let tlsa = tlsa.map(|(r, n)| {
            lookups += n;
            r
        });
        let mut failed = Vec::new();
        let tlsa = records(RecordType::TLSA, &tlsa, &mut failed);
        let mut refused = Vec::new();
        let cands = candidates(&txt, &mut refused);
        let certs = Certs::gather(&self.trust, &name_n, &tlsa, pinned, now, &mut refused);
        let mut keys: Vec<VerifiedVerifierKeyRecord> = Vec::new();
        for rec in &cands {
            match certs.verify(&rec.body.cert_sha256, |der| rec.verify(der, &name_n, now)) {
                Ok(v) => keys.push(v),
                Err(reason) => refused.push(RecordRefusal {
                    what: Refused::VerifierKey {
                        verifier_id: rec.body.verifier_id,
                    },
                    reason,
                }),
            }
        }
        refuse_duplicate_ids(
            &mut keys,
            |k| k.body().verifier_id,
            |k| Refused::VerifierKey {
                verifier_id: k.body().verifier_id,
            },
            &mut refused,
        );
        keys.sort_by_key(|k| std::cmp::Reverse(k.body().not_after));
        let cert_der = certs.signing(keys.first().map(|k| &k.body().cert_sha256));
        Ok(ResolvedVerifier {
            name: name_n,
            keys,
            refused,
            cert_der,
            lookups,
            failed,
            elapsed: t0.elapsed(),
        })
    }
}

/// The distinct `v=zrttpv1` records among TXT answers; those that do not
/// decode are refused.
fn candidates(txt: &[RData], refused: &mut Vec<RecordRefusal>) -> Vec<VerifierKeyRecord> {
    let mut cands: Vec<VerifierKeyRecord> = Vec::new();
    for r in decode_txt(
        txt,
        encodings::txt_is_zrtt_verifier,
        encodings::decode_verifier_txt_rdata,
        Encoding::VerifierTxt,
        refused,
    ) {
        if !cands.contains(&r) {
            cands.push(r);
        }
    }
    cands
}
