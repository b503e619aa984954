// The hooks compiled out: no-op definitions with no Rust and no dependencies, for builds
// without --define enable_distributed_profiling=true that still link a hook call site.
#include "cc_hooks/distprof_hooks.h"

namespace distprof {

void OnGpuClientCreated(const char*, bool, int, int,
                        std::shared_ptr<xla::KeyValueStoreInterface>) {}
void OnTraceStart(TracerClockFn) {}
void OnTraceStop() {}
void OnTraceExport(tensorflow::profiler::XSpace*) {}
void OnTraceClockPair(uint64_t, uint64_t) {}
bool IsEnabled() { return false; }

}  // namespace distprof
