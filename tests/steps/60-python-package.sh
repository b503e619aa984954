#!/usr/bin/env bash
# The Python package `distprof` (rust/distprof-py) with stock JAX:
# 1. maturin builds the wheel (abi3); a fresh venv on another Python (the default 3.11)
#    installs it and imports it;
# 2. the wheel goes into the test venv (jax 0.12 CPU), where
#    - failures.py: a raising KV client, no jax.distributed, an unwritable trace dir each
#      leave the JAX program running with one log line (or raise with strict=True);
#      start(config=) with a FIFO, /dev/zero and a 200 MB file is refused by name at once;
#    - shared_logdir.py: 3 JAX processes on 3 host names (unshare --uts) and 2 on one host,
#      all tracing into one directory: every trace is the profiler's bytes plus its own
#      process's plane only, and `distprof merge` of the directory succeeds;
#    - plane_identity.py: the appended plane is the plugin's plane, byte for byte;
#    - tests/jax/skewed_e2e.py: 4 JAX processes under libfaketime (different offsets and
#      drifts, user-space probe stamps), merged and validated on the traces alone, estimated
#      offsets against the injected ones (prints p99 and max error).
# Needs tests/setup/30-python.sh (jax, maturin, xprof) and 35-faketime.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
py=$root/.venv/py312/bin/python
if [ ! -x "$py" ]; then echo "60-python-package: run tests/setup/30-python.sh first" >&2; exit 1; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The dev profile: the workspace's debug build (step 10) already compiled the dependencies.
"$root/.venv/py312/bin/maturin" build --quiet -m rust/distprof-py/Cargo.toml -o "$out/wheels" -i "$py" 2> "$out/maturin.log" \
    || { tail -30 "$out/maturin.log"; exit 1; }
wheel=$(ls "$out"/wheels/distprof-*.whl)
echo "wheel: $(basename "$wheel")"

fresh_py=$(command -v python3)
"$fresh_py" -m venv "$out/fresh"
"$out/fresh/bin/pip" install --quiet --disable-pip-version-check "$wheel"
(cd "$out" && "$out/fresh/bin/python" -c "import sys, distprof; print(f'fresh venv, Python {sys.version.split()[0]}: distprof', distprof.__version__, distprof.status())")

"$root/.venv/py312/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
cargo build --quiet -p distprof-cli
run() {  # name, command...: stdout shown, stderr kept and shown on failure
    local name=$1; shift
    if ! "$@" 2> "$out/$name.log"; then tail -40 "$out/$name.log"; echo "$name FAILED" >&2; return 1; fi
}
run failures "$py" rust/distprof-py/tests/failures.py
run plane_identity "$py" rust/distprof-py/tests/plane_identity.py
run shared_logdir "$py" rust/distprof-py/tests/shared_logdir.py --distprof "$root/target/debug/distprof"
run skewed_e2e "$py" tests/jax/skewed_e2e.py "$out/e2e" --distprof "$root/target/debug/distprof" --processes 4 --steps 30
