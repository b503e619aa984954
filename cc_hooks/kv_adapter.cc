// Hook 1 and the adapter from XLA's KeyValueStoreInterface to the bridge's KvHandle.
//
// Holds the std::shared_ptr and calls methods; never subclasses the interface (XLA keeps
// adding pure virtuals). Only Get, TryGet and Set work through the PJRT C API; TryGet
// appeared in jax 0.5, so older XLA falls back to Get with a zero timeout.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "distprof-ffi/src/lib.rs.h"
#include "xla/pjrt/distributed/key_value_store_interface.h"

namespace distprof {
namespace {

template <typename T, typename = void>
struct HasTryGet : std::false_type {};
template <typename T>
struct HasTryGet<T, std::void_t<decltype(std::declval<T&>().TryGet(absl::string_view()))>>
    : std::true_type {};

void CopyBytes(absl::string_view from, rust::Vec<uint8_t>& to) {
  to.reserve(from.size());
  for (char c : from) to.push_back(static_cast<uint8_t>(c));
}

int32_t Failure(const absl::Status& status, rust::Vec<uint8_t>& error) {
  if (status.code() == absl::StatusCode::kNotFound ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    return bridge::kKvNotFound;
  }
  CopyBytes(status.ToString(), error);
  return bridge::kKvError;
}

int32_t Deliver(const absl::StatusOr<std::string>& result, rust::Vec<uint8_t>& value,
                rust::Vec<uint8_t>& error) {
  if (!result.ok()) return Failure(result.status(), error);
  CopyBytes(*result, value);
  return bridge::kKvOk;
}

absl::string_view View(rust::Str s) { return absl::string_view(s.data(), s.size()); }

class XlaKvHandle final : public bridge::KvHandle {
 public:
  explicit XlaKvHandle(std::shared_ptr<xla::KeyValueStoreInterface> kv) : kv_(std::move(kv)) {}

  int32_t get(rust::Str key, uint64_t timeout_ms, rust::Vec<uint8_t>& value,
              rust::Vec<uint8_t>& error) const override {
    const int64_t ms = timeout_ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                           ? std::numeric_limits<int64_t>::max()
                           : static_cast<int64_t>(timeout_ms);
    return Deliver(kv_->Get(View(key), absl::Milliseconds(ms)), value, error);
  }

  int32_t try_get(rust::Str key, rust::Vec<uint8_t>& value,
                  rust::Vec<uint8_t>& error) const override {
    if constexpr (HasTryGet<xla::KeyValueStoreInterface>::value) {
      return Deliver(kv_->TryGet(View(key)), value, error);
    } else {
      return Deliver(kv_->Get(View(key), absl::ZeroDuration()), value, error);
    }
  }

  int32_t set(rust::Str key, rust::Str value, rust::Vec<uint8_t>& error) const override {
    absl::Status status = kv_->Set(View(key), View(value));
    if (status.ok()) return bridge::kKvOk;
    CopyBytes(status.ToString(), error);
    return bridge::kKvError;
  }

 private:
  // The store's callbacks are valid only while XLA's client lives; distprof uses it only
  // during the rendezvous right after client creation.
  std::shared_ptr<xla::KeyValueStoreInterface> kv_;
};

}  // namespace

void OnGpuClientCreated(int node_id, int num_nodes,
                        std::shared_ptr<xla::KeyValueStoreInterface> kv_store) {
  if (bridge::PluginOff()) return;
  std::unique_ptr<bridge::KvHandle> handle;
  if (kv_store != nullptr) handle = std::make_unique<XlaKvHandle>(std::move(kv_store));
  bridge::on_client_created(node_id, num_nodes, std::move(handle));
}

}  // namespace distprof
