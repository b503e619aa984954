//! distprof runtime: clock synchronization while a multi-node job runs. This is what the
//! XLA plugin links (through `distprof-ffi`); no FFI, no C++, and no offline tool: merge,
//! validate and report live in `distprof-offline`, which depends on this crate and never
//! the other way (docs/architecture.md).
//!
//! Data flow: `config` -> `rendezvous` (over a `kv` store, building a `topology`) ->
//! `RunContext` -> `probe` engine (speaking `wire`, stamping with `timestamp`, hardware
//! stamps mapped through `nic_clock`, reading `clock`) -> `ProbeRecord`s per `window` -> `estimate` -> `model` -> `jsonl` and the
//! `distprof_plane` export into the trace (`xplane`).

/// Whole-file writes (its own crate, shared with distprof-xla).
pub use distprof_atomic_file as atomic_file;
pub mod clock;
pub mod config;
pub mod context;
pub mod distprof_plane;
pub mod estimate;
pub mod file_name;
pub mod gpu;
pub mod jsonl;
pub mod kv;
pub mod logging;
pub mod model;
pub mod nic_clock;
pub mod plugin;
pub mod probe;
pub mod probe_run;
pub mod record;
pub mod rendezvous;
pub mod snapshot;
pub mod standalone;
pub mod timestamp;
pub mod topology;
pub mod window;
pub mod wire;
pub mod xplane;
