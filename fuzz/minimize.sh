#!/usr/bin/env bash
# Replaces fuzz/corpus/<target>/ by the smallest set of inputs, from the committed corpus and
# a run's fuzz/work/<target>/, that covers the same code edges (libFuzzer's set-cover merge
# with hit counts ignored, which keeps the committed corpus at a few dozen files).
#
#   fuzz/minimize.sh [TARGET...]      default: every target with a fuzz/work/<target>/
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for d in work/*/; do targets+=("$(basename "$d")"); done
for t in "${targets[@]}"; do
    new=$(mktemp -d)
    cargo fuzz run -a "$t" "$new" corpus/"$t" work/"$t" -- \
        -set_cover_merge=1 -use_counters=0 -rss_limit_mb=1024 -malloc_limit_mb=64 >"$new.log" 2>&1 \
        || { tail -n 20 "$new.log"; exit 1; }
    rm -rf corpus/"$t" && mkdir corpus/"$t"
    # Content-named files (libFuzzer's SHA-1 names), as the fuzzer writes them.
    cp "$new"/* corpus/"$t"/ 2>/dev/null || true
    echo "$t: $(ls corpus/"$t" | wc -l) files, $(du -sk corpus/"$t" | cut -f1) KB ($(grep -o '[0-9]* new coverage edges' "$new.log" | tail -n 1))"
    rm -rf "$new" "$new.log"
done
