#!/usr/bin/env bash
# The test command of the README. Installs what the tests need (idempotent, quick when
# already installed), then runs every step under tests/steps/ in order. Each step is a
# script of its own so that a failure names the step.
#
#   tests/run.sh            everything
#   tests/run.sh cargo      only steps whose file name contains "cargo"
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
filter=${1:-}

step() { printf '\n=== %s ===\n' "$1"; }

for setup in tests/setup/*.sh; do
    [ -e "$setup" ] || continue
    step "setup: $(basename "$setup")"
    bash "$setup"
done

failed=()
for script in tests/steps/*.sh; do
    [ -e "$script" ] || continue
    name=$(basename "$script" .sh)
    if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then continue; fi
    step "$name"
    start=$(date +%s)
    if (cd "$root" && bash "$script"); then
        echo "--- $name passed in $(( $(date +%s) - start )) s"
    else
        echo "--- $name FAILED after $(( $(date +%s) - start )) s"
        failed+=("$name")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo; echo "failed steps: ${failed[*]}"; exit 1
fi
echo; echo "all test steps passed"
