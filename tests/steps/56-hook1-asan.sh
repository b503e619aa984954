#!/usr/bin/env bash
# Hook 1 (cc_hooks/kv_adapter.cc with cc_hooks/client_guard.h) on the real bridge staticlib,
# compiled with AddressSanitizer: tests/cpp/hook1_asan_test.cc. A client destroyed during a
# trace leaves no reference to its store in distprof and no call into freed memory; CUDA,
# SYCL and mock-NCCL clients are left alone; a control scenario proves ASan catches a
# dangling call in this build. XLA's types are the test stand-ins (tests/cpp/standin).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# The staticlib XLA links (no `cc-hooks` feature): the hooks are compiled here, as Bazel would.
(cd "$root" && cargo build -q -p distprof-ffi --lib)
g++ -std=c++17 -g -O1 -fsanitize=address -fno-omit-frame-pointer -Wall -Werror \
  -I "$root" -I "$target_dir/cxxbridge" -I "$root/tests/cpp/standin" \
  "$root/tests/cpp/hook1_asan_test.cc" "$root/cc_hooks/kv_adapter.cc" "$root/cc_hooks/plugin_hooks.cc" \
  "$target_dir/debug/libdistprof_ffi.a" -lpthread -ldl -lm -lrt -o "$work/hook1_asan_test"
# detect_leaks=0: the plugin's process-wide state and threads live until exit by design.
ASAN_OPTIONS=detect_leaks=0 "$work/hook1_asan_test"
echo "56-hook1-asan: ok"
