//! The purity test of a coded probe: were the two packets of each pair left alone by the
//! network (no queueing between them)? Pluggable: the engine takes any `PurityFn`; the
//! estimator defines the real test, this one is the simple default.

use crate::record::ProbeRecord;

/// Decides whether a complete probe is pure, given the configured pair gap.
pub type PurityFn = fn(&ProbeRecord, gap_ns: i64) -> bool;

/// How far the received gap of a pair may differ from its sent gap. Queueing behind one
/// 1500-byte frame at 1 Gb/s is 12 us; software stamps on loopback jitter by a few us.
pub const PAIR_GAP_TOLERANCE_NS: i64 = 10_000;

/// Pure when, in both directions, the receive gap equals the transmit gap within
/// `PAIR_GAP_TOLERANCE_NS` (the pair was neither squeezed nor stretched by a queue).
pub fn gap_preserved(r: &ProbeRecord, _gap_ns: i64) -> bool {
    let fwd = (r.fwd_rx_ns[1] - r.fwd_rx_ns[0]) - (r.fwd_tx_ns[1] - r.fwd_tx_ns[0]);
    let rev = (r.rev_rx_ns[1] - r.rev_rx_ns[0]) - (r.rev_tx_ns[1] - r.rev_tx_ns[0]);
    fwd.abs() <= PAIR_GAP_TOLERANCE_NS && rev.abs() <= PAIR_GAP_TOLERANCE_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretched_pair_is_impure() {
        let mut r = ProbeRecord {
            src: 0,
            dst: 1,
            seq: 0,
            fwd_tx_ns: [0, 50_000],
            fwd_rx_ns: [1_000_000, 1_052_000],
            rev_tx_ns: [2_000_000, 2_050_000],
            rev_rx_ns: [1_100_000, 1_149_000],
        };
        assert!(gap_preserved(&r, 50_000));
        r.fwd_rx_ns[1] += 20_000;
        assert!(!gap_preserved(&r, 50_000));
    }
}
