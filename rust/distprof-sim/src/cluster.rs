//! A deterministic cluster simulator: N virtual nodes (up to 16,384) with drifting, wandering
//! clocks, probing each other over a simulated network, producing the same
//! `ProbeRecord`s the probe engine produces, window by window. The true clocks are known,
//! so the real estimator's error is a number.
//!
//! Network model, per direction of each probe: base delay (plus/minus the edge's path
//! asymmetry), exponential queueing shared by the two packets of the pair (they are tens
//! of µs apart and see the same queue), a small independent per-packet jitter, and with
//! some probability a burst of 50-500 µs that delays the first packet and the second only
//! by what is left after the gap (pair compression: such pairs fail the purity test).
//! Every packet is lost with the loss probability; a record with a lost packet is not
//! produced. Every timestamp gets Gaussian noise, and each node's receive stamps a bias
//! of its own (`stamp_bias_max_ns`).
//!
//! Clock model, per node: a crystal with a fixed drift and a random-walk wander
//! (`clock`), optionally disciplined by a chrony-like servo or slewed by ntpd
//! (`discipline`), optionally stepped (`step`). A node may die mid-run (`NodeDeath`). The
//! named scenarios that combine these are in `scenarios`.

mod clock;
mod discipline;
mod graph;
mod jsonl_out;
mod random;
pub mod scenarios;
mod step;

pub use clock::SimClock;
pub use discipline::{Discipline, Slew};
pub use step::ClockStep;
pub use graph::probe_graph;
pub use jsonl_out::{read_truth, NodeTruth, RunDirSummary, TruthFile, WindowTruth, TRUTH_FILE};

use distprof::context::NodeId;
use distprof::estimate::WindowSpec;
use distprof::record::ProbeRecord;
use random::stream;
use serde::Serialize;

/// Local clocks read around this many ns (a realistic CLOCK_REALTIME), so that i64
/// handling of large values is exercised.
pub const EPOCH_NS: i64 = 1_700_000_000_000_000_000;
/// The largest job distprof is built for (issue 27). The cluster itself holds O(N) clocks
/// and edges; a window of every edge's records (`records`) is ~4 GB at 16,384 nodes and
/// out-degree 8, so large runs read one node's at a time (`records_of`).
pub const MAX_NODES: u32 = 16_384;
/// Responder turnaround between receiving the forward pair and sending the reverse pair.
const TURNAROUND_NS: f64 = 20_000.0;
/// Simulated time before the first and after the last window, so that every node's
/// windows are fully covered whatever its offset.
const MARGIN_NS: f64 = 2.5e9;

/// The purposes of the random streams (`random::stream`): each concept draws from its own,
/// so adding one never changes what another draws.
mod purpose {
    pub const CLOCK: u64 = 1;
    pub const EDGE: u64 = 2;
    pub const PROBES: u64 = 3;
    pub const DISCIPLINE: u64 = 5;
    pub const SLEW: u64 = 6;
    pub const STEP: u64 = 8;
    pub const STAMP_BIAS: u64 = 9;
    pub const BROKEN_NODE: u64 = 10;
}

