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
use distprof::estimate::{solve_shared_run, EstimatorSettings, ModelBuilder};
use distprof::model::NodeClockModel;

/// Every node's model solved from the planes' edge fits; empty when no plane carries any.
/// The planes must be of one run (one session, one reference): the caller checks that.
pub fn models_from_planes(planes: &[&DistprofPlaneData], settings: &EstimatorSettings) -> Vec<NodeClockModel> {
    let parts: Vec<_> = planes.iter().flat_map(|p| p.edge_fits.iter()).collect();
    let Some(reference) = planes.first().map(|p| p.reference_node) else { return Vec::new() };
    if parts.is_empty() {
        return Vec::new();
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
        return Vec::new();
    }
    let mut builder = ModelBuilder::new(num_nodes);
    for w in solve_shared_run(parts, num_nodes, reference, settings) {
        builder.push(&w);
    }
    builder.finish()
}

/// The model to apply to a plane's node: the one solved from all planes where it covers
/// at least as many windows as the plane's own.
pub fn better_model<'a>(solved: &'a [NodeClockModel], plane: &'a DistprofPlaneData) -> &'a NodeClockModel {
    match solved.iter().find(|m| m.node == plane.node) {
        Some(m) if m.reachable && m.segments.len() >= plane.model.segments.len() => m,
        _ => &plane.model,
    }
}
