//! `distprof xla package`: the `@distributed_profiling` repository XLA builds the hooks from
//! (docs/upgrading-xla.md, "Where `@distributed_profiling` comes from").
//!
//! The directory holds the C++ of `cc_hooks/` (compiled into this binary, so the sources always
//! match the tool that wrote the call sites), the cxx bridge headers and the Rust staticlib of a
//! `cargo build -p distprof-ffi`, and a `BUILD.bazel` whose hook targets depend on XLA's own
//! targets by label. Those labels are the same in every surveyed version (jax 0.5.3 to main,
//! rocm-jaxlib 0.7.1/0.9.2/0.11.1): `@xla` names XLA's repository both in XLA's own build
//! (its WORKSPACE is `workspace(name = "xla")`) and in jax's, `@tsl` is the TSL copy XLA
//! vendors, `@com_google_absl` is absl in both.

use std::path::{Path, PathBuf};

/// XLA's targets the hooks compile against.
pub const KV_STORE_INTERFACE: &str = "@xla//xla/pjrt/distributed:key_value_store_interface";
pub const XSPACE_PROTO_CC: &str = "@tsl//tsl/profiler/protobuf:xplane_proto_cc";
/// The absl targets `cc_hooks/kv_adapter.cc` includes headers of (layering check: a direct
/// include needs a direct dependency).
pub const ABSL_TARGETS: [&str; 4] = [
    "@com_google_absl//absl/status",
    "@com_google_absl//absl/status:statusor",
    "@com_google_absl//absl/strings:string_view",
    "@com_google_absl//absl/time",
];

/// Where the staticlib goes inside the repository.
pub const STATICLIB: &str = "lib/libdistprof.a";

/// The C++ sources and headers, as compiled into this tool.
const CC_HOOKS: [(&str, &str); 8] = [
    ("cc_hooks/distprof_hooks.h", include_str!("../../../cc_hooks/distprof_hooks.h")),
    ("cc_hooks/distprof_test_hooks.h", include_str!("../../../cc_hooks/distprof_test_hooks.h")),
    ("cc_hooks/bridge_types.h", include_str!("../../../cc_hooks/bridge_types.h")),
    ("cc_hooks/plugin_hooks.cc", include_str!("../../../cc_hooks/plugin_hooks.cc")),
    ("cc_hooks/kv_adapter.cc", include_str!("../../../cc_hooks/kv_adapter.cc")),
    ("cc_hooks/kv_adapter.h", include_str!("../../../cc_hooks/kv_adapter.h")),
    ("cc_hooks/client_guard.h", include_str!("../../../cc_hooks/client_guard.h")),
    ("cc_hooks/xspace_adapter.cc", include_str!("../../../cc_hooks/xspace_adapter.cc")),
];

/// The cxx bridge headers a `cargo build -p distprof-ffi` generates under
/// `<target dir>/cxxbridge/`.
const CXXBRIDGE: [&str; 2] = ["distprof-ffi/src/lib.rs.h", "rust/cxx.h"];

/// What `package` could not do, naming the input and the fix.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("--staticlib {0}: no such file; build it with `cargo build --release -p distprof-ffi --lib` (target/release/libdistprof_ffi.a), with XLA's toolchain for --config=rocm (docs/upgrading-xla.md)")]
    NoStaticlib(PathBuf),
    #[error("--cxxbridge {dir}: no {file} there; pass <cargo target dir>/cxxbridge of the same `cargo build -p distprof-ffi`")]
    NoBridgeHeader { dir: PathBuf, file: &'static str },
    #[error("--out {dir}: {problem}")]
    Out { dir: PathBuf, problem: String },
}

fn quoted(labels: &[&str]) -> String {
    labels.iter().map(|l| format!("        \"{l}\",\n")).collect()
}

