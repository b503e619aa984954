//! The whole chain for one window: records in, fits and `ClockSegment`s out. Called per
//! window while probing and once more at profiler stop for the open window; the same
//! function serves a node that only has its own edges (its neighbours become reachable)
//! and an offline pass over every edge of the run.
//!
//! Windows are the same local-clock interval on every node ([start, end) of each node's own
//! host clock); the reference's midpoint M is the common instant of the network solve.

use super::bound::{edge_uncertainty_ns, node_bounds_ns};
use super::fit::fit_edge;
use super::hull::{self, FitError, Hulls, Line};
use std::collections::{HashMap, VecDeque};
use super::network::{self, EdgeObs, EdgeVerdict, NetworkSolution};
use super::points::{for_each_edge_with, WindowBounds};
use super::purity::{PurityCounts, PurityTolerance};
use super::settings::{EstimatorSettings, NetworkMode};
use crate::config::EstimatorKind;
use crate::context::NodeId;
use crate::model::{ClockSegment, NodeClockModel};
use crate::record::ProbeRecord;
use serde::Serialize;

/// Edge weights are 1 / uncertainty²; below this floor two edges are equally good (the
/// bound's allowances dominate), and it keeps a zero-width interval from taking all weight.
const MIN_WEIGHT_SIGMA_NS: f64 = 100.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    pub window_id: u64,
    /// Window bounds, in each node's own host clock.
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub num_nodes: u32,
    pub reference: NodeId,
}

/// What one edge gave in this window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeReport {
    pub src: NodeId,
    pub dst: NodeId,
    pub counts: PurityCounts,
    /// Why the edge has no line, if it has none.
    pub fit_error: Option<FitError>,
    /// theta = S_dst - S_src at the window midpoint, and its rate, from this edge alone.
    pub theta_ns: Option<f64>,
    pub theta_rate_ppb: Option<f64>,
    pub margin_ns: Option<f64>,
    /// Data-derived uncertainty of theta where the network used it.
    pub uncertainty_ns: Option<f64>,
    pub verdict: Option<EdgeVerdict>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowEstimate {
    pub window_id: u64,
    pub counts: PurityCounts,
    pub edges: Vec<EdgeReport>,
    pub network: NetworkSolution,
    /// Indexed by node; None for unreachable nodes.
    pub segments: Vec<Option<ClockSegment>>,
    pub unreachable: Vec<NodeId>,
    pub flagged: Vec<NodeId>,
}

impl WindowEstimate {
    /// Edges the network rejected, by name.
    pub fn rejected_edges(&self) -> Vec<(NodeId, NodeId)> {
        self.network.edges.iter().filter(|v| v.rejected.is_some()).map(|v| (v.src, v.dst)).collect()
    }
}

/// The hulls of an edge's last windows. The hull of a union is the hull of the union of
/// hulls, so a few dozen vertices per window are all the history the drift fit needs.
#[derive(Debug, Clone, Default)]
pub struct History {
    edges: HashMap<(NodeId, NodeId), VecDeque<PastHulls>>,
}

#[derive(Debug, Clone)]
struct PastHulls {
    mid_ns: i64,
    y_origin_ns: i64,
    hulls: Hulls,
}

/// One window on its own: offset and drift from this window's points only.
pub fn estimate_window(records: &[ProbeRecord], spec: &WindowSpec, settings: &EstimatorSettings) -> WindowEstimate {
    estimate(records, spec, settings, None)
}

/// One window of a sequence: as `estimate_window`, but with the hull estimator the drift
/// comes from this window and the past windows within `drift_span_s` before it (the error of an
/// extreme-point slope falls with the square of the span), and the offset from this
/// window's points at that slope. Call once per window, in order, with the same history.
pub fn estimate_window_with_history(
    records: &[ProbeRecord],
    spec: &WindowSpec,
    settings: &EstimatorSettings,
    history: &mut History,
) -> WindowEstimate {
    estimate(records, spec, settings, Some(history))
}

