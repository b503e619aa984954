//! Real JAX traces, shifted by known clocks, merged back.
//!
//! The fixtures (`tests/fixtures/jax/`) come from one machine, so they share one true clock.
//! Each node's trace is rewritten into a skewed host clock S_k = t + offset_k + drift_k·(t - t_ref),
//! its distprof plane carries the truth model, and node 1 also gets a GPU plane whose events
//! (copies of its all-reduces) are in a tracer clock R with its own offset and rate, recorded
//! through a tracer start pair and snapshot pairs. Merge must put every event back at its true
//! time within the model's bound, and validate must go from violations to none.

use distprof::distprof_plane::{distprof_plane_bytes, TracerStart};
use distprof_offline::merge::{merge, MergeOptions};
use distprof_testkit::synthetic_xspace::{event, plane_data, str_stat, with_tracer, Windows};
use distprof::model::{ClockSegment, NodeClockModel};
use distprof::snapshot::SnapshotPair;
use distprof_offline::validate::validate;
use distprof::xplane::*;
use prost::Message;
use std::path::Path;

/// (offset_ns, drift_ppb) per node; node 0 is the reference.
const TRUTH: [(f64, f64); 3] = [
    (0.0, 0.0),
    (37_000_123.0, 40_000.0),
    (-21_500_456.0, -25_000.0),
];
/// Node 1's GPU tracer clock: R = R0 + (t - t_ref)·(1 + rate).
const R0_NS: i64 = 5_000_000_000;
const R_RATE_PPB: f64 = 50_000.0;
const BOUND_NS: f64 = 1_000.0;

fn fixture(k: usize) -> XSpace {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../tests/fixtures/jax/node{k}.xplane.pb"));
    XSpace::decode(std::fs::read(&p).unwrap().as_slice()).unwrap()
}

fn profile_start(space: &XSpace) -> i64 {
    space
        .planes
        .iter()
        .find(|p| p.name == TASK_ENV_PLANE)
        .and_then(|p| p.stat_u64(PROFILE_START_STAT))
        .unwrap() as i64
}

/// True absolute time (ps) of every event, in plane/line/event order, per plane name.
/// Per plane: name and, per line, (start ps, duration ps) of every event.
type PlaneTimes = Vec<(String, Vec<Vec<(i128, i64)>>)>;

fn true_times(space: &XSpace) -> PlaneTimes {
    let start = profile_start(space);
    space
        .planes
        .iter()
        .filter(|p| !p.lines.is_empty() && p.name != TASK_ENV_PLANE)
        .map(|p| {
            let lines = p
                .lines
                .iter()
                .map(|l| {
                    l.events
                        .iter()
                        .map(|e| {
                            (
                                ((start + l.timestamp_ns) as i128) * 1000 + e.offset_ps() as i128,
                                e.duration_ps,
                            )
                        })
                        .collect()
                })
                .collect();
            (p.name.clone(), lines)
        })
        .collect()
}

/// The host plane of `space` and the metadata id of its `all-reduce` events.
fn host_all_reduces(space: &XSpace) -> (&XPlane, i64) {
    let cpu = space
        .planes
        .iter()
        .find(|p| p.name == HOST_THREADS_PLANE)
        .unwrap();
    let ar = cpu
        .event_metadata
        .values()
        .find(|m| m.name == "all-reduce")
        .unwrap()
        .id;
    (cpu, ar)
}

struct Skew {
    off: f64,
    d: f64,
    t_ref: i64,
}
impl Skew {
    /// S (ps) of true time t (ps).
    fn s_ps(&self, t_ps: i128) -> i128 {
        let dt_ns = (t_ps / 1000 - self.t_ref as i128) as f64;
        t_ps + ((self.off + self.d * dt_ns) * 1000.0).round() as i128
    }
}

/// Rewrites a plane's lines (normalised to `start`) from true time into S.
fn skew_plane(p: &mut XPlane, start: i64, new_start: i64, f: &dyn Fn(i128) -> i128) {
    for l in &mut p.lines {
        let base = (start + l.timestamp_ns) as i128 * 1000;
        let new_base_ns = (f(base).div_euclid(1000)) as i64;
        for e in &mut l.events {
            let t = base + e.offset_ps() as i128;
            let (s, s_end) = (f(t), f(t + e.duration_ps as i128));
            e.data = Some(XEventData::OffsetPs(
                (s - new_base_ns as i128 * 1000) as i64,
            ));
            e.duration_ps = (s_end - s) as i64;
        }
        l.timestamp_ns = new_base_ns - new_start;
    }
}

