#!/usr/bin/env bash
# The core builds and tests with the `rocm` feature against Debian's libamdhip64-dev
# (tests/setup/40-hip.sh); hip-sys's build script needs HIP_PATH. On a machine without a
# GPU the discovery test checks the graceful hipErrorNoDevice path.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HIP_PATH=${HIP_PATH:-/usr}
cargo nextest run -p distprof --features rocm gpu
