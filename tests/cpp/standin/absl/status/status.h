// Test stand-in (see ../../README.md): absl::Status with the codes the adapters inspect.
#ifndef DISTPROF_STANDIN_ABSL_STATUS_STATUS_H_
#define DISTPROF_STANDIN_ABSL_STATUS_STATUS_H_
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
namespace absl {
enum class StatusCode : int {
  kOk = 0,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kInternal = 13,
  kUnavailable = 14,
};
class Status {
 public:
  Status() = default;
  Status(StatusCode code, absl::string_view message) : code_(code), message_(message) {}
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  absl::string_view message() const { return message_; }
  std::string ToString() const {
    return ok() ? "OK" : "code " + std::to_string(static_cast<int>(code_)) + ": " + message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};
inline Status OkStatus() { return Status(); }
inline Status NotFoundError(absl::string_view m) { return Status(StatusCode::kNotFound, m); }
inline Status DeadlineExceededError(absl::string_view m) {
  return Status(StatusCode::kDeadlineExceeded, m);
}
inline Status UnavailableError(absl::string_view m) { return Status(StatusCode::kUnavailable, m); }
}  // namespace absl
#endif
