//! `distprof local` end to end: real node processes, real UDP through the relay, real files.

use distprof_testkit::cli::distprof;
use serde_json::Value;
use std::time::{Duration, Instant};

fn last_json_line(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().last().expect("some output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}

/// Four nodes with known clocks: every edge has windows, nothing is lost on a clean relay,
/// and every estimate is within its bound of the truth.
#[test]
fn four_nodes_recover_their_clocks_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = distprof()
        .args(["local", "--nodes", "4", "--duration", "3", "--window-s", "0.5", "--cadence-us", "20000", "--json"])
        .args(["--clock", "2=+1500000ns,-12.5ppm", "--clock", "0=-300us,4ppm"])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.elapsed() < Duration::from_secs(15), "took {:?}", t.elapsed());
    let v = last_json_line(&out.stdout);
    assert_eq!(v["probes_lost"], 0, "{v}");
    let edges = v["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 12);
    for e in edges {
        // 3 s at 20 ms: ~150 probes, 6 full windows and the closing one.
        assert!(e["sent"].as_u64().unwrap() >= 140, "{e}");
        assert_eq!(e["complete"], e["sent"], "{e}");
        assert!(e["windows"].as_u64().unwrap() >= 6, "{e}");
        assert_eq!(e["windows_down"], 0, "{e}");
    }
    let nodes = v["nodes"].as_array().unwrap();
    // Node 2 against node 0 (the reference): +1.8 ms at the start, losing 16.5 ppm
    // (16.5 us per second) over the few seconds until the end.
    let off2 = nodes[2]["true_offset_ns"].as_f64().unwrap();
    assert!(off2 < 1_800_000.0 && off2 > 1_700_000.0, "{}", nodes[2]);
    assert!((nodes[2]["true_drift_ppm"].as_f64().unwrap() + 16.5).abs() < 0.01);
    assert_eq!(v["estimator"], "hull", "{v}");
    assert!(v["full_windows"].as_u64().unwrap() >= 5, "{v}");
    for n in nodes {
        // The real estimator with network correction, against the truth at every full
        // window's midpoint: every window within its bound, the reported one too.
        assert_eq!(n["reachable"], true, "node {n}");
        assert!(n["windows_estimated"].as_u64().unwrap() >= 5, "node {n}");
        assert_eq!(n["windows_within_bound"], n["windows_estimated"], "node {n}");
        let err = n["error_ns"].as_f64().unwrap();
        let bound = n["bound_ns"].as_f64().unwrap();
        assert!(err.abs() <= bound, "node {n}");
        assert!(bound < 1_000_000.0, "node {n}");
        let drift_err = n["est_drift_ppm"].as_f64().unwrap() - n["true_drift_ppm"].as_f64().unwrap();
        // Over a 0.5 s window and its history (2.5 s) a line within ±bound at both ends
        // has its slope within 2 * bound / 2.5 s.
        assert!(drift_err.abs() <= 2.0 * bound / 2.5e9 * 1e6, "node {n}");
        // The relay is symmetric and (as root) runs under SCHED_FIFO, so the shortest
        // delays of both directions match: within 10 us in every window (1-2 us measured).
        // Without the priority a busy machine delays the relay by 50-150 us at random.
        if distprof_sim::netns::is_root() {
            assert!(n["p99_error_ns"].as_f64().unwrap() <= 10_000.0, "node {n}");
        }
    }
    // Every node-window is listed (3 nodes besides the reference), and the run judged
    // again from its files and the clocks it wrote gives the same verdict.
    let rows = v["node_windows"].as_array().unwrap();
    assert_eq!(rows.len() as u64, 3 * v["full_windows"].as_u64().unwrap(), "{v}");
    assert!(dir.path().join("local_clocks.json").is_file());
    let again = distprof().args(["local", "--judge-only", "--json", "--out"]).arg(dir.path()).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let w = last_json_line(&again.stdout);
    assert_eq!(w["node_windows"], v["node_windows"]);
    assert_eq!(w["p99_offset_error_ns"], v["p99_offset_error_ns"]);
}

/// A node killed with SIGKILL mid-run: the others mark its edges down, keep writing
/// windows and exit cleanly; every closed window in the dead node's file parses.
#[test]
fn killed_node_is_marked_down_and_its_file_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = distprof()
        .args(["local", "--nodes", "3", "--duration", "3", "--window-s", "0.5", "--cadence-us", "20000", "--down-after-ms", "300"])
        .args(["--kill", "2@1.2", "--json", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("killing node 2"), "{stderr}");
    for node in [0u32, 1] {
        let f = distprof::jsonl::read(&dir.path().join(distprof::jsonl::file_name(node))).unwrap();
        assert!(f.windows.len() >= 6, "node {node}: {} windows", f.windows.len());
        let to2: Vec<_> = f.windows.iter().map(|w| w.edges.iter().find(|e| e.dst == 2).unwrap().clone()).collect();
        let survivor = if node == 0 { 1 } else { 0 };
        let other: Vec<_> = f.windows.iter().map(|w| w.edges.iter().find(|e| e.dst == survivor).unwrap().clone()).collect();
        assert_eq!(to2.iter().map(|e| e.went_down).sum::<u32>(), 1, "node {node}: {to2:?}");
        assert!(!to2[to2.len() - 2].up, "node {node}: edge to 2 still up at the end: {to2:?}");
        assert!(to2.iter().map(|e| e.lost).sum::<u64>() > 20);
        // The surviving edge never noticed.
        assert!(other.iter().all(|e| e.up && e.went_down == 0), "{other:?}");
        assert_eq!(other.iter().map(|e| e.lost).sum::<u64>(), 0);
        assert!(other[other.len() - 2].complete > 0);
    }
    let dead = distprof::jsonl::read(&dir.path().join(distprof::jsonl::file_name(2))).unwrap();
    // Killed at 1.2 s with 0.5 s windows: 2 closed windows, none after.
    assert_eq!(dead.windows.len(), 2, "{:?}", dead.windows.len());
    assert!(dead.windows.iter().all(|w| w.edges.iter().all(|e| e.complete > 0)));
}

#[test]
fn bad_clock_argument_names_the_input_and_the_fix() {
    let out = distprof().args(["local", "--nodes", "3", "--clock", "5=+1ms,2ppm"]).output().unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--clock `5=+1ms,2ppm`") && e.contains("0..2"), "{e}");
    let out = distprof().args(["local", "--clock", "1=+1,2ppm"]).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("missing unit"), "{e}");
}

