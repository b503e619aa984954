//! The patch tool on a synthetic XLA tree: files written for these tests that hold only the
//! anchor lines distprof looks for, in made-up surroundings (no XLA code).

use distprof_xla::{apply, check, diff, PatchError, Release, ReleaseError};
use std::fs;
use std::path::{Path, PathBuf};

const CLIENT: &str = "xla/pjrt/gpu/se_gpu_pjrt_client.cc";
const TRACER: &str = "xla/backends/profiler/gpu/device_tracer_rocm.cc";

const CLIENT_SRC: &str = r#"// Synthetic client: only the anchor lines matter.
#include "synthetic/client.h"

#include <memory>

#if defined(SYNTHETIC_GPU) || \
    defined(OTHER_GPU)
#include "synthetic/gpu.h"
#endif  // SYNTHETIC_GPU

int MakeClient(const GpuClientOptions& options) {
  auto pjrt_platform_name = PlatformName();
  std::shared_ptr<KeyValueStoreInterface> kv_store = options.store;
  TF_RET_CHECK(options.num_nodes == 1 || kv_store != nullptr);
  if (kv_store == nullptr) {
    kv_store = MakeLocalStore();
  }
  SOME_ASSIGN_MACRO(
      Pair pair,
      BuildDistributedDevices(options.node_id,
                              options.num_nodes, kv_store));
  SOME_ASSIGN_MACRO(auto topology, TopologyThatCanFail(pair));
  return MakeStreamExecutorGpuClient(
      pair, topology);
}
"#;

const CLIENT_PATCHED: &str = r#"// Synthetic client: only the anchor lines matter.
#include "synthetic/client.h"

#include <memory>

#if defined(SYNTHETIC_GPU) || \
    defined(OTHER_GPU)
#include "synthetic/gpu.h"
#endif  // SYNTHETIC_GPU

#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING
#include "cc_hooks/distprof_hooks.h"
#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING

int MakeClient(const GpuClientOptions& options) {
  auto pjrt_platform_name = PlatformName();
  std::shared_ptr<KeyValueStoreInterface> kv_store = options.store;
  TF_RET_CHECK(options.num_nodes == 1 || kv_store != nullptr);
  if (kv_store == nullptr) {
    kv_store = MakeLocalStore();
  }
  SOME_ASSIGN_MACRO(
      Pair pair,
      BuildDistributedDevices(options.node_id,
                              options.num_nodes, kv_store));
  SOME_ASSIGN_MACRO(auto topology, TopologyThatCanFail(pair));
#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING
  distprof::OnGpuClientCreated(pjrt_platform_name, options.enable_mock_nccl,
                               options.node_id, options.num_nodes, kv_store);
#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING
  return MakeStreamExecutorGpuClient(
      pair, topology);
}
"#;

const TRACER_SRC: &str = r#"#include <cstdint>

#include "synthetic/tracer.h"

absl::Status Tracer::DoStart() {
  uint64_t start_gputime_ns = RocmTracer::GetTimestamp();
  uint64_t start_walltime_ns = NowNanos();
  rocm_trace_collector_ = CreateRocmCollector(
      options, start_walltime_ns, start_gputime_ns);
  return Enable();
}
void Tracer::Start() {
  if (ok) {
    profiling_state_ = State::kStartedOk;
  }
}
void Tracer::Stop() {
  rocm_tracer_->Disable();
}
void Tracer::Collect(XSpace* space) {
  if (rocm_trace_collector_) rocm_trace_collector_->Export(space);
}
"#;

/// Synthetic declarations of what the hooks pass (checked by the tool before it writes a call).
const OPTIONS_H: (&str, &str) =
    ("xla/pjrt/plugin/xla_gpu/xla_gpu_client_options.h", "struct GpuClientOptions {\n  int node_id = 0;\n  int num_nodes = 1;\n  bool enable_mock_nccl = false;\n};\n");
const TRACER_H: (&str, &str) =
    ("xla/backends/profiler/gpu/rocm_tracer.h", "class RocmTracer {\n public:\n  static uint64_t GetTimestamp();\n};\n");

fn build_file(src: &str) -> String {
    format!(
        r#"# Synthetic package.
load("//synthetic:defs.bzl", "rule_a")
load("//synthetic:more.bzl", "rule_b")

cc_library(
    name = "other",
    srcs = ["other.cc"],
    deps = [":x"],
)

cc_library(
    name = "owner",
    srcs = ["{src}"],
    hdrs = ["owner.h"],
    deps = [
        ":dep",
    ],
)
"#
    )
}

