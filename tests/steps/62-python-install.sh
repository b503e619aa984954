#!/usr/bin/env bash
# One install (issue 28): the wheel alone gives a stock-JAX user the Python module and the
# `distprof` command, and the README's stock-JAX example runs as written.
# 1. maturin builds the wheel that a user on any x86_64 Linux with glibc >= 2.28 can install:
#    manylinux_2_28, checked by maturin's own auditwheel check. This machine's toolchain
#    (Debian 12, glibc 2.36) links Rust's std against glibc 2.34's symbols (pthread_create,
#    dlsym...: libpthread and libdl moved into libc then), so its plain build can only be
#    manylinux_2_34; zig (PyPI's ziglang, tests/setup/30-python.sh) links against 2.28's, and
#    compiles the C++ of the hooks against its own libc++, linked in (no libstdc++ needed).
#    Dev profile, in a target directory of its own (zig's linker and compilers differ from
#    the workspace build's, so nothing of target/debug is reused or disturbed; removed after):
#    49 s with zig's cache warm at load 2, 263 s with it cold (a fresh machine) at load 11;
#    about 2.5 CPU-minutes. The whole step: 1 to 4.7 min;
#    WHEEL_COMPAT=manylinux_2_34 builds without zig in seconds on the warm target/debug;
# 2. a fresh venv (the test venv's base Python 3.12, which jax needs; no project path, no
#    .pth) gets the wheel and jax 0.12 from PyPI (the wheels tests/setup/30-python.sh keeps
#    in .venv/wheelhouse), nothing else;
# 3. with that venv's bin/ first on PATH: `distprof --version`, a usage error and a bad
#    input give the CLI's exit status and stderr; then the fenced block of README.md's
#    "With stock JAX" section that runs examples/stock_jax.py is run line by line as
#    written in a scratch directory (2 JAX processes, `distprof merge`, `distprof validate`),
#    and the result is checked: 2 merged nodes, collectives compared, 0 violations after.
# Needs tests/setup/30-python.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
venv_py=$root/.venv/py312/bin/python
wheelhouse=$root/.venv/wheelhouse
if [ ! -x "$venv_py" ] || [ ! -d "$wheelhouse" ]; then
    echo "62-python-install: run tests/setup/30-python.sh first (test venv and .venv/wheelhouse)" >&2; exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "62-python-install: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- 1. the wheel ---------------------------------------------------------------------------
# The platform tag the wheel is built for; maturin's own auditwheel check refuses a wheel
# that needs newer glibc symbols than the tag allows.
compat=${WHEEL_COMPAT:-manylinux_2_28}
build=()
if [ "$compat" = manylinux_2_28 ]; then build=(--zig); export CARGO_TARGET_DIR="$out/target"; fi
t=$(now)
# The venv's bin/ on PATH: maturin finds zig there (`python -m ziglang`).
PATH="$root/.venv/py312/bin:$PATH" "$root/.venv/py312/bin/maturin" build --quiet "${build[@]}" \
    -m rust/distprof-py/Cargo.toml -o "$out/wheels" -i "$venv_py" --compatibility "$compat" 2> "$out/maturin.log" \
    || { tail -30 "$out/maturin.log"; fail "maturin build --compatibility $compat failed"; }
wheel=$(ls "$out"/wheels/distprof-*.whl)
echo "wheel: $(basename "$wheel"), $(( $(stat -c %s "$wheel") / 1000000 )) MB, built in $(since "$t") s"
unset CARGO_TARGET_DIR
rm -rf "$out/target"  # 1 GB
[[ $(basename "$wheel") == *"-${compat}_x86_64.whl" ]] || fail "wheel $(basename "$wheel") is not tagged $compat"
# One artifact: the command is the extension module's, not a second binary in the wheel.
"$venv_py" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
native = [n for n in names if n.endswith(".so")]
scripts = [n for n in names if ".data/scripts/" in n]
entry = [n for n in names if n.endswith("entry_points.txt")]
text = zipfile.ZipFile(sys.argv[1]).read(entry[0]).decode() if entry else ""
if native != ["distprof/_native.abi3.so"] or scripts or "distprof=distprof._cli:main" not in text.replace(" ", ""):
    sys.exit(f"wheel: expected one extension module and the console script distprof._cli:main, "
             f"found {native}, scripts {scripts}, entry points {text!r}")
