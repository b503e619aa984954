//! Named NIC clock scenarios, and a replay that judges every converted stamp against the
//! simulated truth.
//!
//! Each scenario is a `SimulatedNicClock` that breaks one way real clocks do, 6 s into a
//! 12 s run (after the fit has its full 4 s span): the tests assert that no stamp carries a
//! larger error than the mapping states for it, and `distprof bench nic-clock` prints the
//! count per scenario (goal 0). The replay drives the same `PhcMapping` the socket uses,
//! in simulated time: a sample every `SAMPLE_EVERY`, stamps in between, half of each gap's
//! stamps converted before the next sample is added and half after it (the probe engine
//! converts the stamps of a pass after sampling the clock, so some are taken before the
//! newest sample).

use super::mapping::{Converted, PhcMapping, SAMPLE_EVERY};
use super::simulated::{ClockFault, SimulatedNicClock, SimulatedPhc};
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// How long a scenario runs and when its fault comes, from its start (real ns). The fault
/// falls between two samples, not on one.
pub const SCENARIO_NS: i64 = 12_000_000_000;
pub const FAULT_AT_NS: i64 = 6_012_345_678;

/// A named way for the NIC clock or the host clock to break.
#[derive(Debug, Clone, Copy)]
pub struct PhcScenario {
    pub name: &'static str,
    pub what: &'static str,
    fault: ClockFault,
    /// Bracket floor and latch range (see `SimulatedNicClock`), `None` for the default read.
    biased_latch: Option<(i64, [f64; 2])>,
}

impl PhcScenario {
    /// The scenario's NIC clock for a run starting at real time `start_ns`: a PHC on TAI at
    /// 20 ppm, 500 ns mean read jitter (`SimulatedNicClock::tai_20ppm`), with the fault.
    pub fn nic(&self, start_ns: i64) -> SimulatedNicClock {
        self.applied_to(SimulatedNicClock::tai_20ppm(start_ns), start_ns)
    }

    /// True when the fault is the host clock's: the simulated NIC can show it to the
    /// mapping, but a real run's other stamps (kernel, the engine's clock) would not follow.
    pub fn breaks_the_host_clock(&self) -> bool {
        matches!(self.fault, ClockFault::HostStep { .. } | ClockFault::HostSlew { .. })
    }

    /// `nic` with the scenario's fault (`FAULT_AT_NS` after `start_ns`) and reads.
    pub fn applied_to(&self, nic: SimulatedNicClock, start_ns: i64) -> SimulatedNicClock {
        let at = start_ns + FAULT_AT_NS;
        let fault = match self.fault {
            ClockFault::None => ClockFault::None,
            ClockFault::PhcStep { step_ns, .. } => ClockFault::PhcStep { at_real_ns: at, step_ns },
            ClockFault::PhcFrequencyStep { ppm, .. } => ClockFault::PhcFrequencyStep { at_real_ns: at, ppm },
            ClockFault::HostStep { step_ns, .. } => ClockFault::HostStep { at_real_ns: at, step_ns },
            ClockFault::HostSlew { for_ns, ppm, .. } => ClockFault::HostSlew { at_real_ns: at, for_ns, ppm },
        };
        let mut nic = SimulatedNicClock { fault, ..nic };
        if let Some((floor, latch)) = self.biased_latch {
            nic.bracket_floor_ns = floor;
            nic.read_jitter_ns = 200.0;
            nic.latch_within = latch;
        }
        nic
    }
}

const fn phc_step(name: &'static str, what: &'static str, step_ns: i64) -> PhcScenario {
    PhcScenario { name, what, fault: ClockFault::PhcStep { at_real_ns: 0, step_ns }, biased_latch: None }
}

/// Every named scenario, the steady reference first.
pub const PHC_SCENARIOS: [PhcScenario; 8] = [
    PhcScenario { name: "phc-steady", what: "no fault: the reference", fault: ClockFault::None, biased_latch: None },
    phc_step("phc-step", "the PHC steps by +20 us", 20_000),
    phc_step("phc-step-200us", "the PHC steps by -200 us", -200_000),
    phc_step("phc-step-900us", "the PHC steps by +900 us", 900_000),
    PhcScenario {
        name: "phc-frequency-step",
        what: "the PHC's rate changes by +10 ppm",
        fault: ClockFault::PhcFrequencyStep { at_real_ns: 0, ppm: 10.0 },
        biased_latch: None,
    },
    PhcScenario {
        name: "leap-second",
        what: "CLOCK_REALTIME steps back 1 s (an inserted leap second); the PHC on TAI does not",
        fault: ClockFault::HostStep { at_real_ns: 0, step_ns: -1_000_000_000 },
        biased_latch: None,
    },
    PhcScenario {
        name: "host-slew",
        what: "ntpd slews CLOCK_REALTIME at 500 ppm for 3 s (1.5 ms), starting and ending in the run",
        fault: ClockFault::HostSlew { at_real_ns: 0, for_ns: 3_000_000_000, ppm: 500.0 },
        biased_latch: None,
    },
    PhcScenario {
        name: "phc-latch-bias",
        what: "PTP_SYS_OFFSET_EXTENDED-like reads: 1.4 us bracket floor, the PHC latched 5-20% into it",
        fault: ClockFault::None,
        biased_latch: Some((1_400, [0.05, 0.2])),
    },
];

