#!/usr/bin/env bash
# The Bazel wiring distprof writes into XLA, built for real on a synthetic XLA-shaped workspace
# (tests/fixtures/xla-wiring): `distprof xla apply`, then
#   1. without --define enable_distributed_profiling=true: builds although @distributed_profiling
#      is unreachable (never fetched), and no hook runs;
#   2. with the define and @distributed_profiling overridden by a local stand-in: every hook runs,
#      with the arguments the call sites pass;
#   3. with the define and no source named: the build fails saying which --repo_env to pass;
#      likewise with --repo_env=DISTRIBUTED_PROFILING=1 on a tree patched without a source
#      (every shipped series), where it says that none was given and what to pass instead;
#   4. without the define, `bazel query 'deps(//...)'` and `bazel fetch //...` work offline and
#      fetch nothing of distprof (its repository is a configure-style stand-in until named);
#   5. `apply --local-dir` + --repo_env=DISTRIBUTED_PROFILING=1, and --repo_env=
#      DISTRIBUTED_PROFILING_PATH: @distributed_profiling is that directory and every hook runs;
#   6. a non-https release URL is refused by the tool; the stand-in repo.bzl refuses a single-URL
#      archive while workspace2.bzl loads, as XLA's does (why the tool refuses it).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
fixture="$root/tests/fixtures/xla-wiring"
command -v bazel >/dev/null || { echo "bazel missing: run tests/setup/10-bazel.sh" >&2; exit 1; }
# The version table is generated from the recorded survey results, never edited by hand.
python3 "$root/patches/xla/gen_readme.py" --check
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
  local command="$1" build_only=()
  shift
  # query and fetch take no build options.
  case "$command" in build | run | test) build_only=(--nosandbox_debug) ;; esac
  (cd "$work/xla" && bazel --batch --output_user_root="$work/bazel-root" "$command" \
    --override_repository=rules_cc="$work/rules_cc" \
    --override_repository=rules_java=/usr/share/bazel/rules/java \
    "${build_only[@]}" "$@")
}

fail() { echo "50-xla-bazel-wiring: $*" >&2; exit 1; }

bz run //:main >"$work/off.txt" 2>"$work/off.log" || { cat "$work/off.log" >&2; fail "build without the define failed"; }
expected_off="client=21"
[ "$(cat "$work/off.txt")" = "$expected_off" ] || { cat "$work/off.txt" >&2; fail "without the define, output differs from upstream's"; }

bz run --define enable_distributed_profiling=true \
  --override_repository=distributed_profiling="$work/hooks" //:main >"$work/on.txt" 2>"$work/on.log" \
  || { cat "$work/on.log" >&2; fail "build with the define failed"; }
expected_on="hook: OnGpuClientCreated platform=rocm mock_nccl=0 node_id=2 num_nodes=1 kv_store=null
client=21
hook: OnTraceClockPair host_ns=1000 tracer_ns=42
hook: OnTraceStart clock=42
hook: OnTraceStop
hook: OnTraceExport space=set"
[ "$(cat "$work/on.txt")" = "$expected_on" ] || { diff <(echo "$expected_on") "$work/on.txt" >&2 || true; fail "with the define, the hooks did not run as expected"; }

# --keep_going: the placeholder's failing action and XLA's own compile actions run in
# parallel; without it Bazel stops at whichever fails first, and the message naming the
# flags may never be printed.
if bz build --keep_going --define enable_distributed_profiling=true //:main >"$work/fetch.log" 2>&1; then
  fail "with the define and no source named, the build should fail"
