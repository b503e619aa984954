//! Purity of a coded pair: two packets sent `gap` apart that arrive `gap` apart saw the
//! same queue, so neither was delayed by a transient burst. Pairs whose received gap
//! differs from the sent gap by more than the tolerance are dropped, and counted.

use serde::Serialize;

/// The tolerance of the purity test: |received - sent| <= abs + rel * sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PurityTolerance {
    pub abs_ns: u64,
    pub rel: f64,
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
    fn reversed_zero_and_overflowing_gaps_are_invalid() {
        assert_eq!(TOL.judge([50_000, 0], [0, 50_000]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([0, 50_000], [7, 7]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([i64::MIN, i64::MAX], [0, 1]), PairVerdict::Invalid);
        assert_eq!(TOL.judge([0, 1], [i64::MAX, i64::MIN]), PairVerdict::Invalid);
    }
}
