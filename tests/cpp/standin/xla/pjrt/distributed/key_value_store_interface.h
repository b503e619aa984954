// Test stand-in (see ../../../README.md): xla::KeyValueStoreInterface as in jax 0.5-0.8
// (pure virtual Get with timeout, TryGet, Set; implementations must be thread-safe).
#ifndef DISTPROF_STANDIN_XLA_PJRT_DISTRIBUTED_KEY_VALUE_STORE_INTERFACE_H_
#define DISTPROF_STANDIN_XLA_PJRT_DISTRIBUTED_KEY_VALUE_STORE_INTERFACE_H_
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
namespace xla {
class KeyValueStoreInterface {
 public:
  virtual ~KeyValueStoreInterface() = default;
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::string> TryGet(absl::string_view key) = 0;
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
};
}  // namespace xla
#endif
