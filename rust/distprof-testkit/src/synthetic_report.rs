//! A seeded generator of report inputs with known pathologies, for the page's unit tests
//! (the core cannot use `distprof-sim`, which depends on it). Not a simulator of the system: it draws clocks and delays from a simple model,
//! builds real [`ProbeRecord`]s, turns them into points with [`owd_points`], and fits each
//! window with the max-margin offset for a slope near the truth, so the lines, margins,
//! bounds and loop residuals on the page are computed from the points, not invented.
//!
//! The model: node clocks `C_i(t) = t + theta_i + drift_i * (t - t0)` (the reference has
//! neither); one-way delays `base + Exp(jitter)`; a quarter of the coded pairs meet a queue
//! (one packet delayed, the pair impure); a few edges are congested (more queueing); one
//! node's clock steps mid-run, which breaks the fit of that window on all its edges; some
//! edges are down, and one node can be cut off entirely.

use distprof_offline::report::input::{
    owd_points, EdgeHealth, EdgeSeries, EdgeWindowFit, OwdPoint, ReportInput, RunFacts,
};
use distprof::config::{Config, TimestampMode};
use distprof::context::NodeId;
use distprof::estimate::purity::{PairVerdict, PurityTolerance};
use distprof::model::{ClockSegment, NodeClockModel};
use distprof::record::ProbeRecord;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};

/// What to generate.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub nodes: u32,
    pub out_degree: u32,
    pub windows: u32,
    pub window_s: f64,
    pub probes_per_window: u32,
    pub seed: u64,
    /// Nodes whose every edge is down (never node 0, the reference).
    pub unreachable_nodes: u32,
}

impl SyntheticSpec {
    /// A run like a default `distprof local` run of `nodes` nodes, kept short.
    pub fn new(nodes: u32, seed: u64) -> SyntheticSpec {
        SyntheticSpec {
            nodes,
            out_degree: 8.min(nodes.saturating_sub(1)),
            windows: 10,
            window_s: 4.0,
            probes_per_window: 100,
            seed,
            unreachable_nodes: u32::from(nodes >= 8),
        }
    }
}

/// The run starts at a plausible CLOCK_REALTIME value (2026), like real stamps.
const T0_NS: i64 = 1_790_000_000_000_000_000;
const BASE_DELAY_NS: f64 = 12_000.0;
const JITTER_NS: f64 = 6_000.0;
const QUEUE_NS: f64 = 60_000.0;
const IMPURE_SHARE: f64 = 0.25;
/// Receive-gap tolerance of the purity test.
const PURITY_TOLERANCE_NS: i64 = 2_000;
const PAIR_GAP_NS: i64 = 50_000;
const BOUND_LIMIT_NS: f64 = 40_000.0;
const CLOCK_STEP_NS: f64 = 150_000.0;
const MAX_LOOPS: usize = 3_000;

struct Clock {
    theta_ns: f64,
    drift_ppb: f64,
    /// A step of the clock at this true time (ns since t0), if any.
    step: Option<(f64, f64)>,
}

impl Clock {
    /// theta(t): how far this clock reads ahead of true time at `t` ns after t0.
    fn ahead_ns(&self, t: f64) -> f64 {
        let step = match self.step {
            Some((at, by)) if t >= at => by,
            _ => 0.0,
        };
        self.theta_ns + self.drift_ppb * 1e-9 * t + step
    }

    fn read(&self, t: f64) -> i64 {
        T0_NS + (t + self.ahead_ns(t)).round() as i64
    }
}

fn exp(rng: &mut StdRng, mean: f64) -> f64 {
    -(1.0 - rng.gen::<f64>()).ln() * mean
}

