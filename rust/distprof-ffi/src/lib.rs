//! The cxx bridge between XLA's hooks and the distprof core, and the only place where
//! panics are caught.
//!
//! Rules of this boundary (XLA compiles with `-fno-exceptions`, where cxx turns an
//! exception into `abort()` and a panic unwinding into C++ aborts too):
//! - no `Result` crosses it: integers, bools and out-parameters only;
//! - every function C++ calls runs its body inside `catch_unwind`; a panic disables the
//!   plugin with one log line and the hook returns normally;
//! - a disabled plugin costs one relaxed atomic load per hook, before anything else.
//!
//! The crate is built twice: as the staticlib that Bazel links into XLA (the hooks in
//! `cc_hooks/` are compiled by Bazel then), and as an rlib for the `distprof` CLI, where the
//! `cc-hooks` feature compiles the XLA-independent hooks and the hook benchmark into it.

mod plugin_config;
mod kv;
mod panic_report;
mod test_switch;

#[cfg(feature = "cc-hooks")]
pub mod bench;

use distprof::plugin::{NodeState, Plugin, TracerClock, STATE_UNINIT};
use std::sync::atomic::AtomicU8;
use std::panic::{catch_unwind, AssertUnwindSafe};
use test_switch::Hook;

#[cxx::bridge(namespace = "distprof::bridge")]
mod ffi {
    unsafe extern "C++" {
        include!("cc_hooks/bridge_types.h");

        /// A key-value store owned by C++ (XLA's `KeyValueStoreInterface` behind it).
        type KvHandle;
        /// The GPU tracer's clock reader.
        type TracerClock;

        fn get(
            self: &KvHandle,
            key: &str,
            timeout_ms: u64,
            value: &mut Vec<u8>,
            error: &mut Vec<u8>,
        ) -> i32;
        fn try_get(self: &KvHandle, key: &str, value: &mut Vec<u8>, error: &mut Vec<u8>) -> i32;
        fn set(self: &KvHandle, key: &str, value: &str, error: &mut Vec<u8>) -> i32;

        fn now_ns(self: &TracerClock) -> u64;
    }

    extern "Rust" {
        /// Hook 1. `kv` may be null when `num_nodes == 1`.
        fn on_client_created(node_id: i32, num_nodes: i32, kv: UniquePtr<KvHandle>);
        /// Hook 1 on a client distprof leaves alone (cc_hooks/client_guard.h): an enabled
        /// plugin turns off with one log line naming `reason`.
        fn on_client_refused(reason: &str);
        /// Hook 2. `tracer_clock` may be null: snapshot pairs then use the host clock.
        fn on_trace_start(tracer_clock: UniquePtr<TracerClock>);
        fn on_trace_stop();
        /// Fills `planes` with a serialized XSpace holding only distprof's planes, for the
        /// caller to merge into XLA's; returns false when there is nothing to add.
        fn on_trace_export(planes: &mut Vec<u8>) -> bool;
        /// Hook 3: the GPU/host clock pair XLA's ROCm collector was created with (host
        /// CLOCK_REALTIME ns, tracer clock ns); taken up by the next `on_trace_start`.
        fn on_trace_clock_pair(host_ns: u64, tracer_ns: u64);
        fn is_enabled() -> bool;
        /// Diagnostics for tests (cc_hooks/distprof_test_hooks.h): where node `node_id`'s
        /// rendezvous stands, as `RENDEZVOUS_*`; when agreed, `context_digest` receives the
        /// digest of the agreed run context. Never waits for the rendezvous.
        fn rendezvous_state(node_id: i32, context_digest: &mut Vec<u8>) -> i32;
    }
}

// SAFETY: XLA's KeyValueStoreInterface requires thread-safe Get/Set, and the adapter adds
// no state of its own; the tracer clock reader is a plain function pointer.
unsafe impl Send for ffi::KvHandle {}
unsafe impl Sync for ffi::KvHandle {}
unsafe impl Send for ffi::TracerClock {}

/// The plugin's state byte (`distprof::plugin::STATE_*`), read by the C++ hooks so that a
/// disabled hook returns after one relaxed load without crossing the bridge.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static distprof_plugin_state: AtomicU8 = AtomicU8::new(STATE_UNINIT);

/// The plugin of this copy of the Rust runtime (one per DSO that links the staticlib).
static PLUGIN: Plugin = Plugin::new(&distprof_plugin_state, plugin_config::load_config);

