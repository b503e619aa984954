#!/usr/bin/env bash
# The Bazel wiring distprof writes into XLA, built for real on a synthetic XLA-shaped workspace
# (tests/fixtures/xla-wiring): `distprof xla apply`, then
#   1. without --define enable_distributed_profiling=true: builds although @distributed_profiling
#      is unreachable (never fetched), and no hook runs;
#   2. with the define and @distributed_profiling overridden by a local stand-in: every hook runs,
#      with the arguments the call sites pass;
#   3. with the define and no override: the build fails on fetching @distributed_profiling.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
fixture="$root/tests/fixtures/xla-wiring"
command -v bazel >/dev/null || { echo "bazel missing: run tests/setup/10-bazel.sh" >&2; exit 1; }
work="$(mktemp -d)"
cleanup() {
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/xla" "$work/hooks/cc_hooks"
(cd "$fixture" && tar --exclude=hooks_repo --exclude=README.md -cf - .) | tar -xf - -C "$work/xla"
cp -r "$fixture/hooks_repo/." "$work/hooks/"
cp "$root/cc_hooks/distprof_hooks.h" "$work/hooks/cc_hooks/"
cp -r "$root/tests/fixtures/xla-wiring-stubs/rules_cc" "$work/rules_cc"
# The fixtures' BUILD/WORKSPACE files carry a .fixture suffix so that a Bazel build of distprof
# itself never takes them for packages of its own.
find "$work" -name '*.fixture' | while read -r f; do mv "$f" "${f%.fixture}"; done

(cd "$root" && cargo build -q -p distprof-cli)
distprof="$root/target/debug/distprof"
"$distprof" xla apply --xla-dir "$work/xla" --release-url http://127.0.0.1:9/distprof-xla.tar.gz >/dev/null
"$distprof" xla check --xla-dir "$work/xla" --release-url http://127.0.0.1:9/distprof-xla.tar.gz >/dev/null

# --batch: no server outlives the step; a private output root keeps other Bazel users apart.
# Bazel 4.2.3 offline: rules_cc from our stub, rules_java from Debian (tests/setup/10-bazel.sh).
bz() {
  local command="$1"
  shift
  (cd "$work/xla" && bazel --batch --output_user_root="$work/bazel-root" "$command" \
    --override_repository=rules_cc="$work/rules_cc" \
    --override_repository=rules_java=/usr/share/bazel/rules/java \
    --nosandbox_debug "$@")
}

fail() { echo "50-xla-bazel-wiring: $*" >&2; exit 1; }

bz run //:main >"$work/off.txt" 2>"$work/off.log" || { cat "$work/off.log" >&2; fail "build without the define failed"; }
expected_off="client=21
log: Coordination agent has successfully connected."
[ "$(cat "$work/off.txt")" = "$expected_off" ] || { cat "$work/off.txt" >&2; fail "without the define, output differs from upstream's"; }

bz run --define enable_distributed_profiling=true \
  --override_repository=distributed_profiling="$work/hooks" //:main >"$work/on.txt" 2>"$work/on.log" \
  || { cat "$work/on.log" >&2; fail "build with the define failed"; }
expected_on="hook: OnGpuClientCreated node_id=2 num_nodes=1 kv_store=null
client=21
hook: OnTraceStart clock=42
hook: OnTraceStop
hook: OnTraceExport space=set
log: Coordination agent has successfully connected.
hook: OnAgentConnected task_id=3"
[ "$(cat "$work/on.txt")" = "$expected_on" ] || { diff <(echo "$expected_on") "$work/on.txt" >&2 || true; fail "with the define, the hooks did not run as expected"; }

if bz build --define enable_distributed_profiling=true //:main >"$work/fetch.log" 2>&1; then
  fail "with the define and no release reachable, the build should fail"
fi
grep -q "distributed_profiling" "$work/fetch.log" || { cat "$work/fetch.log" >&2; fail "the fetch failure does not name @distributed_profiling"; }
echo "50-xla-bazel-wiring: ok (define off = upstream output, define on = 5 hooks, repository fetched only when on)"
