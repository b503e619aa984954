#!/usr/bin/env bash
# Bazel for tests/steps/50-xla-bazel-wiring.sh. Debian's bazel-bootstrap (4.2.3) cannot build XLA
# but runs the Starlark and cc wiring distprof writes into XLA.
set -euo pipefail
command -v bazel >/dev/null 2>&1 && [ -d /usr/share/bazel/rules/java ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get install -y bazel-bootstrap bazel-rules-java \
  || { apt-get update && apt-get install -y bazel-bootstrap bazel-rules-java; }
