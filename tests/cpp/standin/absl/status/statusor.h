// Test stand-in (see ../../README.md): absl::StatusOr<T>, value or error.
#ifndef DISTPROF_STANDIN_ABSL_STATUS_STATUSOR_H_
#define DISTPROF_STANDIN_ABSL_STATUS_STATUSOR_H_
#include <optional>
#include <utility>

#include "absl/status/status.h"
namespace absl {
template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& operator*() const { return *value_; }
  const T& value() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};
}  // namespace absl
#endif
