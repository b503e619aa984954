//! The whole chain for one window: records in, fits and `ClockSegment`s out. Called per
//! window while probing and once more at profiler stop for the open window; the same
//! function serves a node that only has its own edges (its neighbours become reachable)
//! and an offline pass over every edge of the run.
//!
//! Windows are the same local-clock interval on every node ([start, end) of each node's own
//! host clock); the reference's midpoint M is the common instant of the network solve.

use super::allowance::{nodes_beyond_allowance, total_sigma_ns};
use super::bound::{crossing_ns, edge_uncertainty_ns, node_bounds_ns};
use super::breaks::{edge_slices, find_steps, keeps_point, node_breaks, pieces, repeated_readings, NodeStep};
use super::uncertainty::node_sigmas_ns;
use super::wander::WanderSoFar;
use super::failover::{Anchor, Anchoring};
use super::fit::fit_edge;
use super::hull::FitError;
use super::network::{self, EdgeObs, NetworkSolution};
use super::points::{map_edges, EdgePoints, Point, WindowBounds};
use super::window_fits::{EdgeReport, FittedEdge, WindowFits, WindowSpec};
use std::collections::VecDeque;
use super::purity::{PurityCounts, PurityTolerance};
use super::settings::{EstimatorSettings, NetworkMode};
use crate::config::EstimatorKind;
use crate::context::NodeId;
use crate::model::{ClockSegment, NodeClockModel};
use crate::record::ProbeRecord;
use serde::Serialize;

/// Edge weights are 1 / u², u the edge's worst-case half width (`bound`); below this
/// floor two edges are equally good (the bound's allowances dominate), and it keeps a
/// zero-width interval from taking all weight. The node uncertainties follow whatever the
/// weights (`uncertainty::node_sigmas_ns`).
const MIN_WEIGHT_SIGMA_NS: f64 = 100.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowEstimate {
    pub window_id: u64,
    pub counts: PurityCounts,
    pub edges: Vec<EdgeReport>,
    pub network: NetworkSolution,
    /// Indexed by node; None for unreachable nodes. The window's line of each node.
    pub segments: Vec<Option<ClockSegment>>,
    /// Indexed by node: the pieces of the node's segment where its clock or the
    /// reference's breaks inside the window (`breaks`), in order, covering the window;
    /// empty where the segment's line holds. The model (`ModelBuilder`) takes these.
    pub pieces: Vec<Vec<ClockSegment>>,
    pub unreachable: Vec<NodeId>,
    pub flagged: Vec<NodeId>,
    /// The nodes that stood in for the reference in this window, if any (`failover`):
    /// empty where the reference placed every node it could.
    pub anchors: Vec<Anchor>,
    /// Nodes whose loops show an asymmetry beyond the stated allowance
    /// (`allowance::nodes_beyond_allowance`): their uncertainty's assumption is broken, and
    /// their segments are flagged.
    pub beyond_allowance: Vec<NodeId>,
}

impl WindowEstimate {
    /// Edges the network rejected, by name.
    pub fn rejected_edges(&self) -> Vec<(NodeId, NodeId)> {
        self.network.edges.iter().filter(|v| v.rejected.is_some()).map(|v| (v.src, v.dst)).collect()
    }
}


/// The past windows' fits of a sequence, for the online drift fit (`drift_span_s` back);
/// the wander measured so far (`wander::WanderSoFar`), for the online sigmas; and every
/// node's last segment on G with the anchors in use (`failover::Anchoring`), so that a
/// window the reference cannot place is re-anchored online as the run model does.
#[derive(Debug, Clone, Default)]
pub struct History {
    past: VecDeque<WindowFits>,
    wander: WanderSoFar,
    anchoring: Anchoring,
}

impl History {
    /// Each node's wander (ppb/sqrt(s) against the reference) measured so far: what
    /// widened the last window's sigmas (`wander::WanderSoFar`).
    pub fn wander_q_ppb(&self) -> Vec<Option<f64>> {
        self.wander.q_ppb()
    }
}

/// One window on its own: offset and drift from this window's points only.
pub fn estimate_window(records: &[ProbeRecord], spec: &WindowSpec, settings: &EstimatorSettings) -> WindowEstimate {
    solve(&fit_window(records, spec, settings), settings)
}

