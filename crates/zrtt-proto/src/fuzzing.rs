//! Entry points for fuzz targets (fuzz/) and the tests that run them on
//! random input. Each must never panic, whatever the input.

use crate::handshake::{read_frame, Expect, Frame, ServerConfig, Transport};
use crate::record::{encodings, KeyRecord};
use crate::replay::ReplayFilter;
use crate::time::UnixTime;

/// Binary record decoder; round-trips what it accepts.
pub fn record(data: &[u8]) {
    if let Ok(r) = KeyRecord::decode(data) {
        let again = r.encode();
        assert_eq!(again, data, "accepted record must re-encode identically");
    }
    let _ = crate::record::decode_record_list(data);
}

/// TXT, SVCB, AAAA-tunnel and TLSA decoders.
pub fn encodings(data: &[u8]) {
    if let Ok(r) = encodings::decode_txt_rdata(data) {
        let again = encodings::decode_txt_rdata(&encodings::txt_rdata(&r)).ok();
        assert_eq!(again.as_ref(), Some(&r));
    }
    if let Ok(s) = encodings::SvcbRdata::decode(data) {
        let _ = s.zrtt_records();
        let _ = s.to_presentation();
        assert_eq!(encodings::SvcbRdata::decode(&s.encode()).ok(), Some(s));
    }
    let addrs: Vec<std::net::Ipv6Addr> = data
        .chunks_exact(16)
        .map(|c| {
            let mut o = [0u8; 16];
            o.copy_from_slice(c);
            o.into()
        })
        .collect();
    let _ = encodings::decode_aaaa_tunnel(&addrs);
    let _ = encodings::decode_tlsa_rdata(data);
}

/// Frame reader in every mode.
pub fn frames(data: &[u8]) {
    for expect in [
        Expect::FirstFlight,
        Expect::ReplyOrReject,
        Expect::Transport,
    ] {
        if let Ok(Some((_, used))) = read_frame(data, expect) {
            assert!(used <= data.len());
        }
    }
}

/// A replay filter that accepts everything, so fuzzing reaches decryption.
pub struct NoReplayFilter;

impl ReplayFilter for NoReplayFilter {
    fn seen(&self, _: u32, _: &[u8; 32]) -> bool {
        false
    }
    fn check_and_insert(
        &mut self,
        _: u32,
        _: &[u8; 32],
        _: UnixTime,
        _: UnixTime,
    ) -> Result<(), crate::ReplayError> {
        Ok(())
    }
}

/// The server side of the handshake against arbitrary bytes, with the
/// test-vector key set.
pub fn server_first_flight(config: &ServerConfig, now: UnixTime, data: &[u8]) {
    let rng = crate::crypto::SeededRandomForTestingOnly::new([0; 32]);
    if let Ok(Some((frame @ Frame::FirstFlight { .. }, _))) = read_frame(data, Expect::FirstFlight)
    {
        let _ = config.accept(&frame, Transport::Tcp, now, &mut NoReplayFilter, &rng);
    }
}
