//! The hook benchmark's C++ timing loops (feature `cc-hooks`), used by `distprof bench hooks`.

#[cxx::bridge(namespace = "distprof::bench")]
mod ffi {
    unsafe extern "C++" {
        include!("cpp/bench_hooks.h");

        /// Nanoseconds for `iterations` calls of `distprof::OnTraceStop()`.
        fn time_disabled_hook_ns(iterations: u64) -> u64;
        /// Nanoseconds for `iterations` calls of an empty, non-inlined C++ function.
        fn time_empty_call_ns(iterations: u64) -> u64;
        /// `distprof::IsEnabled()` through the real hook.
        fn hook_is_enabled() -> bool;
    }
}

pub use ffi::{hook_is_enabled, time_disabled_hook_ns, time_empty_call_ns};
