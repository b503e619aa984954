//! When each sender's next burst is due, so that the relay is awake for it.
//!
//! The nodes send on a fixed tick (`probe_cadence_us`): each tick a burst of probe pairs
//! and the answers queued since the last one. The first datagram of a burst finds the
//! relay asleep and is read when the relay's vCPU is woken (p90 30 µs, p99 50 µs late in
//! the jitter run), so one whose drawn delay is shorter than that is sent late. Which node
//! ticks first is stable from tick to tick, so the late datagrams are those of one sender,
//! on one side of its edges: an asymmetry of the minimum one-way delays that two-way probes
//! cannot see, and that moved the jitter run's worst nodes by up to 1.2 µs. Told the tick,
//! the relay predicts each sender's next burst and watches for it from `BEFORE_NS` ahead
//! to `AFTER_NS` past (or until it comes): at most `BEFORE_NS + AFTER_NS` of one core per
//! sender and tick (0.5 % per sender at the 40 ms default).
//!
//! The prediction tracks the earliest arrivals, not the last one: a burst comes at the
//! sender's tick plus its own wake-up lateness, so the estimate takes the smaller of the
//! new burst's start and the old estimate a tick on, and creeps later by `CREEP_NS` a tick
//! so that a sender whose clock runs slow (tens of ppm: about 1 µs per 40 ms) is followed.

/// Watch from this long before a burst is expected...
pub const BEFORE_NS: i64 = 20_000;
/// ...until this long after, if it has not come by then (a sender's wake-up lateness).
pub const AFTER_NS: i64 = 180_000;
/// How far a tick the expected time may move later when bursts keep coming later.
const CREEP_NS: i64 = 2_000;

#[derive(Debug, Clone)]
pub struct BurstWatch {
    tick_ns: i64,
    /// Per sender: when its last datagram arrived, and when its next burst is expected.
    last_arrival_ns: Vec<Option<i64>>,
    expected_ns: Vec<Option<i64>>,
}

impl BurstWatch {
    /// `tick_ns` is the senders' tick; `None` (or not positive) watches for nothing.
    pub fn new(senders: usize, tick_ns: Option<i64>) -> BurstWatch {
        let tick_ns = tick_ns.filter(|&t| t > 0).unwrap_or(0);
        let n = if tick_ns > 0 { senders } else { 0 };
        BurstWatch {
            tick_ns,
            last_arrival_ns: vec![None; n],
            expected_ns: vec![None; n],
        }
    }

    /// A datagram from `sender` arrived at `arrived_ns` (the kernel's stamp).
    pub fn arrival(&mut self, sender: usize, arrived_ns: i64) {
        let Some(last) = self.last_arrival_ns.get_mut(sender) else {
            return;
        };
        // Datagrams of one burst come within a few packet spacings; a quarter tick of
        // silence means a new burst.
        let starts_burst = last.is_none_or(|l| arrived_ns - l > self.tick_ns / 4);
        *last = Some(arrived_ns);
        if !starts_burst {
            return;
        }
        let expected = &mut self.expected_ns[sender];
        let on_schedule = expected.filter(|&e| (arrived_ns - e).abs() < self.tick_ns / 4);
        let start = match on_schedule {
            Some(e) => arrived_ns.min(e + CREEP_NS),
            None => arrived_ns,
        };
        *expected = Some(start + self.tick_ns);
    }

    /// Whether some sender's burst is expected about now and has not come yet.
    pub fn watching(&self, now_ns: i64) -> bool {
        self.expected_ns
            .iter()
            .flatten()
            .any(|&e| (e - BEFORE_NS..=e + AFTER_NS).contains(&now_ns))
    }

    /// The next time a watch begins, after `now_ns` (to end a sleep there).
    pub fn next_watch_ns(&self, now_ns: i64) -> Option<i64> {
        self.expected_ns
            .iter()
            .flatten()
            .map(|&e| e - BEFORE_NS)
            .filter(|&t| t > now_ns)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: i64 = 40_000_000;

    #[test]
    fn watches_around_each_senders_next_tick_until_the_burst_comes() {
        let mut w = BurstWatch::new(2, Some(TICK));
        assert!(!w.watching(0));
        w.arrival(0, 1_000_000);
        w.arrival(0, 1_050_000); // the same burst: the pair's second packet
        let next = 1_000_000 + TICK;
        assert_eq!(w.next_watch_ns(2_000_000), Some(next - BEFORE_NS));
        assert!(!w.watching(next - BEFORE_NS - 1));
        assert!(w.watching(next - BEFORE_NS));
        assert!(w.watching(next + AFTER_NS));
        assert!(
            !w.watching(next + AFTER_NS + 1),
            "a burst that does not come is not waited for longer"
        );
        // The burst comes 30 µs late: the watch ends, the next is a tick after the expected time.
        w.arrival(0, next + 30_000);
        assert!(!w.watching(next + 40_000));
        assert_eq!(
            w.next_watch_ns(next + 40_000),
            Some(next + CREEP_NS + TICK - BEFORE_NS)
        );
    }

    #[test]
    fn follows_the_earliest_arrivals_and_a_new_schedule() {
        let mut w = BurstWatch::new(1, Some(TICK));
        w.arrival(0, 150_000); // a late first wake-up
        w.arrival(0, TICK + 5_000); // the next tick, on time
        assert_eq!(
            w.next_watch_ns(TICK + 10_000),
            Some(2 * TICK + 5_000 - BEFORE_NS)
        );
        // A burst half a tick off is a new schedule (the sender restarted), not lateness.
        w.arrival(0, 2 * TICK + TICK / 2);
        assert_eq!(
            w.next_watch_ns(2 * TICK + TICK / 2 + 1),
            Some(3 * TICK + TICK / 2 - BEFORE_NS)
        );
    }

    #[test]
    fn without_a_tick_it_watches_for_nothing() {
        let mut w = BurstWatch::new(4, None);
        w.arrival(1, 1_000);
        assert!(!w.watching(1_000 + TICK));
        assert_eq!(w.next_watch_ns(0), None);
    }
}
