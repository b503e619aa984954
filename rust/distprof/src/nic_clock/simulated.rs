//! A simulated NIC clock for tests and `distprof local`: this machine has no PHC (its
//! kernel has no PTP device and loads no modules, docs/probing.md), so the hardware path
//! is exercised through the `PhcClock` seam with a clock of known offset, drift and read
//! jitter, and with NIC "hardware stamps" made from the kernel's software stamps.
//!
//! The clock can also misbehave as real ones do (`ClockFault`): the PHC steps or changes
//! frequency (ptp4l or phc2sys correcting it), the host's CLOCK_REALTIME steps (a leap
//! second, which a PHC on TAI does not take) or is slewed (ntpd at up to 500 ppm), and the
//! driver latches the PHC early in the system-clock bracket instead of at its middle.
//! `nic_clock::scenarios` names each of these.

use super::{PhcClock, PhcSample};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io;

/// One way the clocks depart from a steady line, from real time `at_real_ns` on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClockFault {
    #[default]
    None,
    /// The PHC jumps by `step_ns` (ptp4l stepping it, or a driver reset).
    PhcStep { at_real_ns: i64, step_ns: i64 },
    /// The PHC's rate changes by `ppm` (phc2sys adjusting its frequency).
    PhcFrequencyStep { at_real_ns: i64, ppm: f64 },
    /// CLOCK_REALTIME jumps by `step_ns`: -1 s for an inserted leap second, which a PHC on
    /// TAI does not take.
    HostStep { at_real_ns: i64, step_ns: i64 },
    /// CLOCK_REALTIME runs `ppm` faster for `for_ns` (ntpd slewing an offset away; the
    /// kernel caps a slew at 500 ppm).
    HostSlew { at_real_ns: i64, for_ns: i64, ppm: f64 },
}

/// What the simulated NIC clock is: `phc = real + offset + drift (real - epoch)`, plus
/// `fault`; the host clock is the real time plus the host part of `fault`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimulatedNicClock {
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Mean width of a sample's bracket beyond `bracket_floor_ns` (exponential).
    pub read_jitter_ns: f64,
    pub epoch_real_ns: i64,
    /// Every `miss_one_in`-th packet gets no hardware stamp (0: none missing), as a NIC
    /// that stamps only some packets would do.
    pub miss_one_in: u32,
    /// The clock stops answering after this many samples (0: never), as a NIC that is
    /// reset or removed does.
    #[serde(default)]
    pub fail_after_samples: u64,
    /// The narrowest a bracket gets: the two system reads of a `PTP_SYS_OFFSET_EXTENDED`
    /// sample are about 1.5 us apart on common NICs (a PCIe read in between).
    #[serde(default)]
    pub bracket_floor_ns: i64,
    /// Where in the bracket the PHC is latched, as fractions of its width: `[0, 1]`
    /// (anywhere, no bias) by default; a driver that latches right after its first system
    /// read gives e.g. `[0.05, 0.2]`, a midpoint 30-45% of the width late.
    #[serde(default = "anywhere_in_bracket")]
    pub latch_within: [f64; 2],
    #[serde(default)]
    pub fault: ClockFault,
}

fn anywhere_in_bracket() -> [f64; 2] {
    [0.0, 1.0]
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
            bracket_floor_ns: 0,
            latch_within: anywhere_in_bracket(),
            fault: ClockFault::None,
        }
    }

    /// The PHC's reading at real time `real_ns`.
    pub fn phc_at(&self, real_ns: i64) -> i64 {
        let steady = real_ns + self.offset_ns + (self.drift_ppm * 1e-6 * (real_ns - self.epoch_real_ns) as f64).round() as i64;
        steady
            + match self.fault {
                ClockFault::PhcStep { at_real_ns, step_ns } if real_ns >= at_real_ns => step_ns,
                ClockFault::PhcFrequencyStep { at_real_ns, ppm } if real_ns >= at_real_ns => {
                    (ppm * 1e-6 * (real_ns - at_real_ns) as f64).round() as i64
                }
                _ => 0,
            }
    }

    /// CLOCK_REALTIME's reading at real time `real_ns`: what a stamp converted to host
    /// time should come out as.
    pub fn host_at(&self, real_ns: i64) -> i64 {
        real_ns
            + match self.fault {
                ClockFault::HostStep { at_real_ns, step_ns } if real_ns >= at_real_ns => step_ns,
                ClockFault::HostSlew { at_real_ns, for_ns, ppm } if real_ns >= at_real_ns => {
                    (ppm * 1e-6 * (real_ns - at_real_ns).min(for_ns) as f64).round() as i64
                }
                _ => 0,
            }
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
    /// width (the floor plus an exponential part), latched at a random point of
    /// `latch_within` of it; the two system reads are the host clock's.
    pub fn sample_at(&mut self, real_ns: i64) -> PhcSample {
        let p = self.params;
        let u: f64 = self.rng.gen_range(f64::EPSILON..1.0);
        let width = p.bracket_floor_ns + (-u.ln() * p.read_jitter_ns).round() as i64;
        let [lo, hi] = p.latch_within;
        let latch = if hi > lo { self.rng.gen_range(lo..=hi) } else { lo };
        let before = real_ns - (latch * width as f64).round() as i64;
        PhcSample { sys_before_ns: p.host_at(before), phc_ns: p.phc_at(real_ns), sys_after_ns: p.host_at(before + width) }
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
            "simulated NIC clock ({:+} ns, {:+} ppm, {} ns read jitter{}{})",
            p.offset_ns,
            p.drift_ppm,
            p.read_jitter_ns,
            if p.miss_one_in > 0 { format!(", 1 in {} packets unstamped", p.miss_one_in) } else { String::new() },
            if p.fault != ClockFault::None { format!(", {:?}", p.fault) } else { String::new() }
        )
    }

    fn phc_index(&self) -> Option<u32> {
        None
    }
}
