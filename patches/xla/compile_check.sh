#!/usr/bin/env bash
# Compiles the real patched XLA files, per XLA ref, against that tree's own headers and the
# third-party headers it pins:
#   - xla/backends/profiler/gpu/device_tracer_rocm.cc (hooks 2 and 3) and
#     xla/pjrt/gpu/se_gpu_pjrt_client.cc (hook 1), patched by the shipped series of the ref
#     (patches/xla/<ref>/, with `git apply`) or else by `distprof xla apply`, each compiled as
#     the whole translation unit (`g++ -std=c++17 -fsyntax-only`, the flags XLA's ROCm build
#     defines: TENSORFLOW_USE_ROCM=1, XLA_ENABLE_DISTRIBUTED_PROFILING=1, __HIP_PLATFORM_AMD__,
#     and the default branch of any select() of defines in the file's BUILD);
#   - distprof's adapters cc_hooks/kv_adapter.cc, xspace_adapter.cc and plugin_hooks.cc, to
#     object files with -Wall -Werror (XLA's headers are system headers: our code is judged,
#     not XLA's).
# Dependencies (patches/xla/xla_deps.sh): absl, Eigen, ml_dtypes, highwayhash and farmhash at
# the commits the tree pins, protobuf's runtime at the version it pins and `protoc` of that
# same version over the tree's own `.proto` files. ROCm headers: Debian's HIP 5.2.3 first; a
# TU that needs more (rocprofiler-sdk, HIP 6 API) is compiled with ROCm 6.2.0's headers and
# its result says so.
#
# What cannot be had offline is replaced, never hidden: se_gpu_pjrt_client.cc's closure
# reaches LLVM and MLIR headers (xla/pjrt/maybe_owning_mlir_module.h, ...). llvm-project at a
# pinned commit is 8 GB and MLIR's headers include `.h.inc` files that mlir-tblgen of that
# commit generates, so when the TU stops at such a header its hook 1 call is compiled in
# hook1_call_site.cc instead: the call exactly as patched into the file, in a function whose
# parameters are the tree's real KeyValueStoreInterface and `options` with the field
# declarations the tree's GpuClientOptions has. The ref's "replaced" says so and names the
# header; "real_tu_compiled" is true only when both patched files compiled whole.
#
#   patches/xla/compile_check.sh [--json] [--xla-git DIR] [REF...]
#   patches/xla/compile_check.sh [--json] --xla-dir TREE [--ref NAME]
#
# REFs are read from --xla-git, the XLA history (github:ROCm/xla, default
# $MIRROR_DIR/ROCm+xla/repo). Without REFs: every upstream-jax tag from 0.4.38 on, main and
# the rocm-jaxlib v0.4.35, v0.7.1, v0.9.2 and v0.11.1 branches (the survey's refs from 0.4.38,
# and the oldest rocm-jaxlib branch README.md names).
# --xla-dir checks one unpatched tree instead (patched in a copy). The histories of XLA and its
# dependencies come from a session's fetch tool, which CI lacks: this check runs on demand.
# Prints one line per ref and unit; with --json the last line is one JSON object
# {"ok": bool, "refs": {REF: {"real_tu_compiled", "replaced", "ok", "units", "deps", ...}}}.
# Exit 0 when every ref is ok, 1 otherwise (each failure is printed with its first error).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
mirror="${MIRROR_DIR:-/work/.mirror}"
xla_git="$mirror/ROCm+xla/repo" xla_dir="" ref_name="" json=0
refs=()
usage="usage: compile_check.sh [--json] [--xla-git DIR] [REF...] | [--json] --xla-dir TREE [--ref NAME]"
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=1; shift ;;
    --xla-git) xla_git="${2:?--xla-git needs a git directory}"; shift 2 ;;
    --xla-dir) xla_dir="${2:?--xla-dir needs a directory}"; shift 2 ;;
    --ref) ref_name="${2:?--ref needs a name}"; shift 2 ;;
    -*) echo "compile_check.sh: unknown option $1; $usage" >&2; exit 64 ;;
    *) refs+=("$1"); shift ;;
  esac
done
die() { echo "compile_check.sh: $*" >&2; exit 1; }
command -v g++ >/dev/null || die "g++ missing: apt-get install g++"
if [ -n "$xla_dir" ]; then
  [ -f "$xla_dir/workspace2.bzl" ] || die "--xla-dir $xla_dir: no workspace2.bzl there; pass the root of an XLA tree"
  [ -n "$ref_name" ] || ref_name="$(basename "$xla_dir")"
