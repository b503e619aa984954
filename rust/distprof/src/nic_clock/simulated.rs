//! A simulated NIC clock for tests and `distprof local`: this machine has no PHC (its
//! kernel has no PTP device and loads no modules, docs/probing.md), so the hardware path
//! is exercised through the `PhcClock` seam with a clock of known offset, drift and read
//! jitter, and with NIC "hardware stamps" made from the kernel's software stamps.

use super::{PhcClock, PhcSample};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io;

/// What the simulated NIC clock is: `phc = real + offset + drift (real - epoch)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimulatedNicClock {
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Mean width of a sample's bracket (exponential), the PHC read anywhere inside it.
    pub read_jitter_ns: f64,
    pub epoch_real_ns: i64,
    /// Every `miss_one_in`-th packet gets no hardware stamp (0: none missing), as a NIC
    /// that stamps only some packets would do.
    pub miss_one_in: u32,
    /// The clock stops answering after this many samples (0: never), as a NIC that is
    /// reset or removed does.
    #[serde(default)]
    pub fail_after_samples: u64,
}

impl SimulatedNicClock {
    /// A PHC on TAI (37 s ahead of UTC) running 20 ppm fast, 500 ns mean read jitter.
    pub fn tai_20ppm(epoch_real_ns: i64) -> SimulatedNicClock {
        SimulatedNicClock {
            offset_ns: 37_000_000_000,
            drift_ppm: 20.0,
            read_jitter_ns: 500.0,
            epoch_real_ns,
            miss_one_in: 0,
            fail_after_samples: 0,
        }
    }

    /// The PHC's reading at real time `real_ns`.
    pub fn phc_at(&self, real_ns: i64) -> i64 {
        real_ns + self.offset_ns + (self.drift_ppm * 1e-6 * (real_ns - self.epoch_real_ns) as f64).round() as i64
    }
}

/// The simulated clock with its own random reads and packet count.
pub struct SimulatedPhc {
    params: SimulatedNicClock,
    rng: rand::rngs::StdRng,
    packets: u64,
    samples: u64,
}

impl SimulatedPhc {
    pub fn new(params: SimulatedNicClock, seed: u64) -> SimulatedPhc {
        SimulatedPhc { params, rng: rand::rngs::StdRng::seed_from_u64(seed), packets: 0, samples: 0 }
    }

    pub fn params(&self) -> SimulatedNicClock {
        self.params
    }

    /// A sample whose PHC read happened at real time `real_ns`, inside a bracket of random
    /// width placed at random around it.
    pub fn sample_at(&mut self, real_ns: i64) -> PhcSample {
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let width = (-u.ln() * self.params.read_jitter_ns).round() as i64;
        let before = real_ns - (self.rng.gen_range(0.0..=1.0) * width as f64).round() as i64;
        PhcSample { sys_before_ns: before, phc_ns: self.params.phc_at(real_ns), sys_after_ns: before + width }
    }

    /// The NIC's stamp of a packet whose software stamp (real time) is `real_ns`; `None`
    /// for a packet the NIC did not stamp.
    pub fn stamp(&mut self, real_ns: i64) -> Option<i64> {
        self.packets += 1;
        let miss = self.params.miss_one_in > 0 && self.packets % self.params.miss_one_in as u64 == 0;
        (!miss).then(|| self.params.phc_at(real_ns))
    }
}

impl PhcClock for SimulatedPhc {
    fn sample(&mut self) -> io::Result<PhcSample> {
        self.samples += 1;
        let fail = self.params.fail_after_samples;
        if fail > 0 && self.samples > fail {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        Ok(self.sample_at(crate::clock::realtime_ns()))
    }

    fn describe(&self) -> String {
        let p = &self.params;
        format!(
            "simulated NIC clock ({:+} ns, {:+} ppm, {} ns read jitter{})",
            p.offset_ns,
            p.drift_ppm,
            p.read_jitter_ns,
            if p.miss_one_in > 0 { format!(", 1 in {} packets unstamped", p.miss_one_in) } else { String::new() }
        )
    }

    fn phc_index(&self) -> Option<u32> {
        None
    }
}
