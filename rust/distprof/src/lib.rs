//! distprof core: clock synchronization for multi-node traces. No FFI, no C++.
//!
//! Data flow (see DESIGN.md): `config` -> `rendezvous` (over a `kv` store, building a
//! `topology`) -> `RunContext` -> `probe` engine (speaking `wire`, stamping with
//! `timestamp`, reading `clock`) -> `ProbeRecord`s per `window` -> `estimate` ->
//! `model` -> `jsonl` and the `xplane` export; offline `merge`, `validate`, `report`.

pub mod atomic_file;
pub mod config;
pub mod context;
pub mod distprof_plane;
pub mod estimate;
pub mod file_name;
// Entry points of the fuzz targets (fuzz/) and their property tests; not an API.
#[doc(hidden)]
pub mod fuzz;
pub mod gpu;
pub mod kv;
pub mod logging;
pub mod merge;
pub mod model;
pub mod offline_estimate;
pub mod plugin;
pub mod record;
pub mod clock;
pub mod timestamp;
pub mod wire;
pub mod jsonl;
pub mod probe;
pub mod standalone;
pub mod window;
pub mod rendezvous;
pub mod report;
pub mod snapshot;
pub mod topology;
pub mod validate;
pub mod xplane;
