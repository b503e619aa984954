//! The plugin lifecycle inside XLA: the state machine behind the C++ hooks.
//!
//! XLA calls, per process: GPU client created (hook 1, once per client), then any number of
//! profiling rounds: the ROCm collector's clock pair (hook 3), trace start / stop / export
//! (hook 2). This
//! module turns those calls into work on a [`Backend`] while keeping the promise of the
//! hooks header: a disabled plugin costs one atomic load per hook and creates no thread,
//! socket or file; any failure disables the plugin with one log line and never reaches XLA.
//!
//! No FFI here: `distprof-ffi` owns the one process-wide [`Plugin`] and the panic boundary.
//!
//! Seams for the engines built elsewhere:
//! - configuration: the `load_config` function given to [`Plugin::new`];
//! - rendezvous and probing: [`make_backend`], which returns [`backend::EngineBackend`].

pub mod backend;
pub mod lease;
pub mod node;
pub mod node_windows;
pub mod trace;

pub use node::NodeState;

use crate::config::Config;
use crate::context::NodeId;
use crate::distprof_plane::TracerStart;
use crate::kv::KvStore;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Reads the GPU tracer's clock R in nanoseconds (the profiler hook supplies it).
pub trait TracerClock: Send {
    fn now_ns(&self) -> u64;
}

/// Why the plugin turned itself off; the text is the one log line the user sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PluginError(pub String);

impl PluginError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// The work behind the hooks once the plugin is enabled. Every call must return within
/// microseconds: anything slow belongs on threads the backend owns, bounded in time.
pub trait Backend: Send {
    fn client_created(
        &mut self,
        node: NodeId,
        num_nodes: u32,
        kv: Option<Box<dyn KvStore>>,
    ) -> Result<(), PluginError>;
    fn trace_start(&mut self, tracer_clock: Option<Box<dyn TracerClock>>) -> Result<(), PluginError>;
    fn trace_stop(&mut self) -> Result<(), PluginError>;
    /// A serialized `XSpace` holding only the planes to append: the C++ side merges it into
    /// XLA's space (`MergeFromString` appends repeated fields). Empty means nothing to add.
    fn export(&mut self) -> Result<Vec<u8>, PluginError>;
    /// The GPU/host clock pair XLA's device collector was created with (hook 3, just before
    /// trace start): the next trace records it as its tracer start pair.
    fn trace_clock_pair(&mut self, pair: TracerStart) -> Result<(), PluginError>;
    /// Where node `node`'s rendezvous stands; `None` for a node this process does not host.
    fn node_state(&self, _node: NodeId) -> Option<NodeState> {
        None
    }
    /// True once every probe thread of the last trace has ended (closed its last window,
    /// fitted it, written its files). A host that exports after the profile is on disk (the
    /// Python package) waits for this so the plane holds every window; XLA exports at
    /// once and never asks.
    fn probes_finished(&self) -> bool {
        true
    }
}

