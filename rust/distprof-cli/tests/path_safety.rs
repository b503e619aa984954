//! Paths built from input never leave the output directory, and what distprof creates has
//! ordinary permissions: `distprof merge` of traces whose host names try to escape
//! (`../../..`, `/`), run with umask 0.

use distprof_testkit::cli::distprof;
use prost::Message;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Every file and directory under `root`, with its mode.
fn walk(root: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut all = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mode = md.permissions().mode() & 0o777;
            if md.is_dir() {
                stack.push(p.clone());
            }
            all.push((p, mode, md.is_dir()));
        }
    }
    all
}

#[test]
fn host_names_from_traces_cannot_escape_and_outputs_are_not_world_writable() {
    let dir = tempfile::tempdir().unwrap();
    let gen = distprof()
        .args(["bench", "merge", "--size-mb", "1", "--nodes", "2", "--skip-baseline", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    // The host names a hostile or broken trace could carry.
    let hostile = ["../../../../../escaped-host", "/tmp/absolute-host"];
    let mut inputs = Vec::new();
    for (k, host) in hostile.iter().enumerate() {
        let p = dir.path().join(format!("in/node{k}.xplane.pb"));
        let mut space = distprof::xplane::XSpace::decode(std::fs::read(&p).unwrap().as_slice()).unwrap();
        space.hostnames = vec![host.to_string()];
        std::fs::write(&p, space.encode_to_vec()).unwrap();
        inputs.push(p);
    }
    // Nested, so that `../` x5 from the run directory would land inside `dir`, visibly.
    let out = dir.path().join("a/b/merged");
    let mut merge = distprof();
    // --force: the hostile host names do not match the planes' (a belonging error
    // otherwise); what is tested here is where the names can put files.
    merge.arg("merge").args(&inputs).arg("--out").arg(&out).arg("--force");
    // SAFETY: umask is async-signal-safe; it only narrows nothing here (0), so that the
    // modes seen are the ones distprof asks for.
    unsafe {
        merge.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let o = merge.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Nothing was written outside `out` (the inputs and the benchmark's files aside).
    for (p, _, _) in walk(dir.path()) {
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(
            !name.contains("escaped-host") || p.starts_with(&out),
            "{} is outside the output directory",
            p.display()
        );
    }
    assert!(!Path::new("/tmp/absolute-host.xplane.pb").exists());
    let written = walk(&out);
    let traces: Vec<String> = written
        .iter()
        .filter(|(p, _, _)| p.to_string_lossy().ends_with(".xplane.pb"))
        .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut sorted = traces.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec!["node0._.._.._.._.._.._escaped-host.xplane.pb", "node1._tmp_absolute-host.xplane.pb"],
        "{written:?}"
    );
    for (p, mode, is_dir) in &written {
        let want = if *is_dir { 0o755 } else { 0o644 };
        assert_eq!(*mode, want, "{} has mode {mode:o} under umask 0", p.display());
    }
}
