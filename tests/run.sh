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
# Free space on the checkout's disk, printed after every step: CI machines have small disks.
free_disk() { df -h --output=avail . | tail -n 1 | tr -d ' '; }
# Incremental caches double the size of every debug build and are no use to a one-shot run.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
echo "disk: $(free_disk) free at start"

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
        echo "--- $name passed in $(( $(date +%s) - start )) s ($(free_disk) free)"
    else
        echo "--- $name FAILED after $(( $(date +%s) - start )) s ($(free_disk) free)"
        failed+=("$name")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo; echo "failed steps: ${failed[*]}"; exit 1
fi
echo; echo "all test steps passed"
