//! Traces alone are enough: the network-wide clock model from the edge fits every input
//! trace's distprof plane carries (`distprof::estimate::shared`).
//!
//! Each plane holds its node's own edge fits per window; together the inputs hold every
//! edge of the run, and every window is solved as one network, as the nodes did while
//! probing and as `--run-dir` does from the JSONL files. This also covers the last windows
//! of a trace, which the export hook saw before the nodes finished exchanging them. A node
//! takes this model where it has at least as many windows as the model in its own plane
//! (a subset of the traces knows fewer edges than the nodes did while probing).

use distprof::context::NodeId;
use distprof::distprof_plane::DistprofPlaneData;
use distprof::estimate::{add_stamp_mapping_errors, solve_shared_run, Anchor, EstimatorSettings, ModelBuilder};
use distprof::model::NodeClockModel;

/// The network-wide solve of the planes: every node's model, and the windows the
/// reference could not place, re-anchored on another node (`estimate::failover`).
#[derive(Debug, Clone, Default)]
pub struct PlaneSolve {
    pub models: Vec<NodeClockModel>,
    pub reference: NodeId,
    pub anchors: Vec<Anchor>,
}

/// Every node's model solved from the planes' edge fits; empty when no plane carries any.
/// The planes must be of one run (one session, one reference): the caller checks that.
pub fn models_from_planes(planes: &[&DistprofPlaneData], settings: &EstimatorSettings) -> PlaneSolve {
    let parts: Vec<_> = planes.iter().flat_map(|p| p.edge_fits.iter()).collect();
    let Some(reference) = planes.first().map(|p| p.reference_node) else { return PlaneSolve::default() };
    if parts.is_empty() {
        return PlaneSolve::default();
    }
    // One past the largest node id any plane or edge names (bounded: `is_sane` parts only
    // reach here, and ids come from a u32 the rendezvous assigned).
    let num_nodes = planes
        .iter()
        .map(|p| p.node.max(p.reference_node))
        .chain(parts.iter().flat_map(|f| f.edges.iter().map(|e| e.dst)))
        .max()
        .map_or(1, |m: NodeId| m.saturating_add(1));
    if num_nodes > crate::run_dir_estimate::MAX_NODE_ID {
        return PlaneSolve::default();
    }
    // A node's hardware stamp mapping error, which no fit sees (`stamp_mapping`): the
    // plane states the worst of the run so far, taken for every window.
    let mapping_error_ns = |node: NodeId| {
        planes
            .iter()
            .filter(|p| p.node == node)
            .filter_map(|p| p.timestamps.as_ref()?.nic_clock.as_ref().map(|n| n.mapping_error_max_ns))
            .fold(0.0, f64::max)
    };
    let mut builder = ModelBuilder::new(num_nodes);
    let mut anchors = Vec::new();
    for mut w in solve_shared_run(parts, num_nodes, reference, settings) {
        add_stamp_mapping_errors(&mut w, reference, settings, mapping_error_ns);
        builder.push(&w);
        anchors.extend(w.anchors);
    }
    PlaneSolve { models: builder.finish(), reference, anchors }
}

