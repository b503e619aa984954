// Timing loops for `distprof bench hooks`, in C++ so that what is timed is exactly what
// XLA's call site does: a call to a hook entry point.
#ifndef DISTPROF_FFI_CPP_BENCH_HOOKS_H_
#define DISTPROF_FFI_CPP_BENCH_HOOKS_H_

#include <cstdint>

namespace distprof {
namespace bench {

// Wall time, in nanoseconds, of `iterations` calls to distprof::OnTraceStop().
uint64_t time_disabled_hook_ns(uint64_t iterations);
// Wall time, in nanoseconds, of `iterations` calls to an empty non-inlined C++ function.
uint64_t time_empty_call_ns(uint64_t iterations);
// distprof::IsEnabled(), through the real hook.
bool hook_is_enabled();

}  // namespace bench
}  // namespace distprof

#endif  // DISTPROF_FFI_CPP_BENCH_HOOKS_H_
