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
    assert!(out.join("merged.trace.json").exists());

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
        .args(["local", "--nodes", "3", "--duration", "3", "--output-dir"])
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

    // The run's models (nodes 0..2) replace the traces' own: every node is corrected by
    // them, so the merge needs no --allow-uncorrected.
    let out = tmp.path().join("out");
    let merged = distprof()
        .arg("merge")
        .arg(fixtures())
        .arg("--out")
        .arg(&out)
        .arg("--run-dir")
        .arg(&run)
        .args(["--json", "--no-chrome"])
        .output()
        .unwrap();
    assert!(merged.status.success(), "{}", String::from_utf8_lossy(&merged.stderr));
    let report: serde_json::Value = serde_json::from_slice(&merged.stdout).unwrap();
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["corrected"] == true), "{report}");
}