const WORKSPACE2_SRC: &str = r#"load("//third_party:repo.bzl", "tf_http_archive", "tf_mirror_urls")
load("//third_party/a:workspace.bzl", a = "repo")

def _initialize_third_party():
    """ Synthetic docstring. """
    a()
"#;

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    fs::read_to_string(root.join(rel)).unwrap()
}

/// A clean synthetic tree.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, CLIENT, CLIENT_SRC);
    write(root, TRACER, TRACER_SRC);
    for (rel, text) in [OPTIONS_H, TRACER_H] {
        write(root, rel, text);
    }
    write(root, "xla/pjrt/gpu/BUILD", &build_file("se_gpu_pjrt_client.cc"));
    write(root, "xla/backends/profiler/gpu/BUILD", &build_file("device_tracer_rocm.cc"));
    write(root, "workspace2.bzl", WORKSPACE2_SRC);
    dir
}

/// Every file of the tree, for byte-exact before/after comparisons.
fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push((p.clone(), fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

#[test]
fn apply_inserts_each_hook_at_its_anchor() {
    let dir = tree();
    let root = dir.path();
    let report = apply(root, &Release::default()).unwrap();
    assert_eq!(read(root, CLIENT), CLIENT_PATCHED);

    let tracer = read(root, TRACER);
    let lines: Vec<&str> = tracer.lines().collect();
    let after = |anchor: &str| lines[lines.iter().position(|l| l.contains(anchor)).unwrap() + 2];
    assert_eq!(after("kStartedOk;"), "    distprof::OnTraceStart(&RocmTracer::GetTimestamp);");
    assert_eq!(after("->Disable();"), "  distprof::OnTraceStop();");
    assert_eq!(after("->Export(space);"), "  distprof::OnTraceExport(space);");
    // The include follows the include block, set off by a blank line, before the code.
    assert_eq!(lines[3], "");
    assert_eq!(lines[4], "#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING");
    assert_eq!(lines[5], "#include \"cc_hooks/distprof_hooks.h\"");
    assert_eq!(lines[6], "#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING");
    assert_eq!(lines[7], "");
    // Hook 3 after the whole collector statement (its arguments on the next line), passing the
    // two locals the tool found declared before it in the same function.
    assert!(tracer.contains(
        "      options, start_walltime_ns, start_gputime_ns);\n#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING\n  distprof::OnTraceClockPair(start_walltime_ns, start_gputime_ns);\n#endif"
    ), "{tracer}");
    let site = report.sites.iter().find(|s| s.call.starts_with("distprof::OnTraceClockPair(")).unwrap();
    let at: Vec<(&str, usize)> = site.declared.iter().map(|d| (d.passes, d.line)).collect();
    assert_eq!(at, vec![("start_walltime_ns", 7), ("start_gputime_ns", 6)]);

    // Budget: 8 + 16 lines in the two core files.
    let core: Vec<usize> = report.files.iter().filter(|f| f.core).map(|f| f.added_lines).collect();
    assert_eq!(core, vec![8, 16]);
    assert_eq!(report.core_added_lines(), 24);
    assert!(report.core_added_lines() <= distprof_xla::CORE_ADDED_LINES_BUDGET);

    // BUILD wiring: the load first, local_defines after srcs, deps of the owning rule only.
    let build = read(root, "xla/backends/profiler/gpu/BUILD");
    assert!(build.starts_with("# Synthetic package.\nload(\"//third_party/distributed_profiling:build_defs.bzl\""));
    assert!(build.contains(
        "    srcs = [\"device_tracer_rocm.cc\"],\n    local_defines = distributed_profiling_defines(),\n"
    ));
    assert!(build.contains("    deps = distributed_profiling_deps(\"profiler_hooks\") + [\n        \":dep\",\n"));
    assert!(build.contains("    deps = [\":x\"],\n"), "the other rule is untouched");
    let ws = read(root, "workspace2.bzl");
    assert!(ws.contains("\"\"\" Synthetic docstring. \"\"\"\n    distributed_profiling()\n    a()\n"));
    assert!(read(root, "third_party/distributed_profiling/BUILD.bazel").contains("\"enable_distributed_profiling\": \"true\""));
}

#[test]
fn apply_twice_equals_apply_once_and_check_passes() {
    let dir = tree();
    let root = dir.path();
    let before = snapshot(root);
    assert!(apply(root, &Release::default()).unwrap().changed());
    let once = snapshot(root);
    assert_ne!(before, once);
    let again = apply(root, &Release::default()).unwrap();
    assert!(!again.changed(), "second apply made changes: {again:?}");
    assert_eq!(snapshot(root), once);
    let checked = check(root, &Release::default()).unwrap();
    assert_eq!(checked.core_added_lines(), 24);
}

#[test]
fn check_lists_every_missing_edit_of_a_clean_tree() {
    let dir = tree();
    let errors = check(dir.path(), &Release::default()).unwrap_err().0;
    let not_applied = errors.iter().filter(|e| matches!(e, PatchError::NotApplied { .. })).count();
    let generated = errors.iter().filter(|e| matches!(e, PatchError::FileMissing { .. })).count();
    // Edits: client 2, tracer 5, two BUILD files 3 each, workspace2 2.
    assert_eq!(not_applied, 2 + 5 + 6 + 2);
    // The three files of third_party/distributed_profiling/.
    assert_eq!(generated, 3);
}

#[test]
fn check_detects_a_hook_removed_by_hand() {
    let dir = tree();
    let root = dir.path();
    apply(root, &Release::default()).unwrap();
    let tracer = read(root, TRACER).replace("  distprof::OnTraceStop();\n", "");
    write(root, TRACER, &tracer);
    let errors = check(root, &Release::default()).unwrap_err().0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(&errors[0], PatchError::NotApplied { file, anchor, .. }
        if file == Path::new(TRACER) && anchor == "rocm_tracer_->Disable();"));
}

#[test]
fn missing_anchor_is_named_with_its_file_and_nothing_is_written() {
    let dir = tree();
    let root = dir.path();
    write(root, TRACER, &TRACER_SRC.replace("  rocm_tracer_->Disable();\n", "  rocm_tracer_->Shutdown();\n"));
    let before = snapshot(root);
    let errors = apply(root, &Release::default()).unwrap_err();
    assert_eq!(
        errors.0,
        vec![PatchError::AnchorMissing {
            file: PathBuf::from(TRACER),
            anchor: "rocm_tracer_->Disable();".into(),
            purpose: "hook 2b: profiling stopped, collector flushed",
        }]
    );
    let message = errors.to_string();
    assert!(message.contains(TRACER) && message.contains("`rocm_tracer_->Disable();`"), "{message}");
    assert_eq!(snapshot(root), before, "a failed apply must not touch the tree");
}

#[test]
fn missing_return_after_the_anchor_is_named() {
    let dir = tree();
    let root = dir.path();
    // A client handed out some other way: hook 1 has no place after every fallible step.
    write(root, CLIENT, &CLIENT_SRC.replace("return MakeStreamExecutorGpuClient(", "auto client = MakeStreamExecutorGpuClient("));
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(&errors[0], PatchError::AnchorMissing { file, anchor, .. }
        if file == Path::new(CLIENT) && anchor == "return ...StreamExecutorGpuClient"), "{errors:?}");
}

