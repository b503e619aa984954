//! The probe record: the contract between the probe engine and the estimator.
//!
//! One coded exchange on edge `src -> dst` (src is the prober). Every timestamp is in
//! nanoseconds of the clock of the node that took it, after the node's virtual clock (if
//! any) was applied. Forward packets travel src -> dst, reverse packets dst -> src; each
//! direction carries a pair of packets sent `packet_spacing_us` apart so that the
//! receiver can test the pair for purity (no queueing between the two).

use crate::context::NodeId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub src: NodeId,
    pub dst: NodeId,
    pub seq: u32,
    /// Forward pair, transmit times in src's clock.
    pub fwd_tx_ns: [i64; 2],
    /// Forward pair, receive times in dst's clock.
    pub fwd_rx_ns: [i64; 2],
    /// Reverse pair, transmit times in dst's clock.
    pub rev_tx_ns: [i64; 2],
    /// Reverse pair, receive times in src's clock.
    pub rev_rx_ns: [i64; 2],
}

impl ProbeRecord {
    /// Round trip of the first packet of each pair, without the peer's turnaround: what the
    /// path costs both ways, whatever the two clocks' offset.
    pub fn round_trip_ns(&self) -> i64 {
        (self.rev_rx_ns[0] - self.fwd_tx_ns[0]) - (self.rev_tx_ns[0] - self.fwd_rx_ns[0])
    }
}
