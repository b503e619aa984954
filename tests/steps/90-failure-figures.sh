#!/usr/bin/env bash
# The measured figures of the failure tests, printed where CI shows them (the tests print
# them to logs that are shown only on failure):
# - host safety, from //:xla_sim_test compiled in (run by 20-bazel.sh): per fault scenario
#   the hook calls timed, their slowest and 99th-percentile wall time, and the one log
#   line the plugin printed;
# - data safety, from rust/distprof-cli/tests/crash_safety.rs (run by 10-cargo.sh): kills,
#   windows checked, windows lost, torn lines, partial merge outputs.
# Fails when a figure is missing (the tests that produce it did not run) or a scenario failed.
set -euo pipefail
status=0

log=bazel-testlogs/xla_sim_test/test.log
if [ -f "$log" ]; then
    echo "--- host safety: $log"
    grep -E '^(PASS|FAIL) ' "$log" || true
    grep -E '^(FIGURE|LOGLINE) ' "$log" || true
    n=$(grep -c '^FIGURE ' "$log" || true)
    if [ "$n" -lt 15 ]; then
        echo "only $n FIGURE lines in $log: the compiled-in fault scenarios did not run"; status=1
    fi
    if grep -q '^FAIL ' "$log"; then echo "a scenario of //:xla_sim_test failed"; status=1; fi
else
    echo "no $log: run tests/steps/20-bazel.sh first"; status=1
fi

target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
figures="$target_dir/tmp/failure-figures"
echo "--- data safety: $figures"
if ls "$figures"/*.txt >/dev/null 2>&1; then
    cat "$figures"/*.txt
    n=$(cat "$figures"/*.txt | grep -c '^FIGURE ' || true)
    if [ "$n" -lt 2 ]; then echo "want the figures of both kill -9 tests, found $n"; status=1; fi
else
    echo "no figures in $figures: run tests/steps/10-cargo.sh first"; status=1
fi
exit $status
