#!/usr/bin/env bash
# Python venv for the steps that run Python: xprof (the XProf oracle, tests/steps/40-xprof.sh),
# jax/jaxlib CPU and maturin (the Python package and its end-to-end test,
# tests/steps/60-python-package.sh; jax also regenerates the fixtures, tests/jax/make_traces.py),
# and jax's wheels for the fresh venv of tests/steps/62-python-install.sh.
# Idempotent: stamp files record what is installed. The venv lives under .venv/ (gitignored);
# jax from PyPI needs Python >= 3.12.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/py312
pip_install() { "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "$@"; }
if [ ! -x "$venv/bin/python" ]; then
    py=""
    if command -v pyenv >/dev/null 2>&1 && PYENV_VERSION=3.12.1 pyenv which python >/dev/null 2>&1; then
        py=$(PYENV_VERSION=3.12.1 pyenv which python)
    elif command -v python3.12 >/dev/null 2>&1; then
        py=$(command -v python3.12)
    else
        echo "30-python: need Python 3.12 (pyenv 3.12.1 or python3.12) for xprof/jax" >&2; exit 1
    fi
    "$py" -m venv "$venv"
fi
if [ ! -f "$venv/.stamp-xprof-2.24.2" ]; then
    pip_install xprof==2.24.2
    touch "$venv/.stamp-xprof-2.24.2"
fi
if [ ! -f "$venv/.stamp-jax-0.12.0.1" ]; then
    pip_install jax==0.12.0.1 jaxlib==0.12.0.1
    touch "$venv/.stamp-jax-0.12.0.1"
fi
if [ ! -f "$venv/.stamp-maturin-1.16.0" ]; then
    pip_install maturin==1.16.0
    touch "$venv/.stamp-maturin-1.16.0"
fi
# Zig as the linker of step 62's wheel: it links against glibc 2.28's symbols (manylinux_2_28)
# where this machine's own toolchain gives glibc 2.34's (maturin --zig).
if [ ! -f "$venv/.stamp-ziglang-0.17.1" ]; then
    pip_install ziglang==0.17.1
    touch "$venv/.stamp-ziglang-0.17.1"
fi
# jax's wheels from PyPI, kept for step 62, which installs them with the distprof wheel into a
# fresh venv (no network needed there, and no second download per run).
if [ ! -f .venv/wheelhouse/.stamp-jax-0.12.0.1 ]; then
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-cache-dir -d .venv/wheelhouse \
        jax==0.12.0.1 jaxlib==0.12.0.1
    touch .venv/wheelhouse/.stamp-jax-0.12.0.1
fi
echo "python venv ready ($venv)"