/// A node that stops: from `at_s` (true time after the run's start) it sends nothing and
/// answers nothing, as a node whose process was killed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NodeDeath {
    pub node: NodeId,
    pub at_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub nodes: u32,
    pub out_degree: u32,
    pub seed: u64,
    pub cadence_us: u64,
    pub gap_us: u64,
    pub window_s: f64,
    pub duration_s: f64,
    pub base_delay_ns: f64,
    pub queue_mean_ns: f64,
    /// Mean of an independent exponential jitter per packet on top of the pair's shared
    /// queueing: the two packets of a real pair never see exactly the same queue. Not
    /// part of the reference scenario (which makes it harder, not easier).
    pub packet_jitter_mean_ns: f64,
    pub burst_fraction: f64,
    pub burst_min_ns: f64,
    pub burst_max_ns: f64,
    pub timestamp_sigma_ns: f64,
    pub loss: f64,
    /// Per edge, forward base delay + a and reverse - a, a uniform in +-this.
    pub asymmetry_max_ns: f64,
    /// One broken node whose every path has an asymmetry of its own, uniform in +-this
    /// many ns (a NIC whose queues stamp with different biases, routes of different length
    /// each way): unlike a per-node stamping bias (`stamp_bias_max_ns`), the loops through it do not close. Not in the
    /// reference scenario.
    pub broken_node: Option<(NodeId, f64)>,
    pub offset_max_ns: f64,
    pub drift_max_ppb: f64,
    pub wander_ppb_per_sqrt_s: f64,
    /// A chrony-like servo on every node's clock (None: free-running crystals).
    pub discipline: Option<Discipline>,
    /// ntpd-like slews on some nodes.
    pub slew: Option<Slew>,
    /// Steps of host clocks (a leap second, `date -s`).
    pub step: Option<ClockStep>,
    /// Per node, a constant stamping bias b, uniform in +-this: its receive stamps are b
    /// late (its transmit stamps exact), as a NIC or driver that stamps at its own point.
    /// Two-way probes see it as a path asymmetry of (b_dst - b_src) / 2 on each of the
    /// node's edges, common to all its paths, so loops cannot show it either.
    pub stamp_bias_max_ns: f64,
    /// A node that dies mid-run.
    pub death: Option<NodeDeath>,
}

impl Scenario {
    /// The reference scenario of the accuracy goals (issue 5), with the default cadence,
    /// gap, window and out-degree of `Config::default()`.
    pub fn reference() -> Self {
        Self::probed_as(&distprof::config::Config::default())
    }

    /// The reference scenario's clocks and network, probed as `c` configures: its cadence,
    /// pair gap, window and out-degree (a preset of examples/configs/, say).
    pub fn probed_as(c: &distprof::config::Config) -> Self {
        Self {
            nodes: 64,
            out_degree: c.probe_out_degree,
            seed: 1,
            cadence_us: c.probe_cadence_us,
            gap_us: c.packet_spacing_us,
            window_s: c.probe_window_s,
            duration_s: 60.0,
            base_delay_ns: 10_000.0,
            queue_mean_ns: 20_000.0,
            packet_jitter_mean_ns: 300.0,
            burst_fraction: 0.05,
            burst_min_ns: 50_000.0,
            burst_max_ns: 500_000.0,
            timestamp_sigma_ns: 100.0,
            loss: 0.01,
            asymmetry_max_ns: 0.0,
            broken_node: None,
            offset_max_ns: 1e9,
            drift_max_ppb: 50_000.0,
            wander_ppb_per_sqrt_s: 1.0,
            discipline: None,
            slew: None,
            step: None,
            stamp_bias_max_ns: 0.0,
            death: None,
        }
    }

