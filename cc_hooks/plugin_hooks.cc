// The hooks that need no XLA type: they forward to the Rust plugin through the cxx
// bridge. Each returns within microseconds and never throws; when the plugin is disabled
// it returns after one atomic load, without entering Rust.
#include <memory>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "distprof-ffi/src/lib.rs.h"

namespace distprof {

void OnTraceStart(TracerClockFn tracer_clock) {
  if (bridge::PluginOff()) return;
  // Once per profiling session, so the allocation is not on any hot path.
  bridge::on_trace_start(tracer_clock == nullptr
                             ? nullptr
                             : std::make_unique<bridge::TracerClock>(tracer_clock));
}

void OnTraceStop() {
  if (bridge::PluginOff()) return;
  bridge::on_trace_stop();
}

void OnAgentConnected(int task_id) {
  if (bridge::PluginOff()) return;
  bridge::on_agent_connected(task_id);
}

bool IsEnabled() { return !bridge::PluginOff() && bridge::is_enabled(); }

}  // namespace distprof
