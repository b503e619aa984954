//! Drift spans (`distprof::estimate::drift`) on the simulator's clocks, with their truth.
//! Disciplined seed 1 is a tuning seed (bench accuracy reports on 101+): its reference's
//! servo changes frequency by 623 ppb at 15.00 s, exactly where windows 0 and 1 meet.

use distprof::estimate::estimate_run_windows;
use distprof::estimate::EstimatorSettings;
use distprof_sim::cluster::scenarios::SCENARIOS;
use distprof_sim::cluster::{Cluster, Scenario};

/// A frequency correction of the reference at the edge between the run's first two
/// windows: the first window's span must stop there, so every node's drift against the
/// reference in window 0 is its own window's, not the chord's across the kink. Measured at
/// 16 nodes: median drift error of window 0's 15 whole node-windows 13.2 ppb, and 332.8
/// ppb without the slope test (`drift::CUT_SLOPE_NS`); threshold 40 ppb (one window's own
/// slope is good to tens of ppb).
#[test]
fn a_reference_kink_at_a_window_edge_stays_out_of_the_first_windows_drift() {
    let named = SCENARIOS.iter().find(|s| s.name == "disciplined").expect("a named scenario");
    let c = Cluster::new(named.apply(Scenario { nodes: 16, seed: 1, duration_s: 60.0, ..Scenario::reference() })).expect("scenario");
    let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
    let first = estimate_run_windows(inputs, &EstimatorSettings::default()).into_iter().next().expect("window 0").0;
    let mut errors: Vec<f64> = Vec::new();
    for (i, (seg, pieces)) in (0..).zip(first.segments.iter().zip(&first.pieces)) {
        // The reference's own segment says nothing; a node whose own clock breaks in the
        // window is judged by its pieces elsewhere (tests/breaks.rs).
        let Some(seg) = seg.filter(|_| i != c.reference() && pieces.is_empty()) else { continue };
        let truth = c.truth_over(i, seg.start_local_ns, seg.end_local_ns);
        errors.push((seg.drift_ppb - truth.drift_ppb).abs());
    }
    assert!(errors.len() >= 8, "only {} whole node-windows", errors.len());
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    eprintln!("{} node-windows: median drift error {median:.1} ppb", errors.len());
    assert!(median < 40.0, "window 0's drift is the chord's across the reference's kink: median error {median:.1} ppb");
}
