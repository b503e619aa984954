//! Steps of a host clock: the kernel inserting a leap second (every host steps back 1 s
//! when its own clock reaches midnight) or someone running `date -s` on a node.

use super::clock::SimClock;
use super::random::Stream;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ClockStep {
    /// Every node (the reference too) steps by `step_ns` when its own clock reads `at_s`
    /// after the run's start, as a leap second: each host inserts it at its own midnight,
    /// so the steps are as far apart in true time as the clocks are.
    EveryNode { at_s: f64, step_ns: f64 },
    /// Each non-reference node with probability `fraction` steps once, at a uniform instant
    /// in the middle half of the run, by a uniform size within +-[min_step_ns, max_step_ns]:
    /// a manual `date -s`.
    SomeNodes { fraction: f64, min_step_ns: f64, max_step_ns: f64 },
}

impl ClockStep {
    /// An inserted leap second when the clocks read `at_s` into the run.
    pub fn leap_second(at_s: f64) -> Self {
        ClockStep::EveryNode { at_s, step_ns: -1e9 }
    }

    /// One node in eight set by hand, off by 1 ms to 1 s.
    pub fn date_set() -> Self {
        ClockStep::SomeNodes { fraction: 0.125, min_step_ns: 1e6, max_step_ns: 1e9 }
    }

    pub fn problems(&self, duration_s: f64) -> Vec<String> {
        match *self {
            ClockStep::EveryNode { at_s, step_ns } => {
                let mut p = Vec::new();
                if !(at_s.is_finite() && at_s >= 0.0 && at_s <= duration_s) {
                    p.push(format!("step.at_s = {at_s}: must be within the run, 0..={duration_s} s"));
                }
                if !(step_ns.is_finite() && step_ns.abs() <= 1e12) {
                    p.push(format!("step.step_ns = {step_ns}: must be finite and within +-1e12"));
                }
                p
            }
            ClockStep::SomeNodes { fraction, min_step_ns, max_step_ns } => {
                let mut p = Vec::new();
                if !(0.0..=1.0).contains(&fraction) {
                    p.push(format!("step.fraction = {fraction}: must be in [0, 1]"));
                }
                if !(min_step_ns >= 0.0 && max_step_ns >= min_step_ns && max_step_ns <= 1e12) {
                    p.push(format!("step.min_step_ns = {min_step_ns}, max_step_ns = {max_step_ns}: need 0 <= min <= max <= 1e12"));
                }
                p
            }
        }
    }

    /// Steps node `node`'s clock as the plan says (`is_reference`: the reference is never
    /// set by hand); returns the knot and size of its step, if it has one.
    pub fn apply(&self, clock: &mut SimClock, is_reference: bool, duration_s: f64, rng: &mut Stream) -> Option<(usize, f64)> {
        let (at_local_ns, step_ns) = match *self {
            ClockStep::EveryNode { at_s, step_ns } => (at_s * 1e9, step_ns),
            ClockStep::SomeNodes { fraction, min_step_ns, max_step_ns } => {
                // Drawn whether or not the node steps, so each node's draws stay its own.
                let (chance, at, size, sign) =
                    (rng.uniform(0.0, 1.0), rng.uniform(0.25, 0.75), rng.uniform(min_step_ns, max_step_ns), rng.chance(0.5));
                if is_reference || chance >= fraction {
                    return None;
                }
                (at * duration_s * 1e9, if sign { size } else { -size })
            }
        };
        // The step lands at the start of the knot where the clock reads that instant.
        let k = clock.knot_of(clock.invert(at_local_ns)) + 1;
        if k >= clock.knot_count() {
            return None;
        }
        clock.add_step(k, step_ns);
        Some((k, step_ns))
    }
}
