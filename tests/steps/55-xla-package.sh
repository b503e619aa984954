#!/usr/bin/env bash
# `distprof xla package` output built as @distributed_profiling by a workspace named `xla`
# (tests/fixtures/xla-package-consumer) whose targets carry XLA's labels over real libraries:
# Debian's absl (libabsl-dev) and protobuf (protoc, libprotobuf-dev). The hook targets compile
# with their own dependencies only (no stand-in header is on any include path), link the
# staticlib of `cargo build -p distprof-ffi --lib`, and the program then runs two nodes'
# GPU clients over an in-memory store of XLA's KeyValueStoreInterface shape (the KV adapter
# runs the real rendezvous; every distinct call it made is printed), one profile, and finds
# the exported planes in the XSpace.
#
# XLA's two headers the package builds against, `key_value_store_interface.h` and
# `xplane.proto`:
#   DISTPROF_XLA_GIT_DIR=<ROCm/xla git dir> (the fetch of github:ROCm/xla): the real ones of
#       each ref in DISTPROF_XLA_REFS (default: upstream-jax-v0.5.3 and rocm-jaxlib-v0.7.1,
#       the newest whose store header needs only absl; from jax 0.9 it includes the
#       coordination agent, whose closure Debian's absl cannot build), one build per ref;
#   unset (CI, which has no XLA history): the test stand-in of the store interface
#       (tests/cpp/standin, jax 0.5-0.8's shape) and the fixture's one-field XSpace proto.
# The step says which it used.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
fixture="$root/tests/fixtures/xla-package-consumer"
command -v bazel >/dev/null || { echo "bazel missing: run tests/setup/10-bazel.sh" >&2; exit 1; }
for need in /usr/include/absl/status/status.h /usr/bin/protoc /usr/include/google/protobuf/message.h; do
  [ -e "$need" ] || { echo "55-xla-package: $need missing: apt-get install libabsl-dev protobuf-compiler libprotobuf-dev" >&2; exit 1; }
done
work="$(mktemp -d)"
cleanup() {
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "55-xla-package: $*" >&2; exit 1; }

mkdir -p "$work/xla"
(cd "$fixture" && tar --exclude=README.md -cf - .) | tar -xf - -C "$work/xla"
cp -r "$root/tests/fixtures/xla-wiring-stubs/rules_cc" "$work/rules_cc"
find "$work" -name '*.fixture' | while read -r f; do mv "$f" "${f%.fixture}"; done

# The staticlib without the CLI's `cc-hooks` feature: Bazel compiles the hooks from the package.
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
(cd "$root" && cargo build -q -p distprof-ffi --lib)
(cd "$root" && cargo build -q -p distprof-cli)
"$target_dir/debug/distprof" xla package --out "$work/pkg" \
  --staticlib "$target_dir/debug/libdistprof_ffi.a" --cxxbridge "$target_dir/cxxbridge" >/dev/null
grep -q '"@xla//xla/pjrt/distributed:key_value_store_interface"' "$work/pkg/BUILD.bazel" || fail "the package does not name XLA's store target"
if grep -rq standin "$work/pkg"; then fail "the package refers to a stand-in"; fi
# A second package into the same directory is refused (the repository is written whole).
if "$target_dir/debug/distprof" xla package --out "$work/pkg" --staticlib "$target_dir/debug/libdistprof_ffi.a" \
     --cxxbridge "$target_dir/cxxbridge" >/dev/null 2>"$work/again.err"; then
  fail "package wrote into a non-empty directory"
fi
grep -q "not empty" "$work/again.err" || { cat "$work/again.err" >&2; fail "the refusal does not say why"; }

# XLA's two headers for one build: the store interface as this workspace's own target's
# header, the XSpace proto as @tsl's.
use_headers() { # label kv_header xplane_proto
  cp "$2" "$work/xla/xla/pjrt/distributed/key_value_store_interface.h"
  cp "$3" "$work/xla/tsl/tsl/profiler/protobuf/xplane.proto"
  echo "55-xla-package: building against $1"
}

