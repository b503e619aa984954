#!/usr/bin/env bash
# cargo-nextest runs the Rust tests; install it when the machine lacks it.
set -euo pipefail
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
