#![no_main]
//! See `distprof_testkit::fuzz::wire_decode` for what the target feeds and checks (any bytes:
//! `Packet::decode` never panics, and whatever it accepts re-encodes to the same bytes).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    distprof_testkit::fuzz::wire_decode(data);
});