#[test]
fn the_include_goes_after_a_file_wrapped_whole_in_a_platform_if() {
    // XLA up to 0.4.38 wraps the whole tracer file in `#if TENSORFLOW_USE_ROCM`: the include
    // block is one level in, and the include goes at its end, inside the `#if`.
    let dir = tree();
    let root = dir.path();
    let wrapped = format!("#if SYNTHETIC_ROCM\n\n{TRACER_SRC}\n#endif  // SYNTHETIC_ROCM\n");
    write(root, TRACER, &wrapped);
    apply(root, &Release::default()).unwrap();
    let lines: Vec<String> = read(root, TRACER).lines().map(str::to_owned).collect();
    assert_eq!(
        lines[..9],
        [
            "#if SYNTHETIC_ROCM",
            "",
            "#include <cstdint>",
            "",
            "#include \"synthetic/tracer.h\"",
            "",
            "#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING",
            "#include \"cc_hooks/distprof_hooks.h\"",
            "#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING",
        ]
    );
}

#[test]
fn ambiguous_anchor_is_refused_with_the_matching_lines() {
    let dir = tree();
    let root = dir.path();
    let doubled = TRACER_SRC.replace(
        "void Tracer::Stop() {",
        "void Tracer::Restart() {\n  profiling_state_ = State::kStartedOk;\n}\nvoid Tracer::Stop() {",
    );
    write(root, TRACER, &doubled);
    let before = snapshot(root);
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(
        errors,
        vec![PatchError::AnchorAmbiguous {
            file: PathBuf::from(TRACER),
            anchor: "profiling_state_ = State::kStartedOk;".into(),
            lines: vec![14, 18],
            purpose: "hook 2a: profiling started (success only)",
        }]
    );
    assert_eq!(snapshot(root), before);
}