print(f"wheel holds {len(names)} files: the extension module, the console script `distprof`")
EOF

# --- 2. a fresh venv: the wheel and jax, nothing else ----------------------------------------
t=$(now)
"$venv_py" -m venv "$out/fresh"
"$out/fresh/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$wheelhouse" \
    "$wheel" jax==0.12.0.1 jaxlib==0.12.0.1
echo "fresh venv: wheel and jax installed in $(since "$t") s"
if grep -rl "$root" "$out/fresh/lib" --include='*.pth' >/dev/null 2>&1; then fail "a .pth of the fresh venv points into the checkout"; fi
export PATH="$out/fresh/bin:$PATH"
unset PYTHONPATH VIRTUAL_ENV
[ "$(command -v distprof)" = "$out/fresh/bin/distprof" ] || fail "distprof on PATH is $(command -v distprof), not the fresh venv's"

# --- 3. the command, then the README's example ----------------------------------------------
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
got=$(distprof --version)
[ "$got" = "distprof $version" ] || fail "distprof --version printed '$got', expected 'distprof $version'"
echo "$got"
status=0; distprof merge 2> "$out/usage.err" || status=$?
[ "$status" = 2 ] && grep -q "^Usage: distprof merge" "$out/usage.err" \
    || { cat "$out/usage.err"; fail "a usage error gave status $status, not clap's 2 with the usage"; }
status=0; distprof validate "$out/none.xplane.pb" 2> "$out/missing.err" || status=$?
[ "$status" = 2 ] && grep -q "^distprof: error: .*none.xplane.pb" "$out/missing.err" \
    || { cat "$out/missing.err"; fail "a missing input gave status $status, not 2 with 'distprof: error: <path>'"; }

# The README's block, as written: every line of the fenced block (in "With stock JAX") that
# runs examples/stock_jax.py. Relative paths resolve in a scratch directory holding examples/.
block=$(awk '/^## With stock JAX/ { on = 1; next } /^## / { on = 0 }
             on && /^```/ { if (inb) { if (hit) { printf "%s", buf; exit } buf = ""; hit = 0; inb = 0 } else inb = 1; next }
             on && inb { buf = buf $0 "\n"; if ($0 ~ /examples\/stock_jax\.py/) hit = 1 }' README.md)
[ -n "$block" ] || fail "README.md's \"With stock JAX\" section has no fenced block running examples/stock_jax.py"
mkdir "$out/readme" && ln -s "$root/examples" "$out/readme/examples"
printf '%s\n' "$block" | sed 's/^/  $ /'
t=$(now)
(cd "$out/readme" && bash -euo pipefail -c "$block") > "$out/readme.log" 2>&1 \
    || { tail -40 "$out/readme.log"; fail "the README's stock-JAX block failed"; }
echo "README block ran in $(since "$t") s"
grep -E "^(merged|[0-9]+ nodes,|  (before|after) correction)" "$out/readme.log" | sed 's/^/  /'

# What it left: one trace per process, both merged, collectives seen and in order after.
(cd "$out/readme" && distprof validate --json prof/*) > "$out/validate.json" || true
"$out/fresh/bin/python" - "$out/readme" "$out/validate.json" <<'EOF'
import glob, json, os, sys
run, report = sys.argv[1], json.load(open(sys.argv[2]))
traces = sorted(glob.glob(os.path.join(run, "prof", "*", "plugins", "profile", "*", "*.xplane.pb")))
merged = sorted(glob.glob(os.path.join(run, "merged", "plugins", "profile", "*", "*.xplane.pb")))
problems = []
if len(traces) != 2: problems.append(f"{len(traces)} traces under prof/, expected 2: {traces}")
if len(merged) != 2: problems.append(f"{len(merged)} merged traces, expected 2: {merged}")
if report["before"]["checked"] == 0: problems.append(f"validate compared no collective: {report}")
if report["after"]["violations"] != 0: problems.append(f"validate: violations after correction: {report}")
if problems: sys.exit("\n".join(problems))
print(f"  checked: 2 traces, 2 merged nodes, {report['before']['checked']} collective occurrences, "
      f"0 violations after correction")
EOF
