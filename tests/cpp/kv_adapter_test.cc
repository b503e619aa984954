// cc_hooks/kv_adapter.h over two stores of XLA's two KeyValueStoreInterface shapes, driven
// through the bridge's KvHandle as Rust drives it: a store with TryGet (jax >= 0.5) gets
// TryGet; one without (jax 0.4.38, rocm-jaxlib 0.4.35) gets Get with a zero timeout. Both
// would compile if the choice were an `if constexpr` the store type does not depend on only
// when every store had TryGet; here the one without it must compile and be asked Get.
//
// Run by `bazel test --define enable_distributed_profiling=true //:kv_adapter_test`
// (tests/steps/20-bazel.sh); it links the bridge staticlib (rust::Str and rust::Vec live
// there), so compiled out it only says that it was not run.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#ifdef DISTPROF_EXPECT_COMPILED_IN
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc_hooks/bridge_types.h"
#include "cc_hooks/kv_adapter.h"
#include "distprof-ffi/src/lib.rs.h"

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// Counts what the adapter asks; a key "missing" is absent, "broken" fails.
struct Calls {
  int get = 0;
  int try_get = 0;
  int set = 0;
  int64_t last_timeout_ms = -1;
  std::string last_key, last_value;
};

absl::StatusOr<std::string> Answer(absl::string_view key) {
  if (key == "missing") return absl::NotFoundError("missing");
  if (key == "broken") return absl::UnavailableError("store down");
  return std::string("value-of-") + std::string(key);
}

// What both store shapes record; each shape exposes only the methods XLA's has.
class Recorder {
 public:
  Calls calls;

 protected:
  absl::StatusOr<std::string> RecordGet(absl::string_view key, int64_t timeout_ms) {
    ++calls.get;
    calls.last_key = std::string(key);
    calls.last_timeout_ms = timeout_ms;
    return Answer(key);
  }
  void RecordSet(absl::string_view key, absl::string_view value) {
    ++calls.set;
    calls.last_key = std::string(key);
    calls.last_value = std::string(value);
  }
};

// jax >= 0.5: Get, TryGet, Set.
class StoreWithTryGet : public Recorder {
 public:
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) {
    return RecordGet(key, absl::ToInt64Milliseconds(timeout));
  }
  absl::StatusOr<std::string> TryGet(absl::string_view key) {
    ++calls.try_get;
    calls.last_key = std::string(key);
    return Answer(key);
  }
  absl::Status Set(absl::string_view key, absl::string_view value) {
    RecordSet(key, value);
    return absl::OkStatus();
  }
};

// jax 0.4.38 / rocm-jaxlib 0.4.35: Get and Set only.
class StoreWithoutTryGet : public Recorder {
 public:
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) {
    return RecordGet(key, absl::ToInt64Milliseconds(timeout));
  }
  absl::Status Set(absl::string_view key, absl::string_view value) {
    RecordSet(key, value);
    return absl::UnavailableError("read-only store");
  }
};

std::string Text(const rust::Vec<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

template <typename Store>
void Exercise(const char* name, bool has_try_get) {
  auto store = std::make_shared<Store>();
  distprof::KvAdapter<Store> adapter(store);
  const distprof::bridge::KvHandle& handle = adapter;
  std::string label;
  auto expect = [&](bool ok, const std::string& what) {
    label = std::string(name) + ": " + what;
    Expect(ok, label.c_str());
  };

  rust::Vec<uint8_t> value, error;
  int32_t code = handle.try_get("rank/1", value, error);
  expect(code == distprof::bridge::kKvOk && Text(value) == "value-of-rank/1",
         "try_get delivers the value");
  if (has_try_get) {
    expect(store->calls.try_get == 1 && store->calls.get == 0, "try_get asked TryGet, not Get");
  } else {
    expect(store->calls.try_get == 0 && store->calls.get == 1 && store->calls.last_timeout_ms == 0,
           "try_get asked Get with a zero timeout");
  }

  rust::Vec<uint8_t> none, none_error;
  expect(handle.try_get("missing", none, none_error) == distprof::bridge::kKvNotFound &&
             none.empty() && none_error.empty(),
         "an absent key is kKvNotFound with no error text");

  rust::Vec<uint8_t> got, got_error;
  const int before = store->calls.get;
  code = handle.get("rank/2", 1500, got, got_error);
  expect(code == distprof::bridge::kKvOk && store->calls.get == before + 1 &&
             store->calls.last_timeout_ms == 1500 && Text(got) == "value-of-rank/2",
         "get passes the timeout to Get");

  rust::Vec<uint8_t> bad, bad_error;
  code = handle.get("broken", 10, bad, bad_error);
  expect(code == distprof::bridge::kKvError && Text(bad_error).find("store down") != std::string::npos,
         "a failing Get is kKvError carrying the store's message");

  rust::Vec<uint8_t> set_error;
  code = handle.set("clock/0", "bytes", set_error);
  expect(store->calls.set == 1 && store->calls.last_key == "clock/0" &&
             store->calls.last_value == "bytes",
         "set passes key and value to Set");
  if (has_try_get) {
    expect(code == distprof::bridge::kKvOk, "a successful Set is kKvOk");
  } else {
    expect(code == distprof::bridge::kKvError &&
               Text(set_error).find("read-only store") != std::string::npos,
           "a failing Set is kKvError carrying the store's message");
  }
}

}  // namespace

int main() {
  Exercise<StoreWithTryGet>("store with TryGet (jax >= 0.5)", true);
  Exercise<StoreWithoutTryGet>("store without TryGet (jax 0.4.38)", false);
  if (failures != 0) {
    std::printf("kv_adapter_test: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("kv_adapter_test: all checks passed\n");
  return 0;
}
#else
int main() {
  std::printf(
      "kv_adapter_test: not run compiled out (needs the bridge staticlib: "
      "--define enable_distributed_profiling=true)\n");
  return 0;
}
#endif