/// One window of a sequence, as it closes: as `estimate_window`, but with the hull
/// estimator the drift comes from this window and the past windows within `drift_span_s`
/// before it (the error of an extreme-point slope falls with the square of the span), and
/// the offset from this window's points at that slope; the sigmas are widened by the
/// wander measured from the windows so far (`wander::WanderSoFar`, none in the first);
/// where the reference cannot place a node (it stopped, or no path leads to it), the
/// window is re-anchored on a surviving node an earlier window placed (`failover`).
/// Call once per window, in order, with the same history. Offline, `Smoother` also uses the windows after each one.
pub fn estimate_window_with_history(
    records: &[ProbeRecord],
    spec: &WindowSpec,
    settings: &EstimatorSettings,
    history: &mut History,
) -> WindowEstimate {
    estimate_fits_with_history(fit_window(records, spec, settings), settings, history)
}

/// As `estimate_window_with_history`, for a window already fitted (`fit_window`): a caller
/// that also hands the fits to a `Smoother` fits each window once.
pub fn estimate_fits_with_history(mut fits: WindowFits, settings: &EstimatorSettings, history: &mut History) -> WindowEstimate {
    let past: Vec<&WindowFits> = history.past.iter().collect();
    let lines = super::drift::long_lines(&fits, &past, settings);
    fits.set_lines(lines);
    // Past windows' fits of the reference's edges serve only those edges' lines, which the
    // anchoring sets aside once the reference falls silent.
    let mut estimate = history.anchoring.solve(&fits, settings);
    // The bend of each node's clock within the window: the loops cannot see it. A
    // re-anchored window adds nothing to the wander's sums (its carried segments bend with
    // the anchor's extrapolation, not with their own clocks), but is widened by each
    // node's q so far.
    history.wander.add_window(&mut estimate, fits.spec.reference, settings);
    let window_ns = fits.spec.end_local_ns - fits.spec.start_local_ns;
    history.past.push_back(fits);
    while history.past.len() > settings.history_windows(window_ns) {
        history.past.pop_front();
    }
    estimate
}

/// Every edge of one window fitted with the configured estimator.
pub fn fit_window(records: &[ProbeRecord], spec: &WindowSpec, settings: &EstimatorSettings) -> WindowFits {
    let mut fits = WindowFits { spec: *spec, counts: PurityCounts::default(), edges: Vec::new(), fitted: Vec::new(), steps: Vec::new() };
    let window = fits.window();
    let tol = PurityTolerance { abs_ns: settings.purity_abs_tolerance_ns, rel: settings.purity_rel_tolerance };
    // Only the round-trip baselines read the per-probe list.
    let want_probes = matches!(settings.estimator, EstimatorKind::Ntp | EstimatorKind::TwoPoint);
    let (edges, counts) = map_edges(records, spec.num_nodes, window, tol, want_probes, |e| {
        let report = EdgeReport::unfitted(e.src, e.dst, e.counts, None);
        (report, fitted_edge(e, &[], window, settings))
    });
    fits.counts = counts;
    for (mut report, fitted) in edges {
        match fitted {
            Ok(f) => fits.fitted.push(FittedEdge { report: fits.edges.len(), ..f }),
            Err(err) => report.fit_error = Some(err),
        }
        fits.edges.push(report);
    }
    fits.steps = find_steps(&fits);
    if !fits.steps.is_empty() {
        refit_stepping_edges(&mut fits, records, tol, want_probes, settings);
    }
    fits
}

