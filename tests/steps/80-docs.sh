#!/usr/bin/env bash
# The docs run:
# 1. docs/make_pictures.sh regenerates every picture of docs/ (into a scratch directory
#    here), so a picture can always be made again from the current code;
# 2. tests/docs_commands.py runs every `distprof` command of README.md and docs/*.md as
#    written, or its marked smaller equivalent from tests/docs_commands.toml; a documented
#    command that fails, fails this step.
# Needs chromium (tests/setup/50-chromium.sh) and the venv with jax and the distprof wheel
# (tests/setup/30-python.sh; tests/steps/60-python-package.sh installs the wheel).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --quiet -p distprof-cli
pictures=$(mktemp -d)
trap 'rm -rf "$pictures"' EXIT
docs/make_pictures.sh "$pictures"
python3 tests/docs_commands.py --distprof target/debug/distprof --python .venv/py312/bin/python
