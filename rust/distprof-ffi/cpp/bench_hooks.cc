#include "cpp/bench_hooks.h"

#include <chrono>

#include "cc_hooks/distprof_hooks.h"

namespace distprof {
namespace bench {

// Defined in bench_empty.cc: another translation unit, so the compiler cannot inline it
// or see that it is empty (no LTO in this build).
void EmptyCall();

namespace {
template <typename F>
uint64_t TimeLoop(uint64_t iterations, F call) {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) call();
  const auto end = std::chrono::steady_clock::now();
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
}
}  // namespace

uint64_t time_disabled_hook_ns(uint64_t iterations) {
  return TimeLoop(iterations, [] { distprof::OnTraceStop(); });
}

uint64_t time_empty_call_ns(uint64_t iterations) {
  return TimeLoop(iterations, [] { EmptyCall(); });
}

bool hook_is_enabled() { return distprof::IsEnabled(); }

}  // namespace bench
}  // namespace distprof
