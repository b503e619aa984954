//! Purity of a coded pair: two packets sent `gap` apart that arrive `gap` apart saw the
//! same queue, so neither was delayed by a transient burst. The one purity judge of the
//! project: the estimator's points (`points`), the probe engine's per-window counts
//! (through `PurityFn`, pluggable) and the report's point colours all ask it.

use crate::config::Config;
use crate::record::ProbeRecord;
use serde::Serialize;

/// The tolerance of the purity test: |received - sent| <= abs + rel * sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PurityTolerance {
    pub abs_ns: u64,
    pub rel: f64,
}

impl PurityTolerance {
    /// The tolerances of the config (`purity_abs_tolerance_ns`, `purity_rel_tolerance`).
    pub fn from_config(c: &Config) -> PurityTolerance {
        PurityTolerance { abs_ns: c.purity_abs_tolerance_ns, rel: c.purity_rel_tolerance }
    }
}

/// The name the probe engine knows the tolerances by.
pub type PurityParams = PurityTolerance;

/// Decides whether a complete probe is pure; the engine takes any (tests plug in others).
pub type PurityFn = fn(&ProbeRecord, &PurityParams) -> bool;

/// The engine's default: pure when, in both directions, the receive gap equals the
/// transmit gap within the tolerance (the pair was neither squeezed nor stretched).
pub fn gap_preserved(r: &ProbeRecord, p: &PurityParams) -> bool {
    p.judge(r.fwd_tx_ns, r.fwd_rx_ns) == PairVerdict::Pure && p.judge(r.rev_tx_ns, r.rev_rx_ns) == PairVerdict::Pure
}

/// Why a pair of timestamps was or was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairVerdict {
    Pure,
    /// The gaps differ by more than the tolerance: one packet was queued more.
    Impure,
    /// A gap is zero, negative or overflows: the record is garbage.
    Invalid,
}

impl PurityTolerance {
    /// Judges one pair from its transmit times (sender clock) and receive times
    /// (receiver clock).
    pub fn judge(&self, tx_ns: [i64; 2], rx_ns: [i64; 2]) -> PairVerdict {
        let (Some(sent), Some(received)) =
            (tx_ns[1].checked_sub(tx_ns[0]), rx_ns[1].checked_sub(rx_ns[0]))
        else {
            return PairVerdict::Invalid;
        };
        if sent <= 0 || received <= 0 {
            return PairVerdict::Invalid;
        }
        let diff_ns = (received as f64 - sent as f64).abs();
        let tol_ns = self.abs_ns as f64 + self.rel.max(0.0) * sent as f64;
        if diff_ns <= tol_ns {
            PairVerdict::Pure
        } else {
            PairVerdict::Impure
        }
    }
}

/// Per-window counts of what the input held and what was kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PurityCounts {
    pub records: u64,
    pub duplicates: u64,
    /// Records from a node to itself, to a node outside the run, or outside the window.
    pub misplaced: u64,
    pub fwd_pure: u64,
    pub fwd_impure: u64,
    pub rev_pure: u64,
    pub rev_impure: u64,
    /// Pairs with non-positive gaps, overflowing or absurd timestamps.
    pub invalid_pairs: u64,
}

impl PurityCounts {
    /// Pairs whose timestamps made sense, pure or not.
    pub fn usable(&self) -> u64 {
        self.fwd_pure + self.fwd_impure + self.rev_pure + self.rev_impure
    }

    pub fn add(&mut self, other: &PurityCounts) {
        self.records += other.records;
        self.duplicates += other.duplicates;
        self.misplaced += other.misplaced;
        self.fwd_pure += other.fwd_pure;
        self.fwd_impure += other.fwd_impure;
        self.rev_pure += other.rev_pure;
        self.rev_impure += other.rev_impure;
        self.invalid_pairs += other.invalid_pairs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: PurityTolerance = PurityTolerance { abs_ns: 2_000, rel: 0.1 };

    #[test]
    fn tolerance_is_abs_plus_rel_of_sent_gap() {
        // Sent 50 µs: tolerance 2 µs + 5 µs = 7 µs.
        assert_eq!(TOL.judge([0, 50_000], [100, 100 + 57_000]), PairVerdict::Pure);
        assert_eq!(TOL.judge([0, 50_000], [100, 100 + 57_001]), PairVerdict::Impure);
        assert_eq!(TOL.judge([0, 50_000], [100, 100 + 43_000]), PairVerdict::Pure);
        assert_eq!(TOL.judge([0, 50_000], [100, 100 + 42_999]), PairVerdict::Impure);
    }

    #[test]
    fn a_probe_is_pure_when_both_pairs_are() {
        let mut r = ProbeRecord {
            src: 0,
            dst: 1,
            seq: 0,
            fwd_tx_ns: [0, 50_000],
            fwd_rx_ns: [1_000_000, 1_056_000],
            rev_tx_ns: [2_000_000, 2_050_000],
            rev_rx_ns: [1_100_000, 1_149_000],
        };
        assert!(gap_preserved(&r, &TOL));
        r.fwd_rx_ns[1] += 2_000;
        assert!(!gap_preserved(&r, &TOL));
    }

    #[test]
    fn reversed_zero_and_overflowing_gaps_are_invalid() {
        assert_eq!(TOL.judge([50_000, 0], [0, 50_000]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([0, 50_000], [7, 7]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([i64::MIN, i64::MAX], [0, 1]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([0, 1], [i64::MAX, i64::MIN]), PairVerdict::Invalid);
    }
}
