#!/usr/bin/env bash
# Where the shipped series put distprof's include in the two core files, read as XLA's style
# reads it. For each series patches/xla/<ref>/ it extracts the two core files of <ref> from an
# XLA git directory into a temporary directory, applies 0001-distprof-hooks.patch, and checks:
#   sorting    `clang-format --sort-includes` with the include settings of <ref>'s own
#              .clang-format (BasedOnStyle Google; IncludeBlocks and IncludeCategories as that
#              tree sets them: Regroup with xla/ before tsl/ from jax 0.9, Google's defaults
#              before) moves no include of the patched file that it does not move in the clean
#              file (our lines add no sorting change; XLA's own order is left as found);
#   placement  the guarded include comes after every unconditional #include of the file
#              (Google style: conditional includes go after the other includes), not between the
#              file's own header and <cstddef> or inside the absl block.
#
#   patches/xla/include_order_check.sh --git-dir <ROCm/xla git dir> [patches/xla/<ref> ...]
#
# Needs the XLA history (so it runs on demand, not in CI) and clang-format (apt-get install
# clang-format). Prints one line per file; exit 1 when any check failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
gitdir=""
series=()
while [ $# -gt 0 ]; do
  case "$1" in
    --git-dir) gitdir="${2:?--git-dir needs a directory}"; shift 2 ;;
    -*) echo "include_order_check.sh: unknown option $1; usage: include_order_check.sh --git-dir DIR [SERIES_DIR...]" >&2; exit 64 ;;
    *) series+=("${1%/}"); shift ;;
  esac
done
[ -n "$gitdir" ] && git --git-dir="$gitdir" rev-parse -q --verify HEAD >/dev/null 2>&1 || {
  echo "include_order_check.sh: --git-dir ${gitdir:-<missing>} is not a git directory; pass the XLA history (the fetch of github:ROCm/xla)" >&2; exit 64; }
command -v clang-format >/dev/null || { echo "include_order_check.sh: clang-format missing: apt-get install clang-format" >&2; exit 64; }
if [ ${#series[@]} = 0 ]; then
  for d in "$here"/*/; do [ -f "$d/0001-distprof-hooks.patch" ] && series+=("${d%/}"); done
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for s in "${series[@]}"; do
  ref="$(basename "$s")"
  [ -f "$s/0001-distprof-hooks.patch" ] || { echo "$ref: no 0001-distprof-hooks.patch in $s"; status=1; continue; }
  s="$(cd "$s" && pwd)"
  git --git-dir="$gitdir" rev-parse -q --verify "$ref^{commit}" >/dev/null || { echo "$ref: no such ref in $gitdir"; status=1; continue; }
  dir="$work/$ref"
  mkdir -p "$dir"
  files="$(sed -nE 's|^\+\+\+ b/(.*)$|\1|p' "$s/0001-distprof-hooks.patch")"
  for f in $files; do
    mkdir -p "$dir/clean/$(dirname "$f")"
    git --git-dir="$gitdir" show "$ref:$f" >"$dir/clean/$f"
  done
  # The tree's include settings only: clang-format 14 (Debian 12) refuses keys of newer
  # versions that XLA's file also sets (`AlignTrailingComments: Kind:`), none of them about
  # includes.
  git --git-dir="$gitdir" show "$ref:.clang-format" 2>/dev/null >"$dir/tree.clang-format" || echo "BasedOnStyle: Google" >"$dir/tree.clang-format"
  python3 - "$dir/tree.clang-format" >"$dir/clean/.clang-format" <<'PY'
import sys, yaml
tree = yaml.safe_load(open(sys.argv[1])) or {}
keep = {k: tree[k] for k in ("BasedOnStyle", "Language", "IncludeBlocks", "IncludeCategories", "IncludeIsMainRegex") if k in tree}
keep.setdefault("BasedOnStyle", "Google")
print(yaml.safe_dump(keep, sort_keys=False), end="")
PY
  cp -r "$dir/clean" "$dir/patched"
  (cd "$dir/patched" && git apply "$s/0001-distprof-hooks.patch") || { echo "$ref: the series does not apply"; status=1; continue; }
  for f in $files; do
    clang-format --style=file --sort-includes "$dir/clean/$f" >"$dir/clean.fmt"
    clang-format --style=file --sort-includes "$dir/patched/$f" >"$dir/patched.fmt"
    python3 - "$ref" "$f" "$dir/clean/$f" "$dir/clean.fmt" "$dir/patched/$f" "$dir/patched.fmt" <<'PY' || status=1
import re, sys
ref, name, clean, clean_fmt, patched, patched_fmt = sys.argv[1:]
GUARD = "#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING"
OURS = {GUARD, '#include "cc_hooks/distprof_hooks.h"', "#endif  // XLA_ENABLE_DISTRIBUTED_PROFILING"}

def preamble(path):
    """The preprocessor lines before the first line of code."""
    out, in_comment, continued = [], False, False
    for line in open(path):
        s = line.strip()
        if in_comment:
            in_comment = "*/" not in s
            continue
        if s.startswith("/*"):
            in_comment = "*/" not in s
            continue
        if not s or s.startswith("//"):
            continue
        if continued:
            # The next line of a directive ending in a backslash: part of that directive.
            out[-1] += " " + s
            continued = s.endswith("\\")
            continue
        if not s.startswith("#"):
            break
        out.append(s)
        continued = s.endswith("\\")
    return out

problems = []
# sorting: our lines removed, clang-format's order of the patched file equals its order of the
# clean file, and it left our lines where the series put them.
if [l for l in preamble(patched_fmt) if l not in OURS] != preamble(clean_fmt):
    problems.append("sorting: clang-format --sort-includes orders the patched file's includes "
                    "differently from the clean file's")
# Our three lines together and nothing moved across them: what follows the guard is the same
# (clang-format may drop a duplicated include before it, so positions are not compared).
def from_guard(lines):
    return lines[lines.index(GUARD):] if GUARD in lines else []
if from_guard(preamble(patched)) != from_guard(preamble(patched_fmt)):
    problems.append("sorting: clang-format --sort-includes moves distprof's include")
# placement: the guard after every unconditional include.
pre = preamble(patched)
if GUARD not in pre:
    problems.append("placement: no guarded distprof include in the preamble")
else:
    at = pre.index(GUARD)
    depth, later = 0, []
    for i, l in enumerate(pre):
        if l.startswith("#if"):
            depth += 1
        elif l.startswith("#endif"):
            depth -= 1
        elif l.startswith("#include") and depth == 0 and i > at:
            later.append(l)
    if later:
        problems.append(f"placement: the guarded include comes before {len(later)} unconditional "
                        f"include(s), first {later[0]}; conditional includes go after the others")
print(f"{ref:24} {name:48} " + ("ok" if not problems else "; ".join(problems)))
sys.exit(1 if problems else 0)
PY
  done
done
exit $status
