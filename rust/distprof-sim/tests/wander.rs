//! The wander term of the uncertainty (`estimate::wander`) against the simulator's true
//! clocks: it measures the wander a node shows against the reference, it makes the
//! uncertainty cover under strong wander, and it stays out of the way on quiet clocks.
//! Seeds 7-15: the constants were measured on seeds 1-6, and `bench accuracy` reports on
//! 101 and up.

use distprof::estimate::wander::add_wander_terms;
use distprof::estimate::{estimate_window_with_history, fit_window, EstimatorSettings, History, Smoother, WindowEstimate};
use distprof_sim::cluster::{Cluster, Scenario};

/// A run's windows as `estimate_run_windows` delivers them, and each node's measured q
/// (ppb/sqrt(s) against the reference); also the sigmas before the wander term.
struct Run {
    cluster: Cluster,
    before: Vec<WindowEstimate>,
    after: Vec<WindowEstimate>,
    q: Vec<Option<f64>>,
}

fn run(scenario: Scenario, settings: &EstimatorSettings) -> Run {
    let cluster = Cluster::new(scenario).expect("valid scenario");
    let window_ns = cluster.window_spec(0).end_local_ns - cluster.window_spec(0).start_local_ns;
    let mut smoother = Smoother::new(*settings, window_ns);
    let mut before = Vec::new();
    for k in 0..cluster.num_windows() {
        before.extend(smoother.push(fit_window(&cluster.records(k), &cluster.window_spec(k), settings)));
    }
    before.extend(smoother.finish());
    let mut after = before.clone();
    let q = add_wander_terms(&mut after, cluster.reference(), settings);
    Run { cluster, before, after, q }
}