/// The scenario called `name`.
pub fn phc_scenario(name: &str) -> Option<PhcScenario> {
    PHC_SCENARIOS.iter().copied().find(|s| s.name == name)
}

/// What became of a replay's stamps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayOutcome {
    pub stamps: u64,
    /// Stamps the mapping would not convert (none before the first sample here).
    pub not_converted: u64,
    /// Stamps settled with a break between their samples (their error holds its size).
    pub across_break: u64,
    /// Stamps whose error against the truth exceeds the error stated for them: the goal is 0.
    pub outside_stated: u64,
    /// The largest amount by which a stamp's error exceeded its stated error, ns.
    pub worst_excess_ns: f64,
    /// The largest error against the truth of a stamp not across a break, ns.
    pub worst_error_ns: f64,
    /// Median and largest stated error of stamps not across a break, ns.
    pub median_stated_ns: f64,
    pub max_stated_ns: f64,
    /// Breaks the mapping detected.
    pub breaks: u64,
}

/// Rounding to whole ns in the simulated clocks and the conversion: a stamp this close to
/// its stated error is within it.
const ROUNDING_NS: f64 = 2.0;

/// Judges stamps against the truth and keeps the tallies.
struct Judge {
    nic: SimulatedNicClock,
    out: ReplayOutcome,
    /// Stated errors of the stamps not across a break.
    stated: Vec<f64>,
}

impl Judge {
    fn stamp(&mut self, host_ns: i64, real_ns: i64, error_ns: f64, across_break: bool) {
        let err = (host_ns - self.nic.host_at(real_ns)).abs() as f64;
        let out = &mut self.out;
        if err > error_ns + ROUNDING_NS {
            out.outside_stated += 1;
            out.worst_excess_ns = out.worst_excess_ns.max(err - error_ns);
        }
        if across_break {
            out.across_break += 1;
        } else {
            out.worst_error_ns = out.worst_error_ns.max(err);
            self.stated.push(error_ns);
        }
    }

    /// Converts the stamp taken at `real_ns`: judged now if its error is known, else left
    /// in `pending` for the next sample to settle.
    fn convert(&mut self, map: &PhcMapping, real_ns: i64, pending: &mut Vec<(i64, i64)>) {
        match map.convert(self.nic.phc_at(real_ns)) {
            Some(Converted { host_ns, error_ns: Some(e), across_break }) => self.stamp(host_ns, real_ns, e, across_break),
            Some(Converted { host_ns, error_ns: None, .. }) => pending.push((host_ns, real_ns)),
            None => self.out.not_converted += 1,
        }
    }
}

/// Samples taken before the first stamp, as the socket takes its warm-up samples before it
/// is handed out (`hardware_stamps`): a mapping of one sample states tens of us.
const WARM_UP_SAMPLES: i64 = 10;

/// Replays `nic` from its `epoch_real_ns` for `SCENARIO_NS`: samples every `SAMPLE_EVERY`
/// (with `seed`'s read jitter), a stamp at a random instant of every `stamp_every_ns` after
/// the warm-up samples.
pub fn replay(nic: SimulatedNicClock, seed: u64, stamp_every_ns: i64) -> ReplayOutcome {
    let mut phc = SimulatedPhc::new(nic, seed);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed_57a4_9500_0001);
    let mut map = PhcMapping::new();
    let mut judge = Judge { nic, out: ReplayOutcome::default(), stated: Vec::new() };
    let gap = SAMPLE_EVERY.as_nanos() as i64;
    let start = nic.epoch_real_ns;
    let mut next_stamp = start + WARM_UP_SAMPLES * gap;
    let mut sample_at = start;
    // Converted stamps taken after the newest sample: the next accepted sample settles them.
    let mut pending: Vec<(i64, i64)> = Vec::new();
    while sample_at <= start + SCENARIO_NS {
        // The stamps of the gap before this sample: the first half converted before it is
        // added, the rest after.
        let mut taken = Vec::new();
        while next_stamp < sample_at {
            taken.push((next_stamp + rng.gen_range(0..stamp_every_ns.max(1))).min(sample_at - 1));
            next_stamp += stamp_every_ns;
        }
        judge.out.stamps += taken.len() as u64;
        let (early, late) = taken.split_at(taken.len() / 2);
        for &real in early {
            judge.convert(&map, real, &mut pending);
        }
        // A wide or refused sample (a bracket the host's step ran through) settles nothing.
        if let Some(settled) = map.add(phc.sample_at(sample_at)) {
            for (host_ns, real) in pending.drain(..) {
                judge.stamp(host_ns, real, settled.error_ns, settled.across_break);
            }
        }
        for &real in late {
            judge.convert(&map, real, &mut pending);
        }
        sample_at += gap;
    }
    // The end settles what is left, as a window's close does.
    if let Some(settled) = map.add_settling(phc.sample_at(sample_at)) {
        for (host_ns, real) in pending.drain(..) {
            judge.stamp(host_ns, real, settled.error_ns, settled.across_break);
        }
    }
    let Judge { mut out, mut stated, .. } = judge;
    out.not_converted += pending.len() as u64;
    stated.sort_by(f64::total_cmp);
    out.median_stated_ns = stated.get(stated.len() / 2).copied().unwrap_or(0.0);
    out.max_stated_ns = stated.last().copied().unwrap_or(0.0);
    out.breaks = map.breaks();
    out
}
