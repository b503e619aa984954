// Hook 1 (cc_hooks/kv_adapter.cc) on the real Rust bridge, built with AddressSanitizer by
// tests/steps/56-hook1-asan.sh (g++ -fsanitize=address, linking target/debug/libdistprof_ffi.a):
//
//   client_destroyed_during_trace  two nodes (threads) rendezvous over stores of the PJRT C
//       API's shape; then, during a trace, XLA destroys both clients. distprof must hold no
//       reference to a store once the rendezvous ended, and must make no call into the freed
//       client (ASan aborts on one).
//   cuda_client, sycl_client, mock_nccl_client  hook 1 leaves the client alone: no call to
//       its store, no reference kept, distprof turned off (one log line), no output.
//   dangling_control  calls a store after its client was freed, as a distprof that kept the
//       store would: must die with ASan's heap-use-after-free report, which shows that the
//       build really checks (the parent expects this scenario to fail).
//
// Run without arguments it re-executes itself once per scenario (the plugin reads its
// configuration once per process). Prints one line per scenario; exit 1 if any is wrong.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cc_hooks/client_guard.h"
#include "cc_hooks/distprof_hooks.h"
#include "cc_hooks/distprof_test_hooks.h"
#include "xla/pjrt/distributed/key_value_store_interface.h"

namespace {

int failures = 0;

#define EXPECT(cond, ...)                 \
  do {                                    \
    if (!(cond)) {                        \
      std::fprintf(stderr, "FAIL ");      \
      std::fprintf(stderr, __VA_ARGS__);  \
      std::fprintf(stderr, "\n");         \
      ++failures;                         \
    }                                     \
  } while (0)

// The coordination service: one key-value table all nodes share, outliving every client.
class Coordinator {
 public:
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout.chrono(), [&] { return values_.count(key) > 0; })) {
      return absl::DeadlineExceededError("timed out waiting for " + key);
    }
    return values_[key];
  }
  absl::StatusOr<std::string> TryGet(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return absl::NotFoundError(key);
    return it->second;
  }
  void Set(const std::string& key, const std::string& value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

// What the client owns and the store's callbacks use (jaxlib's PjRtCApiClient keeps it in
// `kv_callback_data_`): freed with the client, whoever still holds the store.
struct CallbackData {
  Coordinator* coordinator;
  std::atomic<int> calls{0};
};

// The store the client hands to XLA, of the C API's shape: every call goes through the
// client's callback data, by raw pointer.
class CApiStore : public xla::KeyValueStoreInterface {
 public:
  explicit CApiStore(CallbackData* data) : data_(data) {}
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    ++data_->calls;
    return data_->coordinator->Get(std::string(key), timeout);
  }
  absl::StatusOr<std::string> TryGet(absl::string_view key) override {
    ++data_->calls;
    return data_->coordinator->TryGet(std::string(key));
  }
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    ++data_->calls;
    data_->coordinator->Set(std::string(key), std::string(value));
    return absl::OkStatus();
  }

 private:
  CallbackData* data_;
};

// A GPU client as far as hook 1 is concerned: its callback data and the store over it.
struct Client {
  explicit Client(Coordinator* coordinator)
      : data(new CallbackData{coordinator}), store(std::make_shared<CApiStore>(data.get())) {}
  std::unique_ptr<CallbackData> data;
  std::shared_ptr<CApiStore> store;
};

bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string OutputDir() {
  std::string dir = std::filesystem::temp_directory_path().string() + "/distprof-hook1-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    std::exit(2);
  }
  return dir;
}

void Enable(const std::string& dir) {
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  setenv("XLA_DIST_PROF_OUTPUT_DIR", (dir + "/out").c_str(), 1);
  setenv("XLA_DIST_PROF_INTERFACE", "lo", 1);
  setenv("XLA_PROBE_CADENCE_US", "10000", 1);
  setenv("XLA_PROBE_WINDOW_S", "0.2", 1);
  setenv("XLA_SNAPSHOT_PERIOD_MS", "50", 1);
}

uint64_t TracerClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

int ClientDestroyedDuringTrace() {
  const std::string dir = OutputDir();
  Enable(dir);
  constexpr int kNodes = 2;
  Coordinator coordinator;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::weak_ptr<CApiStore>> stores;
  for (int node = 0; node < kNodes; ++node) {
    clients.push_back(std::make_unique<Client>(&coordinator));
    stores.push_back(clients.back()->store);
  }
  std::vector<std::thread> threads;
  for (int node = 0; node < kNodes; ++node) {
    threads.emplace_back([&, node] {
      distprof::OnGpuClientCreated(distprof::kRocmPlatformName, false, node, kNodes,
                                   clients[node]->store);
    });
  }
  for (auto& t : threads) t.join();
  const bool agreed = WaitFor(
      [&] {
        for (int node = 0; node < kNodes; ++node) {
          if (distprof::testing::RendezvousState(node, nullptr) !=
              distprof::testing::kRendezvousAgreed) {
            return false;
          }
        }
        return true;
      },
      15000);
  EXPECT(agreed, "client_destroyed_during_trace: the two nodes did not agree within 15 s");
  for (int node = 0; node < kNodes; ++node) {
    EXPECT(clients[node]->data->calls > 0,
           "client_destroyed_during_trace: node %d's store was never called", node);
  }

  distprof::OnTraceClockPair(1000, TracerClockNs());
  distprof::OnTraceStart(&TracerClockNs);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // XLA destroys the clients mid-trace: the callback data is freed and XLA's reference to
  // each store goes with it.
  clients.clear();
  for (int node = 0; node < kNodes; ++node) {
    EXPECT(stores[node].expired(),
           "client_destroyed_during_trace: distprof still holds node %d's store after the "
           "rendezvous (use_count %ld)",
           node, stores[node].use_count());
  }
  // The trace goes on probing and snapshotting; any call into a freed store aborts here.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  distprof::OnTraceStop();
  EXPECT(distprof::IsEnabled(), "client_destroyed_during_trace: distprof turned itself off");
  std::filesystem::remove_all(dir);
  return failures;
}

