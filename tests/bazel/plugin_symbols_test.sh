#!/usr/bin/env bash
# Usage: plugin_symbols_test.sh BINARY compiled_out|compiled_in
#
# compiled_out: BINARY (linked with the empty plugin) must contain no Rust code (no Rust
#   mangled symbol, no Rust runtime or cxx bridge symbol) and no distprof symbol other than
#   the six hooks of cc_hooks/distprof_hooks.h.
# compiled_in:  the same checks must find Rust code and the bridge: proof they can fail.
set -euo pipefail
binary=$1
mode=$2

symbols=$(nm "$binary" | awk '{print $NF}' | sort -u)
# Rust legacy mangling ends in a 17h<16 hex>E hash; v0 mangling starts with _R; the
# runtime and the cxx bridge have recognisable names.
rust=$(grep -E '17h[0-9a-f]{16}E$|^_R[A-Za-z0-9_]|rust_begin_unwind|rust_eh_personality|__rust_|cxxbridge1' <<<"$symbols" || true)
distprof=$(nm -C "$binary" | grep -i distprof | sed -E 's/^[0-9a-f]* *[A-Za-z] //' | sort -u || true)
allowed='^distprof::(OnGpuClientCreated\(char const\*, bool, int, int, std::shared_ptr<xla::KeyValueStoreInterface>\)|OnTraceStart\(unsigned long \(\*\)\(\)\)|OnTraceStop\(\)|OnTraceExport\(tensorflow::profiler::XSpace\*\)|OnTraceClockPair\(unsigned long, unsigned long\)|IsEnabled\(\))$'
# The test program's own symbols name neither distprof nor Rust, apart from calling the
# hooks; anything else mentioning distprof comes from the plugin.
extra=$(grep -vE "$allowed" <<<"$distprof" || true)
hooks=$(grep -cE "$allowed" <<<"$distprof" || true)

case $mode in
compiled_out)
    status=0
    if [ -n "$rust" ]; then
        echo "FAIL: Rust code in the compiled-out binary:"; head -20 <<<"$rust"; status=1
    fi
    if [ -n "$extra" ]; then
        echo "FAIL: distprof symbols beyond the empty hooks:"; head -20 <<<"$extra"; status=1
    fi
    if [ "$hooks" -ne 6 ]; then
        echo "FAIL: expected the 6 empty hooks, found $hooks:"; echo "$distprof"; status=1
    fi
    [ $status -eq 0 ] && echo "PASS: no Rust, only the 6 empty hooks ($(wc -l <<<"$symbols") symbols checked)"
    exit $status
    ;;
compiled_in)
    if [ -z "$rust" ] || [ -z "$extra" ]; then
        echo "FAIL: the checks found no Rust code or bridge symbol in the compiled-in binary"
        exit 1
    fi
    echo "PASS: the checks see $(wc -l <<<"$rust") Rust symbols and $(wc -l <<<"$extra") bridge symbols when compiled in"
    ;;
*)
    echo "usage: $0 BINARY compiled_out|compiled_in" >&2; exit 2 ;;
esac