build_and_run() { # label
  # C++17, as XLA's .bazelrc builds (Bazel 4's default toolchain says -std=c++0x).
  (cd "$work/xla" && bazel --batch --output_user_root="$work/bazel-root" build --nosandbox_debug \
    --cxxopt=-std=c++17 --host_cxxopt=-std=c++17 \
    --override_repository=rules_cc="$work/rules_cc" \
    --override_repository=rules_java=/usr/share/bazel/rules/java \
    --override_repository=distributed_profiling="$work/pkg" \
    //:main @distributed_profiling//:pjrt_hooks @distributed_profiling//:profiler_hooks) \
    >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; fail "$1: the packaged repository did not build as @distributed_profiling"; }
  out="$(XLA_ENABLE_DISTRIBUTED_PROFILING=1 XLA_DIST_PROF_OUTPUT_DIR="$work/out" XLA_DIST_PROF_INTERFACE=lo \
    "$work/xla/bazel-bin/main" 2>"$work/run.log")" || { cat "$work/run.log" >&2; echo "$out" >&2; fail "$1: the hooks did not run"; }
  echo "$out" | grep '^kv ' | sed 's/^/  /'
  [ "$(echo "$out" | tail -1)" = "enabled=1 agreed=2 planes=2" ] || { cat "$work/run.log" >&2; echo "$out" >&2; fail "$1: unexpected summary: $(echo "$out" | tail -1)"; }
  # Both nodes published through Set and read the other's entries back through the adapter.
  for node in 0 1; do
    echo "$out" | grep -q "^kv node $node: Set distprof/" || fail "$1: node $node never called Set"
    echo "$out" | grep -qE "^kv node $node: (Get|TryGet) distprof/" || fail "$1: node $node never read the store"
  done
  rm -rf "$work/out"
}

if [ -n "${DISTPROF_XLA_GIT_DIR:-}" ]; then
  git --git-dir="$DISTPROF_XLA_GIT_DIR" rev-parse -q --verify HEAD >/dev/null ||
    fail "DISTPROF_XLA_GIT_DIR=$DISTPROF_XLA_GIT_DIR is not a git directory (the fetch of github:ROCm/xla)"
  refs=(${DISTPROF_XLA_REFS:-upstream-jax-v0.5.3 rocm-jaxlib-v0.7.1})
  for ref in "${refs[@]}"; do
    mkdir -p "$work/real/$ref"
    for f in xla/pjrt/distributed/key_value_store_interface.h third_party/tsl/tsl/profiler/protobuf/xplane.proto; do
      git --git-dir="$DISTPROF_XLA_GIT_DIR" show "$ref:$f" >"$work/real/$ref/$(basename "$f")" ||
        fail "$ref: no $f in $DISTPROF_XLA_GIT_DIR"
    done
    if grep -q '#include "xla/' "$work/real/$ref/key_value_store_interface.h"; then
      fail "$ref: its key_value_store_interface.h includes XLA headers beyond absl (jax >= 0.9: the coordination agent); this step builds only a self-contained one (patches/xla/kv_adapter_check.sh compiles the adapter against those)"
    fi
    use_headers "the real key_value_store_interface.h and xplane.proto of $ref ($(git --git-dir="$DISTPROF_XLA_GIT_DIR" rev-parse --short=10 "$ref^{commit}"))" \
      "$work/real/$ref/key_value_store_interface.h" "$work/real/$ref/xplane.proto"
    build_and_run "$ref"
  done
  echo "55-xla-package: ok (@distributed_profiling from \`distprof xla package\` built against Debian's absl and protobuf and the real store interface and xplane.proto of ${refs[*]}; two nodes agreed through the KV adapter, 2 planes exported)"
else
  use_headers "the test stand-in key_value_store_interface.h (jax 0.5-0.8 shape) and the fixture's one-field xplane.proto: set DISTPROF_XLA_GIT_DIR for XLA's real ones" \
    "$root/tests/cpp/standin/xla/pjrt/distributed/key_value_store_interface.h" "$fixture/tsl/tsl/profiler/protobuf/xplane.proto"
  build_and_run "stand-in headers"
  echo "55-xla-package: ok (@distributed_profiling from \`distprof xla package\` built against Debian's absl and protobuf, stand-in store interface; two nodes agreed through the KV adapter, 2 planes exported)"
fi