/// The slope over this window's and the past windows' hulls, then the max-margin
/// intercept of this window's hulls at that slope. None when there is no usable history.
fn long_line(cur: &Hulls, mid_ns: i64, y_origin_ns: i64, past: &VecDeque<PastHulls>) -> Option<Line> {
    if past.is_empty() {
        return None;
    }
    let shift = |p: &PastHulls, v: &[super::points::Point]| -> Option<Vec<super::points::Point>> {
        let dx = p.mid_ns.checked_sub(mid_ns)? as f64;
        let dy = p.y_origin_ns.checked_sub(y_origin_ns)? as f64;
        Some(v.iter().map(|q| super::points::Point { x_ns: q.x_ns + dx, y_ns: q.y_ns + dy }).collect())
    };
    let mut fwd = cur.fwd_lower.clone();
    let mut rev = cur.rev_upper.clone();
    for p in past {
        fwd.extend(shift(p, &p.hulls.fwd_lower)?);
        rev.extend(shift(p, &p.hulls.rev_upper)?);
    }
    fwd.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
    rev.sort_by(|a, b| a.x_ns.total_cmp(&b.x_ns));
    let b = hull::fit(&fwd, &rev).ok()?.line.slope;
    let hi = cur.fwd_lower.iter().map(|p| p.y_ns - b * p.x_ns).fold(f64::INFINITY, f64::min);
    let lo = cur.rev_upper.iter().map(|p| p.y_ns - b * p.x_ns).fold(f64::NEG_INFINITY, f64::max);
    let line = Line { slope: b, intercept_ns: 0.5 * (hi + lo) };
    (line.intercept_ns.is_finite() && line.slope.is_finite()).then_some(line)
}

