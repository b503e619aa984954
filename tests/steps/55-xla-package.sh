#!/usr/bin/env bash
# `distprof xla package` output built as @distributed_profiling by a workspace named `xla`
# (tests/fixtures/xla-package-consumer) whose targets carry XLA's labels over real libraries:
# Debian's absl (libabsl-dev) and protobuf (protoc, libprotobuf-dev). The hook targets compile
# with their own dependencies only (no stand-in header is on any include path), link the
# staticlib of `cargo build -p distprof-ffi --lib`, and the program then runs every hook with the
# plugin enabled and finds the exported plane in the real protobuf XSpace.
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
# XLA's key-value store interface, as the header of this workspace's own target.
cp "$root/tests/cpp/standin/xla/pjrt/distributed/key_value_store_interface.h" "$work/xla/xla/pjrt/distributed/"

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

# C++17, as XLA's .bazelrc builds (Bazel 4's default toolchain says -std=c++0x).
(cd "$work/xla" && bazel --batch --output_user_root="$work/bazel-root" build --nosandbox_debug \
  --cxxopt=-std=c++17 --host_cxxopt=-std=c++17 \
  --override_repository=rules_cc="$work/rules_cc" \
  --override_repository=rules_java=/usr/share/bazel/rules/java \
  --override_repository=distributed_profiling="$work/pkg" \
  //:main @distributed_profiling//:pjrt_hooks @distributed_profiling//:profiler_hooks) \
  >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; fail "the packaged repository did not build as @distributed_profiling"; }
out="$(XLA_ENABLE_DISTRIBUTED_PROFILING=1 XLA_DIST_PROF_OUTPUT_DIR="$work/out" XLA_DIST_PROF_INTERFACE=lo \
  "$work/xla/bazel-bin/main" 2>"$work/run.log")" || { cat "$work/run.log" >&2; echo "$out" >&2; fail "the hooks did not run"; }
[ "$out" = "enabled=1 planes=1" ] || { cat "$work/run.log" >&2; fail "unexpected output: $out"; }
echo "55-xla-package: ok (@distributed_profiling from \`distprof xla package\` built against Debian's absl and protobuf; hooks ran, 1 plane exported)"
