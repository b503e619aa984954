//! The verdict of `distprof local`: the real estimator run over every node's JSONL, as a
//! user would run it offline, compared with the true virtual clocks.
//!
//! The estimate is `distprof_offline::run_dir_estimate::estimate_run`, the one `distprof report
//! --run-dir` and `merge --run-dir` use (records re-binned into the reference's windows);
//! this module only compares its segments with the virtual clocks.

use super::path_asymmetry;
use crate::stats::quantile;
use distprof::clock::VirtualClock;
use distprof::context::NodeId;
use distprof::estimate::network::EdgeVerdict;
use distprof::estimate::Anchor;
use distprof::model::ClockSegment;
use distprof_offline::run_dir_estimate::{estimate_run, RunDirError, RunFile};
use serde::Serialize;

/// Windows shorter than this share of the longest are the partial last one (it holds
/// only the answers drained after probing stopped): estimated and printed, but neither
/// reported per node nor counted in the error quantiles.
const FULL_WINDOW_SHARE: f64 = 0.9;

/// One node's clock against the reference in the window reported for it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeResult {
    pub node: NodeId,
    /// False when no window gave the node a path to the reference: the estimates are
    /// then null, never zero.
    pub reachable: bool,
    /// The window reported (the last full window in which the node was estimated).
    pub window_id: Option<u64>,
    pub true_offset_ns: Option<f64>,
    pub est_offset_ns: Option<f64>,
    pub error_ns: Option<f64>,
    pub true_drift_ppm: Option<f64>,
    pub est_drift_ppm: Option<f64>,
    pub bound_ns: Option<f64>,
    /// Calibrated uncertainty (one sigma, symmetric paths).
    pub uncertainty_ns: Option<f64>,
    pub flagged: Option<bool>,
    /// Over every full window in which the node was estimated.
    pub windows_estimated: usize,
    pub windows_within_bound: usize,
    pub p99_error_ns: Option<f64>,
    pub max_abs_error_ns: Option<f64>,
    pub p99_drift_error_ppb: Option<f64>,
}

/// One node's estimate in one full window against the truth.
#[derive(Debug, Clone, Serialize)]
pub struct NodeWindow {
    pub node: NodeId,
    pub window_id: u64,
    pub error_ns: f64,
    pub uncertainty_ns: f64,
    pub bound_ns: f64,
    pub drift_error_ppb: f64,
    /// The error the true paths between the node and the reference make in this window
    /// (`path_asymmetry`): half the difference of their true minimum delays, which no
    /// two-way measurement sees. None when the two did not probe each other.
    pub path_asymmetry_ns: Option<f64>,
}

