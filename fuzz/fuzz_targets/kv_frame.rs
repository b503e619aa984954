#![no_main]
//! See `distprof_testkit::fuzz::kv_frame` for what the target feeds and checks.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    distprof_testkit::fuzz::kv_frame(data);
});
