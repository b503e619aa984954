//! TEST-ONLY switch: `DISTPROF_TEST_FORCE_PANIC=<hook>` makes that hook panic inside Rust,
//! so tests can prove a panic leaves XLA running with the plugin disabled. Hook names:
//! `client_created`, `trace_clock_pair`, `trace_start`, `trace_stop`, `trace_export`,
//! `is_enabled`, `rendezvous_state`. Read once per process; never consulted while the plugin is disabled.
//! Not a user setting: it exists only for tests/cpp and is documented there as such.

use std::sync::OnceLock;

pub const ENV: &str = "DISTPROF_TEST_FORCE_PANIC";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    ClientCreated,
    TraceStart,
    TraceStop,
    TraceExport,
    TraceClockPair,
    IsEnabled,
    RendezvousState,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::ClientCreated => "client_created",
            Hook::TraceStart => "trace_start",
            Hook::TraceStop => "trace_stop",
            Hook::TraceExport => "trace_export",
            Hook::TraceClockPair => "trace_clock_pair",
            Hook::IsEnabled => "is_enabled",
            Hook::RendezvousState => "rendezvous_state",
        }
    }
}

pub fn maybe_panic(hook: Hook) {
    static FORCED: OnceLock<Option<String>> = OnceLock::new();
    let forced = FORCED.get_or_init(|| std::env::var(ENV).ok());
    if forced.as_deref() == Some(hook.name()) {
        panic!("{ENV}={} (test-only switch)", hook.name());
    }
}
