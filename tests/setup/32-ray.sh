#!/usr/bin/env bash
# Ray from PyPI into the test venv of tests/setup/30-python.sh, for the Ray merge test
# (tests/steps/61-python-ray.sh). Idempotent: a stamp file records the version installed.
# Ray 2.60.0 has a manylinux wheel for the venv's Python 3.12 (79 MB; 250 MB installed with
# its dependencies, about 10 s from the registry).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/py312
version=2.60.0
if [ ! -x "$venv/bin/python" ]; then echo "32-ray: run tests/setup/30-python.sh first" >&2; exit 1; fi
if [ ! -f "$venv/.stamp-ray-$version" ]; then
    start=$(date +%s)
    before=$(du -sm "$venv" | cut -f1)
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "ray==$version"
    touch "$venv/.stamp-ray-$version"
    echo "ray $version installed in $(( $(date +%s) - start )) s, $(( $(du -sm "$venv" | cut -f1) - before )) MB"
fi
echo "ray $version ready ($venv)"
