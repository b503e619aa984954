#!/usr/bin/env bash
# Replaces fuzz/corpus/<target>/ by a small set of inputs, drawn from the committed corpus and
# a run's fuzz/work/<target>/, that covers as many code edges as possible: libFuzzer records
# the edges of every input (a merge control file), then a greedy set cover keeps at most
# MAX_FILES inputs (default 40), each adding the most new edges, smallest first on ties.
#
#   fuzz/minimize.sh [TARGET...]      default: every target with a fuzz/work/<target>/
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
max_files=${MAX_FILES:-40}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for d in work/*/; do targets+=("$(basename "$d")"); done
for t in "${targets[@]}"; do
    tmp=$(mktemp -d)
    mkdir -p "$tmp/out" work/"$t"
    cargo fuzz run -a "$t" "$tmp/out" corpus/"$t" work/"$t" -- \
        -merge=1 -merge_control_file="$tmp/control" -use_counters=0 \
        -rss_limit_mb=1024 -malloc_limit_mb=64 >"$tmp/log" 2>&1 \
        || { tail -n 20 "$tmp/log"; exit 1; }
    python3 - "$tmp/control" "$max_files" "$tmp/keep" <<'PY'
import os, sys
lines = open(sys.argv[1]).read().split("\n")
n = int(lines[0])
paths = lines[2:2 + n]
cov = {}
for line in lines[2 + n:]:
    parts = line.split()
    if parts and parts[0] == "COV":
        cov[int(parts[1])] = set(parts[2:])
covered, keep = set(), []
while len(keep) < int(sys.argv[2]):
    best = max(cov, key=lambda i: (len(cov[i] - covered), -os.path.getsize(paths[i])), default=None)
    if best is None or not cov[best] - covered:
        break
    covered |= cov.pop(best)
    keep.append(paths[best])
total = set().union(covered, *cov.values())
open(sys.argv[3], "w").write("\n".join(keep) + "\n")
print(f"{len(covered)} of {len(total)} edges")
PY
    mkdir -p "$tmp/new"
    while IFS= read -r f; do [ -n "$f" ] && cp "$f" "$tmp/new/$(sha1sum "$f" | cut -c1-40)"; done <"$tmp/keep"
    rm -rf corpus/"$t" && mv "$tmp/new" corpus/"$t"
    echo "$t: $(ls corpus/"$t" | wc -l) files, $(cat corpus/"$t"/* | wc -c) bytes"
    rm -rf "$tmp"
done
