//! The `distprof merge` and `distprof validate` commands on the real JAX fixtures.

use distprof_testkit::cli::distprof;
use std::path::Path;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/jax")
}

#[test]
fn merge_without_models_needs_the_flag_and_then_writes_an_xprof_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let refused = distprof()
        .arg("merge")
        .arg(fixtures())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("node0.xplane.pb") && err.contains("--allow-uncorrected"),
        "{err}"
    );

    let ok = distprof()
        .arg("merge")
        .arg(fixtures())
        .arg("--out")
        .arg(&out)
        .args(["--allow-uncorrected", "--json"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for (k, n) in nodes.iter().enumerate() {
        assert_eq!(n["hostname"], format!("node{k}.vm"));
        assert!(Path::new(n["output"].as_str().unwrap()).exists());
        assert!(n["events"].as_u64().unwrap() > 5000);
    }
    assert!(
        String::from_utf8_lossy(&ok.stderr).contains("distprof merge: node 2:"),
        "progress on stderr"
    );
    assert!(out.join("merged.pftrace").exists());

    // The fixtures share one real clock: no violations, and exit status 0.
    let v = distprof()
        .arg("validate")
        .arg(report["run_dir"].as_str().unwrap())
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(r["before"]["checked"], 20);
    assert_eq!(r["after"]["violations"], 0);
}

#[test]
fn validate_names_a_missing_input() {
    let out = distprof()
        .args(["validate", "/nonexistent/trace.xplane.pb"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/trace.xplane.pb"));
}

#[test]
fn a_truncated_trace_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixtures().join("node1.xplane.pb")).unwrap();
    let cut = tmp.path().join("cut.xplane.pb");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = distprof()
        .arg("merge")
        .arg(&cut)
        .args(["--allow-uncorrected", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.xplane.pb") && err.contains("not a valid XSpace"),
        "{err}"
    );
}

#[test]
fn run_dir_models_come_from_the_network_solve_over_the_jsonl() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let local = distprof()
        .args(["local", "--nodes", "3", "--duration", "3", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));

    // Both sources at once is a usage error that says which to drop.
    let both = distprof()
        .arg("validate")
        .arg(fixtures())
        .arg("--run-dir")
        .arg(&run)
        .args(["--models", "m.json"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("not both"));

    // A directory without JSONL is named in the error.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let none = distprof().arg("validate").arg(fixtures()).arg("--run-dir").arg(&empty).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("--run-dir"), "{}", String::from_utf8_lossy(&none.stderr));

    // The fixtures are another run's traces: the run's models do not belong to them (their
    // windows are hours away from the profiles), and merge says so, naming both.
    let out = tmp.path().join("out");
    let merge = |force: bool| {
        let mut c = distprof();
        c.arg("merge").arg(fixtures()).arg("--out").arg(&out).arg("--run-dir").arg(&run).args(["--json", "--no-chrome"]);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let refused = merge(false);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("outside the windows") && err.contains(".xplane.pb") && err.contains(&run.display().to_string()), "{err}");
    assert!(err.contains("--force"), "{err}");

    // An expert may force it: the run's models (nodes 0..2) replace the traces' own, every
    // node is corrected by them, and the report states how far they were extrapolated.
    let merged = merge(true);
    assert!(merged.status.success(), "{}", String::from_utf8_lossy(&merged.stderr));
    let report: serde_json::Value = serde_json::from_slice(&merged.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["corrected"] == true), "{report}");
    assert!(nodes.iter().all(|n| n["extrapolated_ns"].as_i64().unwrap() > 60_000_000_000), "{report}");
    // Extrapolated that far, every event's correction is uncertain by far more than a
    // window is trusted to (1 us): stated, flagged, and said on stderr by node.
    assert!(nodes.iter().all(|n| n["max_uncertainty_ns"].as_f64().unwrap() > 1_000.0 && n["uncertainty_exceeded"] == true), "{report}");
    let err = String::from_utf8_lossy(&merged.stderr);
    assert!((0..3).all(|k| err.contains(&format!("WARNING: node {k}: its correction's uncertainty reaches"))), "{err}");
}

#[test]
fn models_with_absurd_values_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tmp.path().join("m.json");
    let seg = |offset: &str| {
        format!(
            r#"[{{"node":1,"reachable":true,"segments":[{{"window_id":0,"start_local_ns":0,"end_local_ns":10,"mid_local_ns":5,"offset_ns":{offset},"drift_ppb":0.0,"bound_ns":100.0,"flagged":false}}]}}]"#
        )
    };
    std::fs::write(&models, seg("1e300")).unwrap();
    for force in [false, true] {
        let mut c = distprof();
        c.arg("merge").arg(fixtures()).arg("--out").arg(tmp.path().join("out")).arg("--models").arg(&models).arg("--no-chrome");
        if force {
            c.arg("--force");
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("m.json") && err.contains("node 1") && err.contains("beyond a day"), "{err}");
    }
}

