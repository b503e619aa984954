#!/usr/bin/env bash
# Python venv for the XProf oracle step (tests/steps/40-xprof.sh) and for regenerating the
# JAX fixtures (tests/jax/make_traces.py). Idempotent: a stamp file records what is installed.
# The venv lives under .venv/ (gitignored). jax from PyPI needs Python >= 3.12.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/py312
stamp="$venv/.distprof-stamp-v1"
if [ -f "$stamp" ]; then echo "python venv ready ($venv)"; exit 0; fi
py=""
if command -v pyenv >/dev/null 2>&1 && PYENV_VERSION=3.12.1 pyenv which python >/dev/null 2>&1; then
    py=$(PYENV_VERSION=3.12.1 pyenv which python)
elif command -v python3.12 >/dev/null 2>&1; then
    py=$(command -v python3.12)
else
    echo "30-python: need Python 3.12 (pyenv 3.12.1 or python3.12) for jax/xprof" >&2; exit 1
fi
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check xprof==2.24.2 jax==0.12.0.1 jaxlib==0.12.0.1
touch "$stamp"
echo "python venv installed ($venv)"
