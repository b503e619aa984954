#!/usr/bin/env bash
# iproute2 (`ip netns`, veth) for the tests that run nodes as separate hosts in network
# namespaces (e.g. rust/distprof-cli/tests/run_netns.rs); present on most machines.
set -euo pipefail
command -v ip >/dev/null 2>&1 && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iproute2
