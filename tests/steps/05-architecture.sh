#!/usr/bin/env bash
# The crate arrows and rooms of docs/architecture.md against `cargo metadata` and the module
# tree; the runtime and the plugin's tree free of offline and test code; no CLI command
# module importing another (tests/check_architecture.py). Needs no build.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 tests/check_architecture.py