/// One edge's line and slices; with `steps`, the line only from the points on the fitted
/// side of each step of its ends (`breaks::keeps_point`), the slices from all of them
/// (the pieces on the other side are fitted from those). Where the window's first or last
/// slices hold both sides of a step (`EdgeSlices::clean_x_ns`), the line is fitted again
/// without them.
fn fitted_edge(
    e: &EdgePoints,
    steps: &[NodeStep],
    window: WindowBounds,
    settings: &EstimatorSettings,
) -> Result<FittedEdge, FitError> {
    let window_ns = window.end_ns.saturating_sub(window.start_ns);
    let fit_within = |clean: Option<(f64, f64)>| {
        let keep = |p: &Point| clean.is_none_or(|(from, to)| (from..to).contains(&p.x_ns)) && keeps_point(steps, e.src, e.dst, e.y_origin_ns, p);
        let line = if steps.is_empty() && clean.is_none() {
            fit_edge(settings.estimator, e, settings.svm_c)?
        } else {
            let on_side = |points: &[Point]| -> Vec<Point> { points.iter().filter(|p| keep(p)).copied().collect() };
            let probes = e.probes.iter().filter(|p| keep(&p.fwd)).copied().collect();
            let side = EdgePoints { fwd: on_side(&e.fwd), rev: on_side(&e.rev), fwd_all: on_side(&e.fwd_all), rev_all: on_side(&e.rev_all), probes, ..e.clone() };
            fit_edge(settings.estimator, &side, settings.svm_c)?
        };
        let (fwd, rev) = if line.all_packets { (&e.fwd_all, &e.rev_all) } else { (&e.fwd, &e.rev) };
        let slices = edge_slices(fwd, rev, &line.line, window_ns);
        Ok::<_, FitError>((line, slices))
    };
    let (mut line, mut slices) = fit_within(None)?;
    if let Some(clean) = slices.clean_x_ns {
        (line, slices) = fit_within(Some(clean))?;
    }
    let sent = if e.fwd_all.is_empty() { &e.fwd } else { &e.fwd_all };
    let src_repeats = repeated_readings(sent, window_ns);
    Ok(FittedEdge { report: 0, key: (e.src, e.dst), y_origin_ns: e.y_origin_ns, gap_noise_ns: e.gap_noise_ns, line, slices, src_repeats })
}

/// Fits every edge of a node that steps inside the window again, on the side of the step
/// its line is kept on (`breaks::find_steps`): one more pass over the records, in the rare
/// windows with a step. An edge with too few points there loses its line.
fn refit_stepping_edges(fits: &mut WindowFits, records: &[ProbeRecord], tol: PurityTolerance, want_probes: bool, settings: &EstimatorSettings) {
    let steps = fits.steps.clone();
    let touches = |src: NodeId, dst: NodeId| steps.iter().any(|s| s.node == src || s.node == dst);
    let window = fits.window();
    let (refits, _) = map_edges(records, fits.spec.num_nodes, window, tol, want_probes, |e| {
        touches(e.src, e.dst).then(|| ((e.src, e.dst), fitted_edge(e, &steps, window, settings)))
    });
    for ((src, dst), refit) in refits.into_iter().flatten() {
        let Some(report) = fits.edges.iter().position(|r| (r.src, r.dst) == (src, dst)) else { continue };
        let at = fits.fitted.binary_search_by_key(&(src, dst), |f| f.key);
        match (refit, at) {
            (Ok(f), Ok(i)) => fits.fitted[i] = FittedEdge { report, ..f },
            (Ok(f), Err(i)) => fits.fitted.insert(i, FittedEdge { report, ..f }),
            (Err(err), at) => {
                if let Ok(i) = at {
                    fits.fitted.remove(i);
                }
                fits.edges[report].fit_error = Some(err);
            }
        }
    }
}

