#!/usr/bin/env bash
# Regenerates every picture under docs/ from the current code, so that no picture shows
# what an older build drew. CI runs it into a scratch directory (tests/steps/80-docs.sh) to
# check that it still works; run it without arguments to refresh the committed pictures.
#
#   docs/make_pictures.sh [OUT_DIR]     (default: docs/)
#
# The pictures, each a headless-Chromium screenshot of a `distprof report` page of a real
# `distprof local` run (six node processes with random virtual clocks, probing over
# loopback through the user-space relay):
#   report-example.png        a healthy run:  distprof local --nodes 6 --duration 8 --window-s 2
#   report-example-fault.png  the same run with node 5 killed (SIGKILL) after 5 s: --kill 5@5
# Needs chromium (tests/setup/50-chromium.sh) and the distprof binary (built here if missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(cd "${1:-$root/docs}" && pwd)"
distprof="${DISTPROF:-$root/target/debug/distprof}"
[ -x "$distprof" ] || (cd "$root" && cargo build -q -p distprof-cli)
command -v chromium >/dev/null || { echo "make_pictures: chromium missing: run tests/setup/50-chromium.sh" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# picture NAME LOCAL_ARGS...: one local run, its report page, one screenshot.
picture() {
  local name=$1; shift
  echo "make_pictures: $name: distprof local $*" >&2
  "$distprof" local "$@" --out "$work/$name" > "$work/$name.txt" 2> "$work/$name.err" \
    || { tail -20 "$work/$name.err" >&2; echo "make_pictures: distprof local $* failed" >&2; exit 1; }
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$work/profile" --window-size=1280,2600 \
    --screenshot="$out/$name.png" "file://$work/$name/report.html" 2> "$work/chromium.err" \
    || { tail -20 "$work/chromium.err" >&2; exit 1; }
  [ -s "$out/$name.png" ] || { echo "make_pictures: no $out/$name.png" >&2; exit 1; }
  grep -E '^(edges|flagged|rejected)' "$work/$name.txt" | sed "s/^/  $name: /" >&2 || true
  echo "$out/$name.png"
}

picture report-example --nodes 6 --duration 8 --window-s 2
picture report-example-fault --nodes 6 --duration 8 --window-s 2 --kill 5@5
