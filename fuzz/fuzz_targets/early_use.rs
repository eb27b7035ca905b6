#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zrtt_net::gateway::fuzz_early_use(data);
});
