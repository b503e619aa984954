#![no_main]
//! See `distprof_testkit::fuzz::report_input` for what the target feeds and checks.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    distprof_testkit::fuzz::report_input(data);
});
