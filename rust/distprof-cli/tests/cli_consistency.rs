//! One spelling per concept, flags judged before anything starts, JSON only with `--json`.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn distprof(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_distprof")).args(args).output().expect("running distprof");
    (out, started.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn local_judges_its_flags_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("never-made");
    let (out, took) = distprof(&["local", "--window-s", "0", "--out", out_dir.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--window-s sets probe_window_s") && stderr.contains("probe_window_s = 0"), "{stderr}");
    // No node, relay or directory: the error comes first and alone.
    assert!(!stderr.contains("distprof local:"), "{stderr}");
    assert!(!out_dir.exists());
    assert!(text(&out.stdout).is_empty());
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn simulate_prints_json_only_when_asked() {
    let args = ["simulate", "--nodes", "6", "--duration", "16", "--window-s", "4", "--out-degree", "3"];
    let (plain, _) = distprof(&args);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let stdout = text(&plain.stdout);
    assert!(stdout.contains("offset error: p50"), "{stdout}");
    assert!(!stdout.contains('{') && !stdout.contains('}'), "JSON without --json:\n{stdout}");
    let (json, _) = distprof(&[&args[..], &["--json"]].concat());
    let last = text(&json.stdout).lines().last().unwrap_or_default().to_string();
    let v: serde_json::Value = serde_json::from_str(&last).expect("the last line is one JSON object");
    assert!(v["p99_offset_err_ns"].is_number(), "{v}");
}

#[test]
fn old_spellings_still_work_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("sim");
    let (out, _) = distprof(&[
        "simulate", "--nodes", "4", "--duration-s", "16", "--window-s", "4", "--out-degree", "3", "--out",
        run_dir.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: `--duration-s` is now spelled `--duration`"), "{stderr}");
    assert!(run_dir.join("probe_windows_node0.jsonl").exists());
}
