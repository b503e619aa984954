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

// Hook 1, se_gpu_pjrt_client.cc GetStreamExecutorGpuClient, right before it returns the
// client: every step that can fail has succeeded. `platform_name` is the platform XLA built
// the client for (`pjrt_platform_name`: xla::RocmName(), CudaName() or SyclName(), as XLA
// was compiled), `mock_nccl` is GpuClientOptions::enable_mock_nccl. Only a ROCm client with
// real collectives starts the rendezvous, on a background thread; any other turns an enabled
// distprof off with one log line (cc_hooks/client_guard.h). `kv_store` may be null when
// num_nodes == 1; distprof stops using it when the rendezvous ends.
void OnGpuClientCreated(const char* platform_name, bool mock_nccl, int node_id,
                        int num_nodes,
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
