#!/usr/bin/env bash
# cargo-fuzz drives the libFuzzer targets in fuzz/ (tests/steps/70-fuzz.sh, docs/fuzzing.md).
# libFuzzer itself comes with the libfuzzer-sys crate, built by the system C++ compiler.
set -euo pipefail
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
