//! A simulated host clock: S(t) = t + phase(t), with phase the integral of a rate that
//! starts at a fixed drift and wanders as a random walk (white frequency noise), sampled
//! at knots `KNOT_NS` apart with a constant rate in between.

use super::random::Stream;

/// The rate is constant over this interval; fine enough that a 4 s window sees the walk.
pub const KNOT_NS: f64 = 250_000_000.0;

#[derive(Debug, Clone)]
pub struct SimClock {
    t0_ns: f64,
    /// phase at each knot, ns.
    phase_ns: Vec<f64>,
    /// rate (dS/dt - 1) over [knot k, knot k+1).
    rate: Vec<f64>,
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
        let mut c = Self { t0_ns, phase_ns, rate };
        let shift = offset_ns - c.phase(0.0);
        c.phase_ns.iter_mut().for_each(|v| *v += shift);
        c
    }

    fn knot(&self, t_ns: f64) -> usize {
        (((t_ns - self.t0_ns) / KNOT_NS).floor().max(0.0) as usize).min(self.rate.len() - 1)
    }

    pub fn phase(&self, t_ns: f64) -> f64 {
        let k = self.knot(t_ns);
        self.phase_ns[k] + self.rate[k] * (t_ns - self.t0_ns - k as f64 * KNOT_NS)
    }

    /// The clock reading (without the epoch) at true time t.
    pub fn read(&self, t_ns: f64) -> f64 {
        t_ns + self.phase(t_ns)
    }

    /// The true time at which the clock reads `s_ns` (fixed point: the rate is tiny).
    pub fn invert(&self, s_ns: f64) -> f64 {
        let mut t = s_ns - self.phase(s_ns);
        for _ in 0..4 {
            t = s_ns - self.phase(t);
        }
        t
    }
}
