//! The calibrated uncertainty against the simulator's true clocks: in the reference
//! scenario the statistical part alone (no asymmetry allowance) has the truth within two
//! of it in 93-97% of node-windows (issue 16's goal; docs/estimation.md, "The
//! uncertainty"); with a stamping asymmetry within the stated allowance the total still
//! covers (issue 29); and the flag separates a good run from a broken node.

use distprof::estimate::{estimate_run_windows, EstimatorSettings, WindowEstimate};
use distprof_sim::cluster::{Cluster, Scenario};

/// Every window of `scenario` as a run delivers it.
fn run(scenario: Scenario, settings: &EstimatorSettings) -> (Cluster, Vec<WindowEstimate>) {
    let c = Cluster::new(scenario).expect("valid scenario");
    let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
    let estimates = estimate_run_windows(inputs, settings).into_iter().map(|(e, _)| e).collect();
    (c, estimates)
}

/// Node-windows (but the reference's) whose offset error is within twice the uncertainty,
/// and all of them.
fn coverage(c: &Cluster, estimates: &[WindowEstimate]) -> (usize, usize) {
    let (mut within, mut total) = (0, 0);
    for est in estimates {
        for (i, seg) in (0..).zip(&est.segments) {
            let Some(seg) = seg.filter(|_| i != c.reference()) else { continue };
            let err = (seg.offset_ns - c.truth(i, est.window_id).offset_ns).abs();
            within += (err <= 2.0 * seg.uncertainty_ns) as usize;
            total += 1;
        }
    }
    (within, total)
}

/// The reference scenario at 64 nodes, seeds 1-6, the model a run delivers, the
/// statistical part of the uncertainty alone (allowance 0: the scenario has no
/// asymmetry), for the line each window finally uses (after the drift refit): 1,512
/// node-windows. Six runs, not one: all nodes of a window share the error of the
/// reference's own edges, so one run of four windows is only ~four samples of that part
/// (seed 1 alone: 0.98). Measured 0.958 (release, `bench accuracy --seed 1
/// --calibration-seeds 6 --asymmetry-allowance-ns 0`); the goal band is asserted as is, the
/// runs being seeded.
/// ~4 min unoptimized on the shared 2-core VM.
#[test]
fn two_uncertainties_cover_the_truth_in_93_to_97_percent_of_node_windows() {
    let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
    let (mut within, mut total) = (0usize, 0usize);
    let mut ratios = Vec::new();
    for seed in 1..=6 {
        let (c, estimates) = run(Scenario { seed, ..Scenario::reference() }, &settings);
        let (w, t) = coverage(&c, &estimates);
        (within, total) = (within + w, total + t);
        for est in &estimates {
            for (i, seg) in (0..).zip(&est.segments) {
                let Some(seg) = seg.filter(|_| i != c.reference()) else { continue };
                let err = (seg.offset_ns - c.truth(i, est.window_id).offset_ns).abs();
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

/// A stamping asymmetry of +-100 ns per node (invisible to the loops; without the
/// allowance 0.77 of node-windows were covered) within the default allowance (kernel
/// stamps, 100 ns per hop): the total uncertainty covers 0.90-0.99 (issue 29's goal),
/// seeds 21-23 (756 node-windows). Measured 0.931: the band is the goal as is.
#[test]
fn a_stamping_asymmetry_within_the_allowance_is_covered() {
    let settings = EstimatorSettings::default();
    assert_eq!(settings.asymmetry_allowance_ns, 100.0);
    let (mut within, mut total) = (0usize, 0usize);
    for seed in 21..=23 {
        let (c, estimates) = run(Scenario { seed, stamp_bias_max_ns: 100.0, ..Scenario::reference() }, &settings);
        let (w, t) = coverage(&c, &estimates);
        (within, total) = (within + w, total + t);
    }
    let coverage = within as f64 / total as f64;
    assert!((0.90..=0.99).contains(&coverage), "{within} of {total} within 2 uncertainties: {coverage:.3}");
}

/// The flag separates: the reference scenario has no segment flagged, and a node whose
/// every path has its own asymmetry within +-5 us (its loops do not close) has every one
/// of its segments flagged, the assumption broken, while the nodes that are fine stay
/// unflagged but for a few. Seed 31.
#[test]
fn the_flag_separates_a_good_run_from_a_broken_node() {
    let settings = EstimatorSettings::default();
    let (_, good) = run(Scenario { seed: 31, ..Scenario::reference() }, &settings);
    let flagged: Vec<_> = good.iter().flat_map(|e| e.segments.iter().flatten().filter(|s| s.flagged).map(move |s| (e.window_id, *s))).collect();
    assert!(flagged.is_empty(), "reference scenario: {} flagged: {flagged:?}", flagged.len());
    let broken = 5;
    let (c, bad) = run(Scenario { seed: 31, broken_node: Some((broken, 5_000.0)), ..Scenario::reference() }, &settings);
    let mut others = 0;
    for est in &bad {
        let seg = est.segments[broken as usize].as_ref();
        assert!(seg.is_some_and(|s| s.flagged), "window {}: the broken node's segment is not flagged: {seg:?}", est.window_id);
        assert!(est.beyond_allowance.contains(&broken), "window {}: {:?}", est.window_id, est.beyond_allowance);
        others += est.segments.iter().enumerate().filter(|(i, s)| *i != broken as usize && s.is_some_and(|s| s.flagged)).count();
    }
    let segments = bad.len() * (c.scenario.nodes as usize - 1);
    assert!(others * 20 <= segments, "{others} of the {segments} other segments flagged");
}
