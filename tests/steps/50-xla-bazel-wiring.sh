#!/usr/bin/env bash
# The Bazel wiring distprof writes into XLA, built for real on a synthetic XLA-shaped workspace
# (tests/fixtures/xla-wiring): `distprof xla apply`, then
#   1. without --define enable_distributed_profiling=true: builds although @distributed_profiling
#      is unreachable (never fetched), and no hook runs;
#   2. with the define and @distributed_profiling overridden by a local stand-in: every hook runs,
#      with the arguments the call sites pass;
#   3. with the define and no override: the build fails on fetching @distributed_profiling;
#   4. `apply --local-dir`: with the define, @distributed_profiling is that directory (no
#      override) and every hook runs;
#   5. a non-https release URL is refused by the tool, and written by hand it breaks even the
#      build without the define (the stand-in repo.bzl refuses single-URL archives as XLA's does).
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
# An https URL nothing serves (the stand-in mirror and the URL are both loopback port 9).
release=(--release-url https://127.0.0.1:9/distprof-xla.tar.gz
  --release-sha256 "$(printf 'no such archive' | sha256sum | cut -d' ' -f1)")
"$distprof" xla apply --xla-dir "$work/xla" "${release[@]}" >/dev/null
"$distprof" xla check --xla-dir "$work/xla" "${release[@]}" >/dev/null

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
"$distprof" xla apply --xla-dir "$work/xla" --local-dir "$work/hooks" >/dev/null
bz run --define enable_distributed_profiling=true //:main >"$work/local.txt" 2>"$work/local.log" \
  || { cat "$work/local.log" >&2; fail "build with the define and --local-dir failed"; }
[ "$(cat "$work/local.txt")" = "$expected_on" ] || { diff <(echo "$expected_on") "$work/local.txt" >&2 || true; fail "with --local-dir, the hooks did not run as expected"; }

if "$distprof" xla apply --xla-dir "$work/xla" --release-url http://127.0.0.1:9/distprof-xla.tar.gz \
     --release-sha256 "${release[3]}" >/dev/null 2>"$work/http.err"; then
  fail "a non-https release URL was accepted"
fi
grep -q "is not https" "$work/http.err" || { cat "$work/http.err" >&2; fail "the non-https refusal does not say why"; }
# What that URL would do if written anyway: XLA's rules refuse it while workspace2.bzl loads.
"$distprof" xla apply --xla-dir "$work/xla" "${release[@]}" >/dev/null
sed -i 's|tf_mirror_urls("https://|tf_mirror_urls("http://|' "$work/xla/third_party/distributed_profiling/workspace.bzl"
if bz build //:main >"$work/single.log" 2>&1; then
  fail "the stand-in repo.bzl accepted a single-URL archive; it must refuse it as XLA's does"
fi
grep -q "must have redundant URLs" "$work/single.log" || { cat "$work/single.log" >&2; fail "the single-URL failure is not XLA's"; }
echo "50-xla-bazel-wiring: ok (define off = upstream output, define on = 5 hooks, repository fetched only when on, --local-dir, non-https refused)"