#[test]
fn missing_file_and_several_problems_are_reported_together() {
    let dir = tree();
    let root = dir.path();
    fs::remove_file(root.join(CLIENT)).unwrap();
    write(root, TRACER, &TRACER_SRC.replace("= CreateRocmCollector(", "= MakeCollector("));
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(&errors[0], PatchError::FileMissing { file, .. } if file == Path::new(CLIENT)));
    assert!(matches!(&errors[1], PatchError::AnchorMissing { file, anchor, .. }
        if file == Path::new(TRACER) && anchor == "rocm_trace_collector_ = CreateRocmCollector("));
}

/// Hook 3 passes two locals of `DoStart()`: a version reading the pair in another function (or
/// under other names) is refused by name, not patched into code that would not compile.
#[test]
fn the_clock_pair_must_be_declared_in_the_function_of_the_call() {
    let dir = tree();
    let root = dir.path();
    let moved = TRACER_SRC.replace(
        "absl::Status Tracer::DoStart() {\n  uint64_t start_gputime_ns = RocmTracer::GetTimestamp();\n",
        "uint64_t start_gputime_ns = 0;\nabsl::Status Tracer::DoStart() {\n",
    );
    write(root, TRACER, &moved);
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(&errors[0], PatchError::NoDeclaredCallForm { file, purpose, tried }
        if file == Path::new(TRACER) && purpose.starts_with("hook 3")
            && tried.contains("`uint64_t start_gputime_ns` in the function at")), "{errors:?}");
}

#[test]
fn a_hook_whose_names_no_version_form_declares_is_refused_by_name() {
    let dir = tree();
    let root = dir.path();
    // The pair's local renamed, and the clock reader gone: no form fits either hook.
    write(root, TRACER, &TRACER_SRC.replace("uint64_t start_walltime_ns", "int64_t start_walltime_ns"));
    write(root, TRACER_H.0, "class RocmTracer {\n public:\n  static uint64_t ReadClock();\n};\n");
    let before = snapshot(root);
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(matches!(&errors[0], PatchError::NoDeclaredCallForm { file, tried, .. }
        if file == Path::new(TRACER) && tried.contains("`uint64_t start_walltime_ns`")));
    assert!(matches!(&errors[1], PatchError::NoDeclaredCallForm { file, tried, .. }
        if file == Path::new(TRACER) && tried.contains("RocmTracer::GetTimestamp") && tried.contains("class RocmTracer")));
    assert!(errors[1].to_string().contains("add a call form"), "{}", errors[1]);
    assert_eq!(snapshot(root), before, "nothing written");
}

/// A hook call edited by hand into names the version does not declare would not compile;
/// check names the line.
#[test]
fn check_refuses_a_hook_call_in_an_undeclared_form() {
    let dir = tree();
    let root = dir.path();
    apply(root, &Release::default()).unwrap();
    let patched = read(root, TRACER).replace("OnTraceClockPair(start_walltime_ns, start_gputime_ns);", "OnTraceClockPair(walltime, gputime);");
    write(root, TRACER, &patched);
    let errors = check(root, &Release::default()).unwrap_err().0;
    assert!(errors.iter().any(|e| matches!(e, PatchError::UndeclaredHookCall { file, found, expected, .. }
        if file == Path::new(TRACER) && found == "distprof::OnTraceClockPair(walltime, gputime);"
            && expected == "distprof::OnTraceClockPair(start_walltime_ns, start_gputime_ns);")), "{errors:?}");
}

