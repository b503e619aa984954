//! `distprof xla` as a user runs it: exit codes and messages on bad input.

use distprof_testkit::cli;

fn distprof(args: &[&str]) -> (i32, String, String) {
    let out = cli::distprof().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_directory_without_workspace2_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let (code, stdout, stderr) = distprof(&["xla", "apply", "--xla-dir", path]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("--xla-dir") && stderr.contains(path) && stderr.contains("workspace2.bzl"), "{stderr}");
}

#[test]
fn check_exits_1_and_apply_2_listing_every_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workspace2.bzl"), "# empty\n").unwrap();
    let path = dir.path().to_str().unwrap();
    let (code, _, stderr) = distprof(&["xla", "check", "--xla-dir", path]);
    assert_eq!(code, 1, "{stderr}");
    let (code, _, stderr) = distprof(&["xla", "apply", "--xla-dir", path]);
    assert_eq!(code, 2);
    // Two core files and two BUILD files missing, and workspace2.bzl's two anchors.
    assert!(stderr.contains("6 problem(s)"), "{stderr}");
    assert!(stderr.contains("xla/pjrt/gpu/se_gpu_pjrt_client.cc: file not found"), "{stderr}");
    assert!(stderr.contains("anchor `def _initialize_third_party():` not found"), "{stderr}");
    // Nothing was written.
    assert!(!dir.path().join("third_party").exists());
}

#[test]
fn a_malformed_release_checksum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workspace2.bzl"), "# empty\n").unwrap();
    let (code, _, stderr) =
        distprof(&["xla", "apply", "--xla-dir", dir.path().to_str().unwrap(), "--release-url", "https://example.com/distprof.tar.gz", "--release-sha256", "abc"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("release SHA-256 \"abc\" is not 64 hex digits"), "{stderr}");
}
