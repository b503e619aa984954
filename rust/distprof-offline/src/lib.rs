//! distprof's offline tools: what runs after a job, on the traces and JSONL it left.
//!
//! - [`merge`]: every node's `.xplane.pb` onto one global timeline (XProf run directory and
//!   Chrome JSON).
//! - [`validate`]: happens-before violations of collectives, before and after correction.
//! - [`report`]: the sync quality of a run as one self-contained HTML page.
//! - [`run_dir_estimate`]: the network-wide estimate of a finished run from every node's
//!   JSONL (`--run-dir`).
//!
//! The runtime crate `distprof` (what the XLA plugin links) never depends on this one.

pub mod merge;
pub mod report;
pub mod run_dir_estimate;
pub mod validate;
