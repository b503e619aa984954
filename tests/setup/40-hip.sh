#!/usr/bin/env bash
# HIP runtime headers and library for building distprof's `rocm` feature (hip-sys links
# libamdhip64). Debian's package is HIP 5.2.3 without hipcc; no GPU is needed to build or
# to run the graceful no-device path. Idempotent.
set -euo pipefail
if dpkg -s libamdhip64-dev >/dev/null 2>&1; then echo "libamdhip64-dev present"; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends libamdhip64-dev >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends libamdhip64-dev >/dev/null; }
echo "libamdhip64-dev installed"
