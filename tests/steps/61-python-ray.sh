#!/usr/bin/env bash
# distprof.ray.merge (rust/distprof-py/python/distprof/ray.py) on a local Ray cluster, a
# head and a second node on this machine, against distprof merge on one machine, byte for
# byte: rust/distprof-py/tests/ray_merge.py. It runs in a network namespace with only
# loopback (Ray would bind the host's address otherwise) and a PID namespace of its own,
# so no Ray process outlives the step, even when it is killed at the timeout.
# Needs tests/setup/32-ray.sh (ray in the test venv) and the wheel that
# tests/steps/60-python-package.sh installs (`tests/run.sh python` runs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
py=$root/.venv/py312/bin/python
if ! "$py" -c "import ray" 2>/dev/null; then echo "61-python-ray: run tests/setup/32-ray.sh first" >&2; exit 1; fi
installed=$(cd / && "$py" -c "import distprof.ray as r; print(r.__file__)" 2>/dev/null || true)
if [ -z "$installed" ] || ! cmp -s "$installed" rust/distprof-py/python/distprof/ray.py; then
    echo "61-python-ray: the installed distprof package is not this checkout's; run tests/steps/60-python-package.sh first (tests/run.sh python runs both)" >&2
    exit 1
fi
cargo build --quiet -p distprof-cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout 600 unshare --net --pid --fork --kill-child --mount-proc \
    "$py" rust/distprof-py/tests/ray_merge.py "$work" --distprof "$root/target/debug/distprof"