/// Node-windows (but the reference's) within twice the uncertainty, and all of them.
fn coverage(r: &Run, estimates: &[WindowEstimate]) -> (usize, usize) {
    let (mut within, mut total) = (0, 0);
    for est in estimates {
        for (i, seg) in (0..).zip(&est.segments) {
            let Some(seg) = seg.filter(|_| i != r.cluster.reference()) else { continue };
            let err = (seg.offset_ns - r.cluster.truth(i, est.window_id).offset_ns).abs();
            within += (err <= 2.0 * seg.uncertainty_ns) as usize;
            total += 1;
        }
    }
    (within, total)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Wander of 20 ppb/sqrt(s) on every crystal, 64 nodes, seeds 10-15 (1,512 node-windows),
/// the statistical part and the wander term without the asymmetry allowance (the scenario
/// has no asymmetry; the allowance adds its own share on top): without the term the
/// uncertainty covers ~0.54 (seeds 1-6); with it 0.978 here (measured; 0.964 on the tuning
/// seeds 1-6, 0.938-0.996 over groups of three seeds from 7 to 18), asserted within
/// 0.93-0.99. The measured q of a node against the reference, whose own wander adds as
/// much, is the true sqrt(2) * 20 = 28.3 ppb/sqrt(s) within a factor 1.5 (median over nodes
/// and seeds: the reference's share of a 60 s run is two samples, so one seed alone can be
/// 1.6 times off).
#[test]
fn under_strong_wander_the_term_measures_it_and_covers() {
    let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
    let (mut within, mut total, mut without) = (0, 0, 0);
    let mut q = Vec::new();
    for seed in 10..=15 {
        let r = run(Scenario { seed, wander_ppb_per_sqrt_s: 20.0, ..Scenario::reference() }, &settings);
        let (w, t) = coverage(&r, &r.after);
        (within, total) = (within + w, total + t);
        without += coverage(&r, &r.before).0;
        q.extend(r.q.iter().enumerate().filter(|(i, _)| *i as u32 != r.cluster.reference()).filter_map(|(_, q)| *q));
    }
    assert_eq!(total, 6 * 4 * 63);
    let (cov, cov_before) = (within as f64 / total as f64, without as f64 / total as f64);
    assert!((0.93..=0.99).contains(&cov), "{within} of {total} within 2 sigma with the wander term ({cov:.3}; {cov_before:.3} without)");
    assert!(cov_before < 0.8, "the scenario no longer needs the term: {cov_before:.3} without it");
    let q = median(q);
    let truth = 20.0 * 2f64.sqrt();
    assert!(q > truth / 1.5 && q < truth * 1.5, "median measured q {q:.1} ppb/sqrt(s), truth {truth:.1}");
}

/// On the reference scenario's free-running crystals (1 ppb/sqrt(s)) the measured q is
/// small (median under 3 ppb/sqrt(s): the truth is 1.4 against the reference), by the run
/// model and online alike, and the run model's term
/// moves the median uncertainty by under 3% and no segment's by more than 40%, seeds 7-8.
#[test]
fn on_quiet_clocks_the_term_is_negligible() {
    let settings = EstimatorSettings::default();
    let mut q = Vec::new();
    let mut growth = Vec::new();
    for seed in 7..=8 {
        let r = run(Scenario { seed, ..Scenario::reference() }, &settings);
        q.extend(r.q.iter().flatten().copied());
        for (b, a) in r.before.iter().zip(&r.after) {
            for (sb, sa) in b.segments.iter().zip(&a.segments) {
                if let (Some(sb), Some(sa)) = (sb, sa) {
                    if sb.uncertainty_ns > 0.0 && sb.uncertainty_ns < f64::MAX {
                        growth.push(sa.uncertainty_ns / sb.uncertainty_ns);
                    }
                }
            }
        }
    }
    let q = median(q);
    assert!(q < 3.0, "median measured q {q:.2} ppb/sqrt(s) on the reference scenario");
    // Online too (`WanderSoFar`), by each run's end.
    let online: Vec<f64> = (7..=8).flat_map(|seed| online_run(Scenario { seed, ..Scenario::reference() }, &settings).2).flatten().collect();
    let online = median(online);
    assert!(online < 3.0, "median q measured online {online:.2} ppb/sqrt(s) on the reference scenario");
    let max = growth.iter().copied().fold(1.0, f64::max);
    let med = median(growth);
    assert!(med < 1.03 && max < 1.4, "uncertainty grown by the wander term: median x{med:.3}, largest x{max:.3}");
}

/// The online model (`estimate_window_with_history`) of each window of a run, in order,
/// and each window's q per node (`WanderSoFar`, what `History` measured so far).
fn online_run(scenario: Scenario, settings: &EstimatorSettings) -> (Cluster, Vec<WindowEstimate>, Vec<Option<f64>>) {
    let cluster = Cluster::new(scenario).expect("valid scenario");
    let mut history = History::default();
    let estimates =
        (0..cluster.num_windows()).map(|k| estimate_window_with_history(&cluster.records(k), &cluster.window_spec(k), settings, &mut history)).collect();
    (cluster, estimates, history.wander_q_ppb())
}

/// Node-windows of the online model within twice the uncertainty, and all of them,
/// counting the first window of each run apart (`first`): it has nothing measured yet.
fn online_coverage(c: &Cluster, estimates: &[WindowEstimate]) -> ((usize, usize), (usize, usize)) {
    let (mut rest, mut first) = ((0, 0), (0, 0));
    for est in estimates {
        let into = if est.window_id == 0 { &mut first } else { &mut rest };
        for (i, seg) in (0..).zip(&est.segments) {
            let Some(seg) = seg.filter(|_| i != c.reference()) else { continue };
            let err = (seg.offset_ns - c.truth(i, est.window_id).offset_ns).abs();
            into.0 += (err <= 2.0 * seg.uncertainty_ns) as usize;
            into.1 += 1;
        }
    }
    (rest, first)
}

/// The online model (what each window's close knows, `WanderSoFar`) under wander of 20
/// ppb/sqrt(s), 64 nodes, seeds 10-13 (the online constants were measured on seeds 1-4,
/// `bench accuracy` reports on 101 and up), the statistical part and the term without the
/// allowance: the median q measured by each run's end is the true 28.3 ppb/sqrt(s) within
/// a factor 1.5 (measured 24.9); from the second window on the uncertainty covers 0.991
/// here (749 of 756; 0.960, 726, before drift spans were also cut by slope,
/// `drift::CUT_SLOPE_NS`: the lines got better and the term, measured before, now
/// over-covers a little), asserted within 0.90-0.995 (0.99 before), where without the
/// term the online model covered 0.708 of all windows (`real_clocks` wander-20, seeds 1-4,
/// default allowance). The first window has nothing measured yet and no term: it covers
/// 0.869 here (its line over its own window bends less than a line over two), asserted
/// at 0.80 or more.
#[test]
fn online_the_term_measures_the_wander_as_windows_close_and_covers() {
    let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
    let (mut rest, mut first, mut q) = ((0, 0), (0, 0), Vec::new());
    for seed in 10..=13 {
        let (c, est, q_end) = online_run(Scenario { seed, wander_ppb_per_sqrt_s: 20.0, ..Scenario::reference() }, &settings);
        let (r, f) = online_coverage(&c, &est);
        rest = (rest.0 + r.0, rest.1 + r.1);
        first = (first.0 + f.0, first.1 + f.1);
        q.extend(q_end.iter().enumerate().filter(|(i, _)| *i as u32 != c.reference()).filter_map(|(_, q)| *q));
    }
    assert_eq!((rest.1, first.1), (4 * 3 * 63, 4 * 63));
    let (cov, cov_first) = (rest.0 as f64 / rest.1 as f64, first.0 as f64 / first.1 as f64);
    let q = median(q);
    let truth = 20.0 * 2f64.sqrt();
    assert!(q > truth / 1.5 && q < truth * 1.5, "median measured q {q:.1} ppb/sqrt(s), truth {truth:.1}");
    assert!((0.90..=0.995).contains(&cov), "{} of {} within 2 sigma after the first window ({cov:.3})", rest.0, rest.1);
    assert!(cov_first >= 0.8, "{} of {} within 2 sigma in the first window ({cov_first:.3})", first.0, first.1);
}

/// The drift's wander term on 8 s windows (examples/configs/high-accuracy.json's): the
/// default 30 s drift span is then five windows centred, not three, and the drift follows
/// the rate over all of them. Wander of 20 ppb/sqrt(s), 32 nodes, 40 s, seeds 16-19: with
/// the term scaled by the span (`wander::Span::drift_scale`, sqrt(5/3)) the drift error
/// is within twice its sigma in 587 of 620 node-windows (0.947, measured), asserted within
/// 0.92-0.99; with the term of the window alone, 529 (0.853).
#[test]
fn on_short_windows_the_drift_term_covers_the_whole_span() {
    let settings = EstimatorSettings { asymmetry_allowance_ns: 0.0, ..EstimatorSettings::default() };
    let (mut within, mut total) = (0usize, 0usize);
    for seed in 16..=19 {
        let r = run(Scenario { nodes: 32, seed, duration_s: 40.0, window_s: 8.0, wander_ppb_per_sqrt_s: 20.0, ..Scenario::reference() }, &settings);
        for est in &r.after {
            for (i, seg) in (0..).zip(&est.segments) {
                let Some(seg) = seg.filter(|s| i != r.cluster.reference() && s.drift_uncertainty_ppb < f64::MAX) else { continue };
                let err = (seg.drift_ppb - r.cluster.truth(i, est.window_id).drift_ppb).abs();
                within += (err <= 2.0 * seg.drift_uncertainty_ppb) as usize;
                total += 1;
            }
        }
    }
    let cov = within as f64 / total as f64;
    eprintln!("drift within 2 sigma: {within} of {total} ({cov:.3})");
    assert!(total >= 500, "only {total} node-windows");
    assert!((0.92..=0.99).contains(&cov), "drift within 2 sigma {within} of {total} ({cov:.3})");
}
