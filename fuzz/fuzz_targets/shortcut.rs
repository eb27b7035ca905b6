#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| zrtt_proto::testing::shortcut(data));
