// Test stand-in (see ../../README.md): the part of absl::Duration the adapters use.
#ifndef DISTPROF_STANDIN_ABSL_TIME_TIME_H_
#define DISTPROF_STANDIN_ABSL_TIME_TIME_H_
#include <chrono>
#include <cstdint>
namespace absl {
class Duration {
 public:
  constexpr Duration() = default;
  constexpr explicit Duration(std::chrono::nanoseconds ns) : ns_(ns) {}
  constexpr std::chrono::nanoseconds chrono() const { return ns_; }

 private:
  std::chrono::nanoseconds ns_{0};
};
inline Duration Milliseconds(int64_t ms) {
  // absl saturates; so does this (ms beyond ~292 years is "forever" either way).
  constexpr int64_t kMaxMs = INT64_MAX / 1000000;
  return Duration(std::chrono::nanoseconds((ms > kMaxMs ? kMaxMs : ms) * 1000000));
}
inline Duration ZeroDuration() { return Duration(); }
inline int64_t ToInt64Milliseconds(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d.chrono()).count();
}
}  // namespace absl
#endif