/// The repository's `BUILD.bazel`. Each hook target lists the hooks header in its own `hdrs`
/// and depends directly on every target whose header its sources include, so XLA's
/// `layering_check` accepts it.
pub fn build_file() -> String {
    format!(
        r#"# Written by `distprof xla package`: the @distributed_profiling repository XLA's
# `--define enable_distributed_profiling=true` build depends on (third_party/distributed_profiling/
# in the patched XLA names pjrt_hooks and profiler_hooks). Labels of XLA's own targets are the
# same in every version distprof was surveyed on (patches/xla/README.md in distprof).
package(default_visibility = ["//visibility:public"])

# The Rust runtime and cxx bridge (`cargo build --release -p distprof-ffi --lib`).
cc_import(
    name = "staticlib",
    static_library = "{STATICLIB}",
)

cc_library(
    name = "bridge",
    hdrs = [
        "cc_hooks/bridge_types.h",
        "cxxbridge/distprof-ffi/src/lib.rs.h",
        "cxxbridge/rust/cxx.h",
    ],
    includes = ["cxxbridge"],
    # Native libraries Rust's std needs (`cargo rustc -- --print native-static-libs`).
    linkopts = [
        "-lpthread",
        "-ldl",
        "-lm",
        "-lrt",
    ],
    deps = [":staticlib"],
)

# The hooks that need no XLA type.
cc_library(
    name = "core",
    srcs = ["cc_hooks/plugin_hooks.cc"],
    hdrs = [
        "cc_hooks/distprof_hooks.h",
        "cc_hooks/distprof_test_hooks.h",
    ],
    deps = [":bridge"],
)

# Hook 1 (se_gpu_pjrt_client.cc): XLA's key-value store behind the bridge.
cc_library(
    name = "pjrt_hooks",
    srcs = [
        "cc_hooks/client_guard.h",
        "cc_hooks/kv_adapter.cc",
        "cc_hooks/kv_adapter.h",
    ],
    hdrs = ["cc_hooks/distprof_hooks.h"],
    deps = [
        ":bridge",
        ":core",
        "{KV_STORE_INTERFACE}",
{absl}    ],
)

# Hooks 2 and 3 (device_tracer_rocm.cc): the distprof planes merged into XLA's XSpace.
cc_library(
    name = "profiler_hooks",
    srcs = ["cc_hooks/xspace_adapter.cc"],
    hdrs = ["cc_hooks/distprof_hooks.h"],
    deps = [
        ":bridge",
        ":core",
        "{XSPACE_PROTO_CC}",
    ],
)
"#,
        absl = quoted(&ABSL_TARGETS),
    )
}

/// Writes the repository into `out` (created; must not hold anything yet): WORKSPACE,
/// BUILD.bazel, `cc_hooks/`, `cxxbridge/` from `cxxbridge_dir` and the staticlib. Returns the
/// files written, relative to `out`.
pub fn write(out: &Path, staticlib: &Path, cxxbridge_dir: &Path) -> Result<Vec<String>, PackageError> {
    if !staticlib.is_file() {
        return Err(PackageError::NoStaticlib(staticlib.to_owned()));
    }
    for file in CXXBRIDGE {
        if !cxxbridge_dir.join(file).is_file() {
            return Err(PackageError::NoBridgeHeader { dir: cxxbridge_dir.to_owned(), file });
        }
    }
    let fail = |problem: String| PackageError::Out { dir: out.to_owned(), problem };
    if out.exists() && std::fs::read_dir(out).map_err(|e| fail(e.to_string()))?.next().is_some() {
        return Err(fail("not empty; pass a new directory (the repository is written whole)".into()));
    }
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("WORKSPACE".into(), b"workspace(name = \"distributed_profiling\")\n".to_vec()),
        ("BUILD.bazel".into(), build_file().into_bytes()),
    ];
    files.extend(CC_HOOKS.iter().map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec())));
    for file in CXXBRIDGE {
        let bytes = std::fs::read(cxxbridge_dir.join(file)).map_err(|e| fail(format!("reading {file}: {e}")))?;
        files.push((format!("cxxbridge/{file}"), bytes));
    }
    let lib = std::fs::read(staticlib).map_err(|e| fail(format!("reading {}: {e}", staticlib.display())))?;
    files.push((STATICLIB.into(), lib));
    for (rel, bytes) in &files {
        let path = out.join(rel);
        if let Some(dir) = path.parent() {
            distprof_atomic_file::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        }
        distprof_atomic_file::write(&path, bytes).map_err(|e| fail(format!("{rel}: {e}")))?;
    }
    Ok(files.into_iter().map(|(rel, _)| rel).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_target_has_the_header_and_the_real_xla_labels() {
        let build = build_file();
        for target in ["pjrt_hooks", "profiler_hooks"] {
            let rule = &build[build.find(&format!("name = \"{target}\"")).unwrap()..];
            let rule = &rule[..rule.find("\n)\n").unwrap()];
            assert!(rule.contains("hdrs = [\"cc_hooks/distprof_hooks.h\"]"), "{rule}");
        }
        assert!(build.contains(KV_STORE_INTERFACE) && build.contains(XSPACE_PROTO_CC));
        assert!(!build.contains("standin"), "no stand-in headers in the shipped repository");
    }

    #[test]
    fn missing_inputs_are_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&dir.path().join("out"), &dir.path().join("nope.a"), dir.path()).unwrap_err();
        assert!(err.to_string().contains("cargo build --release -p distprof-ffi"), "{err}");
        std::fs::write(dir.path().join("lib.a"), b"!<arch>\n").unwrap();
        let err = write(&dir.path().join("out"), &dir.path().join("lib.a"), dir.path()).unwrap_err();
        assert!(err.to_string().contains("distprof-ffi/src/lib.rs.h"), "{err}");
    }
}
