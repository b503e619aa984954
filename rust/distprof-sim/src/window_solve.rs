//! One simulated window solved as `distprof merge` solves it from traces: every node fits
//! the edges it probes from its own records, shares the fits (as its plane carries them),
//! and the network of all shared fits is solved once (`distprof::estimate::solve`: the
//! weighted least squares with its rejections, the bounds, the node sigmas). The timing
//! `distprof bench` reports at scale, with the window's error against the truth.
//!
//! Fitting node by node keeps one node's records in memory at a time: a window of every
//! edge's records at 16,384 nodes would be ~4 GB.

use crate::cluster::{Cluster, Scenario};
use distprof::clock::thread_cpu_s;
use distprof::estimate::network;
use distprof::estimate::uncertainty::row_sigmas_ns;
use distprof::estimate::variance::{projection_error, ProjectionError};
use distprof::estimate::{fit_window, online, EstimatorSettings, NodeWindowFits, WindowEstimate, WindowFits};

/// One window's solve at scale.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WindowSolve {
    pub nodes: u32,
    /// Edges with a fitted line (the rows of the network solve before rejections).
    pub fitted_edges: usize,
    /// Thread CPU time of `distprof::estimate::solve` on the window, ms: the network
    /// solve with sigma and everything else a window's segments need, not the edge fits.
    pub solve_ms: f64,
    /// Thread CPU time of fitting every node's edges (the nodes do it in parallel while
    /// probing; here one after the other), ms.
    pub fit_ms: f64,
    pub rejected_edges: usize,
    /// Conjugate-gradient iterations of the solve, summed over its rejection rounds (not
    /// the sigmas' projections).
    pub cg_iterations: usize,
    pub unreachable_nodes: usize,
    /// Non-reference node-windows, those within 2 sigma of the truth, and the p99 of
    /// |offset error|.
    pub samples: usize,
    pub within_2_sigma: usize,
    pub p99_offset_err_ns: f64,
}

/// Window `k` of the cluster fitted as each node fits its own out-edges (no drift fit
/// over neighbouring windows), combined from the shared fits.
pub fn shared_window_fits(cluster: &Cluster, k: u64, settings: &EstimatorSettings) -> Option<WindowFits> {
    let spec = cluster.window_spec(k);
    let parts: Vec<NodeWindowFits> =
        (0..cluster.scenario.nodes).map(|node| fit_window(&cluster.records_from(node, k), &spec, settings).share(node)).collect();
    let refs: Vec<&NodeWindowFits> = parts.iter().collect();
    WindowFits::from_shared(&refs, cluster.scenario.nodes, cluster.reference())
}

/// Simulates window 0 of `scenario` and times its network solve with sigma: what
/// `distprof bench scale` reports as `solve_<N>_ms`. The reference scenario at N nodes is
/// `Scenario { nodes: N, ..Scenario::reference() }`; at 16,384 nodes simulating and fitting
/// the window takes ~30 s, the solve is what is timed.
pub fn time_window_solve(scenario: &Scenario, settings: &EstimatorSettings) -> Result<WindowSolve, String> {
    let cluster = Cluster::new(scenario.clone())?;
    let started = thread_cpu_s();
    let fits = shared_window_fits(&cluster, 0, settings).ok_or("no node fitted any edge of window 0: the scenario loses every probe")?;
    let fit_ms = (thread_cpu_s() - started) * 1e3;
    let started = thread_cpu_s();
    let est = online::solve(&fits, settings);
    let solve_ms = (thread_cpu_s() - started) * 1e3;
    let (samples, within_2_sigma, p99_offset_err_ns) = score(&cluster, &est);
    Ok(WindowSolve {
        nodes: scenario.nodes,
        fitted_edges: est.edges.iter().filter(|e| e.theta_ns.is_some()).count(),
        solve_ms,
        fit_ms,
        rejected_edges: est.rejected_edges().len(),
        cg_iterations: est.network.cg_iterations,
        unreachable_nodes: est.unreachable.len(),
        samples,
        within_2_sigma,
        p99_offset_err_ns,
    })
}

/// The node sigmas of a window's solve by projection against the exact inverse (cubic:
/// for windows up to ~1,000 nodes). None when the network leaves a node unreached.
pub fn sigma_projection_error(fits: &WindowFits) -> Option<ProjectionError> {
    let obs = online::observations(fits);
    let spec = &fits.spec;
    let solution = network::solve(spec.num_nodes, spec.reference, &obs, true);
    let rejected: Vec<_> = solution.edges.iter().map(|v| v.rejected).collect();
    let system = network::system(spec.num_nodes as usize, spec.reference, &obs, &rejected, &solution.offset_ns);
    projection_error(&system.matrix, &row_sigmas_ns(&system, &fits.edge_sigmas_ns()))
}

/// (samples, within 2 sigma, p99 |offset error| ns) of one window against the truth.
fn score(cluster: &Cluster, est: &WindowEstimate) -> (usize, usize, f64) {
    let mut errors = Vec::new();
    let mut within = 0;
    for (i, seg) in (0..).zip(&est.segments) {
        let Some(s) = seg.filter(|_| i != cluster.reference()) else { continue };
        let err = (s.offset_ns - cluster.truth(i, est.window_id).offset_ns).abs();
        within += (err <= 2.0 * s.uncertainty_ns) as usize;
        errors.push(err);
    }
    errors.sort_by(f64::total_cmp);
    let p99 = errors.get(((errors.len() as f64 * 0.99) as usize).min(errors.len().saturating_sub(1))).copied().unwrap_or(f64::NAN);
    (errors.len(), within, p99)
}
