#!/usr/bin/env bash
# After the installers: drop apt's downloaded packages and say how much disk the test steps
# have. The steps need about 3.5 GB (cargo target 1.7 GB, fuzz target 0.8 GB, Bazel 0.4 GB,
# Python venv 0.3 GB; step 62's zig build 1 GB more, removed after it); on less, name the shortage now rather than fail mid-build.
set -euo pipefail
cd "$(dirname "$0")/../.."
apt-get clean 2>/dev/null || true
free_kb=$(df --output=avail -k . | tail -n 1 | tr -d ' ')
echo "disk: $((free_kb / 1024)) MB free for the test steps"
if [ "$free_kb" -lt $((4 * 1024 * 1024)) ]; then
    echo "warning: under 4 GB free on $(df --output=target . | tail -n 1); the steps need about 3.5 GB" >&2
fi