/// The network solve, the bounds and the segments of one fitted window.
pub fn solve(fits: &WindowFits, settings: &EstimatorSettings) -> WindowEstimate {
    let spec = &fits.spec;
    let n = spec.num_nodes as usize;
    let mut edges = fits.edges.clone();
    for f in &fits.fitted {
        let (line, report) = (&f.line, &mut edges[f.report]);
        report.theta_ns = Some(f.y_origin_ns as f64 + line.line.intercept_ns);
        report.theta_rate_ppb = Some(line.line.slope * 1e9);
        report.margin_ns = line.margin_ns.is_finite().then_some(line.margin_ns);
        report.sigma_ns = line.sigma_ns.is_finite().then_some(line.sigma_ns);
        report.all_packets = line.all_packets;
    }
    let obs = observations(fits);

    let solution = network::solve(spec.num_nodes, spec.reference, &obs, settings.network == NetworkMode::Wls);
    // Each edge's uncertainty where the network evaluates it: at G = M, i.e. x = o_src.
    let uncertainty: Vec<f64> = obs
        .iter()
        .zip(&fits.fitted)
        .map(|(o, f)| {
            let x = solution.offset_ns.get(o.src as usize).copied().flatten().unwrap_or(0.0);
            // A neighbour's 900 us PHC step once crossed an edge's hulls by 694 us while
            // it stated 14 us, and the network carried 233 us of the step into a healthy
            // node whose bound then missed it.
            edge_uncertainty_ns(&f.line.hulls, &f.line.line, x, f.gap_noise_ns).max(crossing_ns(&f.line.hulls, &f.line.line))
        })
        .collect();
    for (k, f) in fits.fitted.iter().enumerate() {
        edges[f.report].uncertainty_ns = uncertainty[k].is_finite().then_some(uncertainty[k]);
        edges[f.report].verdict = solution.edges.get(k).copied();
    }
    let bounds = node_bounds_ns(n, spec.reference, &obs, &uncertainty, &solution);
    let edge_sigmas = fits.edge_sigmas_ns();
    let sigmas = node_sigmas_ns(n, spec.reference, &obs, &edge_sigmas, &solution, settings.network == NetworkMode::Wls);
    let allowance_ns = settings.asymmetry_allowance_ns;
    let beyond_allowance = nodes_beyond_allowance(n, &obs, &edge_sigmas, &solution, allowance_ns);

    let window = fits.window();
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
            let is_reference = i == spec.reference as usize;
            let sigma_ns = sigmas.offset_ns[i].map_or(f64::INFINITY, |s| total_sigma_ns(s, allowance_ns, is_reference));
            // The drift sigma is statistical only: an asymmetry is constant over the window.
            let drift_sigma_ppb = sigmas.drift_ppb[i].unwrap_or(f64::INFINITY);
            let is_flagged = !(sigma_ns <= settings.max_uncertainty_ns as f64)
                || !(bound_ns <= settings.max_bound_ns as f64)
                || beyond_allowance.binary_search(&(i as NodeId)).is_ok();
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
                uncertainty_ns: if sigma_ns.is_finite() { sigma_ns } else { f64::MAX },
                drift_uncertainty_ppb: if drift_sigma_ppb.is_finite() { drift_sigma_ppb } else { f64::MAX },
                flagged: is_flagged,
                break_at_start: false,
            })
        })
        .collect();
    let deviations = node_breaks(fits, &solution);
    let at_reference = deviations.get(spec.reference as usize).and_then(Option::as_ref);
    let pieces = (0..n)
        .map(|i| match &segments[i] {
            Some(seg) if i != spec.reference as usize => {
                pieces(seg, deviations[i].as_ref(), at_reference, settings.max_uncertainty_ns as f64)
            }
            _ => Vec::new(),
        })
        .collect();
    WindowEstimate {
        window_id: spec.window_id,
        counts: fits.counts,
        edges,
        unreachable: solution.unreachable.clone(),
        network: solution,
        segments,
        pieces,
        flagged,
        anchors: Vec::new(),
        beyond_allowance,
    }
}

/// The network solve's equations of a fitted window, one per fitted edge in order: theta
/// at the midpoint, weight 1 / u² from the edge's worst-case half width u at the midpoint
/// (floored at `MIN_WEIGHT_SIGMA_NS`).
pub fn observations(fits: &WindowFits) -> Vec<EdgeObs> {
    fits.fitted
        .iter()
        .map(|f| {
            let theta = f.y_origin_ns as f64 + f.line.line.intercept_ns;
            let u0 = edge_uncertainty_ns(&f.line.hulls, &f.line.line, 0.0, f.gap_noise_ns);
            let sigma = if u0.is_finite() { u0.max(MIN_WEIGHT_SIGMA_NS) } else { 1e9 };
            EdgeObs { src: f.key.0, dst: f.key.1, alpha: f.line.line.slope, beta_ns: theta, weight: 1.0 / (sigma * sigma) }
        })
        .collect()
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

    /// A window's segments, or where a node's clock breaks inside it, its pieces.
    pub fn push(&mut self, w: &WindowEstimate) {
        for (i, (m, seg)) in self.models.iter_mut().zip(&w.segments).enumerate() {
            if let Some(s) = seg {
                m.reachable = true;
                match w.pieces.get(i).filter(|p| !p.is_empty()) {
                    Some(pieces) => m.segments.extend_from_slice(pieces),
                    None => m.segments.push(*s),
                }
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