else
  git --git-dir="$xla_git" rev-parse -q --verify main >/dev/null 2>&1 ||
    die "no XLA history at $xla_git: bring github:ROCm/xla with the fetch tool, or pass --xla-git DIR or --xla-dir TREE"
  if [ ${#refs[@]} = 0 ]; then
    mapfile -t refs < <(git --git-dir="$xla_git" tag --list 'upstream-jax-v*' | sort -V |
      awk -F'upstream-jax-v' '{split($2, v, "."); if (v[1] > 0 || v[2] > 4 || (v[2] == 4 && v[3] >= 38)) print}')
    refs+=(main rocm-jaxlib-v0.4.35 rocm-jaxlib-v0.7.1 rocm-jaxlib-v0.9.2 rocm-jaxlib-v0.11.1)
  fi
fi

distprof="${DISTPROF:-$repo_root/target/debug/distprof}"
[ -x "$distprof" ] || (cd "$repo_root" && cargo build -q -p distprof-cli)
# The cxx bridge header and rust/cxx.h, as cxx_build generates them, for the adapters.
cxxbridge="$repo_root/target/cxxbridge"
[ -f "$cxxbridge/distprof-ffi/src/lib.rs.h" ] || (cd "$repo_root" && cargo build -q -p distprof-ffi)

work="$(mktemp -d)"
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT
# shellcheck source=patches/xla/compile_unit.sh
. "$here/compile_unit.sh"

# Extracts from REF's tree what the patching and the compiles read: every header, proto,
# `.inc`, Bazel file and template, and the two directories patched (a series edits nothing
# else). A whole `git archive` needs every large test blob, which partial mirrors lack.
extract() { # ref dir
  local ref="$1" dir="$2"
  mkdir -p "$dir"
  git --git-dir="$xla_git" archive -o "$work/tree.tar" "$ref" -- xla/pjrt xla/backends/profiler third_party \
    ':(glob)*.bzl' ':(glob)**/*.h' ':(glob)**/*.proto' ':(glob)**/*.inc' ':(glob)**/*.tpl' \
    ':(glob)**/BUILD' ':(glob)**/BUILD.bazel' 2>"$work/archive.err" ||
    die "$ref: git archive from $xla_git failed: $(head -1 "$work/archive.err")"
  tar -x -f "$work/tree.tar" -C "$dir" || die "$ref: could not unpack the tree's archive"
  rm -f "$work/tree.tar"
  [ -f "$dir/workspace2.bzl" ] || die "$ref: no workspace2.bzl in the tree extracted from $xla_git"
}

# Checks one unpatched tree; writes $work/results/<name>.json and prints one line per unit.
check_tree() { # name tree commit
  local name="$1" tree="$2" commit="$3" series="" patched_by
  [ -d "$here/$name" ] && ls "$here/$name"/*.patch >/dev/null 2>&1 && series="$here/$name"
  if [ -n "$series" ]; then
    (cd "$tree" && git apply "$series"/*.patch) 2>"$work/apply.err" ||
      { record_failure "$name" "git apply of patches/xla/$name failed: $(head -1 "$work/apply.err")"; return; }
    patched_by="patches/xla/$name"
  else
    "$distprof" xla apply --xla-dir "$tree" >"$work/apply.err" 2>&1 ||
      { record_failure "$name" "distprof xla apply refused: $(grep -m1 -E '^ *- |error' "$work/apply.err" | sed 's/^ *//')"; return; }
    patched_by="distprof xla apply"
  fi
  local deps
  deps="$(bash "$here/xla_deps.sh" "$tree" 2>"$work/deps.err")" ||
    { record_failure "$name" "dependencies: $(tail -1 "$work/deps.err")"; return; }
  eval "$deps"
  compile_tree "$name" "$tree" "$commit" "$patched_by"
}

mkdir -p "$work/results"
if [ -n "$xla_dir" ]; then
  cp -r "$xla_dir" "$work/tree"
  check_tree "$ref_name" "$work/tree" unknown
else
  for ref in "${refs[@]}"; do
    commit="$(git --git-dir="$xla_git" rev-parse --short=10 "$ref^{commit}" 2>/dev/null)" ||
      { record_failure "$ref" "no such ref in $xla_git"; continue; }
    rm -rf "$work/tree"
    extract "$ref" "$work/tree"
    check_tree "$ref" "$work/tree" "$commit"
    rm -rf "$work/tree"
  done
fi

summary="$(python3 - "$work/results" <<'PY'
import json, os, sys
d = sys.argv[1]
refs = {}
for f in sorted(os.listdir(d)):
    r = json.load(open(os.path.join(d, f)))
    refs[r.pop("ref")] = r
print(json.dumps({"ok": all(r["ok"] for r in refs.values()), "refs": refs}))
PY
)"
failed="$(python3 -c 'import json,sys; print(" ".join(k for k, r in json.loads(sys.argv[1])["refs"].items() if not r["ok"]))' "$summary")"
[ -z "$failed" ] || echo "compile_check.sh: FAILED for: $failed (each ref's lines above give the first error)" >&2
[ "$json" = 0 ] || echo "$summary"
[ -z "$failed" ]
