// The adapter from a key-value store of XLA's KeyValueStoreInterface shape to the bridge's
// KvHandle, as a template over the store type so that the TryGet/Get choice is real overload
// resolution on a dependent type (cc_hooks/kv_adapter.cc instantiates it with XLA's
// interface; tests/cpp/kv_adapter_test.cc with a store of each shape).
//
// Holds the std::shared_ptr and calls methods; never subclasses the store (XLA keeps adding
// pure virtuals). Only Get, TryGet and Set work through the PJRT C API. TryGet appeared in
// jax 0.5: a store without it (jax 0.4.38, rocm-jaxlib 0.4.35) is asked Get with a zero
// timeout instead.
#ifndef DISTPROF_CC_HOOKS_KV_ADAPTER_H_
#define DISTPROF_CC_HOOKS_KV_ADAPTER_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc_hooks/bridge_types.h"
#include "distprof-ffi/src/lib.rs.h"

namespace distprof {
namespace kv_internal {

// TryGet when the store declares it: `int` is an exact match for the literal 0, so this
// overload wins whenever it is viable; for a store without TryGet its return type fails to
// substitute (SFINAE on the dependent `Store`) and only the `long` overload is left.
template <typename Store>
auto TryGetOrGet(Store& store, const std::string& key, int)
    -> decltype(store.TryGet(key)) {
  return store.TryGet(key);
}
template <typename Store>
absl::StatusOr<std::string> TryGetOrGet(Store& store, const std::string& key, long) {
  return store.Get(key, absl::ZeroDuration());
}

inline void CopyBytes(absl::string_view from, rust::Vec<uint8_t>& to) {
  to.reserve(from.size());
  for (char c : from) to.push_back(static_cast<uint8_t>(c));
}

inline int32_t Failure(const absl::Status& status, rust::Vec<uint8_t>& error) {
  if (status.code() == absl::StatusCode::kNotFound ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    return bridge::kKvNotFound;
  }
  CopyBytes(status.ToString(), error);
  return bridge::kKvError;
}

inline int32_t Deliver(const absl::StatusOr<std::string>& result, rust::Vec<uint8_t>& value,
                       rust::Vec<uint8_t>& error) {
  if (!result.ok()) return Failure(result.status(), error);
  CopyBytes(*result, value);
  return bridge::kKvOk;
}

// Keys and values cross as std::string, which converts to the store's parameter type whether
// that is absl::string_view (jax 0.4.38 on) or std::string_view (rocm-jaxlib 0.4.35), also
// where absl::string_view is its own class (an absl built without ABSL_USES_STD_STRING_VIEW,
// such as Debian's). A copy per call is nothing next to a network round trip.
inline std::string Owned(rust::Str s) { return std::string(s.data(), s.size()); }

}  // namespace kv_internal

template <typename Store>
class KvAdapter final : public bridge::KvHandle {
 public:
  explicit KvAdapter(std::shared_ptr<Store> store) : store_(std::move(store)) {}

  int32_t get(rust::Str key, uint64_t timeout_ms, rust::Vec<uint8_t>& value,
              rust::Vec<uint8_t>& error) const override {
    const int64_t ms = timeout_ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                           ? std::numeric_limits<int64_t>::max()
                           : static_cast<int64_t>(timeout_ms);
    return kv_internal::Deliver(store_->Get(kv_internal::Owned(key), absl::Milliseconds(ms)),
                                value, error);
  }

  int32_t try_get(rust::Str key, rust::Vec<uint8_t>& value,
                  rust::Vec<uint8_t>& error) const override {
    return kv_internal::Deliver(kv_internal::TryGetOrGet(*store_, kv_internal::Owned(key), 0),
                                value, error);
  }

  int32_t set(rust::Str key, rust::Str value, rust::Vec<uint8_t>& error) const override {
    absl::Status status = store_->Set(kv_internal::Owned(key), kv_internal::Owned(value));
    if (status.ok()) return bridge::kKvOk;
    kv_internal::CopyBytes(status.ToString(), error);
    return bridge::kKvError;
  }

 private:
  // The store's callbacks are valid only while XLA's client lives; distprof uses it only
  // during the rendezvous right after client creation.
  std::shared_ptr<Store> store_;
};

}  // namespace distprof

#endif  // DISTPROF_CC_HOOKS_KV_ADAPTER_H_
