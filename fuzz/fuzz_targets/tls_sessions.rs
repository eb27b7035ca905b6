#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zrtt_net::gateway::fuzz_tls_sessions(data);
});
