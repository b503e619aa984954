//! The calibrated uncertainty against the simulator's true clocks: in the reference
//! scenario the truth lies within two uncertainties in 93-97% of node-windows (issue 16's
//! goal; docs/estimation.md, "The uncertainty").

use distprof::estimate::{estimate_run_windows, EstimatorSettings};
use distprof_sim::cluster::{Cluster, Scenario};

/// The reference scenario at 64 nodes, seeds 1-6, the model a run delivers: 1,512
/// node-windows. Six runs, not one: all nodes of a window share the error of the
/// reference's own edges, so one run of four windows is only ~four samples of that part
/// (seed 1 alone: 0.98). Measured 0.962 (seeds 1-12: 0.959); the goal band is asserted as
/// is, the runs being seeded: a change that moves the figure by more than 0.008 up or 0.03
/// down fails. ~4 min unoptimized on the shared 2-core VM.
#[test]
fn two_uncertainties_cover_the_truth_in_93_to_97_percent_of_node_windows() {
    let (mut within, mut total) = (0usize, 0usize);
    let mut ratios = Vec::new();
    for seed in 1..=6 {
        let c = Cluster::new(Scenario { seed, ..Scenario::reference() }).expect("valid scenario");
        let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
        for (est, _) in estimate_run_windows(inputs, &EstimatorSettings::default()) {
            for (i, seg) in (0..).zip(&est.segments) {
                let Some(seg) = seg.filter(|_| i != c.reference()) else { continue };
                let err = (seg.offset_ns - c.truth(i, est.window_id).offset_ns).abs();
                within += (err <= 2.0 * seg.uncertainty_ns) as usize;
                total += 1;
                ratios.push(seg.uncertainty_ns / err.max(1e-3));
                assert!(!seg.flagged, "seed {seed} window {} node {i}: flagged ({seg:?})", est.window_id);
            }
        }
    }
    let coverage = within as f64 / total as f64;
    assert_eq!(total, 6 * 4 * 63);
    assert!((0.93..=0.97).contains(&coverage), "{within} of {total} within 2 uncertainties: {coverage:.3}");
    // Informative: the median uncertainty is within a few times the error (goal <= 10).
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(median <= 10.0, "median uncertainty / |error| {median:.2}");
}
