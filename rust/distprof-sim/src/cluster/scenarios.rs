//! The named clock scenarios of issue 29: clocks as real clusters have them, each one
//! change to the reference scenario, runnable by name (`distprof simulate --scenario`,
//! `distprof local --clock-scenario`, `distprof bench accuracy`'s `real_clocks`).
//!
//! A PHC that steps, changes frequency or is read with a biased latch is a NIC clock,
//! not a host clock: it is simulated with the NIC clock mapping
//! (`distprof::nic_clock::SimulatedNicClock`), not here.

use super::{ClockStep, Discipline, NodeDeath, Scenario, Slew};

/// What `distprof local` (real processes, one real clock, the relay between them) can do
/// of a scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LocalEmulation {
    /// It runs as `local` runs anyway.
    Same,
    /// Per node a receive-side bias uniform in +-`max_ns`, as a relay delay on every path
    /// into the node: what two-way probes see of a stamping bias is exactly that.
    StampBias { max_ns: f64 },
    /// The reference node's process is killed at the run's midpoint.
    KillReferenceAtMidpoint,
    /// It cannot, and why.
    Cannot(&'static str),
}

/// Why `local` cannot emulate a host clock that changes frequency or steps.
const LOCAL_CLOCK_IS_A_LINE: &str = "a `distprof local` node's clock is the real clock seen through a virtual \
    clock of fixed offset, drift and a sinusoidal wander (`distprof::clock::VirtualClock`): it cannot change \
    frequency at poll instants, slew, step or random-walk";

pub struct NamedScenario {
    pub name: &'static str,
    pub what: &'static str,
    /// The largest path asymmetry a hop sees in it, ns: the allowance an uncertainty must
    /// state to cover it.
    pub asymmetry_per_hop_ns: f64,
    pub local: LocalEmulation,
    /// The scenario from a base (the reference scenario with the caller's node count,
    /// seed and duration).
    change: fn(Scenario) -> Scenario,
}

impl NamedScenario {
    pub fn apply(&self, base: Scenario) -> Scenario {
        (self.change)(base)
    }
}

pub const SCENARIOS: &[NamedScenario] = &[
    NamedScenario {
        name: "reference",
        what: "free-running crystals (drift up to +-50 ppm, wander 1 ppb/sqrt(s)), symmetric paths",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Same,
        change: |s| s,
    },
    NamedScenario {
        name: "disciplined",
        what: "chrony on every host: a new frequency at every poll (16-64 s) within +-1 ppm of true time, \
               offsets within 100 us",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { discipline: Some(Discipline::chrony()), offset_max_ns: 100_000.0, ..s },
    },
    NamedScenario {
        name: "ntpd-slew",
        what: "ntpd's kernel slew: a quarter of the nodes run 500 ppm fast or slow for 1-10 s \
               (correcting 0.5-5 ms) once, mid-run",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { slew: Some(Slew::ntpd()), ..s },
    },
    NamedScenario {
        name: "wander-5",
        what: "crystals under load: random-walk wander of 5 ppb/sqrt(s)",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { wander_ppb_per_sqrt_s: 5.0, ..s },
    },
    NamedScenario {
        name: "wander-10",
        what: "crystals under load: random-walk wander of 10 ppb/sqrt(s)",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { wander_ppb_per_sqrt_s: 10.0, ..s },
    },
    NamedScenario {
        name: "wander-20",
        what: "crystals under load: random-walk wander of 20 ppb/sqrt(s)",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { wander_ppb_per_sqrt_s: 20.0, ..s },
    },
    NamedScenario {
        name: "leap-second",
        what: "an inserted leap second: every host (offsets within 1 ms) steps back 1 s when its own clock \
               reads 45% into the run (27 s of 60 s: inside a 15 s window)",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { step: Some(ClockStep::leap_second(0.45 * s.duration_s)), offset_max_ns: 1e6, ..s },
    },
    NamedScenario {
        name: "date-step",
        what: "`date -s` by hand: one non-reference node in eight steps once, mid-run, by 1 ms to 1 s either way",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::Cannot(LOCAL_CLOCK_IS_A_LINE),
        change: |s| Scenario { step: Some(ClockStep::date_set()), ..s },
    },
    NamedScenario {
        name: "stamp-bias-100ns",
        what: "each node's receive stamps late by a constant of its own, uniform in +-100 ns",
        asymmetry_per_hop_ns: 100.0,
        local: LocalEmulation::StampBias { max_ns: 100.0 },
        change: |s| Scenario { stamp_bias_max_ns: 100.0, ..s },
    },
    NamedScenario {
        name: "stamp-bias-1us",
        what: "each node's receive stamps late by a constant of its own, uniform in +-1 us",
        asymmetry_per_hop_ns: 1000.0,
        local: LocalEmulation::StampBias { max_ns: 1000.0 },
        change: |s| Scenario { stamp_bias_max_ns: 1000.0, ..s },
    },
    NamedScenario {
        name: "reference-dies",
        what: "the reference node (0) dies at the run's midpoint: it sends and answers nothing after",
        asymmetry_per_hop_ns: 0.0,
        local: LocalEmulation::KillReferenceAtMidpoint,
        change: |s| Scenario { death: Some(NodeDeath { node: 0, at_s: s.duration_s / 2.0 }), ..s },
    },
];

