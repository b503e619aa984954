// The hooks that need no XLA type: they forward to the Rust plugin through the cxx
// bridge. Each returns within microseconds and never throws; when the plugin is disabled
// the Rust side does one atomic load and returns.
#include <memory>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "distprof-ffi/src/lib.rs.h"

namespace distprof {

void OnTraceStart(TracerClockFn tracer_clock) {
  // Once per profiling session, so the allocation is not on any hot path.
  bridge::on_trace_start(tracer_clock == nullptr
                             ? nullptr
                             : std::make_unique<bridge::TracerClock>(tracer_clock));
}

void OnTraceStop() { bridge::on_trace_stop(); }

void OnAgentConnected(int task_id) { bridge::on_agent_connected(task_id); }

bool IsEnabled() { return bridge::is_enabled(); }

}  // namespace distprof
