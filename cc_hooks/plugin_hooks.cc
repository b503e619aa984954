// The hooks that need no XLA type: they forward to the Rust plugin through the cxx
// bridge. Each returns within microseconds and never throws; when the plugin is disabled
// it returns after one atomic load, without entering Rust.
#include <memory>
#include <string>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "cc_hooks/distprof_test_hooks.h"
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

void OnTraceClockPair(uint64_t host_ns, uint64_t tracer_ns) {
  if (bridge::PluginOff()) return;
  bridge::on_trace_clock_pair(host_ns, tracer_ns);
}

bool IsEnabled() { return !bridge::PluginOff() && bridge::is_enabled(); }

namespace testing {

int RendezvousState(int node_id, std::string* context_digest) {
  if (bridge::PluginOff()) return kRendezvousNone;
  rust::Vec<uint8_t> digest;
  const int state = bridge::rendezvous_state(node_id, digest);
  if (context_digest != nullptr) {
    context_digest->assign(reinterpret_cast<const char*>(digest.data()), digest.size());
  }
  return state;
}

}  // namespace testing

}  // namespace distprof
