#!/usr/bin/env bash
# Debian's Bazel 4.2.3 and the rule repositories it needs offline (see .bazelrc, config
# `debian`); Debian's absl and protobuf, which tests/steps/55-xla-package.sh builds the
# packaged @distributed_profiling against. Idempotent: quick when everything is installed.
set -euo pipefail
pkgs=(bazel-bootstrap bazel-rules-cc bazel-skylib bazel-platforms bazel-rules-java bazel-rules-proto
      libabsl-dev libprotobuf-dev protobuf-compiler)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
command -v bazel >/dev/null