fn gauss(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The probe graph: a ring (strongly connected, with cycles) plus seeded random peers.
fn graph(spec: &SyntheticSpec, rng: &mut StdRng) -> Vec<(NodeId, NodeId)> {
    let n = spec.nodes;
    let mut edges = Vec::new();
    for i in 0..n {
        if n < 2 {
            break;
        }
        let mut peers = BTreeSet::new();
        peers.insert((i + 1) % n);
        while (peers.len() as u32) < spec.out_degree.min(n - 1) {
            let p = rng.gen_range(0..n);
            if p != i {
                peers.insert(p);
            }
        }
        edges.extend(peers.into_iter().map(|p| (i, p)));
    }
    edges
}

pub fn synthetic_input(spec: &SyntheticSpec) -> ReportInput {
    generate(spec).0
}

/// The input and the true clocks behind it.
fn generate(spec: &SyntheticSpec) -> (ReportInput, Vec<Clock>) {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let n = spec.nodes.max(1);
    let clocks: Vec<Clock> = (0..n)
        .map(|i| {
            if i == 0 {
                Clock {
                    theta_ns: 0.0,
                    drift_ppb: 0.0,
                    step: None,
                }
            } else {
                Clock {
                    theta_ns: rng.gen_range(-3e6..3e6),
                    drift_ppb: rng.gen_range(-25_000.0..25_000.0),
                    step: None,
                }
            }
        })
        .collect();
    let mut clocks = clocks;
    // One node (not the reference) steps its clock in the middle of a window.
    let stepping: Option<NodeId> = (n >= 4).then(|| rng.gen_range(1..n));
    let step_window = spec.windows / 2;
    if let Some(s) = stepping {
        clocks[s as usize].step = Some((
            (step_window as f64 + 0.5) * spec.window_s * 1e9,
            CLOCK_STEP_NS,
        ));
    }
    let mut cut_off = BTreeSet::new();
    while (cut_off.len() as u32) < spec.unreachable_nodes.min(n.saturating_sub(2)) {
        let c = rng.gen_range(1..n);
        if Some(c) != stepping {
            cut_off.insert(c);
        }
    }
    let edges_list = graph(spec, &mut rng);
    // A few congested edges (more queueing, a slower return path) and one silent peer.
    let congested: BTreeSet<usize> = (0..edges_list.len())
        .filter(|_| rng.gen::<f64>() < 0.03)
        .collect();
    let silent = (edges_list.len() > 4).then(|| rng.gen_range(0..edges_list.len()));

    let window_ns = spec.window_s * 1e9;
    let cadence_ns = window_ns / spec.probes_per_window.max(1) as f64;
    let mut edges = Vec::with_capacity(edges_list.len());
    // (src, dst, window) -> fitted offset, for the loop residuals.
    let mut fitted: BTreeMap<(NodeId, NodeId, u64), f64> = BTreeMap::new();
    // (node, window) -> smallest round trip seen on any of its edges, for its bound.
    let mut min_rtt: BTreeMap<(NodeId, u64), f64> = BTreeMap::new();
    for (k, &(src, dst)) in edges_list.iter().enumerate() {
        let down = cut_off.contains(&src) || cut_off.contains(&dst) || Some(k) == silent;
        if down {
            let note = if Some(k) == silent {
                "no reply from the peer after the handshake timeout"
            } else {
                "peer unreachable: every probe lost"
            };
            edges.push(EdgeSeries {
                src,
                dst,
                points: Vec::new(),
                fits: Vec::new(),
                health: EdgeHealth::Down,
                health_note: note.to_string(),
            });
            continue;
        }
        let queue_share = if congested.contains(&k) {
            0.7
        } else {
            IMPURE_SHARE
        };
        let rev_extra_ns = if congested.contains(&k) {
            25_000.0
        } else {
            0.0
        };
        let (cs, cd) = (&clocks[src as usize], &clocks[dst as usize]);
        let mut points = Vec::with_capacity((spec.windows * spec.probes_per_window * 2) as usize);
        let mut fits = Vec::new();
        for w in 0..spec.windows {
            let w_start = w as f64 * window_ns;
            let first = points.len();
            for p in 0..spec.probes_per_window {
                let t = w_start + (p as f64 + rng.gen::<f64>() * 0.5) * cadence_ns;
                let pair = |rng: &mut StdRng, t: f64, extra: f64| -> ([f64; 2], [f64; 2]) {
                    let d = BASE_DELAY_NS + extra + exp(rng, JITTER_NS);
                    let queued = rng.gen::<f64>() < queue_share;
                    let q = if queued {
                        exp(rng, QUEUE_NS) + PURITY_TOLERANCE_NS as f64
                    } else {
                        0.0
                    };
                    let gap = PAIR_GAP_NS as f64;
                    // A queue delays the first packet only: the pair's receive gap shrinks.
                    (
                        [t, t + gap],
                        [t + d + q, t + gap + d + rng.gen::<f64>() * 500.0],
                    )
                };
                let (ftx, frx) = pair(&mut rng, t, 0.0);
                let t_back = frx[1] + 20_000.0;
                let (rtx, rrx) = pair(&mut rng, t_back, rev_extra_ns);
                let rec = ProbeRecord {
                    src,
                    dst,
                    seq: w * spec.probes_per_window + p,
                    fwd_tx_ns: [cs.read(ftx[0]), cs.read(ftx[1])],
                    fwd_rx_ns: [cd.read(frx[0]), cd.read(frx[1])],
                    rev_tx_ns: [cd.read(rtx[0]), cd.read(rtx[1])],
                    rev_rx_ns: [cs.read(rrx[0]), cs.read(rrx[1])],
                };
                let purity = PurityTolerance { abs_ns: PURITY_TOLERANCE_NS as u64, rel: 0.0 };
                let fp = purity.judge(rec.fwd_tx_ns, rec.fwd_rx_ns) == PairVerdict::Pure;
                let rp = purity.judge(rec.rev_tx_ns, rec.rev_rx_ns) == PairVerdict::Pure;
                points.extend(owd_points(&rec, fp, rp));
            }
            let start_ns = cs.read(w_start);
            let end_ns = cs.read(w_start + window_ns);
            let mid_ns = start_ns + (end_ns - start_ns) / 2;
            // Slope: the true relative drift plus estimation noise of ~20 ppb.
            let drift_ppb = (cd.drift_ppb - cs.drift_ppb) / (1.0 + cs.drift_ppb * 1e-9)
                + gauss(&mut rng) * 20.0;
            let Some((offset_ns, margin_ns)) =
                max_margin_at_slope(&points[first..], mid_ns, drift_ppb)
            else {
                continue;
            };
            fitted.insert((src, dst, w as u64), offset_ns);
            // A window without a separating line says nothing about the round trip.
            if margin_ns > 0.0 {
                for node in [src, dst] {
                    let e = min_rtt.entry((node, w as u64)).or_insert(f64::INFINITY);
                    *e = e.min(2.0 * margin_ns);
                }
            }
            fits.push(EdgeWindowFit {
                window_id: w as u64,
                start_ns,
                end_ns,
                mid_ns,
                offset_ns,
                drift_ppb,
                margin_ns,
                // No estimator ran: health falls back to the share of pure points.
                sigma_ns: None,
            });
        }
        let mut edge = EdgeSeries {
            src,
            dst,
            points,
            fits,
            health: EdgeHealth::Ok,
            health_note: String::new(),
        };
        (edge.health, edge.health_note) = edge.assess_health(Some(spec.windows as usize), None);
        edges.push(edge);
    }

    let nodes = (0..n)
        .map(|i| {
            if cut_off.contains(&i) {
                return NodeClockModel {
                    node: i,
                    reachable: false,
                    segments: Vec::new(),
                };
            }
            let c = &clocks[i as usize];
            let segments = (0..spec.windows)
                .map(|w| {
                    let a = w as f64 * window_ns;
                    let b = a + window_ns;
                    let m = (a + b) / 2.0;
                    let rtt = min_rtt
                        .get(&(i, w as u64))
                        .copied()
                        .filter(|r| r.is_finite())
                        .unwrap_or(2.0 * BASE_DELAY_NS);
                    let stepped = c.step.is_some_and(|(at, _)| at >= a && at < b);
                    let mut bound_ns = if i == 0 {
                        0.0
                    } else {
                        rtt / 2.0 + 1_500.0 + exp(&mut rng, 1_000.0)
                    };
                    if stepped {
                        bound_ns += CLOCK_STEP_NS / 2.0;
                    }
                    let err = if i == 0 {
                        0.0
                    } else {
                        gauss(&mut rng) * bound_ns * 0.3
                    };
                    ClockSegment {
                        window_id: w as u64,
                        start_local_ns: c.read(a),
                        end_local_ns: c.read(b),
                        mid_local_ns: c.read(m),
                        offset_ns: c.ahead_ns(m) + err,
                        drift_ppb: c.drift_ppb + if i == 0 { 0.0 } else { gauss(&mut rng) * 15.0 },
                        bound_ns,
                        uncertainty_ns: bound_ns / 200.0,
                        drift_uncertainty_ppb: 5.0,
                        flagged: bound_ns > BOUND_LIMIT_NS,
                        break_at_start: false,
                    }
                })
                .collect();
            NodeClockModel {
                node: i,
                reachable: true,
                segments,
            }
        })
        .collect();

    let loops = distprof_offline::report::loops::triangle_residuals(&fitted, MAX_LOOPS);
    let config = Config {
        enabled: true,
        probe_window_s: spec.window_s,
        probe_out_degree: spec.out_degree,
        graph_seed: spec.seed,
        timestamping: TimestampMode::Kernel,
        ..Config::default()
    };
    let input = ReportInput {
        facts: RunFacts {
            run_name: format!("synthetic, {n} nodes, seed {}", spec.seed),
            reference_node: 0,
            timestamp_mode: TimestampMode::Kernel,
            timestamp_bound_ns: Some(1_000.0),
            estimator: Some(config.estimator),
            bound_limit_ns: Some(BOUND_LIMIT_NS),
            uncertainty_limit_ns: Some(Config::DEFAULT_MAX_UNCERTAINTY_NS as f64),
            asymmetry_allowance_ns: Some(Config::default().effective_asymmetry_allowance_ns() as f64),
            config: serde_json::to_value(&config).unwrap_or_default(),
            synthetic: true,
            dropped: None,
            timestamps: Default::default(),
            nodes_without_data: Vec::new(),
            reanchored: Vec::new(),
        },
        nodes,
        hostnames: (0..n).map(|i| (i, format!("node-{i:03}"))).collect(),
        edges,
        loops,
    };
    (input, clocks)
}

/// For a given slope, the max-margin line between forward points (above) and reverse
/// points (below), pure points only: offset at `mid_ns` and the margin (negative when the
/// clouds overlap). `None` without a pure point in either direction.
fn max_margin_at_slope(points: &[OwdPoint], mid_ns: i64, drift_ppb: f64) -> Option<(f64, f64)> {
    let mut lowest_fwd = f64::INFINITY;
    let mut highest_rev = f64::NEG_INFINITY;
    for p in points.iter().filter(|p| p.pure) {
        let y = p.owd_ns as f64 - drift_ppb * 1e-9 * (p.t_ns - mid_ns) as f64;
        if p.forward {
            lowest_fwd = lowest_fwd.min(y);
        } else {
            highest_rev = highest_rev.max(y);
        }
    }
    (lowest_fwd.is_finite() && highest_rev.is_finite()).then(|| {
        (
            (lowest_fwd + highest_rev) / 2.0,
            (lowest_fwd - highest_rev) / 2.0,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_recover_the_generated_clocks() {
        let spec = SyntheticSpec::new(8, 11);
        let (input, clocks) = generate(&spec);
        let window_ns = spec.window_s * 1e9;
        let mut checked = 0;
        for e in input.edges.iter().filter(|e| e.health == EdgeHealth::Ok) {
            for f in &e.fits {
                let mid_true = (f.window_id as f64 + 0.5) * window_ns;
                let truth = clocks[e.dst as usize].ahead_ns(mid_true)
                    - clocks[e.src as usize].ahead_ns(mid_true);
                // Error of a max-margin midline: half the difference of the smallest
                // excess delays of the two directions (~100 ns here), well under 2 µs.
                assert!(
                    (f.offset_ns - truth).abs() < 2_000.0,
                    "edge {}->{} w{}: {} vs {truth}",
                    e.src,
                    e.dst,
                    f.window_id,
                    f.offset_ns
                );
                // The margin is about the base one-way delay.
                assert!(
                    f.margin_ns > 0.8 * BASE_DELAY_NS && f.margin_ns < 1.5 * BASE_DELAY_NS,
                    "margin {}",
                    f.margin_ns
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
        // The node whose clock steps breaks the fit of that window on its edges.
        let stepping = clocks.iter().position(|c| c.step.is_some()).unwrap() as NodeId;
        let broken = input
            .edges
            .iter()
            .filter(|e| e.src == stepping || e.dst == stepping)
            .flat_map(|e| &e.fits)
            .filter(|f| f.window_id == u64::from(spec.windows / 2))
            .filter(|f| f.margin_ns < 0.0)
            .count();
        assert!(broken > 0);
        let seg = &input.nodes[stepping as usize].segments[(spec.windows / 2) as usize];
        assert!(seg.flagged);
        assert_eq!(input.nodes.iter().filter(|n| !n.reachable).count(), 1);
        // Loops: consistent fits close to within a few µs.
        assert!(!input.loops.is_empty());
        // Congested edges have a slower return path: the asymmetry biases their offset by
        // half the difference (12.5 µs), which loops through them do show.
        let ok_edge = |a: NodeId, b: NodeId| {
            input.edges.iter().any(|e| {
                ((e.src, e.dst) == (a, b) || (e.src, e.dst) == (b, a)) && e.health == EdgeHealth::Ok
            }) && !input.edges.iter().any(|e| {
                ((e.src, e.dst) == (a, b) || (e.src, e.dst) == (b, a)) && e.health != EdgeHealth::Ok
            })
        };
        let ok_loops = input.loops.iter().filter(|l| {
            l.window_id != Some(u64::from(spec.windows / 2))
                && (0..3).all(|i| ok_edge(l.nodes[i], l.nodes[(i + 1) % 3]))
        });
        assert!(ok_loops.clone().count() > 0);
        for l in ok_loops {
            assert!(l.residual_ns.abs() < 6_000.0, "{l:?}");
        }
        // The same seed gives the same input.
        assert_eq!(input, synthetic_input(&spec));
    }
}