/// The node-window with the largest offset error and the network solve's edges in that
/// window: the p99 of a short run is nearly its maximum, so this is the window to read when
/// the figure misses (was an edge rejected there, or did one disagree and stay?).
#[derive(Debug, Clone, Serialize)]
pub struct WorstNodeWindow {
    pub node_window: NodeWindow,
    pub edges: Vec<EdgeVerdict>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub nodes: Vec<NodeResult>,
    /// Every node but the reference in every full window, by node then window.
    pub node_windows: Vec<NodeWindow>,
    /// Common windows estimated (the reference's windows, including the partial last one).
    pub windows: usize,
    pub full_windows: usize,
    /// Over every node but the reference and every full window.
    pub samples: usize,
    pub p50_offset_error_ns: Option<f64>,
    pub p99_offset_error_ns: Option<f64>,
    pub p50_drift_error_ppb: Option<f64>,
    pub p99_drift_error_ppb: Option<f64>,
    /// Median bound and share of flagged segments over the same node-windows.
    pub bound_ns_p50: Option<f64>,
    pub flagged_fraction: f64,
    /// Median uncertainty, the node-windows whose error is within twice it (of
    /// `samples`), and the median of uncertainty / |error| (how informative it is).
    pub uncertainty_ns_p50: Option<f64>,
    pub within_2_sigma: usize,
    pub uncertainty_coverage_2sigma: Option<f64>,
    pub uncertainty_to_error_ratio_p50: Option<f64>,
    /// Median thread CPU time of one window's estimate (all edges, network, bounds).
    pub estimate_ms_p50: f64,
    /// Node-windows (full windows) without a segment.
    pub unreachable_node_windows: usize,
    /// Of those, the ones whose node was alive (a record of the window touches it): a
    /// dead node has no segment by right, a surviving one must have one.
    pub unreachable_surviving_node_windows: usize,
    /// Every window the reference could not place, with the node that stood in for it
    /// (`estimate::failover`).
    pub anchors: Vec<Anchor>,
    /// Node-windows (full windows) whose loops show an asymmetry beyond the allowance the
    /// uncertainty assumes (`estimate::allowance`).
    pub beyond_allowance_node_windows: usize,
    /// Node-windows whose true path asymmetry to the reference exceeds the allowance
    /// (`NodeWindow::path_asymmetry_ns`): the uncertainty's assumption broken by this
    /// machine's paths, not by the estimator. Of those outside 2 sigma, how many.
    pub asymmetric_node_windows: usize,
    pub asymmetric_misses: usize,
    /// The share within 2 sigma of the node-windows whose true path asymmetry is within
    /// the allowance: the coverage where the uncertainty's assumption holds.
    pub coverage_2sigma_within_allowance: Option<f64>,
    /// The asymmetry per hop the uncertainties assume, ns: the allowance of the weakest
    /// timestamp mode the nodes stamped in, unless configured
    /// (`run_dir_estimate::allowance_of_stamps`).
    pub asymmetry_allowance_ns: f64,
    pub rejected_edges: Vec<(NodeId, NodeId)>,
    pub worst: Option<WorstNodeWindow>,
    /// Records whose prober stamp fell outside every common window.
    pub records_outside: usize,
}

/// The truth for node `i` over the local interval [start, end) of its clock: its offset
/// from the reference at the instant it reads the midpoint, and its mean drift over the
/// interval, in the sign convention of `model::ClockSegment`.
pub fn truth(clock: &VirtualClock, reference: &VirtualClock, start_ns: i64, end_ns: i64) -> (f64, f64) {
    let rel = |v: i64| (v - clock.epoch_real_ns) as f64;
    // Real times relative to the node's epoch, shifted to the reference's epoch.
    let shift = (clock.epoch_real_ns - reference.epoch_real_ns) as f64;
    let g = |t_rel_node: f64| reference.read_rel_ns(t_rel_node + shift);
    let mid = start_ns + (end_ns - start_ns) / 2;
    let t_mid = clock.invert_rel_ns(rel(mid));
    let offset_ns = (mid - reference.epoch_real_ns) as f64 - g(t_mid);
    let (t0, t1) = (clock.invert_rel_ns(rel(start_ns)), clock.invert_rel_ns(rel(end_ns)));
    let ds_i = (end_ns - start_ns) as f64;
    let drift_ppb = (1.0 - (g(t1) - g(t0)) / ds_i) * 1e9;
    (offset_ns, drift_ppb)
}

