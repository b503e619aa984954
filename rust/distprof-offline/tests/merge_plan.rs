//! A merge in shards from a plan (`distprof merge --solve-only`, then `--plan --nodes` per
//! shard, then `--join`) gives the bytes of one merge of every node, when the clock models
//! come from the network solve over every trace's plane; each shard reads only its own
//! nodes' traces, and one that changed since the plan is refused by name.
//!
//! The traces are the real JAX fixtures (one machine, one clock), each given a distprof
//! plane as a node exports it when it could not solve the network itself: the reference
//! knows its model, nodes 1 and 2 know only their own edge fits (1 probes 2, 2 probes 1,
//! only 0 probes 1), so node 2 is placed only by the solve over all three planes.

use distprof::distprof_plane::distprof_plane_bytes;
use distprof::xplane::{XPlane, XSpace, PROFILE_START_STAT, TASK_ENV_PLANE};
use distprof_offline::merge::shard::{self, NodeSet};
use distprof_offline::merge::{merge_planned, merge_with, plan, MergeError, MergeOptions, Plan, RunOptions};
use distprof_testkit::synthetic_xspace::{flat_edge_fits, plane_data, Windows};
use distprof_testkit::tree::files;
use prost::Message;
use std::path::{Path, PathBuf};

/// Node 2's clock is this far ahead of node 1's (and node 1's is on the reference's).
const THETA_12_NS: f64 = 250.0;

fn write_traces(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..3u32)
        .map(|k| {
            let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/jax/node{k}.xplane.pb"));
            let mut space = XSpace::decode(std::fs::read(&fixture).unwrap().as_slice()).unwrap();
            let start = space.planes.iter().find(|p| p.name == TASK_ENV_PLANE).and_then(|p| p.stat_u64(PROFILE_START_STAT)).unwrap() as i64;
            let windows = Windows { start_ns: start - 5_000_000_000, window_ns: 15_000_000_000, count: 1, bound_ns: 1_000.0, uncertainty_ns: 100.0 };
            let mut data = plane_data(k, &space.hostnames[0], windows.segments(|_, _| (0.0, 0.0)));
            if k > 0 {
                data.model.reachable = false;
                data.model.segments.clear();
            }
            let edges: &[(u32, f64)] = match k {
                0 => &[(1, 0.0)],
                1 => &[(2, THETA_12_NS)],
                _ => &[(1, -THETA_12_NS)],
            };
            data.edge_fits = vec![flat_edge_fits(k, 0, windows.start_ns, windows.start_ns + windows.window_ns, edges)];
            space.planes.push(XPlane::decode(distprof_plane_bytes(&data).as_slice()).unwrap());
            let path = dir.join(format!("node{k}.xplane.pb"));
            std::fs::write(&path, space.encode_to_vec()).unwrap();
            path
        })
        .collect()
}

fn options(out: &Path) -> MergeOptions {
    MergeOptions {
        out_dir: out.to_path_buf(),
        chrome: Some(out.join("merged.trace.json")),
        trace_format: distprof_offline::merge::trace_out::TraceFormat::ChromeJson,
        allow_uncorrected: false,
        models: Vec::new(),
        models_origin: None,
        force: false,
        flows: false,
        pftrace_compression: Default::default(),
    }
}

fn shard_run(nodes: &str) -> RunOptions {
    RunOptions { jobs: 1, nodes: Some(nodes.parse::<NodeSet>().unwrap()), meter: false }
}

#[test]
fn shards_of_a_plan_join_to_the_bytes_of_one_merge_and_read_only_their_traces() {
    let tmp = tempfile::tempdir().unwrap();
    let traces = tmp.path().join("traces");
    let paths = write_traces(&traces);
    let whole = tmp.path().join("whole");
    merge_with(std::slice::from_ref(&traces), &options(&whole), &RunOptions { jobs: 1, ..Default::default() }, &mut |_| {}).unwrap();

    let mut lines = Vec::new();
    let (solved, _, stats) = plan::solve(std::slice::from_ref(&traces), &options(tmp.path()), &mut |l| lines.push(l.to_string())).unwrap();
    let plan_path = tmp.path().join("plan.json");
    solved.write(&plan_path).unwrap();
    let plan = Plan::read(&plan_path).unwrap();
    // Node 2 is placed by the solve over every plane (its own knows no model).
    let m2 = plan.models.iter().find(|m| m.node == 2).unwrap();
    assert!(m2.reachable && m2.segments.len() == 1 && (m2.segments[0].offset_ns - THETA_12_NS).abs() < 1e-6, "{m2:?}");
    assert!(lines.iter().any(|l| l.contains("solved network-wide")), "{lines:?}");
    // The solve read the planes, not the events.
    let bytes_in: u64 = paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(stats.bytes_in, bytes_in);
    assert!(stats.bytes_read * 4 < bytes_in, "read {} of {bytes_in} bytes", stats.bytes_read);

    // Shard 0-1 runs without node 2's trace: it reads no trace but its own nodes'.
    let aside = tmp.path().join("node2.aside");
    std::fs::rename(&paths[2], &aside).unwrap();
    let (s0, s1, joined) = (tmp.path().join("s0"), tmp.path().join("s1"), tmp.path().join("joined"));
    merge_planned(&plan, &plan_path, &options(&s0), &shard_run("0-1"), &mut |_| {}).unwrap();
    std::fs::rename(&aside, &paths[2]).unwrap();
    merge_planned(&plan, &plan_path, &options(&s1), &shard_run("2"), &mut |_| {}).unwrap();
    shard::join(&[s0, s1], &joined, Some(&joined.join("merged.trace.json")), distprof_offline::merge::trace_out::TraceFormat::ChromeJson).unwrap();
    let (a, b) = (files(&whole), files(&joined));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    assert!(a.len() == 4, "{:?}", a.keys());
    for (k, v) in &a {
        assert!(v == &b[k], "{} differs between the whole merge and the joined shards of the plan", k.display());
    }

    // A trace that changed since the plan is refused, naming it and the fix.
    let mut bytes = std::fs::read(&paths[1]).unwrap();
    bytes.extend_from_slice(&[0x22, 0]); // one more host name, empty: a valid, different XSpace
    std::fs::write(&paths[1], bytes).unwrap();
    let err = merge_planned(&plan, &plan_path, &options(&tmp.path().join("s2")), &shard_run("1"), &mut |_| {}).unwrap_err();
    assert!(matches!(err, MergeError::Shard(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("node1.xplane.pb") && msg.contains("--solve-only"), "{msg}");
}

#[test]
fn a_plan_of_another_format_or_no_plan_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("plan.json");
    std::fs::write(&p, r#"{"distprof_merge_plan":99,"allow_uncorrected":false,"g0_ns":0,"nodes":[],"models":[]}"#).unwrap();
    let msg = Plan::read(&p).unwrap_err().to_string();
    assert!(msg.contains("plan format 99") && msg.contains("plan.json"), "{msg}");
    std::fs::write(&p, "[]").unwrap();
    let msg = Plan::read(&p).unwrap_err().to_string();
    assert!(msg.contains("not a merge plan") && msg.contains("--solve-only"), "{msg}");
}