/// A tree an older distprof patched still calls the removed agent hook: apply and check name
/// the line and the fix instead of leaving a call to a function the package no longer has.
#[test]
fn the_removed_agent_hook_left_in_a_tree_is_refused_by_name() {
    let dir = tree();
    let root = dir.path();
    let agent = "xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc";
    write(root, agent, "void Agent::Connect() {\n  LOG(INFO) << \"connected\";\n#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING\n  distprof::OnAgentConnected(task_.task_id());\n#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING\n}\n");
    let before = snapshot(root);
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(
        errors,
        vec![PatchError::LeftoverHook {
            file: PathBuf::from(agent),
            line: 3,
            found: "#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING".into()
        }]
    );
    assert!(errors[0].to_string().contains("git checkout --"), "{}", errors[0]);
    assert_eq!(snapshot(root), before, "nothing written");
    // An unpatched agent is none of distprof's business.
    write(root, agent, "void Agent::Connect() {}\n");
    apply(root, &Release::default()).unwrap();
}

#[test]
fn release_values_land_in_the_repository_declaration() {
    let dir = tree();
    let root = dir.path();
    let release =
        Release::archive("https://example.org/distprof-xla-9.9.9.tar.gz", &"AB".repeat(32), "distprof-xla-9.9.9").unwrap();
    apply(root, &release).unwrap();
    let ws = read(root, "third_party/distributed_profiling/workspace.bzl");
    assert!(ws.contains(&format!("sha256 = \"{}\"", "ab".repeat(32))));
    assert!(ws.contains("url = \"https://example.org/distprof-xla-9.9.9.tar.gz\""), "{ws}");
    // A tree patched with other release values fails check on exactly that file.
    let errors = check(root, &Release::default()).unwrap_err().0;
    assert_eq!(
        errors,
        vec![PatchError::GeneratedDiffers { file: PathBuf::from("third_party/distributed_profiling/workspace.bzl") }]
    );
}

#[test]
fn without_a_release_the_declaration_names_no_source_and_the_rule_says_what_to_pass() {
    // A shipped series is made this way: no archive is published, so no placeholder URL or
    // all-zero SHA-256 that --repo_env=DISTRIBUTED_PROFILING=1 would try to download.
    let dir = tree();
    let root = dir.path();
    apply(root, &Release::default()).unwrap();
    let ws = read(root, "third_party/distributed_profiling/workspace.bzl");
    assert!(ws.contains("\n_SOURCE = struct(path = None, url = None, sha256 = None, strip_prefix = None)\n"), "{ws}");
    assert!(!ws.contains("0000000000") && !ws.contains("releases/download"), "{ws}");
    assert!(ws.contains("        else:\n            _standin(ctx, _NO_SOURCE)\n"), "{ws}");
    assert!(ws.contains("pass --repo_env=DISTRIBUTED_PROFILING_PATH=<the directory distprof xla package wrote>"), "{ws}");
}

#[test]
fn diff_series_applied_by_git_equals_the_tool_result() {
    let by_tool = tree();
    apply(by_tool.path(), &Release::default()).unwrap();

    let by_git = tree();
    let series = diff(by_git.path(), &Release::default()).unwrap();
    let core: Vec<usize> = series.core_added.iter().map(|(_, n)| *n).collect();
    assert_eq!(core, vec![8, 16]);
    let out = tempfile::tempdir().unwrap();
    distprof_xla::write_series(&series, out.path()).unwrap();
    let patches: Vec<PathBuf> = series.patches.iter().map(|p| out.path().join(&p.name)).collect();
    let status = std::process::Command::new("git")
        .arg("apply")
        .args(&patches)
        .current_dir(by_git.path())
        .status()
        .expect("git must be installed to run this test");
    assert!(status.success());
    let strip = |root: &Path, snap: Vec<(PathBuf, String)>| -> Vec<(PathBuf, String)> {
        snap.into_iter().map(|(p, c)| (p.strip_prefix(root).unwrap().to_owned(), c)).collect()
    };
    assert_eq!(strip(by_git.path(), snapshot(by_git.path())), strip(by_tool.path(), snapshot(by_tool.path())));

    // On the patched tree, diff refuses instead of producing an empty series.
    let errors = diff(by_tool.path(), &Release::default()).unwrap_err().0;
    assert!(errors.iter().all(|e| matches!(e, PatchError::AlreadyPatched { .. })));
    assert_eq!(errors.len(), 5 + 3);
}

