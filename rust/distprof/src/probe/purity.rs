//! The purity test of a coded probe: were the two packets of each pair left alone by the
//! network (no queueing between them)? Pluggable: the engine takes any `PurityFn`; the
//! estimator may define a finer test, this one is the default.

use crate::config::Config;
use crate::record::ProbeRecord;

/// The tolerances of the test, from the config (`purity_abs_tolerance_ns`,
/// `purity_rel_tolerance`) and the pair gap (`packet_spacing_us`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PurityParams {
    pub gap_ns: i64,
    pub abs_tolerance_ns: i64,
    pub rel_tolerance: f64,
}

impl PurityParams {
    pub fn from_config(c: &Config) -> PurityParams {
        PurityParams {
            gap_ns: c.packet_spacing_us as i64 * 1000,
            abs_tolerance_ns: c.purity_abs_tolerance_ns as i64,
            rel_tolerance: c.purity_rel_tolerance,
        }
    }
    /// Largest accepted difference between a pair's receive gap and its send gap.
    pub fn tolerance_ns(&self) -> i64 {
        self.abs_tolerance_ns.max((self.rel_tolerance * self.gap_ns as f64) as i64)
    }
}

/// Decides whether a complete probe is pure.
pub type PurityFn = fn(&ProbeRecord, &PurityParams) -> bool;

/// Pure when, in both directions, the receive gap equals the transmit gap within the
/// tolerance (the pair was neither squeezed nor stretched by a queue).
pub fn gap_preserved(r: &ProbeRecord, p: &PurityParams) -> bool {
    let fwd = (r.fwd_rx_ns[1] - r.fwd_rx_ns[0]) - (r.fwd_tx_ns[1] - r.fwd_tx_ns[0]);
    let rev = (r.rev_rx_ns[1] - r.rev_rx_ns[0]) - (r.rev_tx_ns[1] - r.rev_tx_ns[0]);
    let tol = p.tolerance_ns();
    fwd.abs() <= tol && rev.abs() <= tol
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretched_pair_is_impure() {
        let p = PurityParams { gap_ns: 50_000, abs_tolerance_ns: 2_000, rel_tolerance: 0.1 };
        assert_eq!(p.tolerance_ns(), 5_000);
        let mut r = ProbeRecord {
            src: 0,
            dst: 1,
            seq: 0,
            fwd_tx_ns: [0, 50_000],
            fwd_rx_ns: [1_000_000, 1_054_000],
            rev_tx_ns: [2_000_000, 2_050_000],
            rev_rx_ns: [1_100_000, 1_149_000],
        };
        assert!(gap_preserved(&r, &p));
        r.fwd_rx_ns[1] += 2_000;
        assert!(!gap_preserved(&r, &p));
    }
}
