#![no_main]
use std::sync::OnceLock;

static CERT: OnceLock<Vec<u8>> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let cert = CERT.get_or_init(zrtt_proto::testing::ed25519_cert);
    zrtt_dns::resolver::fuzz_dns_answer(data, Some(cert.clone()), zrtt_proto::testing::fuzz_now());
});
