#!/usr/bin/env bash
# libfaketime (Debian `faketime`) for the stock-JAX end-to-end test
# (tests/steps/60-python-package.sh): each JAX process runs with its own clock offset and drift.
set -euo pipefail
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq faketime
