//! The plugin harness at scale: 64 nodes as threads of one process (as the C++ harness
//! runs them), each with its own rendezvous over one shared in-memory store and its own
//! probe engine, driven through the backend the hooks drive; the network solved by merge's
//! own code from the 64 exported planes.

use distprof::config::Config;
use distprof::distprof_plane::DistprofPlaneData;
use distprof::kv::MemoryStore;
use distprof::plugin::backend::EngineBackend;
use distprof::plugin::{Backend, NodeState, OnFailure};
use distprof::xplane::XSpace;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Failures = Arc<Mutex<Vec<String>>>;

fn backend(config: Config) -> (EngineBackend, Failures) {
    let failures: Failures = Arc::default();
    let sink = Arc::clone(&failures);
    let on_failure: OnFailure = Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
    (EngineBackend::new(config, on_failure), failures)
}

fn wait_agreed(b: &EngineBackend, node: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match b.node_state(node) {
            Some(NodeState::Agreed { .. }) => return,
            Some(NodeState::Pending) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            other => panic!("node {node}: {other:?}"),
        }
    }
}

fn decode_planes(bytes: &[u8]) -> Vec<distprof::xplane::XPlane> {
    XSpace::decode(bytes).unwrap().planes
}

/// 64 nodes in one process (as the C++ harness runs nodes as threads) over loopback,
/// out-degree 8: most nodes do not probe the reference, so a node's own model (its own
/// edges, solved in the job) places only those that do; merge's solve over the 64 planes
/// places every node in every window, and its error (one host, one clock: the truth is 0)
/// is within 2x of the network solve over all nodes' JSONL files (`--run-dir`).
#[test]
fn sixty_four_nodes_export_their_fits_and_merge_places_every_node() {
    const N: u32 = 64;
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        enabled: true,
        output_dir: dir.path().to_string_lossy().into(),
        // 50 pairs per edge and window: enough points for every edge's fit on a loaded
        // machine.
        probe_window_s: 2.0,
        probe_cadence_us: 40_000,
        snapshot_period_ms: 200,
        interface: "lo".into(),
        ..Config::default()
    };
    let kv = Arc::new(MemoryStore::new());
    let (mut b, failures) = backend(config);
    for node in (0..N).rev() {
        b.client_created(node, N, Some(Box::new(Arc::clone(&kv)))).unwrap();
    }
    for n in 0..N {
        wait_agreed(&b, n);
    }
    let Some(NodeState::Agreed { context, .. }) = b.node_state(0) else { panic!() };
    // Node 0's probers, as node 0's own context lists them.
    let probing_reference = context.in_edges.len();
    assert!(probing_reference < N as usize / 2, "{probing_reference} nodes probe node 0: not the case this test is for");
    b.trace_start(None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..N).all(|n| b.trace().unwrap().windows_closed(n).unwrap_or(0) >= 3) {
        assert!(Instant::now() < deadline, "three windows did not close on every node");
        std::thread::sleep(Duration::from_millis(50));
    }
    b.trace_stop().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !b.trace().unwrap().probes_finished() {
        assert!(Instant::now() < deadline, "the probe threads did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(failures.lock().unwrap().is_empty(), "{:?}", failures.lock().unwrap());
    let planes: Vec<DistprofPlaneData> =
        decode_planes(&b.export().unwrap()).iter().map(|p| DistprofPlaneData::from_xplane(p).unwrap()).collect();
    assert_eq!(planes.len(), N as usize);
    for data in &planes {
        // Every window's own edge fits travel in the plane; the own model places exactly
        // the nodes that probe the reference (and the reference).
        assert!(data.edge_fits.len() >= 3, "node {}: {} windows of fits", data.node, data.edge_fits.len());
        let probes_reference = data.node == 0 || context.in_edges.contains(&data.node);
        assert_eq!(data.model.reachable, probes_reference, "node {}: own model {:?}", data.node, data.model);
    }
    let refs: Vec<&DistprofPlaneData> = planes.iter().collect();
    let solved = distprof_offline::merge::plane_network::models_from_planes(&refs, &distprof::estimate::EstimatorSettings::default()).models;
    let mut exported = Vec::new();
    for data in &planes {
        let m = distprof_offline::merge::plane_network::better_model(&solved, data);
        assert!(m.reachable, "node {} unplaced by merge", data.node);
        assert!(m.segments.len() >= 3, "node {}: {} segments", data.node, m.segments.len());
        if data.node != 0 {
            exported.extend(m.segments.iter().map(|s| s.offset_ns.abs()));
        }
    }
    let files = distprof_offline::run_dir_estimate::read_run_dir(dir.path()).unwrap();
    let offline = distprof_offline::run_dir_estimate::estimate_run(&files).unwrap();
    let mut network: Vec<f64> = offline
        .models()
        .iter()
        .filter(|m| m.node != 0)
        .flat_map(|m| m.segments.iter().map(|s| s.offset_ns.abs()))
        .collect();
    let p99 = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * 0.99).round() as usize]
    };
    let (exported_p99, network_p99) = (p99(&mut exported), p99(&mut network));
    eprintln!("64 nodes: merge over the planes p99 |offset error| {exported_p99:.0} ns, network solve over every JSONL {network_p99:.0} ns");
    // 2x as the issue asks, plus 1 us: loopback errors are scheduling noise of a few us
    // on a loaded 2-core machine, and the two solves bin windows differently.
    assert!(exported_p99 <= 2.0 * network_p99 + 1_000.0, "exported p99 {exported_p99} ns vs network {network_p99} ns");
}

