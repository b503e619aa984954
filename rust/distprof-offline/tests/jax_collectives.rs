//! `validate` on real JAX traces whose collectives XLA names after JAX's primitives
//! (`psum.7`, `psum_invariant.7`, `all_gather.3`, `ppermute.3`): a pmap/psum job and a
//! jit/shard_map job, 2 processes each (tests/fixtures/jax-collectives/README.md). Node 1
//! is shifted 40 ms ahead and given that truth as its clock model: every collective kind
//! must be found and counted, every occurrence broken before correction and none after.
//! Inputs that do not belong together are refused as merge refuses them, and so are clock
//! models of another run, leaving no output behind.

use distprof::distprof_plane::distprof_plane_bytes;
use distprof::xplane::*;
use distprof_offline::merge::belong::ModelOrigin;
use distprof_offline::merge::{merge, MergeError, MergeOptions};
use distprof_offline::validate::{collective::kind_of, validate, ValidateError};
use distprof_testkit::synthetic_xspace::{plane_data, Windows};
use prost::Message;
use std::path::{Path, PathBuf};

/// Node 1's clock runs this far ahead of node 0's (and of G).
const OFF_NS: i64 = 40_000_000;
const KINDS: [&str; 5] = ["all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter"];

fn fixture(job: &str, k: usize) -> XSpace {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/jax-collectives/{job}/node{k}.xplane.pb"));
    XSpace::decode(std::fs::read(&p).unwrap().as_slice()).unwrap()
}

fn set_u64(p: &mut XPlane, name: &str, v: i64) {
    let id = p.stat_id(name).unwrap();
    p.stats.iter_mut().find(|s| s.metadata_id == id).unwrap().value = Some(XStatValue::Uint64Value(v as u64));
}

/// Writes the job's two traces into `dir`, node 1 shifted by [`OFF_NS`], each with a
/// distprof plane of session `session` holding its true model; `edit` changes the events.
fn write_run(dir: &Path, job: &str, session: &str, edit: &dyn Fn(&mut XSpace)) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..2)
        .map(|k| {
            let mut space = fixture(job, k);
            edit(&mut space);
            let off = if k == 1 { OFF_NS } else { 0 };
            let env = space.planes.iter_mut().find(|p| p.name == TASK_ENV_PLANE).unwrap();
            let (start, stop) = (env.stat_u64(PROFILE_START_STAT).unwrap() as i64, env.stat_u64(PROFILE_STOP_STAT).unwrap() as i64);
            // Line timestamps are relative to the profile start: moving it moves every event.
            set_u64(env, PROFILE_START_STAT, start + off);
            set_u64(env, PROFILE_STOP_STAT, stop + off);
            let w = Windows { start_ns: start + off - 4_000_000_000, window_ns: 4_000_000_000, count: 3, bound_ns: 1_000.0, uncertainty_ns: 50.0 };
            let mut data = plane_data(k as u32, &space.hostnames[0], w.segments(|_, _| (off as f64, 0.0)));
            data.session_id = session.into();
            space.planes.push(XPlane::decode(distprof_plane_bytes(&data).as_slice()).unwrap());
            let path = dir.join(format!("node{k}.xplane.pb"));
            std::fs::write(&path, space.encode_to_vec()).unwrap();
            path
        })
        .collect()
}

fn no_edit(_: &mut XSpace) {}

#[test]
fn every_collective_kind_of_pmap_and_shard_map_jobs_is_found_counted_and_corrected() {
    for (job, all_reduce_op) in [("pmap", "psum.7"), ("shard_map", "psum_invariant.7")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(job);
        write_run(&dir, job, "s-jax", &no_edit);
        let v = validate(std::slice::from_ref(&dir), &MergeOptions::default()).unwrap();
        eprintln!("{job}: {v:?}");
        assert_eq!(v.nodes, 2);
        assert_eq!(v.kinds.keys().map(String::as_str).collect::<Vec<_>>(), KINDS, "{job}");
        for (kind, seen) in &v.kinds {
            // 3 steps on each of 2 nodes.
            assert_eq!(seen.events, 6, "{job} {kind}");
        }
        assert!(v.kinds["all-reduce"].ops.contains(all_reduce_op), "{job}: {:?}", v.kinds["all-reduce"]);
        assert_eq!(v.kinds["collective-permute"].ops.iter().collect::<Vec<_>>(), ["ppermute.3"]);
        assert_eq!(v.before.checked, 15, "{job}: 5 ops x 3 steps");
        assert_eq!(v.before.violations, 15, "{job}: 40 ms breaks every occurrence: {v:?}");
        assert!(v.before.worst_gap_ns > 39_000_000.0, "{v:?}");
        assert_eq!(v.after.violations, 0, "{job}: {v:?}");
        assert_eq!(v.after.checked, 15);
    }
}

#[test]
fn traces_whose_xla_ops_hold_no_collective_are_an_error_not_a_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    // The same traces without their collectives' events: only fusions and slices remain.
    write_run(&dir, "pmap", "s-jax", &|space| {
        for p in &mut space.planes {
            let op = p.stat_id("hlo_op");
            let names: std::collections::HashMap<i64, String> = p.stat_metadata.iter().map(|(k, m)| (*k, m.name.clone())).collect();
            for l in &mut p.lines {
                l.events.retain(|e| {
                    !e.stats.iter().any(|s| {
                        Some(s.metadata_id) == op
                            && match &s.value {
                                Some(XStatValue::StrValue(v)) => kind_of(v).is_some(),
                                Some(XStatValue::RefValue(r)) => names.get(&(*r as i64)).is_some_and(|v| kind_of(v).is_some()),
                                _ => false,
                            }
                    })
                });
            }
        }
    });
    let err = validate(std::slice::from_ref(&dir), &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, ValidateError::NoCollectives { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(dir.to_str().unwrap()) && msg.contains("XLA op events") && msg.contains("nothing to check"), "{msg}");
}

