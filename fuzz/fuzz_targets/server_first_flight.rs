#![no_main]
use std::sync::OnceLock;

use zrtt_proto::handshake::ServerConfig;
use zrtt_proto::testing;

static SERVER: OnceLock<ServerConfig> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let server = SERVER.get_or_init(testing::vector_server);
    let now = zrtt_proto::UnixTime::from_secs(testing::T0 + 100);
    testing::server_first_flight(server, now, data);
});