/// Writes the skewed traces into `dir`, returns the original (true-time) spaces.
fn write_skewed(dir: &Path) -> Vec<XSpace> {
    let originals: Vec<XSpace> = (0..3).map(fixture).collect();
    let t_ref = profile_start(&originals[0]);
    for (k, orig) in originals.iter().enumerate() {
        let mut space = orig.clone();
        let start = profile_start(orig);
        let sk = Skew {
            off: TRUTH[k].0,
            d: TRUTH[k].1 * 1e-9,
            t_ref,
        };
        let new_start = (sk.s_ps(start as i128 * 1000) / 1000) as i64;
        let stop = space
            .planes
            .iter()
            .find(|p| p.name == TASK_ENV_PLANE)
            .unwrap()
            .stat_u64(PROFILE_STOP_STAT)
            .unwrap() as i64;
        // Node 1 gets a GPU plane: copies of its all-reduce events.
        if k == 1 {
            let (cpu, ar) = host_all_reduces(&space);
            let mut gpu = XPlane {
                id: 0,
                name: "/device:GPU:0".into(),
                ..Default::default()
            };
            let gid = gpu.intern_event("all-reduce");
            let op = gpu.intern_stat("hlo_op");
            let module = gpu.intern_stat("hlo_module");
            let mut line = XLine {
                id: 1,
                name: "Stream #1".into(),
                timestamp_ns: cpu.lines[0].timestamp_ns,
                ..Default::default()
            };
            for l in &cpu.lines {
                for e in l.events.iter().filter(|e| e.metadata_id == ar) {
                    let t = (l.timestamp_ns as i128 - line.timestamp_ns as i128) * 1000
                        + e.offset_ps() as i128;
                    line.events.push(event(
                        gid,
                        t as i64 + 2_000_000,
                        e.duration_ps - 3_000_000,
                        vec![str_stat(op, "all-reduce"), str_stat(module, "jit_step")],
                    ));
                }
            }
            line.events.sort_by_key(|e| e.offset_ps());
            gpu.lines.push(line);
            space.planes.push(gpu);
        }
        for p in &mut space.planes {
            if p.name == TASK_ENV_PLANE {
                let (a, b) = (
                    p.stat_id(PROFILE_START_STAT).unwrap(),
                    p.stat_id(PROFILE_STOP_STAT).unwrap(),
                );
                for s in &mut p.stats {
                    if s.metadata_id == a {
                        s.value = Some(XStatValue::Uint64Value(new_start as u64));
                    } else if s.metadata_id == b {
                        s.value = Some(XStatValue::Uint64Value(
                            (sk.s_ps(stop as i128 * 1000) / 1000) as u64,
                        ));
                    }
                }
            } else if p.name.starts_with("/device:") {
                // Disk time = R - r0 + s0 with the collector's start pair taken at profile start.
                let r = |t: i128| {
                    R0_NS as i128 * 1000 + t - t_ref as i128 * 1000
                        + (((t / 1000 - t_ref as i128) as f64) * R_RATE_PPB * 1e-9 * 1000.0).round()
                            as i128
                };
                let (s0, r0) = (new_start as i128 * 1000, r(start as i128 * 1000));
                skew_plane(p, start, new_start, &|t| r(t) - r0 + s0);
            } else {
                skew_plane(p, start, new_start, &|t| sk.s_ps(t));
            }
        }
        // The truth model: three 4 s windows in S around the profile; offsets at S midpoints.
        let d = sk.d;
        let windows = Windows {
            start_ns: new_start - 4_000_000_000,
            window_ns: 4_000_000_000,
            count: 3,
            bound_ns: BOUND_NS,
            uncertainty_ns: BOUND_NS / 20.0,
        };
        let segments = windows.segments(|_, mid| {
            let x = ((mid - t_ref) as f64 - sk.off) / (1.0 + d); // t - t_ref at S = mid
            ((mid - t_ref) as f64 - x, d / (1.0 + d) * 1e9)
        });
        let r_of = |t_ns: i64| {
            R0_NS + (t_ns - t_ref) + ((t_ns - t_ref) as f64 * R_RATE_PPB * 1e-9).round() as i64
        };
        let snapshots: Vec<SnapshotPair> = (0..60)
            .map(|j| {
                let t = start - 100_000_000 + j * 10_000_000;
                SnapshotPair {
                    s_ns: (sk.s_ps(t as i128 * 1000) / 1000) as i64,
                    r_ns: r_of(t),
                    read_window_ns: 50,
                }
            })
            .collect();
        let mut data = plane_data(k as u32, "vm", segments);
        if k == 1 {
            let start = TracerStart {
                s_ns: new_start,
                r_ns: r_of(start),
            };
            data = with_tracer(data, start, snapshots);
        } else {
            data.snapshots = snapshots;
        }
        space
            .planes
            .push(XPlane::decode(distprof_plane_bytes(&data).as_slice()).unwrap());
        let d = dir.join(format!("node{k}/plugins/profile/2026_01_01_00_00_00"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("vm.xplane.pb"), space.encode_to_vec()).unwrap();
    }
    originals
}

#[test]
fn merge_puts_shifted_jax_traces_back_within_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("in");
    let originals = write_skewed(&inputs);

    let v = validate(std::slice::from_ref(&inputs), &Default::default()).unwrap();
    eprintln!("validate on skewed inputs: {v:?}");
    assert_eq!(v.nodes, 3);
    // 10 all-reduces and 10 all-gathers per node; node 1's GPU plane adds all-reduce participants.
    assert_eq!(v.before.checked, 20);
    assert!(
        v.before.violations >= 18,
        "skew of tens of ms must break nearly every collective: {v:?}"
    );
    assert!(v.before.worst_gap_ns > 10_000_000.0);
    assert_eq!(v.after.violations, 0, "{v:?}");

    let out = tmp.path().join("out");
    let chrome = tmp.path().join("merged.trace.json");
    let opts = MergeOptions {
        out_dir: out.clone(),
        chrome: Some(chrome.clone()),
        trace_format: distprof_offline::merge::trace_out::TraceFormat::ChromeJson,
        allow_uncorrected: false,
        models: vec![],
        models_origin: None,
        force: false,
        flows: false,
        pftrace_compression: Default::default(),
    };
    let report = merge(&[inputs], &opts, &mut |l| eprintln!("{l}")).unwrap();
    assert_eq!(report.nodes.len(), 3);
    // The profiles lie inside the windows: every event's uncertainty is the windows' own,
    // grown at most by interpolation between their midpoints, and nothing is flagged.
    for s in &report.nodes {
        assert!(s.max_uncertainty_ns >= BOUND_NS / 20.0 && s.max_uncertainty_ns < BOUND_NS / 20.0 + 50.0 && !s.uncertainty_exceeded, "{s:?}");
    }

    let mut ids = std::collections::HashSet::new();
    let mut hosts = std::collections::HashSet::new();
    let mut worst_ps: i128 = 0;
    let mut total_events = 0u64;
    for (k, s) in report.nodes.iter().enumerate() {
        let merged = XSpace::decode(std::fs::read(&s.output).unwrap().as_slice()).unwrap();
        assert_eq!(
            profile_start(&merged),
            report.g0_ns,
            "every node's output shares the origin"
        );
        assert!(
            hosts.insert(merged.hostnames.clone()),
            "host names must be distinct: {:?}",
            merged.hostnames
        );
        for p in &merged.planes {
            assert!(ids.insert(p.id), "plane id {} repeated", p.id);
        }
        assert!(merged
            .planes
            .iter()
            .any(|p| p.name == distprof::distprof_plane::DISTPROF_APPLIED_PLANE));
        let got = true_times(&merged);
        let want = true_times(&originals[k]);
        for (plane, lines) in &want {
            let g = &got
                .iter()
                .find(|(n, _)| n == plane)
                .unwrap_or_else(|| panic!("node {k}: plane {plane} missing"))
                .1;
            assert_eq!(g.len(), lines.len());
            for (gl, wl) in g.iter().zip(lines) {
                assert_eq!(gl.len(), wl.len());
                for ((gt, gd), (wt, wd)) in gl.iter().zip(wl) {
                    worst_ps = worst_ps.max((gt - wt).abs());
                    assert!(
                        (gt - wt).abs() <= (BOUND_NS * 1000.0) as i128,
                        "node {k} {plane}: event off by {} ps",
                        gt - wt
                    );
                    assert!(
                        (gd - wd).abs() <= 2_000,
                        "node {k} {plane}: duration off by {} ps",
                        gd - wd
                    );
                    total_events += 1;
                }
            }
        }
        // Node 1's GPU events: R -> S -> G must land them at their true times (CPU time + 2 µs).
        if k == 1 {
            let (cpu, ar) = host_all_reduces(&merged);
            let mut cpu_ar: Vec<i128> = cpu
                .lines
                .iter()
                .flat_map(|l| {
                    l.events
                        .iter()
                        .filter(|e| e.metadata_id == ar)
                        .map(move |e| l.timestamp_ns as i128 * 1000 + e.offset_ps() as i128)
                })
                .collect();
            cpu_ar.sort();
            let gpu = merged
                .planes
                .iter()
                .find(|p| p.name == "/device:GPU:0")
                .unwrap();
            let l = &gpu.lines[0];
            assert_eq!(l.events.len(), cpu_ar.len());
            for (e, c) in l.events.iter().zip(&cpu_ar) {
                let t = l.timestamp_ns as i128 * 1000 + e.offset_ps() as i128;
                let err = t - (c + 2_000_000);
                worst_ps = worst_ps.max(err.abs());
                assert!(
                    err.abs() <= (BOUND_NS * 1000.0) as i128,
                    "GPU event off by {err} ps"
                );
            }
        }
    }
    eprintln!("worst event error {worst_ps} ps over {total_events} events");
    assert!(total_events > 1000);

    // Merged outputs are on G: validate sees no violations there.
    let v2 = validate(std::slice::from_ref(&report.run_dir), &Default::default()).unwrap();
    assert_eq!(
        (v2.before.violations, v2.after.violations),
        (0, 0),
        "{v2:?}"
    );

    // The Chrome JSON parses, has no displayTimeUnit (older Perfetto releases would take it
    // as the unit of ts), and has one X event per mapped event.
    let text = std::fs::read_to_string(&chrome).unwrap();
    assert!(!text.contains("\"displayTimeUnit\""));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let evs = j["traceEvents"].as_array().unwrap();
    let xs = evs.iter().filter(|e| e["ph"] == "X").count() as u64;
    assert_eq!(xs, report.nodes.iter().map(|n| n.events).sum::<u64>());
    let names: std::collections::HashSet<_> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains("node 1 node1.vm /device:GPU:0"), "{names:?}");
    let pids: std::collections::HashSet<_> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), names.len());

    // Perfetto reads a tid as 32 bits: every line gets a small tid of its own, named by
    // thread_name metadata that keeps the XLine id, and every event sits on a named line.
    let mut threads = std::collections::HashMap::new();
    for e in evs.iter().filter(|e| e["name"] == "thread_name") {
        let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("tid not a non-negative integer: {e}"));
        assert!(tid <= u32::MAX as u64 && tid > 0, "{e}");
        assert!(e["args"]["xline_id"].is_i64(), "{e}");
        let key = (e["pid"].as_u64().unwrap(), tid);
        assert!(threads.insert(key, e["args"]["name"].clone()).is_none(), "two lines share pid/tid {key:?}");
    }
    assert!(!threads.is_empty());
    for e in evs.iter().filter(|e| e["ph"] == "X") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        assert!(threads.contains_key(&key), "event on an unnamed line: {e}");
    }

    // tests/steps/40-xprof.sh checks these outputs with XProf's own converter.
    if let Some(keep) = std::env::var_os("DISTPROF_MERGE_TEST_OUT") {
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        for n in &report.nodes {
            std::fs::copy(&n.output, keep.join(n.output.file_name().unwrap())).unwrap();
        }
        std::fs::copy(&chrome, keep.join("merged.trace.json")).unwrap();
    }
}

