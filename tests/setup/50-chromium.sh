#!/usr/bin/env bash
# Headless Chromium renders `distprof report` pages in the report tests (screenshot not
# blank, load time of a 64-node report). Debian's package; installed only when missing.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
export DEBIAN_FRONTEND=noninteractive
# Another installer may hold the dpkg lock; apt waits for it instead of failing.
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq chromium >/dev/null
command -v chromium >/dev/null
