//! `distprof merge`'s model from the traces alone at 1,024 nodes: every node's plane
//! carries only the fits of the edges it probes (no in-job sharing), and merge's own solve
//! (`distprof_offline::merge::plane_network`) puts every node on the reference's clock
//! about as well as it does for 64 nodes.

use distprof::distprof_plane::DistprofPlaneData;
use distprof::estimate::EstimatorSettings;
use distprof_offline::merge::plane_network::models_from_planes;
use distprof_sim::cluster::{Cluster, Scenario};
use distprof_sim::planes::node_planes;

/// The reference scenario with 4 s windows over 8 s: two windows of 100 probe pairs per
/// edge, cheap enough unoptimized at 1,024 nodes (8,192 edges).
fn scenario(nodes: u32, seed: u64) -> Scenario {
    Scenario { nodes, seed, window_s: 4.0, duration_s: 8.0, ..Scenario::reference() }
}

/// |offset error| of every non-reference node-window of the merged model, asserting that
/// every node has a segment in every window.
fn merged_errors_ns(c: &Cluster) -> Vec<f64> {
    let settings = EstimatorSettings::default();
    let planes = node_planes(c, &settings);
    let refs: Vec<&DistprofPlaneData> = planes.iter().collect();
    let models = models_from_planes(&refs, &settings).models;
    assert_eq!(models.len(), c.scenario.nodes as usize);
    let mut errors = Vec::new();
    for (node, m) in (0..).zip(&models) {
        assert!(m.reachable, "node {node} not placed");
        for k in 0..c.num_windows() {
            let seg = m.segments.iter().find(|s| s.window_id == k);
            let seg = seg.unwrap_or_else(|| panic!("node {node}: no segment in window {k}"));
            assert!(seg.uncertainty_ns.is_finite() && seg.uncertainty_ns < 1e6, "node {node} window {k}: {seg:?}");
            if node != c.reference() {
                errors.push((seg.offset_ns - c.truth(node, k).offset_ns).abs());
            }
        }
    }
    errors
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)]
}

/// 1,024 nodes against 64: every node placed in every window, and the p99 of |offset
/// error| within 1.5 times the 64-node figure (the paths to the reference grow by a hop
/// or two; the goal of issue 27). The 64-node side pools four seeds (504 node-windows) so
/// its p99 is not one window's luck; the 1,024-node run has 2,046. Measured: 155 ns against
/// 189 ns (eight seeds: 176 ns); ~27 s unoptimized alone on the shared 2-core VM.
#[test]
fn a_thousand_nodes_from_their_traces_alone_are_placed_as_well_as_sixty_four() {
    let started = std::time::Instant::now();
    let big = Cluster::new(scenario(1024, 1)).expect("valid scenario");
    let big_p99 = p99(merged_errors_ns(&big));
    let small: Vec<f64> = (1..=4).flat_map(|seed| merged_errors_ns(&Cluster::new(scenario(64, seed)).expect("valid scenario"))).collect();
    let small_p99 = p99(small);
    eprintln!("p99 |offset error|: 1,024 nodes {big_p99:.1} ns, 64 nodes {small_p99:.1} ns ({:.1} s)", started.elapsed().as_secs_f64());
    assert!(big_p99 <= 1.5 * small_p99, "1,024 nodes: p99 {big_p99:.1} ns; 64 nodes: {small_p99:.1} ns");
}
