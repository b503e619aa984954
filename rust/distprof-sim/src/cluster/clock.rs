//! A simulated host clock: S(t) = t + phase(t), with phase the integral of a rate that
//! starts at a fixed drift and wanders as a random walk (white frequency noise), sampled
//! at knots `KNOT_NS` apart with a constant rate in between. A servo may rewrite the rates
//! (`discipline`), and the phase may step at a knot (a leap second, `date -s`); a clock
//! that stepped backwards reads the same value twice, so it is inverted exactly, piece by
//! piece, instead of by the fixed point that serves a continuous clock.

use super::random::Stream;

/// The rate is constant over this interval; fine enough that a 4 s window sees the walk.
pub const KNOT_NS: f64 = 250_000_000.0;

#[derive(Debug, Clone)]
pub struct SimClock {
    t0_ns: f64,
    /// phase at the start of each knot (after a step there), ns.
    phase_ns: Vec<f64>,
    /// rate (dS/dt - 1) over [knot k, knot k+1).
    rate: Vec<f64>,
    /// phase at t0, before any step: where `integrate` starts.
    start_phase_ns: f64,
    /// (knot, ns) the phase jumps by at the start of that knot, in knot order.
    steps: Vec<(usize, f64)>,
    /// Only for a clock with steps: per knot, the largest reading up to its end and the
    /// smallest reading from its start on; they make the exact inversion a binary search.
    max_read_to_end: Vec<f64>,
    min_read_from_start: Vec<f64>,
}

impl SimClock {
    /// `offset_ns` is the phase at t = 0.
    pub fn new(
        t0_ns: f64,
        t1_ns: f64,
        offset_ns: f64,
        drift_ppb: f64,
        wander_ppb_per_sqrt_s: f64,
        rng: &mut Stream,
    ) -> Self {
        let n = ((t1_ns - t0_ns) / KNOT_NS).ceil().max(1.0) as usize + 2;
        let mut rate = Vec::with_capacity(n);
        let mut r = drift_ppb * 1e-9;
        let step_sigma = wander_ppb_per_sqrt_s * 1e-9 * (KNOT_NS * 1e-9).sqrt();
        for _ in 0..n {
            rate.push(r);
            r += rng.normal(step_sigma);
        }
        let mut phase_ns = Vec::with_capacity(n + 1);
        let mut p = 0.0;
        for r in &rate {
            phase_ns.push(p);
            p += r * KNOT_NS;
        }
        phase_ns.push(p);
        let mut c = Self {
            t0_ns,
            phase_ns,
            rate,
            start_phase_ns: 0.0,
            steps: Vec::new(),
            max_read_to_end: Vec::new(),
            min_read_from_start: Vec::new(),
        };
        let shift = offset_ns - c.phase(0.0);
        c.phase_ns.iter_mut().for_each(|v| *v += shift);
        c.start_phase_ns = c.phase_ns[0];
        c
    }

    /// How many knots the clock has; the last one's rate holds on to any later time.
    pub fn knot_count(&self) -> usize {
        self.rate.len()
    }

    /// The knot that holds true time `t_ns`.
    pub fn knot_of(&self, t_ns: f64) -> usize {
        (((t_ns - self.t0_ns) / KNOT_NS).floor().max(0.0) as usize).min(self.rate.len() - 1)
    }

    /// True time at which knot k starts.
    pub fn knot_start_ns(&self, k: usize) -> f64 {
        self.t0_ns + k as f64 * KNOT_NS
    }

    /// The rate (dS/dt - 1) over knot k.
    pub fn rate_of_knot(&self, k: usize) -> f64 {
        self.rate[k]
    }

    /// Rewrites the rates (a servo's corrections, a slew) and integrates the phase again
    /// from the first knot's, so that what happened before the first changed knot stays.
    pub fn adjust_rates(&mut self, change: impl FnOnce(&mut [f64])) {
        change(&mut self.rate);
        self.integrate();
    }

    /// Makes the phase jump by `step_ns` at the start of knot k (and stay jumped).
    pub fn add_step(&mut self, k: usize, step_ns: f64) {
        let at = self.steps.partition_point(|s| s.0 <= k);
        self.steps.insert(at, (k, step_ns));
        self.integrate();
    }

    /// The phase at every knot from the first knot's phase, the rates and the steps.
    fn integrate(&mut self) {
        let mut p = self.start_phase_ns;
        let mut steps = self.steps.iter().peekable();
        for k in 0..self.rate.len() {
            while let Some(&(_, ns)) = steps.next_if(|s| s.0 == k) {
                p += ns;
            }
            self.phase_ns[k] = p;
            p += self.rate[k] * KNOT_NS;
        }
        self.phase_ns[self.rate.len()] = p;
        self.max_read_to_end.clear();
        self.min_read_from_start.clear();
        if self.steps.is_empty() {
            return;
        }
        let mut max = f64::NEG_INFINITY;
        for k in 0..self.rate.len() {
            max = max.max(self.knot_start_ns(k) + KNOT_NS + self.phase_ns[k] + self.rate[k] * KNOT_NS);
            self.max_read_to_end.push(max);
        }
        let mut min = f64::INFINITY;
        self.min_read_from_start = vec![0.0; self.rate.len()];
        for k in (0..self.rate.len()).rev() {
            min = min.min(self.knot_start_ns(k) + self.phase_ns[k]);
            self.min_read_from_start[k] = min;
        }
    }

