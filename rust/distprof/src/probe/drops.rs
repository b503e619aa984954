//! Datagrams the probe engine drops, grouped for people: the per-reason counters of the
//! JSONL (`docs/jsonl.md`) say exactly why; these classes say what it means. Foreign
//! datagrams belong to someone else (another run, another node, a scanner), malformed ones
//! are not distprof packets at all, and late ones are ours but arrived too late or twice.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A window with more dropped datagrams than this is logged: a healthy run drops none, a
/// restarted peer or a late answer a handful.
pub const DROP_LOG_THRESHOLD: u64 = 100;

/// Dropped datagrams by class, over a window or a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCounts {
    /// Well-formed distprof packets of another run or for another node: `wrong_token`,
    /// `wrong_dst`, `unexpected_prober`, `unexpected_peer`, `unexpected`.
    pub foreign: u64,
    /// Not distprof packets: `wrong_length`, `bad_magic`, `unsupported_version`,
    /// `unknown_kind`, `nonzero_reserved`.
    pub malformed: u64,
    /// Ours, but too late or again: `stale_seq`, `duplicate`.
    pub late_or_duplicate: u64,
}

impl DropCounts {
    /// Sums per-reason counters (unknown reasons count as foreign: not ours to explain).
    pub fn from_reasons<'a>(reasons: impl IntoIterator<Item = (&'a String, &'a u64)>) -> Self {
        let mut c = DropCounts::default();
        for (reason, n) in reasons {
            match reason.as_str() {
                "wrong_length" | "bad_magic" | "unsupported_version" | "unknown_kind" | "nonzero_reserved" => {
                    c.malformed += n
                }
                "stale_seq" | "duplicate" => c.late_or_duplicate += n,
                _ => c.foreign += n,
            }
        }
        c
    }

    pub fn total(&self) -> u64 {
        self.foreign + self.malformed + self.late_or_duplicate
    }

    pub fn add(&mut self, other: &DropCounts) {
        self.foreign += other.foreign;
        self.malformed += other.malformed;
        self.late_or_duplicate += other.late_or_duplicate;
    }
}

/// Adds one window's per-reason counters into a run's.
pub fn add_reasons(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (reason, n) in from {
        *into.entry(reason.clone()).or_default() += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fall_into_their_class() {
        let reasons: BTreeMap<String, u64> = [("wrong_token", 5), ("bad_magic", 3), ("stale_seq", 2), ("wrong_dst", 1), ("duplicate", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let c = DropCounts::from_reasons(&reasons);
        assert_eq!(c, DropCounts { foreign: 6, malformed: 3, late_or_duplicate: 3 });
        assert_eq!(c.total(), 12);
    }
}