#[test]
fn two_runs_in_one_directory_are_refused_as_merge_refuses_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    write_run(&dir.join("a"), "pmap", "s-run-a", &no_edit);
    write_run(&dir.join("b"), "shard_map", "s-run-b", &no_edit);
    let err = validate(std::slice::from_ref(&dir), &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, ValidateError::Merge(MergeError::MixedSessions { .. })), "{err}");
    let merge_err = merge(std::slice::from_ref(&dir), &MergeOptions { out_dir: tmp.path().join("out"), ..Default::default() }, &mut |_| {}).unwrap_err();
    assert_eq!(err.to_string(), merge_err.to_string());
    // One run twice (a copy beside it): each node twice.
    let same = tmp.path().join("same");
    write_run(&same.join("a"), "pmap", "s-run-a", &no_edit);
    write_run(&same.join("copy"), "pmap", "s-run-a", &no_edit);
    let err = validate(std::slice::from_ref(&same), &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, ValidateError::Merge(MergeError::DuplicateNode { node: 0, .. })), "{err}");
}

#[test]
fn raw_traces_and_a_merge_output_together_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    write_run(&raw, "pmap", "s-jax", &no_edit);
    let out = tmp.path().join("merged");
    let r = merge(std::slice::from_ref(&raw), &MergeOptions { out_dir: out.clone(), ..Default::default() }, &mut |_| {}).unwrap();
    // The merge output alone: 2 nodes on G, nothing to correct.
    let v = validate(std::slice::from_ref(&r.run_dir), &MergeOptions::default()).unwrap();
    assert!(v.merged && v.nodes == 2 && v.before.violations == 0 && v.after == v.before, "{v:?}");
    assert_eq!(v.kinds.len(), 5);
    let err = validate(&[raw, r.run_dir.clone()], &MergeOptions::default()).unwrap_err().to_string();
    assert!(err.contains("output of a distprof merge") && err.contains("not both"), "{err}");
}

/// Node 1's clock model as its plane in `trace` holds it.
fn plane_model(trace: &Path) -> distprof::model::NodeClockModel {
    let space = XSpace::decode(std::fs::read(trace).unwrap().as_slice()).unwrap();
    let p = space.planes.iter().find(|p| p.name == distprof::distprof_plane::DISTPROF_PLANE).unwrap();
    distprof::distprof_plane::DistprofPlaneData::from_xplane(p).unwrap().model
}

#[test]
fn models_of_another_run_are_refused_by_name_and_leave_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let traces = write_run(&tmp.path().join("in"), "pmap", "s-now", &no_edit);
    let this_run = plane_model(&traces[1]);
    // The same node's model from a run 20 s earlier: its windows 20 s before, its offset
    // 75 ms away. Within the 60 s a profile may lie outside a model's windows, so only
    // the windows themselves tell it apart.
    let mut earlier = this_run.clone();
    for s in &mut earlier.segments {
        s.start_local_ns -= 20_000_000_000;
        s.mid_local_ns -= 20_000_000_000;
        s.end_local_ns -= 20_000_000_000;
        s.offset_ns += 75_000_000.0;
    }
    let out = tmp.path().join("out");
    let with = |models: Vec<distprof::model::NodeClockModel>, session: Option<&str>| MergeOptions {
        out_dir: out.clone(),
        models,
        models_origin: Some(ModelOrigin { path: "earlier.json".into(), session_id: session.map(String::from) }),
        ..Default::default()
    };
    let inputs = [tmp.path().join("in")];
    let err = merge(&inputs, &with(vec![earlier.clone()], None), &mut |_| {}).unwrap_err();
    assert!(matches!(err, MergeError::ForeignWindows { node: 1, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("earlier.json") && msg.contains("node1.xplane.pb") && msg.contains("another run") && msg.contains("--force"), "{msg}");
    assert!(!out.exists(), "a refused merge leaves nothing");
    // validate applies the same checks.
    let v = validate(&inputs, &with(vec![earlier.clone()], None)).unwrap_err();
    assert_eq!(v.to_string(), msg);
    // A models file that records its run's session: another session is refused as such.
    let err = merge(&inputs, &with(vec![this_run.clone()], Some("s-earlier")), &mut |_| {}).unwrap_err();
    assert!(matches!(err, MergeError::ForeignModels { .. }), "{err}");
    assert!(!out.exists());
    // This run's own model passes, with or without its session.
    for session in [None, Some("s-now")] {
        let r = merge(&inputs, &with(vec![this_run.clone()], session), &mut |_| {}).unwrap();
        assert!(r.nodes.iter().all(|n| n.corrected), "{r:?}");
        std::fs::remove_dir_all(&out).unwrap();
    }
    // --force is for experts: the earlier model is applied and the collectives break by 75 ms.
    let forced = MergeOptions { force: true, ..with(vec![earlier], None) };
    let v = validate(&inputs, &forced).unwrap();
    assert_eq!(v.after.violations, 15, "{v:?}");
}
