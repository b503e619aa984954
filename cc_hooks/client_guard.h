// Which GPU clients hook 1 takes. GetStreamExecutorGpuClient is compiled for CUDA and SYCL
// builds too, so the hook sees every StreamExecutor GPU client XLA creates; distprof takes
// only a ROCm client with real collectives:
// - the platform XLA built the client for (`pjrt_platform_name`, xla::RocmName() "rocm" only
//   when XLA is compiled with TENSORFLOW_USE_ROCM) must be ROCm: distprof maps device time
//   through the ROCm tracer's clock (hooks 2 and 3), which a CUDA or SYCL build has not;
// - a mock-NCCL client (GpuClientOptions::enable_mock_nccl) gets an in-memory key-value store
//   from XLA while it still reports num_nodes > 1, so no other node can ever join its
//   rendezvous, which could only time out.
// Header-only and free of XLA and Rust types, so tests/cpp/client_guard_test.cc checks it
// with a plain compiler.
#ifndef DISTPROF_CC_HOOKS_CLIENT_GUARD_H_
#define DISTPROF_CC_HOOKS_CLIENT_GUARD_H_

#include <cstring>

namespace distprof {

// XLA's xla::RocmName() (xla/pjrt/pjrt_compiler.h, the same from jax 0.4.35 to main).
inline constexpr char kRocmPlatformName[] = "rocm";

// Why hook 1 leaves this client alone, or nullptr when distprof takes it.
inline const char* ClientSkipReason(const char* platform_name, bool mock_nccl) {
  if (platform_name == nullptr || std::strcmp(platform_name, kRocmPlatformName) != 0) {
    return "not a ROCm GPU client: distprof maps device time through the ROCm tracer's "
           "clock, which CUDA and SYCL builds of XLA do not have; distprof does nothing "
           "in this process";
  }
  if (mock_nccl) {
    return "mock-NCCL client (enable_mock_nccl): XLA gives it an in-memory key-value store, "
           "so no other node can join the rendezvous; distprof does nothing in this process";
  }
  return nullptr;
}

}  // namespace distprof

#endif  // DISTPROF_CC_HOOKS_CLIENT_GUARD_H_