/// Every scenario's name, comma-separated (for help texts and errors).
pub fn names() -> String {
    SCENARIOS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// The scenario called `name`, or an error that lists them all.
pub fn find(name: &str) -> Result<&'static NamedScenario, String> {
    SCENARIOS.iter().find(|s| s.name == name).ok_or_else(|| {
        let list: Vec<String> = SCENARIOS.iter().map(|s| format!("  {}: {}", s.name, s.what)).collect();
        format!("unknown clock scenario `{name}`; use one of:\n{}", list.join("\n"))
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Cluster, EPOCH_NS};
    use super::*;

    fn small(name: &str) -> Cluster {
        let base = Scenario { nodes: 8, out_degree: 3, seed: 11, duration_s: 48.0, window_s: 4.0, ..Scenario::reference() };
        Cluster::new(find(name).expect("known").apply(base)).expect("valid scenario")
    }

    #[test]
    fn every_named_scenario_builds_and_unknown_names_list_them() {
        for s in SCENARIOS {
            let c = Cluster::new(s.apply(Scenario { nodes: 8, duration_s: 20.0, ..Scenario::reference() }));
            assert!(c.is_ok(), "{}: {:?}", s.name, c.err());
        }
        let e = find("chrony").err().unwrap_or_default();
        assert!(e.contains("`chrony`") && e.contains("disciplined:") && e.contains("reference-dies:"), "{e}");
    }

    /// The dead reference sends and answers nothing after its death, and everything before.
    #[test]
    fn the_dead_reference_is_silent_from_its_death() {
        let c = small("reference-dies");
        let death_ns = 24e9;
        let r = c.clock(0);
        let mut before = 0;
        for k in 0..c.num_windows() {
            for rec in c.records(k).iter().filter(|r| r.src == 0 || r.dst == 0) {
                // The reference's own stamps, in true time (100 ns stamp noise: 1 us margin).
                let own: Vec<i64> = if rec.src == 0 {
                    rec.fwd_tx_ns.iter().chain(&rec.rev_rx_ns).copied().collect()
                } else {
                    rec.fwd_rx_ns.iter().chain(&rec.rev_tx_ns).copied().collect()
                };
                for s in own {
                    assert!(r.invert((s - EPOCH_NS) as f64) < death_ns + 1e3, "window {k}: {rec:?}");
                }
                before += 1;
            }
        }
        // Probes of the reference's 6 edges (3 out, ~3 in) up to its death.
        assert!(before > 1000, "{before}");
        assert!(c.records(7).iter().all(|r| r.src != 0 && r.dst != 0));
        assert!(c.records(7).len() > 1000);
    }

    /// A stamping bias shows in the one-way delays exactly as (b_dst - b_src) / 2 of
    /// asymmetry per edge: the midpoint of forward and reverse delay shifts by it.
    #[test]
    fn a_stamp_bias_shifts_each_edge_by_half_the_bias_difference() {
        let biased = small("stamp-bias-1us");
        let plain = small("reference");
        let (a, b) = (biased.records(3), plain.records(3));
        assert_eq!(a.len(), b.len());
        let mut seen = 0;
        for (x, y) in a.iter().zip(&b) {
            let shift = |r: &distprof::record::ProbeRecord| {
                ((r.fwd_rx_ns[0] - r.fwd_tx_ns[0]) - (r.rev_rx_ns[0] - r.rev_tx_ns[0])) as f64 / 2.0
            };
            let want = (biased.stamp_bias_ns(x.dst) - biased.stamp_bias_ns(x.src)) / 2.0;
            assert!((shift(x) - shift(y) - want).abs() <= 1.0, "{} {}: {} vs {want}", x.src, x.dst, shift(x) - shift(y));
            seen += 1;
        }
        assert!(seen > 1000);
        let biases: Vec<f64> = (0..8).map(|i| biased.stamp_bias_ns(i)).collect();
        assert!(biases.iter().all(|b| b.abs() <= 1000.0) && biases.iter().any(|b| b.abs() > 300.0), "{biases:?}");
    }

    /// The leap second steps every clock back 1 s, each when it reads 45% of the run
    /// (21.6 s of 48 s), and the clock reads those times twice.
    #[test]
    fn a_leap_second_steps_every_clock_back_one_second() {
        let c = small("leap-second");
        for i in 0..8 {
            let clock = c.clock(i);
            let t = clock.invert_first(21.6e9);
            // Over 0.6 s the clock advances 0.6 s +- 50 ppm (30 us), less the step.
            let (before, after) = (clock.read(t - 0.3e9), clock.read(t + 0.3e9));
            assert!((after - before - 0.6e9 + 1e9).abs() < 40e3, "node {i}: {}", after - before);
            assert!(clock.invert_last(21.6e9) > t + 0.7e9, "node {i}");
        }
    }

    /// `date -s` steps some non-reference nodes once, by 1 ms to 1 s; the reference never.
    #[test]
    fn date_step_steps_a_few_nodes_once() {
        let base = Scenario { nodes: 64, duration_s: 60.0, ..Scenario::reference() };
        let c = Cluster::new(find("date-step").expect("known").apply(base)).expect("valid");
        let plain = Cluster::new(Scenario { nodes: 64, duration_s: 60.0, ..Scenario::reference() }).expect("valid");
        let mut stepped = 0;
        for i in 0..64 {
            let jump = c.clock(i).read(60e9) - plain.clock(i).read(60e9);
            if jump.abs() > 1e-3 {
                assert!(i != 0 && (1e6..=1e9).contains(&jump.abs()), "node {i}: {jump}");
                assert_eq!(c.clock(i).read(10e9), plain.clock(i).read(10e9), "node {i} stepped before mid-run");
                stepped += 1;
            }
        }
        assert!((2..=20).contains(&stepped), "{stepped} of 63 stepped");
    }
}
