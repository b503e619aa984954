//! A node under Debian's libfaketime (tests/setup/35-faketime.sh installs it): kernel and
//! NIC stamps are taken on the real clock and cannot see the faked one, so a node that finds
//! libfaketime chooses user-space stamps, and says which mode it chose and why in its
//! summary (the same `timestamps` object that its JSONL and plane carry).

use serde_json::Value;
use std::process::Command;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// `distprof run` of one node for 1 s, under libfaketime (2 s ahead) when `faked`; returns
/// the `timestamps` of its summary line and its stderr.
fn one_node(faked: bool, timestamping: Option<&str>) -> (Value, String) {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: run tests/setup/35-faketime.sh (Debian's `faketime` package)"
    );
    let out_dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_distprof"));
    cmd.args(["run", "--rank", "0", "--nodes", "1", "--duration", "1", "--bind", "127.0.0.1"])
        .env("XLA_DIST_PROF_OUTPUT_DIR", out_dir.path())
        .env_remove("LD_PRELOAD")
        .env_remove("FAKETIME")
        .env_remove("XLA_DIST_PROF_TIMESTAMPING");
    if faked {
        // As tests/jax/skewed_e2e.py runs its processes: monotonic time stays real.
        cmd.env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME", "+2s").env("DONT_FAKE_MONOTONIC", "1");
    }
    if let Some(mode) = timestamping {
        cmd.env("XLA_DIST_PROF_TIMESTAMPING", mode);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary: Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str::<Value>(l).ok().filter(|v| v.get("summary").is_some()))
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    (summary["summary"]["timestamps"].clone(), stderr)
}

#[test]
fn a_node_under_libfaketime_chooses_user_stamps_and_says_why() {
    // Control: without libfaketime this machine stamps in the kernel.
    let (plain, _) = one_node(false, None);
    assert_eq!(plain["mode"], "kernel", "{plain}");

    let (faked, stderr) = one_node(true, None);
    assert_eq!(faked["mode"], "user", "{faked}");
    let note = faked["note"].as_str().unwrap_or_default();
    assert!(note.contains("libfaketime") && note.contains(LIBFAKETIME) && note.contains("cannot see a faked clock"), "{note}");
    assert!(stderr.contains("timestamps: user") && stderr.contains("libfaketime"), "{stderr}");
}

#[test]
fn kernel_stamps_asked_for_under_libfaketime_are_kept_with_a_warning_naming_the_fix() {
    let (t, stderr) = one_node(true, Some("kernel"));
    assert_eq!(t["mode"], "kernel", "{t}");
    let note = t["note"].as_str().unwrap_or_default();
    assert!(note.contains("see the real clock") && note.contains("set `timestamping` to `user`"), "{note}");
    assert!(stderr.contains("WARN") && stderr.contains("see the real clock"), "{stderr}");
}