    /// Every problem with the scenario, each naming the field, the value and the fix.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !(2..=MAX_NODES).contains(&self.nodes) {
            p.push(format!("nodes = {}: must be 2..={MAX_NODES}", self.nodes));
        }
        if self.out_degree == 0 {
            p.push("out_degree = 0: every node must probe at least one peer".into());
        }
        if self.cadence_us == 0 || self.gap_us == 0 || self.gap_us >= self.cadence_us {
            p.push(format!(
                "cadence_us = {}, gap_us = {}: both must be positive and the gap shorter than the cadence",
                self.cadence_us, self.gap_us
            ));
        }
        if !(self.window_s > 0.0 && self.duration_s >= self.window_s && self.duration_s <= 3600.0) {
            p.push(format!(
                "window_s = {}, duration_s = {}: need 0 < window <= duration <= 3600 s",
                self.window_s, self.duration_s
            ));
        }
        let nonneg = [
            ("base_delay_ns", self.base_delay_ns),
            ("queue_mean_ns", self.queue_mean_ns),
            ("packet_jitter_mean_ns", self.packet_jitter_mean_ns),
            ("burst_min_ns", self.burst_min_ns),
            ("timestamp_sigma_ns", self.timestamp_sigma_ns),
            ("asymmetry_max_ns", self.asymmetry_max_ns),
            ("offset_max_ns", self.offset_max_ns),
            ("drift_max_ppb", self.drift_max_ppb),
            ("wander_ppb_per_sqrt_s", self.wander_ppb_per_sqrt_s),
            ("stamp_bias_max_ns", self.stamp_bias_max_ns),
        ];
        for (name, v) in nonneg {
            if !(v.is_finite() && v >= 0.0) {
                p.push(format!("{name} = {v}: must be a finite number >= 0"));
            }
        }
        if let Some((node, a)) = self.broken_node {
            if node >= self.nodes || !(a.is_finite() && a >= 0.0) {
                p.push(format!("broken_node = ({node}, {a}): needs a node below {} and an asymmetry >= 0 ns", self.nodes));
            }
        }
        if self.offset_max_ns > 1e12 || self.drift_max_ppb > 1e6 {
            p.push("offset_max_ns <= 1e12 and drift_max_ppb <= 1e6 (1000 ppm) are supported".into());
        }
        if self.burst_max_ns.is_nan() || self.burst_max_ns < self.burst_min_ns {
            p.push(format!("burst_max_ns = {}: must be >= burst_min_ns", self.burst_max_ns));
        }
        for (name, v) in [("burst_fraction", self.burst_fraction), ("loss", self.loss)] {
            if !(0.0..1.0).contains(&v) {
                p.push(format!("{name} = {v}: must be in [0, 1)"));
            }
        }
        p.extend(self.discipline.iter().flat_map(Discipline::problems));
        p.extend(self.slew.iter().flat_map(Slew::problems));
        p.extend(self.step.iter().flat_map(|s| s.problems(self.duration_s)));
        if let Some(d) = self.death {
            if d.node >= self.nodes || !(d.at_s.is_finite() && d.at_s >= 0.0) {
                p.push(format!(
                    "death = node {} at {} s: need a node below nodes = {} and a time >= 0",
                    d.node, d.at_s, self.nodes
                ));
            }
        }
        p
    }
}

struct EdgeParams {
    src: NodeId,
    dst: NodeId,
    index: u64,
    asymmetry_ns: f64,
    phase_ns: f64,
}

/// The truth for one node and window, in the conventions of `distprof::model`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Truth {
    /// S_i - G at the node's local window midpoint.
    pub offset_ns: f64,
    /// d(S_i - G)/dS_i averaged over the window, ppb.
    pub drift_ppb: f64,
}

pub struct Cluster {
    pub scenario: Scenario,
    pub graph: Vec<Vec<NodeId>>,
    clocks: Vec<SimClock>,
    edges: Vec<EdgeParams>,
    reference: NodeId,
    /// Per node, how late its receive stamps are, ns (empty: no bias).
    stamp_bias_ns: Vec<f64>,
}

impl Cluster {
    pub fn new(scenario: Scenario) -> Result<Self, String> {
        let problems = scenario.problems();
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let s = &scenario;
        let t1 = s.duration_s * 1e9 + MARGIN_NS;
        let clocks = (0..s.nodes).map(|i| node_clock(s, i, t1)).collect();
        let stamp_bias_ns = if s.stamp_bias_max_ns > 0.0 {
            (0..s.nodes)
                .map(|i| stream(s.seed, purpose::STAMP_BIAS, i as u64, 0).uniform(-s.stamp_bias_max_ns, s.stamp_bias_max_ns))
                .collect()
        } else {
            Vec::new()
        };
        let graph = probe_graph(s.nodes, s.out_degree, s.seed);
        let mut edges = Vec::new();
        for (src, outs) in graph.iter().enumerate() {
            for &dst in outs {
                let index = edges.len() as u64;
                let mut rng = stream(s.seed, purpose::EDGE, index, 0);
                edges.push(EdgeParams {
                    src: src as NodeId,
                    dst,
                    index,
                    asymmetry_ns: rng.uniform(-s.asymmetry_max_ns, s.asymmetry_max_ns)
                        + match s.broken_node {
                            // Its own stream, one draw per edge.
                            Some((b, a)) if b == src as NodeId || b == dst => stream(s.seed, purpose::BROKEN_NODE, index, 0).uniform(-a, a),
                            _ => 0.0,
                        },
                    phase_ns: rng.uniform(0.0, s.cadence_us as f64 * 1e3),
                });
            }
        }
        Ok(Self { clocks, graph, edges, reference: 0, scenario, stamp_bias_ns })
    }