/// Runs `distprof merge INPUTS --out OUT --allow-uncorrected --json`.
fn merge_into(inputs: &[&Path], out: &Path) -> std::process::Output {
    distprof()
        .arg("merge")
        .args(inputs)
        .arg("--out")
        .arg(out)
        .args(["--allow-uncorrected", "--json"])
        .output()
        .unwrap()
}

fn hostnames(out: &std::process::Output) -> Vec<String> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["nodes"].as_array().unwrap().iter().map(|n| n["hostname"].as_str().unwrap().to_string()).collect()
}

/// A merge cannot be fooled into reading its own output: a second merge into the same tree
/// gives exactly the nodes of the first; an output inside the input, an input inside the
/// output's run tree, and a merged trace passed as input are named errors.
#[test]
fn merge_refuses_its_own_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir(&input).unwrap();
    for k in 0..3 {
        let name = format!("node{k}.xplane.pb");
        std::fs::copy(fixtures().join(&name), input.join(&name)).unwrap();
    }
    let out = tmp.path().join("out");
    let first = hostnames(&merge_into(&[&input], &out));
    assert_eq!(first, ["node0.vm", "node1.vm", "node2.vm"]);
    // The same merge again, into the same tree: the same nodes, no more.
    assert_eq!(hostnames(&merge_into(&[&input], &out)), first);

    let refused = |out: std::process::Output, want: &str| {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(err.contains(want), "{err}");
        err
    };
    // The output inside the input directory: refused before anything is written.
    let nested = input.join("merged");
    let err = refused(merge_into(&[&input], &nested), "lies inside the input directory");
    assert!(err.contains("choose an output directory outside"), "{err}");
    assert!(!nested.join("plugins").exists());
    // The earlier output passed as input, alone or next to the traces.
    let run_dir = std::fs::read_dir(out.join("plugins/profile")).unwrap().next().unwrap().unwrap().path();
    refused(merge_into(&[&run_dir], &tmp.path().join("again")), "the output of an earlier distprof merge");
    refused(merge_into(&[&input, &run_dir], &tmp.path().join("again")), "the output of an earlier distprof merge");
    // An input inside the tree this merge writes.
    refused(merge_into(&[&run_dir], &out), "lies in the run tree merge writes");
}

#[test]
fn empty_and_eventless_traces_are_named_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.xplane.pb");
    std::fs::write(&empty, b"").unwrap();
    let out = merge_into(&[&empty], &tmp.path().join("out"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("empty.xplane.pb: an empty trace (0 bytes)"), "{err}");
    assert!(!tmp.path().join("out/plugins").exists(), "no 1970 run directory");
    // One hostname and no plane: a valid XSpace with nothing to merge.
    let eventless = tmp.path().join("eventless.xplane.pb");
    std::fs::write(&eventless, [0x22, 0x01, b'h']).unwrap();
    let out = merge_into(&[&eventless], &tmp.path().join("out"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("eventless.xplane.pb: a trace with no events"), "{err}");
}

/// The fixtures with the last node's events corrupted past its planes' headers: the
/// prescan accepts it, the rewrite of node 2 fails after nodes 0 and 1 were written.
fn with_a_corrupt_last_node(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..3)
        .map(|k| {
            let mut b = std::fs::read(fixtures().join(format!("node{k}.xplane.pb"))).unwrap();
            if k == 2 {
                let m = b.len() / 2;
                b[m..m + 64].fill(0xff);
            }
            let p = dir.join(format!("node{k}.xplane.pb"));
            std::fs::write(&p, b).unwrap();
            p
        })
        .collect()
}