/// A bad network (loss, duplication, reordering, jitter, asymmetry): probes are lost and
/// counted, duplicates dropped, nothing hangs, and every estimate stays within its bound.
#[test]
fn lossy_relay_loses_probes_but_not_the_clocks() {
    let dir = tempfile::tempdir().unwrap();
    let out = distprof()
        .args(["local", "--nodes", "3", "--duration", "3", "--window-s", "0.5", "--cadence-us", "20000"])
        .args(["--loss", "0.05", "--duplicate", "0.05", "--reorder", "0.05", "--jitter-us", "100", "--asymmetry-us", "80"])
        .args(["--json", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = last_json_line(&out.stdout);
    let sent = v["probes_sent"].as_u64().unwrap();
    let lost = v["probes_lost"].as_u64().unwrap();
    // 5 datagrams per probe at 5% loss each: ~23% of probes lost.
    assert!(lost as f64 > 0.1 * sent as f64 && (lost as f64) < 0.4 * sent as f64, "lost {lost} of {sent}");
    for n in v["nodes"].as_array().unwrap() {
        assert!(n["error_ns"].as_f64().unwrap().abs() <= n["bound_ns"].as_f64().unwrap(), "{n}");
        assert_eq!(n["windows_within_bound"], n["windows_estimated"], "{n}");
    }
    let mut duplicates = 0;
    for node in 0..3u32 {
        let f = distprof::jsonl::read(&dir.path().join(distprof::jsonl::file_name(node))).unwrap();
        duplicates += f.windows.iter().map(|w| w.dropped.get("duplicate").copied().unwrap_or(0)).sum::<u64>();
    }
    assert!(duplicates > 10, "{duplicates} duplicates dropped");
}

/// `--simulate-nic-clock`: every node takes hardware stamps from a NIC clock 37 s ahead and
/// 20 ppm off, mapped to its host clock; the output states each node's mode and mapping,
/// and the estimates are within their bounds as with kernel stamps.
#[test]
fn simulated_nic_clocks_are_mapped_and_stated_in_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = distprof()
        .args(["local", "--nodes", "3", "--duration", "3", "--window-s", "0.5", "--cadence-us", "20000", "--json"])
        .args(["--simulate-nic-clock", "--clock", "2=+1500000ns,-12.5ppm"])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for node in 0..3 {
        let line = format!("node {node} timestamps: hardware, stamp error <= ");
        assert!(stdout.contains(&line) && stdout.contains("NIC clock simulated NIC clock (+37000000000 ns"), "{stdout}");
    }
    let v = last_json_line(&out.stdout);
    let stamps = v["timestamps"].as_array().unwrap();
    assert_eq!(stamps.len(), 3, "{v}");
    for t in stamps {
        let t = &t["timestamps"];
        assert_eq!(t["mode"], "hardware", "{t}");
        let m = &t["nic_clock"]["mapping"];
        // host - NIC = -37 s, within the clock's 20 ppm over a few seconds.
        assert!((m["offset_ns"].as_f64().unwrap() + 37e9).abs() < 1e6, "{t}");
        assert!((m["drift_ppm"].as_f64().unwrap().abs() - 20.0).abs() < 0.5, "{t}");
        assert_eq!(t["nic_clock"]["unstamped_dropped"], 0, "{t}");
    }
    for n in v["nodes"].as_array().unwrap() {
        let (err, bound) = (n["error_ns"].as_f64().unwrap(), n["bound_ns"].as_f64().unwrap());
        assert!(err.abs() <= bound && err.abs() < 10_000.0, "node {n}");
    }
    // The report states the NIC clocks on its timestamps card.
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(page.contains("NIC clocks of 3 nodes mapped to host time"), "timestamps card without the NIC clocks");
}

/// `--nic-clock-fault phc-step-900us`: node 2's PHC steps by 900 us 6 s in. Its mapping
/// sees the break, counts the stamps converted across it, and states the step in their
/// error; the estimate carries that error into the window's sigma and bound, so a
/// window the step hit (up to hundreds of us off) is still within two sigma and its
/// bound, and is flagged. The other nodes see no break. A fault of the host clock is refused.
#[test]
fn a_nic_clock_fault_is_seen_and_carried_into_the_uncertainty() {
    let dir = tempfile::tempdir().unwrap();
    let out = distprof()
        .args(["local", "--nodes", "3", "--duration", "9", "--window-s", "1.5", "--json"])
        .args(["--simulate-nic-clock", "--nic-clock-fault", "phc-step-900us"])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = last_json_line(&out.stdout);
    for t in v["timestamps"].as_array().unwrap() {
        let (node, nic) = (t["node"].as_u64().unwrap(), &t["timestamps"]["nic_clock"]);
        let (breaks, across) = (nic["mapping"]["breaks"].as_u64().unwrap(), nic["stamps_across_break"].as_u64().unwrap());
        if node == 2 {
            assert!(breaks == 1 && across > 0 && nic["mapping_error_max_ns"].as_f64().unwrap() >= 900_000.0, "{t}");
        } else {
            assert!(breaks == 0 && across == 0, "{t}");
        }
    }
    // The step reached node 2's uncertainty: the mapping's error (the step) is carried
    // into its sigma. Whether it reaches its estimate depends on which stamps the
    // mapping dropped (under load, 0 to 450 us in 23 runs), so every window of node 2
    // off by more than 10 us must state it: within two sigma and its bound. Node 1
    // reaches the reference through node 2's edges too, and the network can carry part
    // of the step into it: under load 8-9, 1 run in 5 put node 1 233 us off at a sigma
    // of 134 us (its edge to node 2 crossed by 694 us: its points contradict any line).
    // Its sigma does not know of node 2's stamps; its bound, which holds whatever the
    // network did with the other edges, does (340 us there).
    let n2 = v["nodes"].as_array().unwrap().iter().find(|n| n["node"] == 2).unwrap();
    assert_eq!(n2["windows_within_bound"], n2["windows_estimated"], "{n2}");
    let windows = v["node_windows"].as_array().unwrap();
    let stated = windows.iter().filter(|w| w["node"] == 2).map(|w| w["uncertainty_ns"].as_f64().unwrap()).fold(0.0, f64::max);
    assert!(stated >= 400_000.0, "the step did not reach node 2's sigma: {stated} ns");
    for w in windows.iter().filter(|w| w["error_ns"].as_f64().unwrap().abs() > 10_000.0) {
        let (err, sigma, bound) = (w["error_ns"].as_f64().unwrap(), w["uncertainty_ns"].as_f64().unwrap(), w["bound_ns"].as_f64().unwrap());
        assert!(err.abs() <= bound && (w["node"] != 2 || err.abs() <= 2.0 * sigma), "{w}");
    }
    assert!(v["flagged_fraction"].as_f64().unwrap() > 0.0, "{v}");
    let refused = distprof().args(["local", "--simulate-nic-clock", "--nic-clock-fault", "leap-second"]).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("cannot be played in a real run") && err.contains("bench nic-clock"), "{err}");
}