fi
grep -q "@distributed_profiling is not configured" "$work/fetch.log" || { cat "$work/fetch.log" >&2; fail "the failure does not say how to name @distributed_profiling"; }
# A tree patched without a source (as every shipped series is) and built with
# --repo_env=DISTRIBUTED_PROFILING=1, as docs/upgrading-xla.md's step 6 reads after `git apply`:
# the stand-in fails the build saying what to pass, nothing is downloaded.
"$distprof" xla apply --xla-dir "$work/xla" >/dev/null
if bz build --keep_going --define enable_distributed_profiling=true --repo_env=DISTRIBUTED_PROFILING=1 //:main >"$work/nosource.log" 2>&1; then
  fail "with DISTRIBUTED_PROFILING=1 and no source given to apply, the build should fail"
fi
grep -q "@distributed_profiling has no source" "$work/nosource.log" || { cat "$work/nosource.log" >&2; fail "the no-source failure does not say what to pass"; }
if grep -qi "download" "$work/nosource.log"; then cat "$work/nosource.log" >&2; fail "the no-source build tried a download"; fi

# Without the define: query and fetch follow every select() branch, so they reach
# @distributed_profiling; it must resolve to the stand-in without reading or fetching anything.
bz query 'deps(//...)' >"$work/query.txt" 2>"$work/query.log" || { cat "$work/query.log" >&2; fail "bazel query 'deps(//...)' failed without the define"; }
grep -q "@distributed_profiling//:pjrt_hooks" "$work/query.txt" || fail "query did not follow the select() branch to @distributed_profiling"
bz fetch //... >"$work/fetch-off.log" 2>&1 || { cat "$work/fetch-off.log" >&2; fail "bazel fetch //... failed without the define"; }
bz run --define enable_distributed_profiling=true --repo_env=DISTRIBUTED_PROFILING_PATH="$work/hooks" \
  //:main >"$work/path.txt" 2>"$work/path.log" || { cat "$work/path.log" >&2; fail "build with DISTRIBUTED_PROFILING_PATH failed"; }
[ "$(cat "$work/path.txt")" = "$expected_on" ] || { diff <(echo "$expected_on") "$work/path.txt" >&2 || true; fail "with DISTRIBUTED_PROFILING_PATH, the hooks did not run as expected"; }
"$distprof" xla apply --xla-dir "$work/xla" --local-dir "$work/hooks" >/dev/null
bz run --define enable_distributed_profiling=true --repo_env=DISTRIBUTED_PROFILING=1 //:main \
  >"$work/local.txt" 2>"$work/local.log" || { cat "$work/local.log" >&2; fail "build with the define and --local-dir failed"; }
[ "$(cat "$work/local.txt")" = "$expected_on" ] || { diff <(echo "$expected_on") "$work/local.txt" >&2 || true; fail "with --local-dir, the hooks did not run as expected"; }

if "$distprof" xla apply --xla-dir "$work/xla" --release-url http://127.0.0.1:9/distprof-xla.tar.gz \
     --release-sha256 "${release[3]}" >/dev/null 2>"$work/http.err"; then
  fail "a non-https release URL was accepted"
fi
grep -q "is not https" "$work/http.err" || { cat "$work/http.err" >&2; fail "the non-https refusal does not say why"; }
# What such a URL does to XLA's own rules (the stand-ins behave the same): a single-URL archive
# declared in workspace2.bzl fails every command, whatever is built.
cat >>"$work/xla/workspace2.bzl" <<'BZL'

def _single_url_archive():
    tf_http_archive(name = "single_url", sha256 = "0" * 64, urls = tf_mirror_urls("http://127.0.0.1:9/a.tar.gz"))
BZL
sed -i 's|^    pass$|    _single_url_archive()|' "$work/xla/workspace2.bzl"
if bz query //:main >"$work/single.log" 2>&1; then
  fail "the stand-in repo.bzl accepted a single-URL archive; it must refuse it as XLA's does"
fi
grep -q "must have redundant URLs" "$work/single.log" || { cat "$work/single.log" >&2; fail "the single-URL failure is not XLA's"; }
echo "50-xla-bazel-wiring: ok (define off = upstream output and query/fetch work offline; define on = 5 hook calls from a named path or --local-dir, a clear error otherwise; non-https refused)"
