//! How long before a datagram is due, and after one arrived, the relay stays awake instead
//! of sleeping, within a CPU budget.
//!
//! A sleep ends late by an amount that depends on the machine (a few µs on an idle host;
//! tens of µs in a virtual machine whose idle vCPU the host has to wake). A send started
//! late is one-way delay no real link adds, so the relay wakes early by a high quantile of
//! its observed lateness and watches the clock from there. An arrival that finds it asleep
//! is read late too (p90 30 µs in the jitter run), which makes a datagram with little
//! delay to go late, so after each arrival, when the next datagram of a burst is likely,
//! it stays awake as long as the budget allows. The budget is `BUDGET_SHARE` of a core at
//! the datagram rate of the last period (two spans per datagram), but the margin is never
//! below `MIN_NS`: the fixed margin the relay had before, whose cost at high rates is the
//! ceiling (there the budget leaves no lingering).

/// The margin never falls below this (the relay's former fixed margin).
pub const MIN_NS: i64 = 10_000;
/// Nor rises above this, however late wake-ups come.
pub const MAX_NS: i64 = 100_000;
/// Share of one core that staying awake (before due times and after arrivals) may take,
/// unless `MIN_NS` per datagram is more.
pub const BUDGET_SHARE: f64 = 0.20;
/// The quantile of wake-up lateness the margin covers.
const QUANTILE: f64 = 0.95;
/// Wake-ups remembered; the margin is recomputed every `RECOMPUTE_EVERY` of them.
const HISTORY: usize = 256;
const RECOMPUTE_EVERY: usize = 32;
/// Period over which the datagram rate is counted, ns.
const RATE_PERIOD_NS: i64 = 1_000_000_000;

#[derive(Debug, Clone)]
pub struct SpinMargin {
    recent: Vec<i64>,
    next: usize,
    since_recompute: usize,
    /// The quantile of recent lateness (before the budget).
    learned_ns: i64,
    /// Datagrams sent in the current and in the last full rate period.
    period_start_ns: i64,
    period_sent: u64,
    last_rate_per_s: f64,
}

impl SpinMargin {
    pub fn new(now_ns: i64) -> SpinMargin {
        SpinMargin {
            recent: Vec::with_capacity(HISTORY),
            next: 0,
            since_recompute: 0,
            learned_ns: MIN_NS,
            period_start_ns: now_ns,
            period_sent: 0,
            last_rate_per_s: 0.0,
        }
    }

    /// A timed wake-up came `late_ns` after the time asked for.
    pub fn observe_wake(&mut self, late_ns: i64) {
        let late = late_ns.max(0);
        if self.recent.len() < HISTORY {
            self.recent.push(late);
        } else {
            self.recent[self.next] = late;
        }
        self.next = (self.next + 1) % HISTORY;
        self.since_recompute += 1;
        if self.since_recompute >= RECOMPUTE_EVERY {
            self.since_recompute = 0;
            let mut v = self.recent.clone();
            let k = ((QUANTILE * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            self.learned_ns = *v.select_nth_unstable(k).1;
        }
    }

    /// One datagram sent at `now_ns` (for the rate the budget is shared by).
    pub fn observe_send(&mut self, now_ns: i64) {
        self.period_sent += 1;
        let elapsed = now_ns - self.period_start_ns;
        if elapsed >= RATE_PERIOD_NS {
            self.last_rate_per_s = self.period_sent as f64 * 1e9 / elapsed as f64;
            self.period_sent = 0;
            self.period_start_ns = now_ns;
        }
    }

    /// How long before the next due time to stop sleeping.
    pub fn margin_ns(&self) -> i64 {
        self.learned_ns.clamp(MIN_NS, self.linger_ns().max(MIN_NS))
    }

    /// How long to stay awake after an arrival: the budget's share per datagram (none
    /// where the budget is spent by the margins, e.g. at 64 nodes).
    pub fn linger_ns(&self) -> i64 {
        let budget_ns = if self.last_rate_per_s > 0.0 { BUDGET_SHARE * 1e9 / (2.0 * self.last_rate_per_s) } else { MAX_NS as f64 };
        (budget_ns as i64).min(MAX_NS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_the_95th_percentile_of_wake_lateness() {
        let mut m = SpinMargin::new(0);
        assert_eq!(m.margin_ns(), MIN_NS);
        // 90 % of wake-ups 5 µs late, 10 % 40 µs: the margin covers the 40 µs ones.
        for i in 0..HISTORY {
            m.observe_wake(if i % 10 == 0 { 40_000 } else { 5_000 });
        }
        assert_eq!(m.margin_ns(), 40_000);
        // Prompt wake-ups bring it back down, but not below the former fixed margin.
        for _ in 0..HISTORY {
            m.observe_wake(2_000);
        }
        assert_eq!(m.margin_ns(), MIN_NS);
        for _ in 0..HISTORY {
            m.observe_wake(5_000_000);
        }
        assert_eq!(m.margin_ns(), MAX_NS);
    }

    #[test]
    fn the_cpu_budget_holds_it_down_at_high_datagram_rates() {
        let mut m = SpinMargin::new(0);
        for _ in 0..HISTORY {
            m.observe_wake(60_000);
        }
        // 1500 datagrams/s (4 nodes): 20 % of a core is 2 x 67 µs per datagram.
        for i in 1..=1500 {
            m.observe_send(i * 1_000_000_000 / 1500);
        }
        assert_eq!(m.margin_ns(), 60_000);
        for _ in 0..HISTORY {
            m.observe_wake(90_000);
        }
        assert_eq!((m.margin_ns(), m.linger_ns()), (66_666, 66_666));
        // 51 200 datagrams/s (64 nodes): the budget is below the fixed margin, which stays.
        let t0 = 2_000_000_000;
        for i in 0..=51_200 {
            m.observe_send(t0 + i * 1_000_000_000 / 51_200);
        }
        assert_eq!((m.margin_ns(), m.linger_ns()), (MIN_NS, 1_953));
    }
}