/// The model to apply to a plane's node: the one solved from all planes where it covers
/// at least as many windows as the plane's own.
pub fn better_model<'a>(solved: &'a [NodeClockModel], plane: &'a DistprofPlaneData) -> &'a NodeClockModel {
    match solved.iter().find(|m| m.node == plane.node) {
        Some(m) if m.reachable && m.segments.len() >= plane.model.segments.len() => m,
        _ => &plane.model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distprof::estimate::NodeWindowFits;

    /// Node `src`'s fits of window 0 (15 to 30 s): one flat line per `(dst, theta_ns)`.
    fn fits(src: u32, edges: &[(u32, f64)]) -> NodeWindowFits {
        distprof_testkit::synthetic_xspace::flat_edge_fits(src, 0, 15_000_000_000, 30_000_000_000, edges)
    }

    fn plane(node: u32, edge_fits: Vec<NodeWindowFits>) -> DistprofPlaneData {
        DistprofPlaneData {
            session_id: "s".into(),
            node,
            reference_node: 0,
            hostname: String::new(),
            timestamp_mode: "kernel".into(),
            timestamps: None,
            tracer_clock: "host".into(),
            tracer_start: None,
            // As a node exports when it could not solve the network itself.
            model: NodeClockModel { node, reachable: node == 0, segments: Vec::new() },
            snapshots: Vec::new(),
            probe_stats: Vec::new(),
            edge_fits,
        }
    }

    /// Node 2 does not probe the reference, and its own plane knows no model; the fits of
    /// all three planes reach it through node 1: o_1 = theta_01, o_2 = o_1 + theta_12.
    #[test]
    fn a_node_that_does_not_probe_the_reference_is_solved_from_every_plane() {
        let planes = [plane(0, vec![fits(0, &[(1, 5_000.0)])]), plane(1, vec![fits(1, &[(2, -2_000.0)])]), plane(2, vec![fits(2, &[(1, 2_000.0)])])];
        let refs: Vec<&DistprofPlaneData> = planes.iter().collect();
        let solved = models_from_planes(&refs, &EstimatorSettings::default()).models;
        let m2 = better_model(&solved, &planes[2]);
        assert!(m2.reachable && m2.segments.len() == 1, "{m2:?}");
        assert!((m2.segments[0].offset_ns - 3_000.0).abs() < 1e-6, "{m2:?}");
        assert!((better_model(&solved, &planes[1]).segments[0].offset_ns - 5_000.0).abs() < 1e-6);
        // Node 2's plane alone knows only its own edge: its own model (none) is kept.
        let alone = models_from_planes(&[&planes[2]], &EstimatorSettings::default()).models;
        assert!(alone.iter().all(|m| m.node == 0 || !m.reachable));
        assert!(std::ptr::eq(better_model(&alone, &planes[2]), &planes[2].model));
    }

    /// Node 1 stamps in hardware and its plane states a 3 us mapping error: its segment's
    /// bound grows by that, its sigma covers it at two sigma, and node 2, reached through
    /// it, keeps what the data gave (its own stamps are kernel ones).
    #[test]
    fn a_plane_s_nic_mapping_error_widens_its_node_s_segments() {
        use distprof::timestamp::{NicClockInfo, StampMode, TimestampQuality};
        let planes = |nic: bool| {
            let mut p1 = plane(1, vec![fits(1, &[(2, -2_000.0)])]);
            if nic {
                p1.timestamps = Some(TimestampQuality {
                    mode: StampMode::Hardware,
                    stamp_error_bound_ns: 3_100,
                    note: String::new(),
                    nic_clock: Some(NicClockInfo { mapping_error_max_ns: 3_000.0, ..Default::default() }),
                });
            }
            [plane(0, vec![fits(0, &[(1, 5_000.0)])]), p1, plane(2, vec![fits(2, &[(1, 2_000.0)])])]
        };
        let seg = |nic: bool, node: usize| {
            let ps = planes(nic);
            let refs: Vec<&DistprofPlaneData> = ps.iter().collect();
            models_from_planes(&refs, &EstimatorSettings::default()).models[node].segments[0]
        };
        let (kernel, hardware) = (seg(false, 1), seg(true, 1));
        assert_eq!(hardware.offset_ns, kernel.offset_ns);
        assert!((hardware.bound_ns - kernel.bound_ns - 3_000.0).abs() < 1e-6, "{hardware:?} vs {kernel:?}");
        assert!(hardware.uncertainty_ns >= 1_500.0 && hardware.flagged, "{hardware:?}");
        assert_eq!(seg(true, 2), seg(false, 2));
    }

    /// The reference's plane ends after window 0 (it died) and nobody reaches it in window
    /// 1: node 1 stands in, carried by its window-0 segment (flat clocks, so exactly), and
    /// node 2 stays on the same timeline through it; the merge is told which and why.
    #[test]
    fn a_dead_reference_is_replaced_by_the_lowest_surviving_node() {
        let w = |src: u32, k: u64, edges: &[(u32, f64)]| {
            let start = 15_000_000_000 * (k as i64 + 1);
            distprof_testkit::synthetic_xspace::flat_edge_fits(src, k, start, start + 15_000_000_000, edges)
        };
        let planes = [
            plane(0, vec![w(0, 0, &[(1, 5_000.0)])]),
            plane(1, vec![w(1, 0, &[(2, -2_000.0)]), w(1, 1, &[(2, -2_000.0)])]),
            plane(2, vec![w(2, 0, &[(1, 2_000.0)]), w(2, 1, &[(1, 2_000.0)])]),
        ];
        let refs: Vec<&DistprofPlaneData> = planes.iter().collect();
        let solve = models_from_planes(&refs, &EstimatorSettings::default());
        for (node, offset_ns) in [(1usize, 5_000.0), (2, 3_000.0)] {
            let m = &solve.models[node];
            assert_eq!(m.segments.iter().map(|s| s.window_id).collect::<Vec<_>>(), [0, 1], "node {node}: {m:?}");
            for s in &m.segments {
                assert!((s.offset_ns - offset_ns).abs() < 1e-6, "node {node}: {s:?}");
            }
            // Window 1 carries window 0's uncertainty grown by 15 s of the drift's sigma.
            assert!(m.segments[1].uncertainty_ns > m.segments[0].uncertainty_ns + 100.0, "{m:?}");
        }
        // The dead reference keeps only the window it lived in.
        assert_eq!(solve.models[0].segments.len(), 1);
        assert_eq!(solve.anchors.len(), 1, "{:?}", solve.anchors);
        let a = solve.anchors[0];
        assert_eq!((a.window_id, a.node, a.base_window_id, a.reason), (1, 1, 0, distprof::estimate::AnchorReason::ReferenceSilent));
        assert_eq!(a.nodes_placed, 2);
    }
}