thread_local! {
    static PANICS_REPORTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread (one of the plugin's own) as one whose panics are caught and
/// reported by the plugin's one log line, so the panic hook of the FFI prints nothing else
/// on the host's stderr.
pub fn mark_thread_panics_reported() {
    PANICS_REPORTED.with(|c| c.set(true));
}

/// True on a thread marked by [`mark_thread_panics_reported`].
pub fn thread_panics_reported() -> bool {
    PANICS_REPORTED.with(|c| c.get())
}

/// The message of a caught panic, for the one log line.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// How a backend's own threads report a failure: the plugin turns off with one log line
/// naming `what` failed and why.
pub type OnFailure = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Seam: the backend an enabled plugin drives; the hooks and the FFI do not depend on it.
pub fn make_backend(config: Config, on_failure: OnFailure) -> Box<dyn Backend> {
    Box::new(backend::EngineBackend::new(config, on_failure))
}

/// Loads the effective configuration; an error string names the input and the fix.
pub type ConfigLoader = fn() -> Result<Config, String>;

// `state` values. UNINIT: no hook has run yet; the first one loads the configuration.
// The C++ hooks read the same byte (cc_hooks/bridge_types.h mirrors these values).
pub const STATE_UNINIT: u8 = 0;
pub const STATE_DISABLED: u8 = 1;
pub const STATE_ENABLED: u8 = 2;
const UNINIT: u8 = STATE_UNINIT;
const DISABLED: u8 = STATE_DISABLED;
const ENABLED: u8 = STATE_ENABLED;

/// One per process (per copy of the Rust runtime), in a `static`: the backend's threads
/// hold `&'static` to it to report failures. All methods are safe to call from any thread
/// in any order; calls out of XLA's order are tolerated by the backend.
pub struct Plugin {
    /// Outside the struct so the FFI can export it to C++, whose hooks then return after
    /// one load without crossing the bridge.
    state: &'static AtomicU8,
    load_config: ConfigLoader,
    backend: Mutex<Option<Box<dyn Backend>>>,
    /// Why the plugin turned off, as logged (None while on, or after a clean [`Plugin::stop`]).
    disabled_reason: Mutex<Option<String>>,
}

impl Plugin {
    /// `state` must start at [`STATE_UNINIT`] and belong to this plugin alone.
    pub const fn new(state: &'static AtomicU8, load_config: ConfigLoader) -> Self {
        Self { state, load_config, backend: Mutex::new(None), disabled_reason: Mutex::new(None) }
    }

    /// The hot path of every hook: true once the plugin is known to be off. Relaxed is
    /// enough: a hook racing with the first initialisation takes the slow path, which
    /// synchronises on the mutex.
    #[inline(always)]
    pub fn is_off(&self) -> bool {
        self.state.load(Ordering::Relaxed) == DISABLED
    }

    pub fn is_enabled(&'static self) -> bool {
        if self.is_off() {
            return false;
        }
        let _guard = self.lock_initialised();
        self.state.load(Ordering::Acquire) == ENABLED
    }

    pub fn on_client_created(&'static self, node: NodeId, num_nodes: u32, kv: Option<Box<dyn KvStore>>) {
        self.with_backend("client created", |b| b.client_created(node, num_nodes, kv));
    }

    /// Hook 1 on a client distprof does not take (a CUDA or SYCL client, a mock-NCCL one:
    /// cc_hooks/client_guard.h says which and why): an enabled plugin turns off with one log
    /// line naming `reason`, so no rendezvous or probe starts and the trace hooks do nothing;
    /// a disabled one stays silent.
    pub fn on_client_refused(&'static self, reason: &str) {
        self.with_backend("client created", |_| Err::<(), _>(PluginError::new(reason)));
    }

    pub fn on_trace_start(&'static self, tracer_clock: Option<Box<dyn TracerClock>>) {
        self.with_backend("trace start", |b| b.trace_start(tracer_clock));
    }

    pub fn on_trace_stop(&'static self) {
        self.with_backend("trace stop", |b| b.trace_stop());
    }

    pub fn on_trace_export(&'static self) -> Vec<u8> {
        self.with_backend("trace export", |b| b.export()).unwrap_or_default()
    }

    /// Hook 3. Both values are nanoseconds since the epoch (host) and of the tracer clock; one
    /// beyond i64 is no time XLA reads, so the pair is ignored (the trace then records its own
    /// first snapshot pair, as without the hook) with one warning.
    pub fn on_trace_clock_pair(&'static self, host_ns: u64, tracer_ns: u64) {
        let (Ok(s_ns), Ok(r_ns)) = (i64::try_from(host_ns), i64::try_from(tracer_ns)) else {
            tracing::warn!(host_ns, tracer_ns, "distprof: XLA's collector clock pair is out of range; using distprof's own start pair");
            return;
        };
        self.with_backend("trace clock pair", |b| b.trace_clock_pair(TracerStart { s_ns, r_ns }));
    }

    /// Where node `node`'s rendezvous stands (tests and diagnostics; never blocks on the
    /// rendezvous). `None` when the plugin is off or the node is not hosted here.
    pub fn node_state(&'static self, node: NodeId) -> Option<NodeState> {
        if self.is_off() {
            return None;
        }
        let guard = self.lock_initialised();
        guard.as_ref()?.node_state(node)
    }

    /// True once the last trace's probe threads have all ended (see
    /// [`Backend::probes_finished`]); true when the plugin is off. Never blocks on them.
    pub fn probes_finished(&'static self) -> bool {
        if self.is_off() {
            return true;
        }
        let guard = self.lock_initialised();
        guard.as_ref().is_none_or(|b| b.probes_finished())
    }

    /// The one log line's reason, once the plugin turned itself off on a failure.
    pub fn disabled_reason(&self) -> Option<String> {
        self.disabled_reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Turns the plugin off because its host asked (the Python package's `stop()`): the
    /// backend is dropped as in [`Plugin::disable`], logged at info, not as a failure.
    pub fn stop(&self) {
        let previous = self.state.swap(DISABLED, Ordering::AcqRel);
        let backend = match self.backend.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(backend);
        if previous == ENABLED {
            tracing::info!("distprof stopped");
        }
    }

    /// Turns the plugin off for the rest of the process and says why, once. Threads the
    /// backend owns are told to stop when it is dropped; none of them is joined here.
    pub fn disable(&self, hook: &str, reason: &str) {
        let previous = self.state.swap(DISABLED, Ordering::AcqRel);
        // A poisoned mutex means a panic while it was held: the backend is suspect, drop it.
        let backend = match self.backend.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        drop(backend);
        if previous != DISABLED {
            let line = format!("{hook}: {reason}");
            tracing::error!("distprof disabled for the rest of this process: {line}");
            *self.disabled_reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
        }
    }

    fn with_backend<R>(
        &'static self,
        hook: &str,
        f: impl FnOnce(&mut dyn Backend) -> Result<R, PluginError>,
    ) -> Option<R> {
        if self.is_off() {
            return None;
        }
        let mut guard = self.lock_initialised();
        let backend = guard.as_mut()?;
        match f(backend.as_mut()) {
            Ok(r) => Some(r),
            Err(err) => {
                drop(guard);
                self.disable(hook, &err.0);
                None
            }
        }
    }

    /// Locks the backend slot, loading the configuration first if no hook ran yet.
    fn lock_initialised(&'static self) -> MutexGuard<'static, Option<Box<dyn Backend>>> {
        let mut guard = match self.backend.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.state.load(Ordering::Acquire) == UNINIT {
            match (self.load_config)() {
                Ok(config) if config.enabled => {
                    tracing::info!(output_dir = %config.output_dir, "distprof enabled");
                    let on_failure: OnFailure = Arc::new(|what, why| self.disable(what, why));
                    *guard = Some(make_backend(config, on_failure));
                    self.state.store(ENABLED, Ordering::Release);
                }
                Ok(_) => self.state.store(DISABLED, Ordering::Release),
                Err(err) => {
                    self.state.store(DISABLED, Ordering::Release);
                    tracing::error!("distprof disabled: configuration: {err}");
                    *self.disabled_reason.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("configuration: {err}"));
                }
            }
        }
        guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static LOADS: AtomicUsize = AtomicUsize::new(0);

    fn disabled_config() -> Result<Config, String> {
        LOADS.fetch_add(1, Ordering::SeqCst);
        Ok(Config::default())
    }

    fn broken_config() -> Result<Config, String> {
        Err("XLA_PROBE_CADENCE_US=abc is not an integer".into())
    }

    #[test]
    fn disabled_loads_config_once_and_does_nothing() {
        static STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static PLUGIN: Plugin = Plugin::new(&STATE, disabled_config);
        let plugin = &PLUGIN;
        let before = LOADS.load(Ordering::SeqCst);
        assert!(!plugin.is_off(), "nothing is known before the first hook");
        plugin.on_client_created(0, 1, None);
        assert!(plugin.is_off());
        plugin.on_trace_start(None);
        plugin.on_trace_stop();
        assert!(plugin.on_trace_export().is_empty());
        assert!(!plugin.is_enabled());
        assert_eq!(LOADS.load(Ordering::SeqCst) - before, 1);
        assert!(plugin.backend.lock().unwrap().is_none());
    }

    #[test]
    fn bad_config_disables() {
        static STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static PLUGIN: Plugin = Plugin::new(&STATE, broken_config);
        let plugin = &PLUGIN;
        assert!(!plugin.is_enabled());
        assert!(plugin.is_off());
    }

    fn enabled_config() -> Result<Config, String> {
        let dir = std::env::temp_dir().join(format!("distprof-plugin-test-{}", std::process::id()));
        Ok(Config { enabled: true, output_dir: dir.to_string_lossy().into_owned(), ..Config::default() })
    }

    #[test]
    fn backend_error_disables_for_good() {
        static STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static PLUGIN: Plugin = Plugin::new(&STATE, enabled_config);
        let plugin = &PLUGIN;
        assert!(plugin.is_enabled());
        // num_nodes > 1 without a store is a contract violation by the caller.
        plugin.on_client_created(0, 2, None);
        assert!(plugin.is_off());
        assert!(!plugin.is_enabled());
        assert!(plugin.on_trace_export().is_empty());
    }

    #[test]
    fn a_refused_client_turns_an_enabled_plugin_off_with_the_reason_and_a_disabled_one_stays_silent() {
        static STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static PLUGIN: Plugin = Plugin::new(&STATE, enabled_config);
        PLUGIN.on_client_refused("not a ROCm GPU client (platform `cuda`)");
        assert!(PLUGIN.is_off());
        assert_eq!(
            PLUGIN.disabled_reason().as_deref(),
            Some("client created: not a ROCm GPU client (platform `cuda`)")
        );
        assert!(PLUGIN.on_trace_export().is_empty());

        static OFF_STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static OFF: Plugin = Plugin::new(&OFF_STATE, disabled_config);
        OFF.on_client_refused("mock-NCCL client");
        assert!(OFF.is_off());
        assert_eq!(OFF.disabled_reason(), None, "a plugin the configuration disables says nothing");
    }

    /// A store where node 0 never shows up.
    struct EmptyKv;
    impl KvStore for EmptyKv {
        fn get(&self, key: &str, timeout: std::time::Duration) -> Result<String, crate::kv::KvError> {
            std::thread::sleep(timeout);
            Err(crate::kv::KvError::Timeout { key: key.into(), timeout_ms: timeout.as_millis() as u64 })
        }
        fn try_get(&self, _key: &str) -> Result<Option<String>, crate::kv::KvError> {
            Ok(None)
        }
        fn set(&self, _key: &str, _value: &str) -> Result<(), crate::kv::KvError> {
            Ok(())
        }
    }

    fn short_rendezvous_config() -> Result<Config, String> {
        Ok(Config { enabled: true, rendezvous_timeout_ms: 50, ..Config::default() })
    }

    #[test]
    fn a_failed_background_rendezvous_disables_the_plugin() {
        static STATE: AtomicU8 = AtomicU8::new(STATE_UNINIT);
        static PLUGIN: Plugin = Plugin::new(&STATE, short_rendezvous_config);
        PLUGIN.on_client_created(1, 2, Some(Box::new(EmptyKv)));
        assert!(PLUGIN.is_enabled(), "the hook itself must not wait for the rendezvous");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !PLUGIN.is_off() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(PLUGIN.is_off());
        assert!(PLUGIN.backend.lock().unwrap().is_none(), "the backend is dropped");
    }
}
