#!/usr/bin/env bash
# Verifies every shipped patch series against the real XLA sources, and the tool against the
# same versions plus any extra refs given (versions without a shipped series).
#
#   patches/xla/verify.sh XLA_GIT_DIR [EXTRA_REF...]
#
# XLA_GIT_DIR is a clone of https://github.com/ROCm/xla (it carries openxla/xla's history, the
# upstream-jax-v* tags and the rocm-jaxlib-* branches). Each series directory is named after the
# ref it was generated from. For every ref this prints one table row:
#   ref | commit | git apply --check | tool apply+check+reapply == series | +lines per core file
# Exit status 1 if any row fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
git_dir="${1:?usage: verify.sh XLA_GIT_DIR [EXTRA_REF...]}"
shift
distprof="${DISTPROF:-$repo_root/target/debug/distprof}"
[ -x "$distprof" ] || (cd "$repo_root" && cargo build -q -p distprof-cli)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The parts of the tree distprof touches or inspects (git archive of the whole tree would need
# every large test blob, which shallow mirrors may lack).
paths=(workspace2.bzl third_party/repo.bzl xla/pjrt xla/backends/profiler xla/tsl/distributed_runtime)

extract() { # ref dir
  mkdir -p "$2"
  # git archive may report blobs missing elsewhere in a partial mirror; the files we need are
  # checked right after.
  { git --git-dir="$git_dir" archive "$1" -- "${paths[@]}" 2>/dev/null || true; } | tar -x -C "$2"
  [ -f "$2/workspace2.bzl" ] || { echo "$1: could not extract the tree from $git_dir" >&2; exit 1; }
}

status=0
row() { # ref series_dir_or_empty
  local ref="$1" series="$2" commit applies tool lines
  commit="$(git --git-dir="$git_dir" rev-parse --short=10 "$ref^{commit}")"
  local a="$work/$ref/by-series" b="$work/$ref/by-tool"
  extract "$ref" "$b"
  if "$distprof" xla apply --xla-dir "$b" >"$work/apply1.txt" 2>&1 \
     && "$distprof" xla check --xla-dir "$b" >/dev/null 2>&1 \
     && "$distprof" xla apply --xla-dir "$b" >"$work/apply2.txt" 2>&1 \
     && grep -q "no change needed" "$work/apply2.txt"; then
    tool="yes"
  else
    tool="NO: $(grep -m3 -e '- ' "$work/apply1.txt" | tr '\n' ' ' || true)"
    status=1
  fi
  if [ -n "$series" ]; then
    extract "$ref" "$a"
    if (cd "$a" && git apply --check "$series"/*.patch && git apply "$series"/*.patch); then
      applies="yes"
      if [ "$tool" = "yes" ] && ! diff -r "$a" "$b" >/dev/null; then
        tool="NO: tool result differs from the series"
        status=1
      fi
    else
      applies="NO"
      status=1
    fi
    lines="$(awk '/^\+\+\+ b\//{f=$2; sub("^b/","",f)} /^\+[^+]/{n[f]++} END{for (f in n) printf "%s:%d ", f, n[f]}' "$series/0001-distprof-hooks.patch")"
  else
    applies="(no series)"
    lines="$(awk '/\(core\)/{print $1 ":" substr($5, 2)}' "$work/apply1.txt" | tr '\n' ' ')"
  fi
  echo "$ref | $commit | $applies | $tool | $lines"
}

for dir in "$here"/*/; do
  [ -f "$dir/0001-distprof-hooks.patch" ] || continue   # e.g. results/, not a series
  ref="$(basename "$dir")"
  row "$ref" "$dir"
done
for ref in "$@"; do
  row "$ref" ""
done
exit "$status"