// Hook 1 on a client it must leave alone (`platform`, `mock_nccl` as XLA passes them).
int LeftAlone(const char* scenario, const char* platform, bool mock_nccl) {
  const std::string dir = OutputDir();
  Enable(dir);
  Coordinator coordinator;
  auto client = std::make_unique<Client>(&coordinator);
  std::weak_ptr<CApiStore> store = client->store;
  EXPECT(distprof::ClientSkipReason(platform, mock_nccl) != nullptr,
         "%s: the guard lets the client through", scenario);
  EXPECT(distprof::IsEnabled(), "%s: distprof is not enabled before the hook", scenario);
  distprof::OnGpuClientCreated(platform, mock_nccl, 0, 2, client->store);
  EXPECT(client->data->calls == 0, "%s: distprof called the store %d times", scenario,
         client->data->calls.load());
  EXPECT(!distprof::IsEnabled(), "%s: distprof is still enabled", scenario);
  EXPECT(distprof::testing::RendezvousState(0, nullptr) == distprof::testing::kRendezvousNone,
         "%s: a rendezvous started", scenario);
  client.reset();
  EXPECT(store.expired(), "%s: distprof kept a reference to the store", scenario);
  distprof::OnTraceStart(&TracerClockNs);
  distprof::OnTraceStop();
  EXPECT(!std::filesystem::exists(dir + "/out"), "%s: distprof wrote output", scenario);
  std::filesystem::remove_all(dir);
  return failures;
}

// What a distprof that kept the store past its client would do.
int DanglingControl() {
  Coordinator coordinator;
  auto client = std::make_unique<Client>(&coordinator);
  std::shared_ptr<CApiStore> kept = client->store;
  client.reset();
  (void)kept->Set("distprof/late", "x");  // heap-use-after-free: ASan aborts here
  return 0;
}

int RunScenario(const std::string& name) {
  if (name == "client_destroyed_during_trace") return ClientDestroyedDuringTrace();
  if (name == "cuda_client") return LeftAlone("cuda_client", "cuda", false);
  if (name == "sycl_client") return LeftAlone("sycl_client", "sycl", false);
  if (name == "mock_nccl_client") return LeftAlone("mock_nccl_client", "rocm", true);
  if (name == "dangling_control") return DanglingControl();
  std::fprintf(stderr, "unknown scenario %s\n", name.c_str());
  return 2;
}

// The guard alone, as hook 1 applies it.
int GuardCases() {
  EXPECT(distprof::ClientSkipReason("rocm", false) == nullptr, "guard: a ROCm client is refused");
  EXPECT(std::strstr(distprof::ClientSkipReason("cuda", false), "not a ROCm") != nullptr,
         "guard: a CUDA client is not refused as such");
  EXPECT(distprof::ClientSkipReason("sycl", false) != nullptr, "guard: a SYCL client is taken");
  EXPECT(distprof::ClientSkipReason("oneapi", false) != nullptr, "guard: a oneAPI client is taken");
  EXPECT(distprof::ClientSkipReason(nullptr, false) != nullptr, "guard: a null platform is taken");
  EXPECT(std::strstr(distprof::ClientSkipReason("rocm", true), "mock-NCCL") != nullptr,
         "guard: a mock-NCCL ROCm client is not refused as such");
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return RunScenario(argv[1]) == 0 ? 0 : 1;
  int wrong = GuardCases() == 0 ? 0 : 1;
  std::printf("%s guard\n", wrong ? "FAIL" : "PASS");
  struct Scenario {
    const char* name;
    bool must_fail;
    const char* in_stderr;  // what the child's stderr must hold, if anything
  };
  const Scenario scenarios[] = {
      {"client_destroyed_during_trace", false, nullptr},
      {"cuda_client", false, "not a ROCm GPU client"},
      {"sycl_client", false, "not a ROCm GPU client"},
      {"mock_nccl_client", false, "mock-NCCL client"},
      {"dangling_control", true, "heap-use-after-free"},
  };
  for (const Scenario& s : scenarios) {
    const std::string log = OutputDir() + "/stderr.txt";
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
      execl("/proc/self/exe", argv[0], s.name, static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::string text;
    if (FILE* f = std::fopen(log.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
      std::fclose(f);
    }
    const bool has_text = s.in_stderr == nullptr || text.find(s.in_stderr) != std::string::npos;
    const bool ok = (s.must_fail ? !exited_ok : exited_ok) && has_text;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", s.name);
    if (!ok) {
      std::printf("--- stderr of %s:\n%s\n", s.name, text.c_str());
      wrong = 1;
    }
    std::filesystem::remove_all(std::filesystem::path(log).parent_path());
  }
  return wrong;
}
