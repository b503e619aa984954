//! End to end in simulation: the real estimator on a simulated cluster, errors against the
//! simulator's true clocks.

use distprof::estimate::{estimate_window, EstimatorSettings, ModelBuilder, NetworkMode};
use distprof_sim::cluster::{Cluster, Scenario};

/// 4 s windows: three of them in 12 s, cheap, whatever the default window.
fn small(nodes: u32, asymmetry_max_ns: f64) -> Cluster {
    let s = Scenario { nodes, duration_s: 12.0, window_s: 4.0, asymmetry_max_ns, seed: 7, ..Scenario::reference() };
    Cluster::new(s).expect("valid scenario")
}

#[test]
fn reference_noise_errors_are_small_inside_the_bound_and_network_beats_single_edges() {
    let c = small(24, 0.0);
    let (mut wls_sq, mut tree_sq, mut n) = (0.0, 0.0, 0);
    let mut builder = ModelBuilder::new(24);
    for k in 0..c.num_windows() {
        let recs = c.records(k);
        let spec = c.window_spec(k);
        let wls = estimate_window(&recs, &spec, &EstimatorSettings::default());
        let tree = estimate_window(&recs, &spec, &EstimatorSettings { network: NetworkMode::Tree, ..Default::default() });
        assert!(wls.unreachable.is_empty());
        for i in 1..24u32 {
            let t = c.truth(i, k);
            let seg = wls.segments[i as usize].expect("reachable");
            let err = seg.offset_ns - t.offset_ns;
            assert!(err.abs() < 1_000.0, "window {k} node {i}: offset error {err} ns");
            assert!((seg.drift_ppb - t.drift_ppb).abs() < 1_000.0, "window {k} node {i}: drift {} vs {}", seg.drift_ppb, t.drift_ppb);
            assert!(err.abs() <= seg.bound_ns, "window {k} node {i}: error {err} beyond bound {}", seg.bound_ns);
            wls_sq += err * err;
            tree_sq += (tree.segments[i as usize].expect("reachable").offset_ns - t.offset_ns).powi(2);
            n += 1;
        }
        builder.push(&wls);
    }
    let (wls_rms, tree_rms) = ((wls_sq / n as f64).sqrt(), (tree_sq / n as f64).sqrt());
    assert!(wls_rms < 0.7 * tree_rms, "network {wls_rms} ns vs single edges {tree_rms} ns");
    assert!(wls_rms < 200.0, "rms offset error {wls_rms} ns");
    let models = builder.finish();
    assert!(models.iter().all(|m| m.reachable && m.segments.len() == c.num_windows() as usize));
}

#[test]
fn asymmetric_paths_stay_inside_the_bound() {
    let c = small(12, 5_000.0);
    let est = estimate_window(&c.records(1), &c.window_spec(1), &EstimatorSettings::default());
    for i in 1..12u32 {
        let seg = est.segments[i as usize].expect("reachable");
        let err = seg.offset_ns - c.truth(i, 1).offset_ns;
        assert!(err.abs() <= seg.bound_ns, "node {i}: error {err} beyond bound {}", seg.bound_ns);
    }
}

#[test]
fn a_node_with_only_its_own_edges_reaches_its_neighbours_only() {
    let c = small(32, 0.0);
    // A neighbour of the reference: through its own edges it reaches the reference, and
    // so do its other neighbours; everyone else is unreachable, never zero.
    let node = c.graph[0][0];
    let est = estimate_window(&c.records_of(node, 1), &c.window_spec(1), &EstimatorSettings::default());
    let adjacent = |a: u32, b: u32| c.graph[a as usize].contains(&b) || c.graph[b as usize].contains(&a);
    for i in 0..32u32 {
        let expected = i == 0 || i == node || adjacent(node, i);
        assert_eq!(est.segments[i as usize].is_some(), expected, "node {i}");
        assert_eq!(est.unreachable.contains(&i), !expected, "node {i}");
    }
    let t = c.truth(node, 1);
    let seg = est.segments[node as usize].expect("reachable");
    assert!((seg.offset_ns - t.offset_ns).abs() <= seg.bound_ns);
}

