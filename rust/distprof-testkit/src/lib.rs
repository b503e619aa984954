//! Test support shared by distprof's crates: the fuzz entry points (`fuzz/` and the seeded
//! property tests call the same functions) and seeded generators of synthetic inputs with
//! known truth. Never linked into the XLA plugin; the CLI links it only for the synthetic
//! input of `distprof bench merge` (docs/architecture.md).

pub mod cli;
pub mod fuzz;
pub mod golden;
pub mod synthetic_report;
pub mod synthetic_xspace;
pub mod tree;