    /// Node `node`'s receive-stamp bias, ns.
    pub fn stamp_bias_ns(&self, node: NodeId) -> f64 {
        self.stamp_bias_ns.get(node as usize).copied().unwrap_or(0.0)
    }

    /// Node `node`'s true clock.
    pub fn clock(&self, node: NodeId) -> &SimClock {
        &self.clocks[node as usize]
    }

    pub fn reference(&self) -> NodeId {
        self.reference
    }

    pub fn num_windows(&self) -> u64 {
        (self.scenario.duration_s / self.scenario.window_s).floor() as u64
    }

    fn window_ns(&self) -> i64 {
        (self.scenario.window_s * 1e9).round() as i64
    }

    pub fn window_spec(&self, k: u64) -> WindowSpec {
        let w = self.window_ns();
        WindowSpec {
            window_id: k,
            start_local_ns: EPOCH_NS + k as i64 * w,
            end_local_ns: EPOCH_NS + (k as i64 + 1) * w,
            num_nodes: self.scenario.nodes,
            reference: self.reference,
        }
    }

    /// The true clock of `node` against the reference in window k.
    pub fn truth(&self, node: NodeId, k: u64) -> Truth {
        let spec = self.window_spec(k);
        self.truth_over(node, spec.start_local_ns, spec.end_local_ns)
    }

    /// The true clock of `node` against the reference over any interval [start, end) of
    /// its own clock (a piece of a window, `estimate::breaks`): its offset where it reads
    /// the interval's midpoint and its mean drift over the interval.
    pub fn truth_over(&self, node: NodeId, start_local_ns: i64, end_local_ns: i64) -> Truth {
        let rel = |v: i64| (v - EPOCH_NS) as f64;
        let (c, r) = (&self.clocks[node as usize], &self.clocks[self.reference as usize]);
        let mid = rel(start_local_ns + (end_local_ns - start_local_ns) / 2);
        let t_mid = c.invert(mid);
        let (t0, t1) = (c.invert_first(rel(start_local_ns)), c.invert_last(rel(end_local_ns)));
        let ds_i = c.read(t1) - c.read(t0);
        let dg = r.read(t1) - r.read(t0);
        Truth { offset_ns: mid - r.read(t_mid), drift_ppb: (1.0 - dg / ds_i) * 1e9 }
    }

    /// Every record whose prober's first forward stamp falls in window k (prober clock).
    pub fn records(&self, k: u64) -> Vec<ProbeRecord> {
        let mut out = Vec::new();
        for e in &self.edges {
            self.edge_records(e, k, &mut out);
        }
        out
    }

    /// Records of the edges touching `node` only (what that node itself would hold).
    pub fn records_of(&self, node: NodeId, k: u64) -> Vec<ProbeRecord> {
        let mut out = Vec::new();
        for e in self.edges.iter().filter(|e| e.src == node || e.dst == node) {
            self.edge_records(e, k, &mut out);
        }
        out
    }

    /// Records of the edges `node` probes only: what its probe engine's windows hold. The
    /// edges are kept in prober order, so this costs the node's own edges at any N.
    pub fn records_from(&self, node: NodeId, k: u64) -> Vec<ProbeRecord> {
        let from = self.edges.partition_point(|e| e.src < node);
        let to = self.edges.partition_point(|e| e.src <= node);
        let mut out = Vec::new();
        for e in &self.edges[from..to] {
            self.edge_records(e, k, &mut out);
        }
        out
    }