#[test]
fn merge_refuses_traces_without_a_model_and_names_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/jax/node0.xplane.pb");
    let opts = MergeOptions {
        out_dir: tmp.path().into(),
        chrome: None,
        trace_format: Default::default(),
        allow_uncorrected: false,
        models: vec![],
        models_origin: None,
        force: false,
        flows: false,
        pftrace_compression: Default::default(),
    };
    let err = merge(std::slice::from_ref(&p), &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("node0.xplane.pb") && err.contains("--allow-uncorrected"),
        "{err}"
    );
    let opts = MergeOptions {
        allow_uncorrected: true,
        ..opts
    };
    let r = merge(&[p], &opts, &mut |_| {}).unwrap();
    assert!(!r.nodes[0].corrected);
}

#[test]
fn given_models_take_precedence_over_the_planes() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("in");
    write_skewed(&inputs);
    // A model that claims node 1 is exactly on G: its 37 ms offset stays, so collectives break.
    // Its one window is none of the plane's (which would mark it as another run's), hence
    // --force.
    let t = profile_start(&fixture(1));
    let wrong = NodeClockModel {
        node: 1,
        reachable: true,
        segments: vec![ClockSegment {
            window_id: 0,
            start_local_ns: t,
            end_local_ns: t + 1,
            mid_local_ns: t,
            offset_ns: 0.0,
            drift_ppb: 0.0,
            bound_ns: 1.0,
            uncertainty_ns: 0.1,
            drift_uncertainty_ppb: 5.0,
            flagged: false,
            break_at_start: false,
        }],
    };
    let v = validate(std::slice::from_ref(&inputs), &MergeOptions { models: vec![wrong], force: true, ..Default::default() }).unwrap();
    assert_eq!(v.before.violations, 20);
    assert!(v.after.violations >= 18, "{v:?}");
    assert!(v.after.worst_gap_ns > 10_000_000.0, "{v:?}");
}
