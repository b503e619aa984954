//! How late the relay acts against the time it meant to: a datagram's send against its due
//! time, a timed wake-up against the time asked for. Any lateness of a send is one-way
//! delay that no real link adds, so it is counted for every datagram: a histogram fine
//! where it matters (100 ns steps below 10 µs), coarse above, bounded in memory.

const FINE_STEP_NS: u64 = 100;
const FINE_BUCKETS: usize = 100;
const COARSE_STEP_NS: u64 = 10_000;
const COARSE_BUCKETS: usize = 99;
/// Everything from here on shares the last bucket (its largest value is `max_ns`).
const COARSE_END_NS: u64 = FINE_STEP_NS * FINE_BUCKETS as u64 + COARSE_STEP_NS * COARSE_BUCKETS as u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lateness {
    counts: Vec<u64>,
    count: u64,
    max_ns: u64,
}

impl Default for Lateness {
    fn default() -> Lateness {
        Lateness { counts: vec![0; FINE_BUCKETS + COARSE_BUCKETS + 1], count: 0, max_ns: 0 }
    }
}

impl Lateness {
    /// Counts one event `late_ns` after its time (an early one counts as on time).
    pub fn record(&mut self, late_ns: i64) {
        let late = late_ns.max(0) as u64;
        let bucket = if late < FINE_STEP_NS * FINE_BUCKETS as u64 {
            (late / FINE_STEP_NS) as usize
        } else if late < COARSE_END_NS {
            FINE_BUCKETS + ((late - FINE_STEP_NS * FINE_BUCKETS as u64) / COARSE_STEP_NS) as usize
        } else {
            FINE_BUCKETS + COARSE_BUCKETS
        };
        self.counts[bucket] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(late);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// An upper bound of the `q` quantile: the top of the bucket holding it (or the
    /// largest value seen, if smaller). None before any event.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_top_ns(i).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    /// `p10 0.1 us, p50 0.2 us, p90 0.9 us, p99 1.3 us, max 41.0 us (n 18000)`.
    pub fn summary(&self) -> String {
        let us = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{:.1} us", v as f64 / 1000.0));
        format!(
            "p10 {}, p50 {}, p90 {}, p99 {}, max {} (n {})",
            us(self.quantile_ns(0.1)),
            us(self.quantile_ns(0.5)),
            us(self.quantile_ns(0.9)),
            us(self.quantile_ns(0.99)),
            us((self.count > 0).then_some(self.max_ns)),
            self.count
        )
    }
}

fn bucket_top_ns(i: usize) -> u64 {
    if i < FINE_BUCKETS {
        (i as u64 + 1) * FINE_STEP_NS
    } else if i < FINE_BUCKETS + COARSE_BUCKETS {
        FINE_STEP_NS * FINE_BUCKETS as u64 + (i - FINE_BUCKETS + 1) as u64 * COARSE_STEP_NS
    } else {
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_the_top_of_their_bucket() {
        let mut l = Lateness::default();
        assert_eq!(l.quantile_ns(0.5), None);
        // 90 events at 150 ns, 9 at 3.05 µs, one at 250 µs.
        for _ in 0..90 {
            l.record(150);
        }
        for _ in 0..9 {
            l.record(3_050);
        }
        l.record(250_000);
        assert_eq!(l.count(), 100);
        assert_eq!(l.quantile_ns(0.5), Some(200));
        assert_eq!(l.quantile_ns(0.9), Some(200));
        assert_eq!(l.quantile_ns(0.95), Some(3_100));
        assert_eq!(l.quantile_ns(0.99), Some(3_100));
        // The top of the coarse bucket [240, 250) µs is above the largest value seen.
        assert_eq!(l.quantile_ns(1.0), Some(250_000));
        assert_eq!(l.max_ns(), 250_000);
    }

    #[test]
    fn early_counts_as_on_time_and_huge_goes_to_the_last_bucket() {
        let mut l = Lateness::default();
        l.record(-5);
        l.record(5_000_000_000);
        assert_eq!(l.quantile_ns(0.5), Some(100));
        assert_eq!(l.quantile_ns(1.0), Some(5_000_000_000));
        assert!(l.summary().contains("max 5000000.0 us (n 2)"), "{}", l.summary());
    }
}
