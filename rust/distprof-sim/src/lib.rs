//! A network that tells the truth: virtual clocks, a user-space UDP relay, network
//! namespaces, and a cluster simulator that drives the real estimation code.

pub mod cluster;
pub mod inject;
pub mod netns;
pub mod planes;
pub mod relay;
pub mod window_solve;