#[test]
fn older_owner_rule_is_found_by_its_fallback_anchor() {
    // Before XLA 0.7.2 the ROCm tracer was one source of a shared `device_tracer` rule.
    let dir = tree();
    let root = dir.path();
    let older = "load(\"//synthetic:defs.bzl\", \"gpu_library\")\n\ngpu_library(\n    name = \"device_tracer\",\n    srcs = shared_tracer_srcs(),\n    deps = [\n        \":dep\",\n    ],\n)\n";
    write(root, "xla/backends/profiler/gpu/BUILD", older);
    apply(root, &Release::default()).unwrap();
    let build = read(root, "xla/backends/profiler/gpu/BUILD");
    assert!(build.contains(
        "    name = \"device_tracer\",\n    local_defines = distributed_profiling_defines(),\n    srcs = shared_tracer_srcs(),\n    deps = distributed_profiling_deps(\"profiler_hooks\") + [\n"
    ), "{build}");
    assert!(!apply(root, &Release::default()).unwrap().changed());

    // With neither spelling present, the message names both.
    write(root, "xla/backends/profiler/gpu/BUILD", "load(\"//x:y.bzl\", \"z\")\n");
    let message = apply(root, &Release::default()).unwrap_err().to_string();
    assert!(message.contains("srcs = [\"device_tracer_rocm.cc\"],") && message.contains("name = \"device_tracer\","), "{message}");
}

#[test]
fn a_missing_rule_anchor_is_reported_once() {
    let dir = tree();
    let root = dir.path();
    write(root, "xla/pjrt/gpu/BUILD", &build_file("renamed_client.cc"));
    let errors = apply(root, &Release::default()).unwrap_err().0;
    assert_eq!(
        errors,
        vec![PatchError::AnchorMissing {
            file: PathBuf::from("xla/pjrt/gpu/BUILD"),
            anchor: "srcs = [\"se_gpu_pjrt_client.cc\"],".into(),
            purpose: "the hook macro on the owning target",
        }]
    );
}

#[test]
fn release_values_that_would_break_xla_or_starlark_are_refused_by_name() {
    let sha = "ab".repeat(32);
    assert_eq!(
        Release::archive("http://example.org/a.tar.gz", &sha, ""),
        Err(ReleaseError::NotHttps { url: "http://example.org/a.tar.gz".into() })
    );
    assert!(Release::archive("file:///tmp/a.tar.gz", &sha, "").unwrap_err().to_string().contains("tf_mirror_urls"));
    assert_eq!(
        Release::archive("https://example.org/a.tar.gz", "abc", ""),
        Err(ReleaseError::BadChecksum { sha256: "abc".into() })
    );
    assert_eq!(
        Release::archive("https://example.org/a.tar.gz", &"0".repeat(64), ""),
        Err(ReleaseError::PlaceholderChecksum)
    );
    assert!(matches!(
        Release::archive("https://example.org/a\n.tar.gz", &sha, ""),
        Err(ReleaseError::ControlCharacter { .. })
    ));
    assert!(matches!(Release::local(Path::new("relative/dir")), Err(ReleaseError::LocalDir { .. })));
}

#[test]
fn quotes_and_backslashes_are_escaped_in_the_written_starlark() {
    let dir = tree();
    let root = dir.path();
    let release = Release::archive("https://example.org/x\"y\\z.tar.gz", &"ab".repeat(32), "p\"q").unwrap();
    apply(root, &release).unwrap();
    let ws = read(root, "third_party/distributed_profiling/workspace.bzl");
    assert!(ws.contains(r#"url = "https://example.org/x\"y\\z.tar.gz","#), "{ws}");
    assert!(ws.contains(r#"strip_prefix = "p\"q")"#), "{ws}");
}

#[test]
fn a_local_directory_is_the_source_the_repository_rule_reads() {
    let dir = tree();
    let root = dir.path();
    let hooks = tempfile::tempdir().unwrap();
    let missing = Release::local(hooks.path()).unwrap_err();
    assert!(missing.to_string().contains("no BUILD.bazel"), "{missing}");
    write(hooks.path(), "BUILD.bazel", "");
    apply(root, &Release::local(hooks.path()).unwrap()).unwrap();
    let ws = read(root, "third_party/distributed_profiling/workspace.bzl");
    assert!(ws.contains(&format!("_SOURCE = struct(path = \"{}\", url = None", hooks.path().display())), "{ws}");
    // Nothing is fetched by declaring it: no http rule, and the stand-in is the default.
    assert!(!ws.contains("tf_http_archive"), "{ws}");
    assert!(ws.contains("    else:\n        _standin(ctx, _NOT_CONFIGURED)\n"), "{ws}");
}
