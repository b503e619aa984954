//! The reference failover figures of `bench accuracy`: the reference scenario (64 nodes)
//! with the reference silent from the run's midpoint on (no probe touches it, as when its
//! process dies), estimated as a run's model is (`estimate::failover` re-anchors the
//! windows after it). Scored against the dead reference's true clock: G after the switch
//! is that clock as the anchor's last segment predicts it.

use crate::stats::quantile;
use distprof::estimate::{estimate_run_windows, EstimatorSettings};
use distprof_sim::cluster::{Cluster, Scenario};
use serde::Serialize;

/// Seeds start here: none of them is a test's (tests use seeds below 100).
const FIRST_SEED: u64 = 101;

#[derive(Debug, Clone, Serialize)]
pub struct FailoverFigures {
    pub runs: u64,
    pub nodes: u32,
    /// Windows per run, and the first one without the reference.
    pub windows: u64,
    pub first_silent_window: u64,
    /// Surviving node-windows (every node but the reference, every window; the reference
    /// too while it lived), and those without a segment.
    pub surviving_node_windows: usize,
    pub unreachable: usize,
    pub unreachable_fraction: f64,
    /// Over the re-anchored node-windows only: errors within twice the stated sigma, the
    /// p99 error and the largest sigma (it grows with the time since the switch).
    pub reanchored_node_windows: usize,
    pub reanchored_coverage_2sigma: Option<f64>,
    pub reanchored_p99_offset_ns: Option<f64>,
    pub reanchored_max_sigma_ns: Option<f64>,
}

/// `runs` runs of `reference` at 64 nodes, seeds from `FIRST_SEED`.
pub fn failover_figures(reference: &Scenario, runs: u64, settings: &EstimatorSettings) -> anyhow::Result<FailoverFigures> {
    let (mut surviving, mut unreachable, mut within, mut errors, mut sigmas) = (0, 0, 0, Vec::new(), Vec::new());
    let mut shape = (0, 0);
    for i in 0..runs {
        let c = Cluster::new(Scenario { nodes: 64, seed: FIRST_SEED + i, ..reference.clone() }).map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
        let (r, windows) = (c.reference(), c.num_windows());
        let silent_from = windows / 2;
        shape = (windows, silent_from);
        let inputs = (0..windows).map(|k| {
            let records: Vec<_> = c.records(k).into_iter().filter(|p| k < silent_from || (p.src != r && p.dst != r)).collect();
            (records, c.window_spec(k))
        });
        for (est, _) in estimate_run_windows(inputs, settings) {
            let k = est.window_id;
            for (node, seg) in (0..).zip(&est.segments) {
                if node == r && k >= silent_from {
                    continue;
                }
                surviving += 1;
                let Some(s) = seg else {
                    unreachable += 1;
                    continue;
                };
                if k >= silent_from {
                    let err = (s.offset_ns - c.truth(node, k).offset_ns).abs();
                    within += (err <= 2.0 * s.uncertainty_ns) as usize;
                    errors.push(err);
                    sigmas.push(s.uncertainty_ns);
                }
            }
        }
    }
    let reanchored = errors.len();
    Ok(FailoverFigures {
        runs,
        nodes: 64,
        windows: shape.0,
        first_silent_window: shape.1,
        surviving_node_windows: surviving,
        unreachable,
        unreachable_fraction: unreachable as f64 / surviving.max(1) as f64,
        reanchored_node_windows: reanchored,
        reanchored_coverage_2sigma: (reanchored > 0).then(|| within as f64 / reanchored as f64),
        reanchored_p99_offset_ns: quantile(&mut errors, 0.99),
        reanchored_max_sigma_ns: sigmas.iter().copied().reduce(f64::max),
    })
}