/// `local` starts from the configuration every entry point loads: the file named by
/// `XLA_DIST_PROF_CONFIG` (estimator, window and cadence here), under the flags.
#[test]
fn the_file_of_xla_dist_prof_config_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("distprof.json");
    std::fs::write(&file, r#"{"estimator": "two_point", "probe_window_s": 0.5, "probe_cadence_us": 20000}"#).unwrap();
    let out = distprof()
        .args(["local", "--nodes", "2", "--duration", "2", "--json", "--out"])
        .arg(dir.path().join("run"))
        .env("XLA_DIST_PROF_CONFIG", &file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = last_json_line(&out.stdout);
    assert_eq!(v["estimator"], "two_point", "{v}");
    for e in v["edges"].as_array().unwrap() {
        // 2 s at 20 ms (the file's cadence, not the default): ~100 probes; 0.5 s windows
        // (the file's, not local's 2 s): 4 full windows.
        let sent = e["sent"].as_u64().unwrap();
        assert!((80..=110).contains(&sent), "{e}");
        assert!(e["windows"].as_u64().unwrap() >= 3, "{e}");
    }
}

/// A path in `XLA_DIST_PROF_CONFIG` that is not a config file fails `local` at once, blamed
/// on the variable.
#[test]
fn a_fifo_in_xla_dist_prof_config_is_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let t = Instant::now();
    let out = distprof()
        .args(["local", "--nodes", "2", "--duration", "1", "--out"])
        .arg(dir.path().join("run"))
        .env("XLA_DIST_PROF_CONFIG", &fifo)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(t.elapsed() < Duration::from_secs(1), "took {:?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("environment variable XLA_DIST_PROF_CONFIG: {} is a FIFO", fifo.display())),
        "{stderr}"
    );
    assert!(stderr.contains("fix: point XLA_DIST_PROF_CONFIG at"), "{stderr}");
    assert!(!dir.path().join("run").exists(), "local made its output directory before failing");
}
