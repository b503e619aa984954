//! Seeded noise for the estimator's tests: one xorshift64 generator, so that a test
//! states its noise model (exponential queueing, Gaussian jitter) and not a generator.
//! Each test keeps its own seed: its thresholds were set on that sequence.

pub(crate) struct XorShift(u64);

impl XorShift {
    /// `seed` must not be 0 (xorshift stays at 0).
    pub(crate) fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift64 needs a nonzero seed");
        XorShift(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1): safe to take the log of.
    pub(crate) fn open_unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Exponential with this mean (a path's queueing delay).
    pub(crate) fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal (Box-Muller, one of the pair).
    pub(crate) fn gauss(&mut self) -> f64 {
        (-2.0 * self.open_unit().ln()).sqrt() * (std::f64::consts::TAU * self.open_unit()).cos()
    }
}
