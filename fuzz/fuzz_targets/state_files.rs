#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| zrtt_net::client::fuzz_state_files(data));
