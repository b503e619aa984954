#!/usr/bin/env bash
# `bazel test //...` in both build modes: hooks compiled out (empty plugin; the C++ test
# program and the symbol check) and compiled in (`--define enable_distributed_profiling=true`;
# cargo builds the bridge staticlib inside a genrule, offline, from the local registry).
set -euo pipefail
cargo_home=${CARGO_HOME:-$HOME/.cargo}
cargo_bin=$(dirname "$(command -v cargo)")
# The genrule builds with --offline: make sure every locked crate is in the registry.
cargo fetch --locked --quiet

flags=(
    --config=debian
    "--action_env=CARGO_HOME=$cargo_home"
    "--action_env=PATH=$cargo_bin:/usr/local/bin:/usr/bin:/bin"
)
[ -n "${RUSTUP_HOME:-}" ] && flags+=("--action_env=RUSTUP_HOME=$RUSTUP_HOME")

status=0
echo "--- bazel test //... (hooks compiled out)"
bazel test "${flags[@]}" //... || status=1
echo "--- bazel test //... --define enable_distributed_profiling=true (hooks compiled in)"
bazel test "${flags[@]}" --define enable_distributed_profiling=true //... || status=1
# The server JVM holds ~270 MB until shut down.
bazel shutdown
exit $status
