#!/usr/bin/env bash
# Every Rust unit and integration test of the workspace.
set -euo pipefail
cargo build --workspace --all-targets --locked
cargo nextest run --workspace --locked --no-fail-fast
