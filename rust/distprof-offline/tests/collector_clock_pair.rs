//! Hook 3's effect on an output: the GPU/host clock pair XLA's ROCm collector was created with
//! (`OnTraceClockPair(start_walltime_ns, start_gputime_ns)` in `GpuTracer::DoStart()`) becomes
//! the exported plane's tracer start pair, and with it `distprof merge` maps a device event
//! back to its true host time; with distprof's own first snapshot pair instead (no hook 3), the
//! same event lands off by the time between XLA's two clock reads.
//!
//! Driven through the backend the C++ hooks drive (rust/distprof-ffi forwards each hook to it).

use distprof::config::Config;
use distprof::distprof_plane::{DistprofPlaneData, TracerStart};
use distprof::plugin::backend::EngineBackend;
use distprof::plugin::{Backend, NodeState, OnFailure, TracerClock};
use distprof::xplane::XSpace;
use distprof_offline::merge::timemap::NodeTimeMap;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The GPU tracer clock R of this test: the host clock 5 s behind.
struct BehindClock;
const BEHIND_NS: i64 = 5_000_000_000;
impl TracerClock for BehindClock {
    fn now_ns(&self) -> u64 {
        (distprof::clock::realtime_ns() - BEHIND_NS) as u64
    }
}

/// XLA reads `start_gputime_ns` first and `start_walltime_ns` after it; whatever runs between
/// the two reads (here 3 ms: a preempted thread) is in every device time XLA exports.
const XLA_READ_GAP_NS: i64 = 3_000_000;
/// How closely the snapshot fit (bracketed reads, best of 5) recovers R -> S here; a tenth
/// of the gap, far above the fit's sub-microsecond error on an idle machine.
const FIT_TOLERANCE_NS: i64 = XLA_READ_GAP_NS / 10;

fn one_trace(b: &mut EngineBackend, collector_pair: Option<TracerStart>) -> DistprofPlaneData {
    if let Some(pair) = collector_pair {
        b.trace_clock_pair(pair).unwrap();
    }
    b.trace_start(Some(Box::new(BehindClock))).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    b.trace_stop().unwrap();
    let planes = XSpace::decode(b.export().unwrap().as_slice()).unwrap().planes;
    assert_eq!(planes.len(), 1);
    DistprofPlaneData::from_xplane(&planes[0]).unwrap()
}

#[test]
fn the_collector_pair_is_the_planes_start_pair_and_maps_device_events_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        enabled: true,
        output_dir: dir.path().to_string_lossy().into(),
        snapshot_period_ms: 20,
        interface: "lo".into(),
        ..Config::default()
    };
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&failures);
    let on_failure: OnFailure = Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
    let mut b = EngineBackend::new(config, on_failure);
    b.client_created(0, 1, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(b.node_state(0), Some(NodeState::Agreed { .. })) {
        assert!(Instant::now() < deadline, "node 0 did not agree with itself: {:?}", b.node_state(0));
        std::thread::sleep(Duration::from_millis(5));
    }

    // DoStart(): the tracer clock, then the host clock XLA_READ_GAP_NS later.
    let r0 = BehindClock.now_ns() as i64;
    let xla_pair = TracerStart { s_ns: r0 + BEHIND_NS + XLA_READ_GAP_NS, r_ns: r0 };
    let with_hook = one_trace(&mut b, Some(xla_pair));
    assert_eq!(with_hook.tracer_start, Some(xla_pair), "the plane must carry the pair hook 3 passed");
    // The next trace gets no pair (hook 3 gave one per DoStart()): its own first snapshot.
    let without_hook = one_trace(&mut b, None);
    let own = without_hook.tracer_start.unwrap();
    assert_ne!(own, xla_pair);
    assert!((own.s_ns - own.r_ns - BEHIND_NS).abs() < FIT_TOLERANCE_NS, "{own:?}");
    assert!(failures.lock().unwrap().is_empty(), "{:?}", failures.lock().unwrap());

    // A device event at tracer time r_e, as XLA's collector exports it (rocm_collector.cc:
    // line at start_gputime_ns, plane normalised by start_walltime_ns): s0 + (r_e - r0).
    let r_e = r0 + 40_000_000;
    let truth_ps = (r_e + BEHIND_NS) as i128 * 1000;
    let disk_ps = (xla_pair.s_ns + (r_e - xla_pair.r_ns)) as i128 * 1000;
    let map = |plane: &DistprofPlaneData| NodeTimeMap::from_plane(plane, true).unwrap().device_to_g_ps(disk_ps);
    let error_with = ((map(&with_hook) - truth_ps) / 1000) as i64;
    let error_without = ((map(&without_hook) - truth_ps) / 1000) as i64;
    assert!(error_with.abs() <= FIT_TOLERANCE_NS, "with XLA's pair the event is off by {error_with} ns");
    assert!(
        (error_without - XLA_READ_GAP_NS).abs() <= FIT_TOLERANCE_NS,
        "with distprof's own pair the event should be off by XLA's read gap ({XLA_READ_GAP_NS} ns), is {error_without} ns"
    );
}
