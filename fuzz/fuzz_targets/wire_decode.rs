//! Any bytes: `Packet::decode` never panics, and whatever it accepts re-encodes to the
//! same bytes.
#![no_main]

use distprof::wire::Packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data) {
        assert_eq!(&p.encode()[..], data);
    }
});
