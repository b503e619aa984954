#!/usr/bin/env bash
# Compiles (syntax only) the hook call sites as `distprof xla apply` inserts them, against the
# real XLA headers of one tree and cc_hooks/distprof_hooks.h, proving the forward declarations
# and the hook signatures match XLA's API:
#   - hook 1 passes `std::shared_ptr<xla::KeyValueStoreInterface>` from the real
#     xla/pjrt/distributed/key_value_store_interface.h (needs only absl: libabsl-dev);
#   - hook 2 passes `&RocmTracer::GetTimestamp`, declared as in the tree's rocm_tracer header
#     (the declaration line is read from the tree; the header itself needs ROCm);
#   - hook 3 passes the agent's task id as in the tree's agent header.
#   patches/xla/syntax_check.sh XLA_DIR   (an unpatched tree; it is patched in a copy)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
xla="${1:?usage: syntax_check.sh XLA_DIR}"
distprof="${DISTPROF:-$repo_root/target/debug/distprof}"
[ -x "$distprof" ] || (cd "$repo_root" && cargo build -q -p distprof-cli)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$xla" "$work/xla"
"$distprof" xla apply --xla-dir "$work/xla" >/dev/null
hook() { grep -h -m1 "distprof::$1(" "$work/xla/$2" | sed 's/^ *//'; }
client_call="$(hook OnGpuClientCreated xla/pjrt/gpu/se_gpu_pjrt_client.cc)"
start_call="$(hook OnTraceStart xla/backends/profiler/gpu/device_tracer_rocm.cc)"
stop_call="$(hook OnTraceStop xla/backends/profiler/gpu/device_tracer_rocm.cc)"
export_call="$(hook OnTraceExport xla/backends/profiler/gpu/device_tracer_rocm.cc)"
if [ -f "$work/xla/xla/pjrt/distributed/coordination/coordination_service_agent.cc" ]; then
  agent_call="$(hook OnAgentConnected xla/pjrt/distributed/coordination/coordination_service_agent.cc)"
  agent_member="int task_id_ = 0;"   # CoordinationService::TaskId is `using TaskId = int;`
else
  agent_call="$(hook OnAgentConnected xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc)"
  agent_member="struct Task { int task_id() const { return 0; } } task_;"  # proto int32 accessor
fi
timestamp_decl="$(grep -h -m1 'static uint64_t GetTimestamp();' \
  "$work"/xla/xla/backends/profiler/gpu/rocm_tracer*.h "$work"/xla/xla/backends/profiler/gpu/rocm_profiler_sdk.h 2>/dev/null | head -1 || true)"
[ -n "$timestamp_decl" ] || { echo "no 'static uint64_t GetTimestamp();' in the tree's ROCm tracer headers" >&2; exit 1; }
cat >"$work/call_sites.cc" <<CC
#include <cstdint>
#include <memory>
#include "xla/pjrt/distributed/key_value_store_interface.h"
#include "cc_hooks/distprof_hooks.h"
namespace xla {
struct Options { int node_id = 0; int num_nodes = 1; };
void Hook1(const Options& options, std::shared_ptr<KeyValueStoreInterface> kv_store) {
  $client_call
}
namespace profiler {
class RocmTracer { public: $timestamp_decl };
namespace tsl_profiler = ::tensorflow::profiler;
void Hook2(tsl_profiler::XSpace* space) {
  $start_call
  $stop_call
  $export_call
}
}  // namespace profiler
struct Agent { $agent_member void Connect() { $agent_call } };
}  // namespace xla
CC
g++ -std=c++17 -fsyntax-only -Wall -Werror -DXLA_ENABLE_DISTRIBUTED_PROFILING=1 \
  -I "$work/xla" -I "$repo_root" "$work/call_sites.cc"
echo "call sites of $(basename "$xla") compile against its key_value_store_interface.h and cc_hooks/distprof_hooks.h"