    fn edge_records(&self, e: &EdgeParams, k: u64, out: &mut Vec<ProbeRecord>) {
        let s = &self.scenario;
        let spec = self.window_spec(k);
        let (ca, cb) = (&self.clocks[e.src as usize], &self.clocks[e.dst as usize]);
        let cadence = s.cadence_us as f64 * 1e3;
        let gap = s.gap_us as f64 * 1e3;
        let t_start = ca.invert_first((spec.start_local_ns - EPOCH_NS) as f64);
        let t_end = ca.invert_last((spec.end_local_ns - EPOCH_NS) as f64);
        let j0 = ((t_start - e.phase_ns) / cadence).ceil() as i64;
        let mut rng = stream(s.seed, purpose::PROBES, e.index, k);
        let stamp = |clock: &SimClock, t: f64, rng: &mut random::Stream| -> i64 {
            EPOCH_NS + (clock.read(t) + rng.normal(s.timestamp_sigma_ns)).round() as i64
        };
        let (bias_a, bias_b) = (self.stamp_bias_ns(e.src).round() as i64, self.stamp_bias_ns(e.dst).round() as i64);
        // A dead node sends nothing, so a probe it sends or answers after death never completes.
        let death_t = |node: NodeId| s.death.filter(|d| d.node == node).map_or(f64::INFINITY, |d| d.at_s * 1e9);
        let (death_a, death_b) = (death_t(e.src), death_t(e.dst));
        let mut j = j0;
        loop {
            let t = e.phase_ns + j as f64 * cadence;
            j += 1;
            // The prober assigns the probe by its own clock; the boundary test is exact on
            // the stamped value below.
            if t >= t_end {
                break;
            }
            let delays = |base: f64, rng: &mut random::Stream| -> [f64; 2] {
                let q = base.max(0.0) + rng.exp(s.queue_mean_ns);
                let mut d = [q + rng.exp(s.packet_jitter_mean_ns), q + rng.exp(s.packet_jitter_mean_ns)];
                if rng.chance(s.burst_fraction) {
                    let b = rng.uniform(s.burst_min_ns, s.burst_max_ns);
                    d[0] += b;
                    d[1] += (b - gap).max(0.0);
                }
                d
            };
            let fwd_d = delays(s.base_delay_ns + e.asymmetry_ns, &mut rng);
            let rev_d = delays(s.base_delay_ns - e.asymmetry_ns, &mut rng);
            let lost = (0..4).any(|_| rng.chance(s.loss));
            let fwd_tx_t = [t, t + gap];
            let fwd_rx_t = [fwd_tx_t[0] + fwd_d[0], fwd_tx_t[1] + fwd_d[1]];
            let rev_tx0 = fwd_rx_t[1].max(fwd_rx_t[0]) + TURNAROUND_NS;
            let rev_tx_t = [rev_tx0, rev_tx0 + gap];
            let rev_rx_t = [rev_tx_t[0] + rev_d[0], rev_tx_t[1] + rev_d[1]];
            let rec = ProbeRecord {
                src: e.src,
                dst: e.dst,
                seq: j as u32,
                fwd_tx_ns: [stamp(ca, fwd_tx_t[0], &mut rng), stamp(ca, fwd_tx_t[1], &mut rng)],
                fwd_rx_ns: [stamp(cb, fwd_rx_t[0], &mut rng) + bias_b, stamp(cb, fwd_rx_t[1], &mut rng) + bias_b],
                rev_tx_ns: [stamp(cb, rev_tx_t[0], &mut rng), stamp(cb, rev_tx_t[1], &mut rng)],
                rev_rx_ns: [stamp(ca, rev_rx_t[0], &mut rng) + bias_a, stamp(ca, rev_rx_t[1], &mut rng) + bias_a],
            };
            let dead = rev_rx_t[1] >= death_a || rev_tx_t[1] >= death_b;
            if lost || dead || rec.fwd_tx_ns[0] < spec.start_local_ns || rec.fwd_tx_ns[0] >= spec.end_local_ns {
                continue;
            }
            out.push(rec);
        }
    }
}

