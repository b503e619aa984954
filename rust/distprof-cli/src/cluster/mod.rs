//! Standalone nodes as child processes: what a node does after its rendezvous
//! ([`node_run`]) and how a parent spawns and waits for several ([`spawn`]). A library for
//! the commands (`run`, `local`) and the benches, so that no command imports another.

pub mod node_run;
pub mod path_asymmetry;
pub mod spawn;
pub mod truth;
