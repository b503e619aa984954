#!/usr/bin/env bash
# The core crate as the XLA plugin builds it (no `svm` feature): the config tests then
# check that choosing `estimator: "svm"` is an error that says the build lacks it.
set -euo pipefail
cargo nextest run -p distprof --no-default-features --locked config::