    pub fn phase(&self, t_ns: f64) -> f64 {
        let k = self.knot_of(t_ns);
        self.phase_ns[k] + self.rate[k] * (t_ns - self.t0_ns - k as f64 * KNOT_NS)
    }

    /// The clock reading (without the epoch) at true time t.
    pub fn read(&self, t_ns: f64) -> f64 {
        t_ns + self.phase(t_ns)
    }

    /// The true time at which the clock reads `s_ns`; for a clock that stepped, the first
    /// one (`invert_first`).
    pub fn invert(&self, s_ns: f64) -> f64 {
        if !self.steps.is_empty() {
            return self.invert_first(s_ns);
        }
        // Fixed point: the rate is tiny.
        let mut t = s_ns - self.phase(s_ns);
        for _ in 0..4 {
            t = s_ns - self.phase(t);
        }
        t
    }

    /// The first true time at which the clock reads `s_ns` or more: where a window that
    /// starts at local `s_ns` starts in true time. A reading a forward step skipped maps to
    /// the step.
    pub fn invert_first(&self, s_ns: f64) -> f64 {
        if self.steps.is_empty() {
            return self.invert(s_ns);
        }
        let k = self.max_read_to_end.partition_point(|&m| m < s_ns).min(self.rate.len() - 1);
        let t = self.within_knot(k, s_ns);
        if k == 0 { t } else { t.max(self.knot_start_ns(k)) }
    }

    /// The last true time at which the clock reads less than `s_ns`: where a window that
    /// ends at local `s_ns` ends in true time. After a backward step the clock reads a
    /// window's times twice; the window spans both passes.
    pub fn invert_last(&self, s_ns: f64) -> f64 {
        if self.steps.is_empty() {
            return self.invert(s_ns);
        }
        let k = self.min_read_from_start.partition_point(|&m| m < s_ns).saturating_sub(1);
        let t = self.within_knot(k, s_ns);
        if k + 1 == self.rate.len() { t } else { t.min(self.knot_start_ns(k + 1)) }
    }

    /// The true time in knot k's line (extended either side) that reads `s_ns`.
    fn within_knot(&self, k: usize, s_ns: f64) -> f64 {
        let start = self.knot_start_ns(k);
        start + (s_ns - start - self.phase_ns[k]) / (1.0 + self.rate[k])
    }
}

#[cfg(test)]
mod tests {
    use super::super::random::stream;
    use super::*;

    fn clock(drift_ppb: f64) -> SimClock {
        SimClock::new(-2.5e9, 60e9, 1e6, drift_ppb, 1.0, &mut stream(9, 1, 0, 0))
    }

    /// A step is a step: the reading jumps by exactly its size at the knot, and the
    /// inversion finds both passes of a time read twice.
    #[test]
    fn a_backward_step_jumps_by_its_size_and_inverts_to_both_passes() {
        let mut c = clock(20_000.0);
        let k = c.knot_of(30e9);
        let at = c.knot_start_ns(k);
        let before = c.read(at - 1.0);
        c.add_step(k, -1e9);
        assert!((c.read(at) - before + 1e9).abs() < 2.0, "{} {}", c.read(at), before);
        // Before the step nothing changed.
        assert_eq!(c.read(at - 1.0), before);
        // A reading 0.5 s before the step occurs twice: before and ~1 s after the step.
        let s = before - 0.5e9;
        let (first, last) = (c.invert_first(s), c.invert_last(s));
        assert!((c.read(first) - s).abs() < 1e-3 && first < at, "{first}");
        assert!((c.read(last) - s).abs() < 1e-3 && last > at + 0.4e9, "{last}");
        // A continuous clock inverts to one time.
        let plain = clock(20_000.0);
        assert_eq!(plain.invert_first(s), plain.invert_last(s));
        assert!((plain.read(plain.invert(s)) - s).abs() < 1e-3);
    }

    #[test]
    fn a_forward_step_maps_the_skipped_readings_to_the_step() {
        let mut c = clock(-5_000.0);
        let k = c.knot_of(10e9);
        let at = c.knot_start_ns(k);
        c.add_step(k, 0.2e9);
        let skipped = c.read(at - 1.0) + 0.1e9;
        assert_eq!(c.invert_first(skipped), at);
        let later = c.read(at) + 1e9;
        assert!((c.read(c.invert(later)) - later).abs() < 1e-3);
    }

    #[test]
    fn adjusted_rates_change_the_phase_only_from_the_changed_knot() {
        let mut c = clock(0.0);
        let k = 100;
        let t = c.knot_start_ns(k);
        let (before, after) = (c.read(t - 1e6), c.read(t + KNOT_NS));
        c.adjust_rates(|r| r[k] += 1e-6);
        assert_eq!(c.read(t - 1e6), before);
        assert!((c.read(t + KNOT_NS) - after - 1e-6 * KNOT_NS).abs() < 1e-3);
    }
}
