//! `distprof bench accuracy` refuses bad scenario flags before simulating anything, naming
//! the flag, the value and what it accepts.

use distprof_testkit::cli::distprof;

fn accuracy(args: &[&str]) -> (bool, String, String) {
    let out = distprof()
        .args(["bench", "accuracy", "--local-nodes", "0"])
        .args(args)
        .output()
        .expect("running distprof");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_scenario_flags_are_named_and_nothing_runs() {
    for (args, named) in [
        (&["--nodes", "1"][..], "--nodes 1: each node count must be in 2..=16384"),
        (&["--nodes", "8", "--packet-jitter-ns=-5"][..], "--packet-jitter-ns -5: must be a number of ns >= 0"),
        (&["--nodes", "8", "--packet-jitter-ns", "NaN"][..], "--packet-jitter-ns NaN"),
    ] {
        let (ok, stdout, stderr) = accuracy(args);
        assert!(!ok, "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: stderr does not name the flag: {stderr}");
        assert!(!stdout.contains("simulation"), "{args:?}: rows were printed before the error: {stdout}");
    }
}

/// `--config` names the file and the fix when the file is bad, and nothing runs.
#[test]
fn a_bad_config_is_named_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bad = dir.path().join("too-fast.json");
    std::fs::write(&bad, r#"{"probe_cadence_us": 5}"#).expect("writing the config");
    let missing = dir.path().join("missing.json");
    for (path, named) in [(&bad, "probe_cadence_us = 5 is below the minimum 1000"), (&missing, "cannot read")] {
        let (ok, stdout, stderr) = accuracy(&["--nodes", "8", "--config", path.to_str().expect("a UTF-8 path")]);
        assert!(!ok, "{path:?} was accepted");
        assert!(stderr.contains("--config `") && stderr.contains(named), "{path:?}: {stderr}");
        assert!(!stdout.contains("simulation"), "{path:?}: rows were printed before the error: {stdout}");
    }
}

/// Every simulated run probes as `--config` says, the real-clock scenarios' included: the
/// high-accuracy preset's 8 s windows give a 60 s run of 8 nodes 7 full windows, 49
/// node-windows of the 7 nodes that are not the reference (the default's 15 s give 28).
#[test]
fn the_config_sets_how_every_simulated_run_probes() {
    let preset = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/configs/high-accuracy.json");
    let quick = [
        "--nodes", "8", "--estimators", "hull", "--jitter-run-duration", "0", "--calibration-seeds", "0", "--scale-nodes", "0",
        "--failover-runs", "0", "--real-clocks-nodes", "8", "--real-clocks-seeds", "1", "--real-clocks-scenarios", "reference",
        "--real-clocks-local-duration", "0", "--local-coverage-node-windows", "0", "--json",
    ];
    for (config, cadence_us, node_windows) in [(None, 40_000, 28), (Some(preset), 10_000, 49)] {
        let mut args = quick.to_vec();
        args.extend(config.map(|c| ["--config", c]).into_iter().flatten());
        let (ok, stdout, stderr) = accuracy(&args);
        assert!(ok, "{config:?}: {stderr}");
        let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("a summary line")).expect("JSON");
        assert_eq!(summary["config"].as_str(), config, "{config:?}");
        assert_eq!(summary["scenario"]["cadence_us"], cadence_us, "{config:?}");
        assert_eq!(summary["real_clocks"][0]["node_windows"], node_windows, "{config:?}");
    }
}