/// Node i's true clock: its crystal, then what its time daemon does to it, then its steps;
/// each from its own random stream.
fn node_clock(s: &Scenario, i: u32, t1: f64) -> SimClock {
    let mut rng = stream(s.seed, purpose::CLOCK, i as u64, 0);
    let offset = rng.uniform(-s.offset_max_ns, s.offset_max_ns);
    let drift = rng.uniform(-s.drift_max_ppb, s.drift_max_ppb);
    let mut clock = SimClock::new(-MARGIN_NS, t1, offset, drift, s.wander_ppb_per_sqrt_s, &mut rng);
    if let Some(d) = &s.discipline {
        d.apply(&mut clock, &mut stream(s.seed, purpose::DISCIPLINE, i as u64, 0));
    }
    // The reference (node 0) neither slews nor is set by hand: the scenarios that move it
    // are the leap second (every node) and its death.
    if let Some(slew) = s.slew.as_ref().filter(|_| i != 0) {
        let mut rng = stream(s.seed, purpose::SLEW, i as u64, 0);
        let (chance, at, size, sign) =
            (rng.uniform(0.0, 1.0), rng.uniform(0.25, 0.75), rng.uniform(slew.min_amount_ns, slew.max_amount_ns), rng.chance(0.5));
        if chance < slew.fraction {
            let from = clock.knot_of(at * s.duration_s * 1e9);
            slew.apply(&mut clock, from, if sign { size } else { -size });
        }
    }
    if let Some(step) = &s.step {
        step.apply(&mut clock, i == 0, s.duration_s, &mut stream(s.seed, purpose::STEP, i as u64, 0));
    }
    clock
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s_probes_per_window(s: &Scenario) -> f64 {
        s.window_s * 1e6 / s.cadence_us as f64
    }

    #[test]
    fn deterministic_per_seed_and_different_across_seeds() {
        let mut s = Scenario::reference();
        s.nodes = 8;
        s.duration_s = 8.0;
        s.window_s = 4.0;
        let a = Cluster::new(s.clone()).expect("scenario").records(1);
        let b = Cluster::new(s.clone()).expect("scenario").records(1);
        assert_eq!(a, b);
        s.seed = 2;
        let c = Cluster::new(s).expect("scenario").records(1);
        assert_ne!(a, c);
        // 7 edges per node, window / cadence probes per edge, 4% of records lose a packet.
        let probes = s_probes_per_window(&Scenario { window_s: 4.0, ..Scenario::reference() });
        let expected = 56.0 * probes * 0.96;
        assert!((a.len() as f64 - expected).abs() < expected * 0.1, "{} vs {expected}", a.len());
    }

    /// A prober's own records are exactly its out-edges' share of every record touching it.
    #[test]
    fn records_from_a_node_are_its_out_edges_records() {
        let s = Scenario { nodes: 16, out_degree: 3, duration_s: 8.0, window_s: 4.0, ..Scenario::reference() };
        let c = Cluster::new(s).expect("scenario");
        for node in [0, 7, 15] {
            let own: Vec<_> = c.records_of(node, 1).into_iter().filter(|r| r.src == node).collect();
            let from = c.records_from(node, 1);
            assert!(!from.is_empty());
            assert_eq!(from, own, "node {node}");
        }
    }

    #[test]
    fn truth_matches_the_clock_definition() {
        let mut s = Scenario::reference();
        s.nodes = 4;
        s.duration_s = 8.0;
        s.window_s = 4.0;
        s.wander_ppb_per_sqrt_s = 0.0;
        let c = Cluster::new(s).expect("scenario");
        // Without wander a node's drift against the reference is fixed:
        // (1 + r_i) / (1 + r_ref) - 1 in G terms.
        let r = |i: usize| c.clocks[i].phase(1e9) - c.clocks[i].phase(0.0);
        let t = c.truth(2, 1);
        let rate_g = (1.0 + r(2) * 1e-9) / (1.0 + r(0) * 1e-9) - 1.0;
        assert!((t.drift_ppb - rate_g / (1.0 + rate_g) * 1e9).abs() < 1e-3, "{t:?}");
        let t0 = c.truth(0, 1);
        assert!(t0.offset_ns.abs() < 1e-3 && t0.drift_ppb.abs() < 1e-3, "{t0:?}");
    }

    #[test]
    fn bad_scenarios_name_every_problem() {
        let mut s = Scenario::reference();
        s.nodes = 20_000;
        s.loss = 1.5;
        s.timestamp_sigma_ns = f64::NAN;
        let err = Cluster::new(s).err().unwrap_or_default();
        assert!(err.contains("nodes = 20000") && err.contains("loss = 1.5") && err.contains("timestamp_sigma_ns"), "{err}");
    }
}