fn estimate(
    records: &[ProbeRecord],
    spec: &WindowSpec,
    settings: &EstimatorSettings,
    mut history: Option<&mut History>,
) -> WindowEstimate {
    let n = spec.num_nodes as usize;
    let window = WindowBounds { start_ns: spec.start_local_ns, end_ns: spec.end_local_ns.max(spec.start_local_ns) };
    let tol = PurityTolerance { abs_ns: settings.purity_abs_tolerance_ns, rel: settings.purity_rel_tolerance };
    let mut edges = Vec::new();
    let mut obs = Vec::new();
    let mut fitted = Vec::new(); // (edge index, line, timestamp noise) per obs
    // Only the round-trip baselines read the per-probe list.
    let want_probes = matches!(settings.estimator, EstimatorKind::Ntp | EstimatorKind::TwoPoint);
    let counts = for_each_edge_with(records, spec.num_nodes, window, tol, want_probes, |e| {
        let mut report = EdgeReport {
            src: e.src,
            dst: e.dst,
            counts: e.counts,
            fit_error: None,
            theta_ns: None,
            theta_rate_ppb: None,
            margin_ns: None,
            uncertainty_ns: None,
            verdict: None,
        };
        match fit_edge(settings.estimator, e, settings.svm_c) {
            Ok(mut line) => {
                if let (Some(h), EstimatorKind::Hull) = (history.as_deref_mut(), settings.estimator) {
                    let past = h.edges.entry((e.src, e.dst)).or_default();
                    if let Some(long) = long_line(&line.hulls, window.mid_ns(), e.y_origin_ns, past) {
                        line.line = long;
                    }
                    past.push_back(PastHulls { mid_ns: window.mid_ns(), y_origin_ns: e.y_origin_ns, hulls: line.hulls.clone() });
                    while past.len() > settings.history_windows(window.end_ns - window.start_ns) {
                        past.pop_front();
                    }
                }
                let theta = e.y_origin_ns as f64 + line.line.intercept_ns;
                let u0 = edge_uncertainty_ns(&line.hulls, &line.line, 0.0, e.gap_noise_ns);
                report.theta_ns = Some(theta);
                report.theta_rate_ppb = Some(line.line.slope * 1e9);
                report.margin_ns = line.margin_ns.is_finite().then_some(line.margin_ns);
                let sigma = if u0.is_finite() { u0.max(MIN_WEIGHT_SIGMA_NS) } else { 1e9 };
                obs.push(EdgeObs {
                    src: e.src,
                    dst: e.dst,
                    alpha: line.line.slope,
                    beta_ns: theta,
                    weight: 1.0 / (sigma * sigma),
                });
                fitted.push((edges.len(), line, e.gap_noise_ns));
            }
            Err(err) => report.fit_error = Some(err),
        }
        edges.push(report);
    });

    let solution = network::solve(spec.num_nodes, spec.reference, &obs, settings.network == NetworkMode::Wls);
    // Each edge's uncertainty where the network evaluates it: at G = M, i.e. x = o_src.
    let uncertainty: Vec<f64> = obs
        .iter()
        .zip(&fitted)
        .map(|(o, (_, line, noise_ns))| {
            let x = solution.offset_ns.get(o.src as usize).copied().flatten().unwrap_or(0.0);
            edge_uncertainty_ns(&line.hulls, &line.line, x, *noise_ns)
        })
        .collect();
    for (k, (ei, _, _)) in fitted.iter().enumerate() {
        edges[*ei].uncertainty_ns = uncertainty[k].is_finite().then_some(uncertainty[k]);
        edges[*ei].verdict = solution.edges.get(k).copied();
    }
    let bounds = node_bounds_ns(n, spec.reference, &obs, &uncertainty, &solution);

    let mid = window.mid_ns();
    let mut flagged = Vec::new();
    let segments: Vec<Option<ClockSegment>> = (0..n)
        .map(|i| {
            let (o, r) = (solution.offset_ns[i]?, solution.rate[i]?);
            // Drift per local time: dS_i/dG = 1 + r, so d(S_i - G)/dS_i = r / (1 + r).
            let drift = r / (1.0 + r);
            // S_i - G = o + drift * (S_i - (M + o)); at S_i = M (the local midpoint):
            let offset_ns = o * (1.0 - drift);
            let bound_ns = bounds[i].unwrap_or(f64::INFINITY);
            let is_flagged = bound_ns.is_nan() || bound_ns > settings.max_bound_ns as f64;
            if is_flagged {
                flagged.push(i as NodeId);
            }
            Some(ClockSegment {
                window_id: spec.window_id,
                start_local_ns: window.start_ns,
                end_local_ns: window.end_ns,
                mid_local_ns: mid,
                offset_ns,
                drift_ppb: drift * 1e9,
                // JSON has no infinity: an unbounded segment carries f64::MAX and the flag.
                bound_ns: if bound_ns.is_finite() { bound_ns } else { f64::MAX },
                flagged: is_flagged,
            })
        })
        .collect();
    WindowEstimate {
        window_id: spec.window_id,
        counts,
        edges,
        unreachable: solution.unreachable.clone(),
        network: solution,
        segments,
        flagged,
    }
}

/// Collects window estimates into every node's piecewise model.
#[derive(Debug, Clone)]
pub struct ModelBuilder {
    models: Vec<NodeClockModel>,
}

impl ModelBuilder {
    pub fn new(num_nodes: u32) -> Self {
        Self {
            models: (0..num_nodes).map(|node| NodeClockModel { node, reachable: false, segments: Vec::new() }).collect(),
        }
    }

    pub fn push(&mut self, w: &WindowEstimate) {
        for (m, seg) in self.models.iter_mut().zip(&w.segments) {
            if let Some(s) = seg {
                m.reachable = true;
                m.segments.push(*s);
            }
        }
    }

    pub fn finish(mut self) -> Vec<NodeClockModel> {
        for m in &mut self.models {
            m.segments.sort_by_key(|s| s.start_local_ns);
        }
        self.models
    }
}