#[test]
fn drift_history_makes_drift_several_times_better() {
    use distprof::estimate::{estimate_window_with_history, History};
    // 4 s windows: six of them, the first few with growing history.
    let s = Scenario { nodes: 12, duration_s: 24.0, window_s: 4.0, seed: 3, ..Scenario::reference() };
    let c = Cluster::new(s).expect("valid scenario");
    let settings = EstimatorSettings { drift_span_s: 16.0, ..EstimatorSettings::default() };
    let mut history = History::default();
    let (mut with_sq, mut without_sq, mut n) = (0.0, 0.0, 0);
    for k in 0..c.num_windows() {
        let recs = c.records(k);
        let spec = c.window_spec(k);
        let with = estimate_window_with_history(&recs, &spec, &settings, &mut history);
        let without = estimate_window(&recs, &spec, &settings);
        if k < settings.history_windows(4_000_000_000) as u64 {
            continue;
        }
        for i in 1..12u32 {
            let t = c.truth(i, k);
            let w = with.segments[i as usize].expect("reachable");
            with_sq += (w.drift_ppb - t.drift_ppb).powi(2);
            without_sq += (without.segments[i as usize].expect("reachable").drift_ppb - t.drift_ppb).powi(2);
            assert!((w.offset_ns - t.offset_ns).abs() <= w.bound_ns);
            n += 1;
        }
    }
    let (with_rms, without_rms) = ((with_sq / n as f64).sqrt(), (without_sq / n as f64).sqrt());
    assert!(with_rms < 0.5 * without_rms, "with history {with_rms} ppb, without {without_rms} ppb");
    assert!(with_rms < 30.0, "drift rms {with_rms} ppb");
}

/// Why the default window is 15 s: the offset error of an extreme-point fit falls as
/// 1 / (probes per window), so over the same 30 s of the reference noise the default
/// window's offsets (with the default drift span) are far better than 4 s windows'.
#[test]
fn the_default_window_beats_short_windows() {
    use distprof::estimate::{estimate_window_with_history, History};
    let rms = |window_s: f64| {
        let s = Scenario { nodes: 16, duration_s: 30.0, window_s, seed: 5, ..Scenario::reference() };
        let c = Cluster::new(s).expect("valid scenario");
        let mut history = History::default();
        let (mut sq, mut n) = (0.0, 0);
        for k in 0..c.num_windows() {
            let est = estimate_window_with_history(&c.records(k), &c.window_spec(k), &EstimatorSettings::default(), &mut history);
            for i in 1..16u32 {
                let seg = est.segments[i as usize].expect("reachable");
                let t = c.truth(i, k);
                assert!((seg.offset_ns - t.offset_ns).abs() <= seg.bound_ns, "window {k} node {i}");
                sq += (seg.offset_ns - t.offset_ns).powi(2);
                n += 1;
            }
        }
        (sq / n as f64).sqrt()
    };
    let default_window_s = distprof::config::Config::default().probe_window_s;
    let (long, short) = (rms(default_window_s), rms(4.0));
    assert!(long < 0.75 * short, "{default_window_s} s windows: {long} ns rms; 4 s windows: {short} ns rms");
    assert!(long < 60.0, "{default_window_s} s windows: {long} ns rms");
}