/// Runs one hook: the disabled check first, then the body inside `catch_unwind`.
#[inline(always)]
fn entry<R>(hook: Hook, fallback: R, body: impl FnOnce() -> R) -> R {
    if PLUGIN.is_off() {
        return fallback;
    }
    entry_slow(hook, fallback, body)
}

#[inline(never)]
fn entry_slow<R>(hook: Hook, fallback: R, body: impl FnOnce() -> R) -> R {
    panic_report::install();
    let result = panic_report::inside_entry(|| {
        catch_unwind(AssertUnwindSafe(|| {
            test_switch::maybe_panic(hook);
            body()
        }))
    });
    match result {
        Ok(r) => r,
        Err(_) => {
            // A panic in the very first hook comes before the configuration (which starts
            // logging) was read; the one line must be printed all the same.
            plugin_config::start_logging_with_defaults();
            PLUGIN.disable(
                hook.name(),
                &format!(
                    "internal error (panic: {}); XLA continues without distributed profiling",
                    panic_report::take_last()
                ),
            );
            fallback
        }
    }
}

fn on_client_created(node_id: i32, num_nodes: i32, kv: cxx::UniquePtr<ffi::KvHandle>) {
    entry(Hook::ClientCreated, (), || {
        let (Ok(node), Ok(nodes)) = (u32::try_from(node_id), u32::try_from(num_nodes)) else {
            PLUGIN.disable(
                Hook::ClientCreated.name(),
                &format!("XLA reported node id {node_id} of {num_nodes} nodes; both must be >= 0"),
            );
            return;
        };
        let kv: Option<Box<dyn distprof::kv::KvStore>> =
            if kv.is_null() { None } else { Some(Box::new(kv::CxxKv::new(kv))) };
        PLUGIN.on_client_created(node, nodes, kv);
    })
}

fn on_client_refused(reason: &str) {
    entry(Hook::ClientCreated, (), || PLUGIN.on_client_refused(reason))
}

struct CxxTracerClock(cxx::UniquePtr<ffi::TracerClock>);

impl TracerClock for CxxTracerClock {
    fn now_ns(&self) -> u64 {
        self.0.as_ref().map_or(0, |c| c.now_ns())
    }
}

fn on_trace_start(tracer_clock: cxx::UniquePtr<ffi::TracerClock>) {
    entry(Hook::TraceStart, (), || {
        let clock: Option<Box<dyn TracerClock>> = if tracer_clock.is_null() {
            None
        } else {
            Some(Box::new(CxxTracerClock(tracer_clock)))
        };
        PLUGIN.on_trace_start(clock);
    })
}

fn on_trace_stop() {
    entry(Hook::TraceStop, (), || PLUGIN.on_trace_stop())
}

fn on_trace_export(planes: &mut Vec<u8>) -> bool {
    entry(Hook::TraceExport, false, || {
        *planes = PLUGIN.on_trace_export();
        !planes.is_empty()
    })
}

fn on_trace_clock_pair(host_ns: u64, tracer_ns: u64) {
    entry(Hook::TraceClockPair, (), || PLUGIN.on_trace_clock_pair(host_ns, tracer_ns))
}

fn is_enabled() -> bool {
    entry(Hook::IsEnabled, false, || PLUGIN.is_enabled())
}

// Values of `rendezvous_state`, mirrored in cc_hooks/distprof_test_hooks.h.
/// The plugin is off, or this process hosts no such node.
const RENDEZVOUS_NONE: i32 = 0;
const RENDEZVOUS_PENDING: i32 = 1;
const RENDEZVOUS_AGREED: i32 = 2;
const RENDEZVOUS_FAILED: i32 = 3;

fn rendezvous_state(node_id: i32, context_digest: &mut Vec<u8>) -> i32 {
    entry(Hook::RendezvousState, RENDEZVOUS_NONE, || {
        let Ok(node) = u32::try_from(node_id) else { return RENDEZVOUS_NONE };
        match PLUGIN.node_state(node) {
            None => RENDEZVOUS_NONE,
            Some(NodeState::Pending) => RENDEZVOUS_PENDING,
            Some(NodeState::Agreed { context_digest: digest, .. }) => {
                *context_digest = digest.into_bytes();
                RENDEZVOUS_AGREED
            }
            Some(NodeState::Failed { .. }) => RENDEZVOUS_FAILED,
        }
    })
}