/// Every entry under `dir`, recursively, as paths relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_merge_failing_on_its_last_node_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = with_a_corrupt_last_node(&tmp.path().join("in"));
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let plan = tmp.path().join("plan.json");
    let solved = distprof().arg("merge").arg("--solve-only").arg("--allow-uncorrected").arg("--out").arg(&plan).args(&inputs).output().unwrap();
    assert!(solved.status.success(), "{}", String::from_utf8_lossy(&solved.stderr));
    let out = work.join("new/merged");
    let out_arg = out.to_str().unwrap();
    let chrome = work.join("elsewhere.trace.json");
    let chrome_arg = chrome.to_str().unwrap();
    let plan_arg = plan.to_str().unwrap();
    let runs: [&[&str]; 5] = [
        &["--allow-uncorrected", "-j", "1", "--out", out_arg],
        &["--allow-uncorrected", "-j", "3", "--out", out_arg, "--chrome", chrome_arg],
        &["--allow-uncorrected", "--out", out_arg, "--no-chrome"],
        &["--plan", plan_arg, "--nodes", "0-2", "--out", out_arg],
        &["--plan", plan_arg, "--out", out_arg, "--chrome", chrome_arg],
    ];
    for args in runs {
        let inputs: &[std::path::PathBuf] = if args.contains(&"--plan") { &[] } else { &inputs };
        let r = distprof().arg("merge").args(args).args(inputs).output().unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("node2.xplane.pb") && err.contains("not a valid XSpace"), "{args:?}: {err}");
        assert!(err.contains("node 0:") || args.contains(&"3"), "{args:?}: node 0 was written first: {err}");
        assert_eq!(tree(&work), Vec::<String>::new(), "{args:?}: a failed merge leaves nothing");
    }
    // Into an existing directory: it stays as it was.
    std::fs::create_dir_all(work.join("logs/keep")).unwrap();
    std::fs::write(work.join("logs/keep/a.txt"), b"x").unwrap();
    let r = distprof().arg("merge").args(["--allow-uncorrected", "--out"]).arg(work.join("logs")).args(&inputs).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert_eq!(tree(&work), ["logs", "logs/keep", "logs/keep/a.txt"]);
}

#[test]
fn a_join_missing_a_shard_file_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = [tmp.path().join("s0"), tmp.path().join("s1")];
    for (s, nodes) in shards.iter().zip(["0-1", "2"]) {
        let r = distprof().arg("merge").args(["--allow-uncorrected", "--nodes", nodes, "--out"]).arg(s).arg(fixtures()).output().unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    // The second shard's Chrome fragment is gone: the join fails after linking node files.
    std::fs::remove_file(shards[1].join("shard.trace.part")).unwrap();
    let out = tmp.path().join("joined");
    let r = distprof().arg("merge").arg("--join").arg("--out").arg(&out).args(&shards).output().unwrap();
    assert_eq!(r.status.code(), Some(2), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(!out.exists());
    let mut names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["s0", "s1"]);
    // Whole, it joins.
    let r = distprof().arg("merge").arg("--join").arg("--no-chrome").arg("--out").arg(&out).args(&shards).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(tree(&out).iter().filter(|p| p.ends_with(".xplane.pb")).count(), 3);
}

#[test]
fn a_models_file_of_another_run_is_refused_and_leaves_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let gen = distprof().args(["bench", "merge", "--size-mb", "1", "--nodes", "2", "--skip-baseline", "--no-chrome", "--repeat", "1", "--dir"]).arg(tmp.path()).output().unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    let input = tmp.path().join("in");
    use prost::Message;
    let space = distprof::xplane::XSpace::decode(std::fs::read(input.join("node1.xplane.pb")).unwrap().as_slice()).unwrap();
    let plane = space.planes.iter().find(|p| p.name == distprof::distprof_plane::DISTPROF_PLANE).unwrap();
    let model = distprof::distprof_plane::DistprofPlaneData::from_xplane(plane).unwrap().model;
    // Node 1's model as a run 20 s earlier would have it: other windows, 75 ms off.
    let mut earlier = serde_json::to_value(vec![&model]).unwrap();
    for s in earlier[0]["segments"].as_array_mut().unwrap() {
        for k in ["start_local_ns", "mid_local_ns", "end_local_ns"] {
            s[k] = (s[k].as_i64().unwrap() - 20_000_000_000).into();
        }
        s["offset_ns"] = (s["offset_ns"].as_f64().unwrap() + 75e6).into();
    }
    let files = [("earlier.json", earlier), ("this_run.json", serde_json::json!({"session_id": "", "models": [model]}))];
    for (name, json) in &files {
        std::fs::write(tmp.path().join(name), json.to_string()).unwrap();
    }
    let out = tmp.path().join("out");
    let merge = |models: &str| distprof().arg("merge").arg(&input).arg("--out").arg(&out).arg("--models").arg(tmp.path().join(models)).output().unwrap();
    let refused = merge("earlier.json");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("earlier.json") && err.contains("node1.xplane.pb") && err.contains("another run"), "{err}");
    assert!(!out.exists(), "a refused merge leaves nothing");
    let ok = merge("this_run.json");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(out.join("merged.pftrace").exists());
}
