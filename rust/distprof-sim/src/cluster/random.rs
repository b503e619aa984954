//! Deterministic random streams for the simulator: every (seed, purpose, index) gets its
//! own generator, so a window can be generated without generating the ones before it and
//! the result never depends on the order of generation.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn stream(seed: u64, purpose: u64, a: u64, b: u64) -> Stream {
    let s = splitmix(splitmix(splitmix(splitmix(seed) ^ purpose) ^ a) ^ b);
    Stream(StdRng::seed_from_u64(s))
}

pub struct Stream(StdRng);

impl Stream {
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.0.gen::<f64>()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.gen::<f64>() < p
    }
    /// Exponential with the given mean (inverse CDF).
    pub fn exp(&mut self, mean: f64) -> f64 {
        if mean <= 0.0 {
            return 0.0;
        }
        -mean * (1.0 - self.0.gen::<f64>()).ln()
    }
    /// Normal with mean 0 (Box-Muller).
    pub fn normal(&mut self, sigma: f64) -> f64 {
        if sigma <= 0.0 {
            return 0.0;
        }
        let u1 = 1.0 - self.0.gen::<f64>();
        let u2 = self.0.gen::<f64>();
        sigma * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
