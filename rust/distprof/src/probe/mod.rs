//! The probe exchange: coded packet pairs in both directions on every out-edge, stamped
//! precisely, collected into `ProbeRecord`s per window.
//!
//! One socket and one thread per node, whatever the number of edges: the thread sleeps in
//! `ppoll` until the next deadline (next probe of any edge, window close, timeout check)
//! or until a datagram or transmit stamp arrives. The only other wait is the pair gap
//! (`packet_spacing_us`, tens of microseconds) between the two packets of a pair, a
//! timed sleep with the timer slack lowered to 1 us (see `timestamp::precise_timer_slack`):
//! a `ppoll` round trip would add its own wake-up latency to the gap, a spin would burn a
//! core. Packets arriving during that sleep are stamped by the kernel anyway.

pub mod drops;
pub mod engine;
pub mod purity;

pub use drops::DropCounts;
pub use engine::{Engine, EngineParams, EngineStats};
pub use purity::{gap_preserved, PurityFn, PurityParams};
