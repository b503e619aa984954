//! Every simulated node's distprof plane as its export writes it from the edge fits alone:
//! the input of `distprof merge` from traces (its `plane_network` solve), with no JSONL and
//! no in-job sharing.

use crate::cluster::Cluster;
use distprof::distprof_plane::DistprofPlaneData;
use distprof::estimate::{fit_window, EstimatorSettings, Smoother};
use distprof::model::NodeClockModel;

/// Per node: the final fits of the edges it probes (drift fitted over the windows either
/// side, as at profiler stop), in a plane encoded and read back as on disk. The plane's
/// own model is empty, so whatever model merge gives a node comes from the fits of all
/// planes.
pub fn node_planes(c: &Cluster, settings: &EstimatorSettings) -> Vec<DistprofPlaneData> {
    let window_ns = (c.scenario.window_s * 1e9) as i64;
    (0..c.scenario.nodes)
        .map(|node| {
            let mut smoother = Smoother::new(*settings, window_ns);
            let mut finals = Vec::new();
            for k in 0..c.num_windows() {
                // Its plane carries the edges it probes: their records are all it fits.
                finals.extend(smoother.push_fits(fit_window(&c.records_from(node, k), &c.window_spec(k), settings)));
            }
            finals.extend(smoother.finish_fits());
            let plane = DistprofPlaneData {
                session_id: "simulated".into(),
                node,
                reference_node: c.reference(),
                hostname: format!("sim{node}"),
                timestamp_mode: "simulated".into(),
                timestamps: None,
                tracer_clock: "host".into(),
                tracer_start: None,
                model: NodeClockModel { node, reachable: false, segments: Vec::new() },
                snapshots: Vec::new(),
                probe_stats: Vec::new(),
                edge_fits: finals.iter().map(|f| f.share(node)).collect(),
            };
            DistprofPlaneData::from_xplane(&plane.to_xplane()).expect("a plane distprof wrote reads back")
        })
        .collect()
}
