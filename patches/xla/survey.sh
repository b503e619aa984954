#!/usr/bin/env bash
# Runs the tool over real XLA versions and records what it found, one JSON file per ref in
# patches/xla/results/; patches/xla/gen_readme.py turns those into patches/xla/README.md.
#
#   patches/xla/survey.sh [--compile] XLA_GIT_DIR [REF...]
#
# XLA_GIT_DIR: a clone (bare is fine) of https://github.com/ROCm/xla, which carries openxla/xla's
# history, the upstream-jax-v* tags and AMD's rocm-jaxlib-* branches. Without REFs: every jax
# release tag from 0.5.3 on, main, and the rocm-jaxlib v0.7.1, v0.9.2 and v0.11.1 branches.
# Per ref: `distprof xla apply` on a clean tree, `check --json` (anchors, declarations, added
# core lines), a second `apply` that must change nothing, and with --compile
# patches/xla/compile_check.sh on the clean tree (about 2 minutes per ref; it needs the
# dependency histories it names, see its header).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
compile=0
if [ "${1:-}" = "--compile" ]; then compile=1; shift; fi
git_dir="${1:?usage: survey.sh [--compile] XLA_GIT_DIR [REF...]}"
shift
refs=("$@")
if [ ${#refs[@]} = 0 ]; then
  mapfile -t refs < <(git --git-dir="$git_dir" tag --list 'upstream-jax-v*' | sort -V |
    awk -F'upstream-jax-v' '{split($2, v, "."); if (v[1] > 0 || v[2] > 5 || (v[2] == 5 && v[3] >= 3)) print}')
  refs+=(main rocm-jaxlib-v0.7.1 rocm-jaxlib-v0.9.2 rocm-jaxlib-v0.11.1)
fi
distprof="${DISTPROF:-$repo_root/target/debug/distprof}"
(cd "$repo_root" && cargo build -q -p distprof-cli)
export DISTPROF="$distprof"
out="$here/results"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# What distprof patches or reads, plus every header and proto for the compile check. (A whole
# `git archive` needs every large test blob, which partial mirrors lack.)
extract() { # ref dir
  mkdir -p "$2"
  { git --git-dir="$git_dir" archive "$1" -- workspace2.bzl third_party/repo.bzl xla/pjrt \
      xla/backends/profiler xla/tsl/distributed_runtime ':(glob)**/*.h' ':(glob)**/*.proto' \
      ':(glob)**/*.inc' 2>/dev/null || true; } | tar -x -C "$2"
  [ -f "$2/workspace2.bzl" ] || { echo "$1: could not extract the tree from $git_dir" >&2; exit 1; }
}

status=0
for ref in "${refs[@]}"; do
  tree="$work/$ref"
  extract "$ref" "$tree"
  clean="$work/$ref.clean"
  cp -r "$tree" "$clean"
  commit="$(git --git-dir="$git_dir" rev-parse --short=10 "$ref^{commit}")"
  date="$(git --git-dir="$git_dir" log -1 --format=%cs "$ref^{commit}")"
  apply_ok=false idempotent=false
  "$distprof" xla apply --xla-dir "$tree" >"$work/apply1.txt" 2>&1 && apply_ok=true
  "$distprof" xla check --xla-dir "$tree" --json >"$work/check.txt" 2>"$work/check.err" || true
  if [ "$apply_ok" = true ] && "$distprof" xla apply --xla-dir "$tree" >"$work/apply2.txt" 2>&1 &&
     grep -q "no change needed" "$work/apply2.txt"; then
    idempotent=true
  fi
  compile_json=null
  if [ "$compile" = 1 ]; then
    compile_json="$("$here/compile_check.sh" --xla-dir "$clean" --ref "$ref" --json 2>"$work/compile.err" | tail -1 |
      python3 -c 'import json,sys; print(json.dumps(json.loads(sys.stdin.read())["refs"][sys.argv[1]]))' "$ref" 2>/dev/null || true)"
    [ -n "$compile_json" ] || compile_json="{\"ok\": false, \"units\": {}, \"blocked_by\": [], \"error\": $(python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()[-300:]))' <"$work/compile.err")}"
  fi
  python3 - "$ref" "$commit" "$date" "$apply_ok" "$idempotent" "$work/check.txt" "$work/apply1.txt" "$compile_json" >"$out/$ref.json" <<'PY'
import json, sys
ref, commit, date, apply_ok, idem, check_path, apply_path, compile_json = sys.argv[1:]
lines = open(check_path).read().strip().splitlines()
check = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
# Keep where each name is declared (file:line), not XLA's source text.
for site in (check or {}).get("sites", []):
    for d in site["declared"]:
        d.pop("text", None)
apply_errors = [l.strip()[2:] for l in open(apply_path) if l.strip().startswith("- ")]
print(json.dumps({"ref": ref, "commit": commit, "date": date, "apply_ok": apply_ok == "true",
                  "apply_errors": apply_errors, "idempotent": idem == "true", "check": check,
                  "compile": json.loads(compile_json)}, indent=1))
PY
  ok="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["check"] or {}; print(d["apply_ok"] and d["idempotent"] and bool(c.get("ok")))' "$out/$ref.json")"
  echo "$ref $commit apply+check+idempotent=$ok"
  [ "$ok" = True ] || status=1
  rm -rf "$tree" "$clean"
done
python3 "$here/gen_readme.py"
exit "$status"
