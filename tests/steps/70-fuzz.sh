#!/usr/bin/env bash
# Bounded libFuzzer run of every target in fuzz/ (docs/fuzzing.md): each target starts from
# its committed corpus (copied, so the run does not change the repository) and runs for
# FUZZ_SECONDS seconds. The step fails on any crash, panic, timeout (an input taking over
# 10 s), single allocation over FUZZ_MALLOC_MB, or resident memory over FUZZ_RSS_MB.
#
# Stable Rust: cargo-fuzz needs nightly-only flags (sanitizer, coverage), which
# RUSTC_BOOTSTRAP=1 unlocks on the stable toolchain. AddressSanitizer (cargo-fuzz's default)
# stays on: libFuzzer's -malloc_limit_mb works through its allocator hooks.
set -euo pipefail
cd "$(dirname "$0")/../.."
export RUSTC_BOOTSTRAP=1
seconds=${FUZZ_SECONDS:-20}
malloc_mb=${FUZZ_MALLOC_MB:-64}
rss_mb=${FUZZ_RSS_MB:-1024}

# The fuzz crate has its own lock file; refuse to run if it is stale.
(cd fuzz && cargo fetch --locked -q)
cargo fuzz build -a

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for target in $(cargo fuzz list); do
    mkdir -p "$work/$target"
    cp fuzz/corpus/"$target"/* "$work/$target"/ 2>/dev/null || true
    log="$work/$target.log"
    # -seed fixes the mutation sequence (the count still varies with speed); artifacts go
    # to fuzz/artifacts/<target>/, where `cargo fuzz fmt` / `cargo fuzz run TARGET FILE`
    # reproduce them.
    if cargo fuzz run -a "$target" "$work/$target" -- \
        -seed=1 -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" \
        -print_final_stats=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
        echo "fuzz $target: ${runs:-?} executions in ${seconds} s, peak RSS ${rss:-?} MB, no crash"
    else
        echo "fuzz $target: FAILED"
        grep -E "^(==[0-9]+==|SUMMARY|thread '|panicked|ERROR)|out-of-memory|malloc\(|Test unit written|artifact_prefix" "$log" | head -n 20 || tail -n 40 "$log"
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz targets that failed: ${failed[*]}"
    exit 1
fi
