#!/usr/bin/env bash
# The merged Chrome JSON as Perfetto's own trace processor reads it (a WebAssembly build of
# Perfetto v20.1 from the npm registry, fetched by tests/setup/55-perfetto-ui.sh, driven by
# tests/perfetto/trace_processor.js). tests/perfetto/check_merged.py compares what it draws
# (processes, threads, slices with times and args, flow links between slices, import
# errors) with the JSON:
# 1. its self-test: merge's layout passes, and the layouts merge avoids fail for their
#    reasons (64-bit tids fold lines, displayTimeUnit "ns" shifts times, a key before
#    traceEvents hides every event, a flow end without "bp":"e" binds to no slice);
# 2. the three real JAX traces merged with --flows;
# 3. a GPU-like trace of two nodes (several lines per plane, args on every event) merged
#    with --flows.
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=.cache/perfetto-ui
if [ ! -f "$engine/trace_processor.wasm" ]; then echo "42-perfetto: run tests/setup/55-perfetto-ui.sh first" >&2; exit 1; fi
cargo build --quiet -p distprof-cli
distprof=target/debug/distprof
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 tests/perfetto/check_merged.py "$engine" --self-test
"$distprof" merge tests/fixtures/jax --allow-uncorrected --flows --out "$work/jax" >/dev/null
python3 tests/perfetto/check_merged.py "$engine" "$work/jax/merged.trace.json"
"$distprof" bench merge --size-mb 8 --nodes 2 --dir "$work/gpu" --skip-baseline --repeat 1 --jobs 1 >/dev/null 2>&1
"$distprof" merge "$work/gpu/in" --flows --out "$work/gpu/merged" >/dev/null
python3 tests/perfetto/check_merged.py "$engine" "$work/gpu/merged/merged.trace.json"
