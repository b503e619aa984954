// The one header the XLA patches include. Forward declarations only: no XLA, protobuf or
// cxx types are needed to compile a call site, so the patches stay a few lines and the
// header never breaks when XLA moves its own headers.
//
// Every function returns within microseconds and never throws or aborts; anything slow
// runs on threads owned by distprof. When distprof is disabled at run time each call is
// one atomic load. When it is compiled out (no --define enable_distributed_profiling=true)
// the call sites are not compiled at all, and empty_plugin.cc provides no-op definitions
// for targets that still link them.
#ifndef DISTPROF_CC_HOOKS_DISTPROF_HOOKS_H_
#define DISTPROF_CC_HOOKS_DISTPROF_HOOKS_H_

#include <cstdint>
#include <memory>

namespace xla {
class KeyValueStoreInterface;
}  // namespace xla

namespace tensorflow {
namespace profiler {
class XSpace;
}  // namespace profiler
}  // namespace tensorflow

namespace distprof {

// Reads the GPU tracer's clock R in nanoseconds (e.g. the rocprofiler timestamp).
using TracerClockFn = uint64_t (*)();

// Hook 1, se_gpu_pjrt_client.cc, after BuildDistributedDevices(...) succeeded.
// `kv_store` may be null when num_nodes == 1. Starts the rendezvous on a background thread.
void OnGpuClientCreated(int node_id, int num_nodes,
                        std::shared_ptr<xla::KeyValueStoreInterface> kv_store);

// Hook 3, device_tracer_rocm.cc GpuTracer::DoStart(), right after the ROCm collector was
// created: the GPU/host clock pair XLA gave it (`start_walltime_ns`, host CLOCK_REALTIME ns;
// `start_gputime_ns`, the tracer clock). The collector exports every device event at
// host_ns + (gpu - tracer_ns), so the distprof plane records this pair for merge to recover
// the GPU time exactly. Comes before OnTraceStart, which takes it up.
void OnTraceClockPair(uint64_t host_ns, uint64_t tracer_ns);

// Hook 2, device_tracer_rocm.cc GpuTracer: profiling started / stopped / exported.
// `tracer_clock` may be null: snapshot pairs then use the host clock.
void OnTraceStart(TracerClockFn tracer_clock);
void OnTraceStop();
// Appends the distprof plane (clock model, snapshot pairs, probe statistics) to `space`.
void OnTraceExport(tensorflow::profiler::XSpace* space);

// True when distprof is compiled in and enabled by configuration.
bool IsEnabled();

}  // namespace distprof

#endif  // DISTPROF_CC_HOOKS_DISTPROF_HOOKS_H_
