//! Golden tests of what the `distprof` command prints: help, flag errors, `config check` of
//! a bad file, the shape of `simulate --json`, and `validate` and `merge` on the JAX fixtures
//! (tests/fixtures/jax). Each output (exit code, stdout, stderr) is compared with its copy in
//! rust/distprof-cli/tests/golden/, after the one normaliser takes out temporary paths and
//! timings. An intended change is blessed with
//!
//!     DISTPROF_BLESS=1 cargo nextest run -p distprof-cli --test golden

use distprof_testkit::cli::distprof;
use distprof_testkit::golden::{assert_golden, normalise, repo_root};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

const BLESS: &str = "cargo nextest run -p distprof-cli --test golden";

/// Runs `distprof ARGS` from the repository's root (so fixture paths print relative) with no
/// launcher variables that `run` would read.
fn run(args: &[&str]) -> Output {
    let mut cmd = distprof();
    for var in ["RANK", "WORLD_SIZE", "PJRT_PROCESS_INDEX", "PJRT_NUM_PROCESSES", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"] {
        cmd.env_remove(var);
    }
    cmd.current_dir(repo_root()).args(args).output().expect("running distprof")
}

/// Exit code, stdout and stderr of one run, normalised.
fn transcript(args: &[&str], out: &Output, paths: &[(&Path, &str)]) -> String {
    let text = format!(
        "$ distprof {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.status.code().map_or("signal".into(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    normalise(&text, paths)
}

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn check(name: &str, args: &[&str]) {
    let out = run(args);
    assert_golden(&golden(name), &transcript(args, &out, &[]), BLESS);
}

#[test]
fn top_level_help() {
    check("help.txt", &["--help"]);
}

#[test]
fn flag_errors_of_local_run_and_merge() {
    let cases: [&[&str]; 6] = [
        &["local", "--bogus"],
        &["local", "--nodes", "1"],
        &["run", "--rank", "5", "--nodes", "2"],
        &["run"],
        &["merge"],
        &["merge", "--out", "no-such-out", "no-such-input.xplane.pb"],
    ];
    let mut all = String::new();
    for args in cases {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?} must fail as a usage error");
        all.push_str(&transcript(args, &out, &[]));
        all.push('\n');
    }
    assert_golden(&golden("flag_errors.txt"), &all, BLESS);
}

#[test]
fn config_check_of_a_bad_file_lists_every_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"probe_cadence_us": 5, "estimator": "svmx", "unknown_key": 1, "probe_window_s": "two"}"#,
    )
    .unwrap();
    let args = ["config", "check", file.to_str().unwrap()];
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    assert_golden(&golden("config_check_bad.txt"), &transcript(&args, &out, &[(tmp.path(), "<TMP>")]), BLESS);
}

/// The keys of a JSON value and the type of each leaf (`integer`, `float`, `string`, `bool`,
/// `null`); an array shows the shape of its first element. Float values are left out: they
/// are the estimator's, tested against truth elsewhere.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.first().map(shape).into_iter().collect()),
        Value::Number(n) if n.is_f64() => "float".into(),
        Value::Number(_) => "integer".into(),
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

#[test]
fn simulate_json_shape() {
    let args = ["simulate", "--nodes", "4", "--duration", "30", "--seed", "1", "--json"];
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let text = format!("$ distprof {}\n{}\n", args.join(" "), serde_json::to_string_pretty(&shape(&last)).unwrap());
    assert_golden(&golden("simulate_json_shape.json"), &text, BLESS);
}

#[test]
fn validate_table_on_the_jax_fixtures() {
    check("validate_jax.txt", &["validate", "--allow-uncorrected", "tests/fixtures/jax"]);
}

#[test]
fn validate_counts_every_collective_kind_of_a_pmap_psum_job() {
    check("validate_jax_pmap.txt", &["validate", "--allow-uncorrected", "tests/fixtures/jax-collectives/pmap"]);
}

#[test]
fn validate_counts_every_collective_kind_of_a_shard_map_all_gather_job() {
    check("validate_jax_shard_map.txt", &["validate", "--allow-uncorrected", "tests/fixtures/jax-collectives/shard_map"]);
}

#[test]
fn validate_without_a_model_names_the_fix() {
    check("validate_jax_no_model.txt", &["validate", "tests/fixtures/jax"]);
}

#[test]
fn merge_summary_on_the_jax_fixtures() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("merged");
    let args = ["merge", "--allow-uncorrected", "--out", out_dir.to_str().unwrap(), "tests/fixtures/jax"];
    let out = run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_golden(&golden("merge_jax.txt"), &transcript(&args, &out, &[(tmp.path(), "<TMP>")]), BLESS);
}
