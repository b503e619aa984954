//! Compiles the cxx bridge (and, with feature `cc-hooks`, the XLA-independent hooks and
//! the hook benchmark) into this crate. The staticlib Bazel links never contains the hooks:
//! Bazel compiles those itself from cc_hooks/, against XLA's headers.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let repo = crate_dir.join("../..");
    let with_hooks = std::env::var_os("CARGO_FEATURE_CC_HOOKS").is_some();

    let mut bridges = vec!["src/lib.rs"];
    if with_hooks {
        bridges.push("src/bench.rs");
    }
    let mut build = cxx_build::bridges(&bridges);
    build
        .include(&repo)
        .include(&crate_dir)
        .std("c++17")
        // As XLA compiles: proves the bridge code needs no exceptions.
        .flag("-fno-exceptions")
        // XLA compiles the hooks optimized; so do we even in debug builds, so that
        // `distprof bench hooks` from a debug CLI measures the code XLA would run.
        .opt_level(2)
        .warnings(true);
    if with_hooks {
        build
            .file(repo.join("cc_hooks/plugin_hooks.cc"))
            .file(crate_dir.join("cpp/bench_hooks.cc"))
            .file(crate_dir.join("cpp/bench_empty.cc"));
    }
    build.compile("distprof-ffi-cxx");

    for path in ["src/lib.rs", "src/bench.rs", "cpp/bench_hooks.h", "cpp/bench_hooks.cc", "cpp/bench_empty.cc"] {
        println!("cargo:rerun-if-changed={path}");
    }
    for path in [
        "cc_hooks/bridge_types.h",
        "cc_hooks/distprof_hooks.h",
        "cc_hooks/distprof_test_hooks.h",
        "cc_hooks/plugin_hooks.cc",
    ] {
        println!("cargo:rerun-if-changed={}", repo.join(path).display());
    }
}
