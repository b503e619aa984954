//! The purity test the engine counts per window: were the two packets of each pair left
//! alone by the network (no queueing between them)? Pluggable: the engine takes any
//! `PurityFn`. The default is the estimator's own test (`estimate::purity`), so the
//! window counts and the fits agree on which pairs are pure.

use crate::config::Config;
use crate::estimate::purity::{PairVerdict, PurityTolerance};
use crate::record::ProbeRecord;

/// The tolerances of the test, from the config (`purity_abs_tolerance_ns`,
/// `purity_rel_tolerance`).
pub type PurityParams = PurityTolerance;

impl PurityTolerance {
    pub fn from_config(c: &Config) -> PurityTolerance {
        PurityTolerance { abs_ns: c.purity_abs_tolerance_ns, rel: c.purity_rel_tolerance }
    }
}

/// Decides whether a complete probe is pure.
pub type PurityFn = fn(&ProbeRecord, &PurityParams) -> bool;

/// Pure when, in both directions, the receive gap equals the transmit gap within the
/// tolerance (the pair was neither squeezed nor stretched by a queue).
pub fn gap_preserved(r: &ProbeRecord, p: &PurityParams) -> bool {
    p.judge(r.fwd_tx_ns, r.fwd_rx_ns) == PairVerdict::Pure
        && p.judge(r.rev_tx_ns, r.rev_rx_ns) == PairVerdict::Pure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretched_pair_is_impure() {
        // 2 us + 10% of the 50 us gap: 7 us of slack.
        let p = PurityParams { abs_ns: 2_000, rel: 0.1 };
        let mut r = ProbeRecord {
            src: 0,
            dst: 1,
            seq: 0,
            fwd_tx_ns: [0, 50_000],
            fwd_rx_ns: [1_000_000, 1_056_000],
            rev_tx_ns: [2_000_000, 2_050_000],
            rev_rx_ns: [1_100_000, 1_149_000],
        };
        assert!(gap_preserved(&r, &p));
        r.fwd_rx_ns[1] += 2_000;
        assert!(!gap_preserved(&r, &p));
    }
}