/// The model a run delivers fits each window's drift over the windows either side of it
/// (`Smoother`); online, a window knows only itself and the past. Over whole runs of the
/// reference scenario the run model's drift is far better (the first window of a run gets
/// a span at all, and a centred span follows the clocks' wander), its offsets as good and
/// still inside their bounds, and every window comes back once, in order.
#[test]
fn the_run_model_centres_the_drift_fit_and_beats_the_online_one() {
    use distprof::estimate::{estimate_run_windows, estimate_window_with_history, History};
    let settings = EstimatorSettings::default();
    let (mut run_sq, mut online_sq, mut run_off_sq, mut online_off_sq, mut n) = (0.0, 0.0, 0.0, 0.0, 0);
    for seed in [11, 12] {
        let c = Cluster::new(Scenario { nodes: 16, seed, ..Scenario::reference() }).expect("valid scenario");
        let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
        let run = estimate_run_windows(inputs, &settings);
        let ids: Vec<u64> = run.iter().map(|(e, _)| e.window_id).collect();
        assert_eq!(ids, (0..c.num_windows()).collect::<Vec<_>>(), "seed {seed}");
        let mut history = History::default();
        for (k, (est, _)) in (0..).zip(&run) {
            let online = estimate_window_with_history(&c.records(k), &c.window_spec(k), &settings, &mut history);
            for i in 1..16u32 {
                let t = c.truth(i, k);
                let r = est.segments[i as usize].expect("reachable");
                let o = online.segments[i as usize].expect("reachable");
                assert!((r.offset_ns - t.offset_ns).abs() <= r.bound_ns, "seed {seed} window {k} node {i}");
                run_sq += (r.drift_ppb - t.drift_ppb).powi(2);
                online_sq += (o.drift_ppb - t.drift_ppb).powi(2);
                run_off_sq += (r.offset_ns - t.offset_ns).powi(2);
                online_off_sq += (o.offset_ns - t.offset_ns).powi(2);
                n += 1;
            }
        }
    }
    let rms = |sq: f64| (sq / n as f64).sqrt();
    let (run, online) = (rms(run_sq), rms(online_sq));
    eprintln!("drift rms: run {run:.2} ppb, online {online:.2} ppb; offset rms: run {:.1} ns, online {:.1} ns", rms(run_off_sq), rms(online_off_sq));
    assert!(run < 0.6 * online, "run model {run} ppb, online {online} ppb");
    assert!(run < 6.0, "run model drift rms {run} ppb");
    assert!(rms(run_off_sq) < 1.2 * rms(online_off_sq) && rms(run_off_sq) < 50.0, "offset rms {} vs {}", rms(run_off_sq), rms(online_off_sq));
}

/// Each node fits only the records it probed (as the plugin does), shares its final fits
/// as text, and the network solved from everyone's shares is the one solved from all
/// records at once: the exchange loses nothing.
#[test]
fn the_network_from_every_nodes_shared_fits_is_the_network_from_all_records() {
    use distprof::estimate::{estimate_run_windows, fit_window, solve_shared_run, NodeWindowFits, Smoother};
    let c = small(16, 0.0);
    let settings = EstimatorSettings::default();
    let window_ns = (c.scenario.window_s * 1e9) as i64;
    let mut shared: Vec<NodeWindowFits> = Vec::new();
    for node in 0..16u32 {
        let mut smoother = Smoother::new(settings, window_ns);
        let mut done = Vec::new();
        for k in 0..c.num_windows() {
            done.extend(smoother.push_fits(fit_window(&c.records_of(node, k), &c.window_spec(k), &settings)));
        }
        done.extend(smoother.finish_fits());
        for f in done {
            let text = serde_json::to_string(&f.share(node)).unwrap();
            shared.push(serde_json::from_str(&text).unwrap());
        }
    }
    let from_shares = solve_shared_run(&shared, 16, 0, &settings);
    let inputs = (0..c.num_windows()).map(|k| (c.records(k), c.window_spec(k)));
    let from_records: Vec<_> = estimate_run_windows(inputs, &settings).into_iter().map(|(e, _)| e).collect();
    assert_eq!(from_shares.len(), from_records.len());
    for (a, b) in from_shares.iter().zip(&from_records) {
        assert_eq!(a.window_id, b.window_id);
        for (i, (sa, sb)) in a.segments.iter().zip(&b.segments).enumerate() {
            let (sa, sb) = (sa.expect("reachable"), sb.expect("reachable"));
            assert!((sa.offset_ns - sb.offset_ns).abs() < 1e-3, "window {} node {i}: {sa:?} vs {sb:?}", a.window_id);
            assert!((sa.drift_ppb - sb.drift_ppb).abs() < 1e-6, "window {} node {i}", a.window_id);
            assert!((sa.bound_ns - sb.bound_ns).abs() < 1e-3, "window {} node {i}", a.window_id);
        }
    }
}
