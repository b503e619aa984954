#!/usr/bin/env bash
# The merged Perfetto outputs as Perfetto's own trace processor reads them (a WebAssembly
# build of Perfetto v20.1 from the npm registry, fetched by tests/setup/55-perfetto-ui.sh,
# driven by tests/perfetto/trace_processor.js). tests/perfetto/check_merged.py compares what
# it draws (processes, threads, slices with times and args, flow links between slices,
# import errors) with what the trace itself says (read by tests/perfetto/pftrace.py for
# Perfetto's protobuf format, by Python's json module for the Chrome JSON):
# 1. its self-test: merge's layout passes, and the layouts merge avoids fail for their
#    reasons (64-bit tids fold lines, displayTimeUnit "ns" shifts times, a key before
#    traceEvents hides every event, a flow end without "bp":"e" binds to no slice; packet
#    defaults set again per line without clearing the sequence's state lose every interned
#    name in v20.1, an interned string value (string_value_iid) loses the value; flow ids in
#    the newer fixed64 field 47 link nothing in v20.1, in field 36 they link; packets
#    deflated into two compressed_packets cut within a line pass, a file gzipped as two gzip
#    members loses the second);
# 2. the three real JAX traces (their XLine ids are 64-bit hashes), merged into
#    merged.pftrace (the default) and into the Chrome JSON (--chrome), each checked, and the
#    two compared through Perfetto's tables (--same: the same slices, args and flows), once
#    without --flows and once with it (every flow step one row of Perfetto's flow table, in
#    both formats); merged.pftrace's packets deflated (the default) and, for the JAX traces,
#    plain (--pftrace-compression none);
# 3. a GPU-like trace of two nodes (several lines per plane, args on every event), the same.
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=.cache/perfetto-ui
if [ ! -f "$engine/trace_processor.wasm" ]; then echo "42-perfetto: run tests/setup/55-perfetto-ui.sh first" >&2; exit 1; fi
cargo build --quiet -p distprof-cli
distprof=target/debug/distprof
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check=tests/perfetto/check_merged.py
python3 "$check" "$engine" --self-test
both() { # input dir, output dir, merge flags...
    local in=$1 out=$2
    shift 2
    "$distprof" merge "$in" "$@" --out "$out/pftrace" >/dev/null 2>&1
    "$distprof" merge "$in" "$@" --chrome --out "$out/json" >/dev/null 2>&1
    "$distprof" merge "$in" "$@" --chrome --flows --out "$out/flows" >/dev/null 2>&1
    "$distprof" merge "$in" "$@" --flows --out "$out/pftrace-flows" >/dev/null 2>&1
    python3 "$check" "$engine" "$out/pftrace/merged.pftrace"
    python3 "$check" "$engine" "$out/flows/merged.trace.json"
    local linked
    linked=$(python3 "$check" "$engine" "$out/pftrace-flows/merged.pftrace")
    echo "$linked"
    # The flows must be there to be compared (the JSON's are checked the same way).
    case $linked in *" 0 flow links") echo "42-perfetto: $out/pftrace-flows/merged.pftrace has no flow links" >&2; exit 1 ;; esac
    python3 "$check" "$engine" --same "$out/json/merged.trace.json" "$out/pftrace/merged.pftrace"
    python3 "$check" "$engine" --same "$out/flows/merged.trace.json" "$out/pftrace-flows/merged.pftrace"
}
both tests/fixtures/jax "$work/jax" --allow-uncorrected
"$distprof" merge tests/fixtures/jax --allow-uncorrected --flows --pftrace-compression none --out "$work/jax/plain" >/dev/null 2>&1
python3 "$check" "$engine" "$work/jax/plain/merged.pftrace"
python3 "$check" "$engine" --same "$work/jax/flows/merged.trace.json" "$work/jax/plain/merged.pftrace"
"$distprof" bench merge --size-mb 8 --nodes 2 --dir "$work/gpu" --skip-baseline --repeat 1 --jobs 1 >/dev/null 2>&1
both "$work/gpu/in" "$work/gpu"