/// Runs the offline estimate over every readable node file and compares each node's
/// segment with the truth, over the common windows.
pub fn judge(files: &[RunFile], clocks: &[VirtualClock]) -> Result<Verdict, RunDirError> {
    let n = clocks.len();
    let run = estimate_run(files)?;
    let reference = run.reference;
    let longest = run.windows.iter().map(|w| w.spec.end_local_ns - w.spec.start_local_ns).max().unwrap_or(0);
    let is_full = |s: i64, e: i64| (e - s) as f64 >= FULL_WINDOW_SHARE * longest as f64;

    // Per node: (window, segment, truth offset, truth drift) of every estimated full window,
    // and the error its true paths to the reference make there.
    let mut per_node: Vec<Vec<(u64, ClockSegment, f64, f64)>> = vec![Vec::new(); n];
    let mut asymmetry: Vec<Vec<Option<f64>>> = vec![Vec::new(); n];
    let mut rejected = Vec::new();
    let mut estimate_ms = Vec::new();
    let mut unreachable_node_windows = 0;
    let mut unreachable_surviving_node_windows = 0;
    let mut anchors = Vec::new();
    let mut beyond_allowance_node_windows = 0;
    for w in &run.windows {
        anchors.extend(w.estimate.anchors.iter().copied());
        estimate_ms.push(w.estimate_cpu_ms);
        for e in w.estimate.rejected_edges() {
            if !rejected.contains(&e) {
                rejected.push(e);
            }
        }
        if !is_full(w.spec.start_local_ns, w.spec.end_local_ns) {
            continue;
        }
        unreachable_node_windows += w.estimate.unreachable.len();
        let alive = |i: NodeId| w.records.iter().any(|r| r.src == i || r.dst == i);
        unreachable_surviving_node_windows += w.estimate.unreachable.iter().filter(|&&i| alive(i)).count();
        beyond_allowance_node_windows += w.estimate.beyond_allowance.len();
        for (i, seg) in w.estimate.segments.iter().enumerate().take(n) {
            if let Some(s) = seg {
                let (o, d) = truth(&clocks[i], &clocks[reference as usize], s.start_local_ns, s.end_local_ns);
                per_node[i].push((w.spec.window_id, *s, o, d));
                asymmetry[i].push(path_asymmetry::to_reference_ns(&w.records, clocks, reference, i as NodeId));
            }
        }
    }

    let (mut all_off, mut all_drift, mut all_bounds, mut flagged) = (Vec::new(), Vec::new(), Vec::new(), 0usize);
    let (mut sigmas, mut ratios, mut within_2_sigma) = (Vec::new(), Vec::new(), 0usize);
    let nodes = per_node
        .iter()
        .enumerate()
        .map(|(i, ws)| {
            let mut errs: Vec<f64> = ws.iter().map(|(_, s, o, _)| (s.offset_ns - o).abs()).collect();
            let mut derrs: Vec<f64> = ws.iter().map(|(_, s, _, d)| (s.drift_ppb - d).abs()).collect();
            if i != reference as usize {
                all_off.extend_from_slice(&errs);
                all_drift.extend_from_slice(&derrs);
                all_bounds.extend(ws.iter().map(|(_, s, _, _)| s.bound_ns));
                flagged += ws.iter().filter(|(_, s, _, _)| s.flagged).count();
                for (_, s, o, _) in ws {
                    let err = (s.offset_ns - o).abs();
                    sigmas.push(s.uncertainty_ns);
                    ratios.push(s.uncertainty_ns / err.max(1e-3));
                    within_2_sigma += (err <= 2.0 * s.uncertainty_ns) as usize;
                }
            }
            let last = ws.last();
            NodeResult {
                node: i as NodeId,
                reachable: last.is_some(),
                window_id: last.map(|l| l.0),
                true_offset_ns: last.map(|l| l.2),
                est_offset_ns: last.map(|l| l.1.offset_ns),
                error_ns: last.map(|l| l.1.offset_ns - l.2),
                true_drift_ppm: last.map(|l| l.3 / 1e3),
                est_drift_ppm: last.map(|l| l.1.drift_ppb / 1e3),
                bound_ns: last.map(|l| l.1.bound_ns),
                uncertainty_ns: last.map(|l| l.1.uncertainty_ns),
                flagged: last.map(|l| l.1.flagged),
                windows_estimated: ws.len(),
                windows_within_bound: ws.iter().filter(|(_, s, o, _)| (s.offset_ns - o).abs() <= s.bound_ns).count(),
                max_abs_error_ns: errs.iter().copied().reduce(f64::max),
                p99_error_ns: quantile(&mut errs, 0.99),
                p99_drift_error_ppb: quantile(&mut derrs, 0.99),
            }
        })
        .collect();
    let node_windows = per_node
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != reference as usize)
        .flat_map(|(i, ws)| {
            let asymmetry = &asymmetry[i];
            ws.iter().zip(asymmetry).map(move |((w, s, o, d), a)| NodeWindow {
                node: i as NodeId,
                window_id: *w,
                error_ns: s.offset_ns - o,
                uncertainty_ns: s.uncertainty_ns,
                bound_ns: s.bound_ns,
                drift_error_ppb: s.drift_ppb - d,
                path_asymmetry_ns: *a,
            })
        })
        .collect::<Vec<NodeWindow>>();
    let allowance_ns = run.asymmetry_allowance_ns;
    let asymmetric = |nw: &&NodeWindow| nw.path_asymmetry_ns.is_some_and(|a| a.abs() > allowance_ns);
    let missed = |nw: &&NodeWindow| nw.error_ns.abs() > 2.0 * nw.uncertainty_ns;
    let within_assumption: Vec<&NodeWindow> = node_windows.iter().filter(|nw| !asymmetric(nw)).collect();
    let coverage_2sigma_within_allowance = (!within_assumption.is_empty())
        .then(|| within_assumption.iter().filter(|nw| !missed(nw)).count() as f64 / within_assumption.len() as f64);
    let asymmetric_node_windows = node_windows.iter().filter(asymmetric).count();
    let asymmetric_misses = node_windows.iter().filter(asymmetric).filter(missed).count();
    let worst = node_windows.iter().max_by(|a, b| a.error_ns.abs().total_cmp(&b.error_ns.abs())).map(|nw| WorstNodeWindow {
        node_window: nw.clone(),
        edges: run
            .windows
            .iter()
            .find(|w| w.spec.window_id == nw.window_id)
            .map(|w| w.estimate.network.edges.clone())
            .unwrap_or_default(),
    });
    Ok(Verdict {
        nodes,
        node_windows,
        windows: run.windows.len(),
        full_windows: run.windows.iter().filter(|w| is_full(w.spec.start_local_ns, w.spec.end_local_ns)).count(),
        samples: all_off.len(),
        p50_offset_error_ns: quantile(&mut all_off, 0.5),
        p99_offset_error_ns: quantile(&mut all_off, 0.99),
        p50_drift_error_ppb: quantile(&mut all_drift, 0.5),
        p99_drift_error_ppb: quantile(&mut all_drift, 0.99),
        flagged_fraction: flagged as f64 / all_bounds.len().max(1) as f64,
        bound_ns_p50: quantile(&mut all_bounds, 0.5),
        uncertainty_ns_p50: quantile(&mut sigmas, 0.5),
        within_2_sigma,
        uncertainty_coverage_2sigma: (!all_off.is_empty()).then(|| within_2_sigma as f64 / all_off.len() as f64),
        uncertainty_to_error_ratio_p50: quantile(&mut ratios, 0.5),
        estimate_ms_p50: quantile(&mut estimate_ms, 0.5).unwrap_or(0.0),
        unreachable_node_windows,
        unreachable_surviving_node_windows,
        anchors,
        beyond_allowance_node_windows,
        asymmetry_allowance_ns: allowance_ns,
        asymmetric_node_windows,
        asymmetric_misses,
        coverage_2sigma_within_allowance,
        rejected_edges: rejected,
        worst,
        records_outside: run.records_outside,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_follows_the_segment_sign_convention() {
        let epoch = 1_700_000_000_000_000_000;
        let reference = VirtualClock { offset_ns: -300_000, drift_ppb: 4_000.0, wander_ns: 0.0, epoch_real_ns: epoch };
        let node = VirtualClock { offset_ns: 1_500_000, drift_ppb: -12_500.0, wander_ns: 0.0, epoch_real_ns: epoch };
        // Over [epoch + 1 s, epoch + 3 s) of the node's clock: at its midpoint (real time
        // ~2 s) the node is 1.8 ms - 16.5 us/s * 2 s ahead; it loses ~16.5 ppm.
        let (o, d) = truth(&node, &reference, epoch + 1_000_000_000, epoch + 3_000_000_000);
        assert!((o - (1_800_000.0 - 2.0 * 16_500.0)).abs() < 50.0, "{o}");
        // drift = 1 - dG/dS_i = 1 - (1 + 4e-6) / (1 - 12.5e-6).
        let want = (1.0 - (1.0 + 4e-6) / (1.0 - 12.5e-6)) * 1e9;
        assert!((d - want).abs() < 0.01, "{d} vs {want}");
        let (o0, d0) = truth(&reference, &reference, epoch, epoch + 2_000_000_000);
        assert!(o0.abs() < 1e-3 && d0.abs() < 1e-3);
    }
}
