// Plays XLA against the distprof hooks: an in-memory key-value store with XLA's
// Get(key, timeout) / TryGet / Set shape, N nodes as threads calling the hooks in XLA's
// order (agent connected, GPU client created, trace start, stop, export).
//
// Run without arguments it re-executes itself once per scenario, so every scenario gets a
// fresh process (the plugin reads its configuration once per process):
//   compiled in  (DISTPROF_EXPECT_COMPILED_IN): disabled, bad_config, enabled,
//                panic_client_created, panic_trace_start, panic_trace_export
//   compiled out (the empty plugin):            compiled_out
// A scenario prints one FAIL line per broken expectation and exits 1.
//
// DISTPROF_TEST_FORCE_PANIC is a TEST-ONLY switch of the Rust bridge
// (rust/distprof-ffi/src/test_switch.rs): it makes the named hook panic inside Rust.

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cc_hooks/distprof_hooks.h"
#include "tsl/profiler/protobuf/xplane.pb.h"
#include "xla/pjrt/distributed/key_value_store_interface.h"

namespace {

constexpr int kNumNodes = 4;
int failures = 0;

#define EXPECT(cond, ...)                                      \
  do {                                                         \
    if (!(cond)) {                                             \
      ++failures;                                              \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                       \
      std::fprintf(stderr, "\n");                              \
    }                                                          \
  } while (0)

// XLA's in-memory store semantics: Get blocks until the key exists or the timeout ends.
class InMemoryKv : public xla::KeyValueStoreInterface {
 public:
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++gets_[std::string(key)];
    const bool found = cv_.wait_for(lock, timeout.chrono(), [&] {
      return values_.count(std::string(key)) > 0;
    });
    if (!found) return absl::DeadlineExceededError("timed out waiting for " + std::string(key));
    return values_[std::string(key)];
  }
  absl::StatusOr<std::string> TryGet(absl::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return absl::NotFoundError(std::string(key));
    return it->second;
  }
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[std::string(key)] = std::string(value);
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  int CountKeysWithPrefix(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& kv : values_) n += kv.first.compare(0, prefix.size(), prefix) == 0;
    return n;
  }
  int Gets(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return gets_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  std::map<std::string, int> gets_;
};

std::atomic<int> tracer_reads{0};
constexpr uint64_t kTracerNs = 777000777;
uint64_t FakeTracerClock() {
  ++tracer_reads;
  return kTracerNs;
}

int CountThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Open descriptors other than the one listing them, and how many are sockets.
struct Fds {
  int total = 0;
  int sockets = 0;
};
Fds CountFds() {
  Fds fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == own) continue;
    ++fds.total;
    char target[256] = {0};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
        std::string(target).rfind("socket:", 0) == 0) {
      ++fds.sockets;
    }
  }
  closedir(d);
  return fds;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Minimal protobuf wire reader: the names of the planes (XSpace field 1, XPlane field 2).
bool ReadVarint(const std::string& s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; i < s.size() && shift < 64; shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[i++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}
// Calls f(field, bytes) for every length-delimited field; false on malformed input.
template <typename F>
bool ForEachBytesField(const std::string& s, F f) {
  size_t i = 0;
  while (i < s.size()) {
    uint64_t key, len;
    if (!ReadVarint(s, i, key)) return false;
    switch (key & 7) {
      case 0:
        if (!ReadVarint(s, i, len)) return false;
        break;
      case 2:
        if (!ReadVarint(s, i, len) || len > s.size() - i) return false;
        f(static_cast<int>(key >> 3), s.substr(i, len));
        i += len;
        break;
      default:
        return false;
    }
  }
  return true;
}
std::vector<std::string> PlaneNames(const tensorflow::profiler::XSpace& space) {
  std::vector<std::string> names;
  for (const std::string& fragment : space.fragments()) {
    const bool ok = ForEachBytesField(fragment, [&](int field, const std::string& plane) {
      if (field != 1) return;
      ForEachBytesField(plane, [&](int f, const std::string& v) {
        if (f == 2) names.push_back(v);
      });
    });
    EXPECT(ok, "the exported XSpace fragment is not valid protobuf");
  }
  return names;
}

// XLA's order: agent connected, then every node's GPU client (one thread per node, all
// sharing the store), then one profiling session driven by one thread.
void CreateClients(const std::shared_ptr<InMemoryKv>& kv) {
  distprof::OnAgentConnected(0);
  std::vector<std::thread> nodes;
  for (int node = 0; node < kNumNodes; ++node) {
    nodes.emplace_back([node, kv] { distprof::OnGpuClientCreated(node, kNumNodes, kv); });
  }
  for (auto& t : nodes) t.join();
}
void Profile(tensorflow::profiler::XSpace* space) {
  distprof::OnTraceStart(&FakeTracerClock);
  distprof::OnTraceStop();
  distprof::OnTraceExport(space);
}

bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A fresh directory under $TEST_TMPDIR (Bazel) or /tmp, removed when the scenario ends.
std::string MakeTempDir() {
  static std::vector<std::string> made;
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : made) std::filesystem::remove_all(d, ec);
    }
  } cleanup;
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/distprof-xla-sim-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::exit(2);
  }
  made.push_back(tmpl);
  return tmpl;
}

// Disabled, misconfigured or compiled out: the hooks must leave no trace at all.
void ExpectNothingHappens(const char* scenario) {
  const std::string out = MakeTempDir() + "/out";
  setenv("XLA_DIST_PROF_OUTPUT_DIR", out.c_str(), 1);
  const int threads_before = CountThreads();
  const Fds fds_before = CountFds();

  auto kv = std::make_shared<InMemoryKv>();
  CreateClients(kv);
  tensorflow::profiler::XSpace space;
  Profile(&space);

  EXPECT(!distprof::IsEnabled(), "%s: IsEnabled() is true", scenario);
  EXPECT(CountThreads() == threads_before, "%s: %d threads before, %d after", scenario,
         threads_before, CountThreads());
  const Fds fds_after = CountFds();
  EXPECT(fds_after.total == fds_before.total && fds_after.sockets == fds_before.sockets,
         "%s: fds %d -> %d, sockets %d -> %d", scenario, fds_before.total, fds_after.total,
         fds_before.sockets, fds_after.sockets);
  EXPECT(!Exists(out), "%s: %s was created", scenario, out.c_str());
  EXPECT(kv->CountKeysWithPrefix("distprof/") == 0, "%s: distprof wrote to the store", scenario);
  EXPECT(space.fragments().empty(), "%s: planes were exported", scenario);
  EXPECT(tracer_reads == 0, "%s: the tracer clock was read", scenario);
}

int Disabled() {
  unsetenv("XLA_ENABLE_DISTRIBUTED_PROFILING");
  ExpectNothingHappens("disabled");
  return failures;
}

int BadConfig() {
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "maybe", 1);
  ExpectNothingHappens("bad_config");
  return failures;
}

int CompiledOut() {
  // Even asked for, nothing can happen: the empty plugin has no code to run.
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  ExpectNothingHappens("compiled_out");
  return failures;
}

int Enabled() {
  const std::string out = MakeTempDir() + "/out";
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  setenv("XLA_DIST_PROF_OUTPUT_DIR", out.c_str(), 1);
  auto kv = std::make_shared<InMemoryKv>();
  CreateClients(kv);
  EXPECT(distprof::IsEnabled(), "enabled: IsEnabled() is false");

  // Rust's background threads call back into this store through the bridge: every node
  // writes its hello and every node reads node 0's.
  const bool exchanged = WaitFor(
      [&] {
        return kv->CountKeysWithPrefix("distprof/hello/") == kNumNodes &&
               kv->Gets("distprof/hello/0") == kNumNodes;
      },
      10000);
  EXPECT(exchanged, "enabled: %d hellos written, %d reads of node 0 (want %d each)",
         kv->CountKeysWithPrefix("distprof/hello/"), kv->Gets("distprof/hello/0"), kNumNodes);
  auto hello1 = kv->TryGet("distprof/hello/1");
  EXPECT(hello1.ok() && (*hello1).find("\"node\":1") != std::string::npos,
         "enabled: node 1's hello is missing or wrong");

  tensorflow::profiler::XSpace space;
  Profile(&space);
  EXPECT(tracer_reads >= 2, "enabled: tracer clock read %d times, want >= 2 (start, stop)",
         tracer_reads.load());
  for (int node = 0; node < kNumNodes; ++node) {
    const std::string path = out + "/distprof-node" + std::to_string(node) + ".jsonl";
    const std::string text = ReadFile(path);
    EXPECT(text.find("\"kind\":\"meta\"") != std::string::npos, "enabled: %s has no meta line",
           path.c_str());
    EXPECT(text.find("\"tracer_ns\":" + std::to_string(kTracerNs)) != std::string::npos,
           "enabled: %s lacks the tracer clock reading", path.c_str());
  }
  const std::vector<std::string> names = PlaneNames(space);
  EXPECT(names.size() == kNumNodes, "enabled: %zu planes exported, want %d", names.size(),
         kNumNodes);
  for (int node = 0; node < kNumNodes; ++node) {
    const std::string want = "/distprof/node:" + std::to_string(node);
    bool found = false;
    for (const auto& n : names) found |= n == want;
    EXPECT(found, "enabled: no plane named %s", want.c_str());
  }
  EXPECT(distprof::IsEnabled(), "enabled: disabled itself during a normal run");
  return failures;
}

// A panic forced inside Rust at `hook`: the process keeps running, the plugin turns off,
// later hooks do nothing.
int Panic(const std::string& hook) {
  const std::string out = MakeTempDir() + "/out";
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  setenv("XLA_DIST_PROF_OUTPUT_DIR", out.c_str(), 1);
  setenv("DISTPROF_TEST_FORCE_PANIC", hook.c_str(), 1);
  auto kv = std::make_shared<InMemoryKv>();
  CreateClients(kv);
  if (hook == "client_created") {
    EXPECT(!distprof::IsEnabled(), "panic at %s: still enabled", hook.c_str());
  } else {
    EXPECT(distprof::IsEnabled(), "panic at %s: disabled before the panic", hook.c_str());
  }
  tensorflow::profiler::XSpace space;
  distprof::OnTraceStart(&FakeTracerClock);
  if (hook == "trace_start") {
    EXPECT(!distprof::IsEnabled(), "panic at %s: still enabled", hook.c_str());
  }
  distprof::OnTraceStop();
  distprof::OnTraceExport(&space);
  EXPECT(!distprof::IsEnabled(), "panic at %s: still enabled at the end", hook.c_str());
  EXPECT(space.fragments().empty(), "panic at %s: planes exported after the panic", hook.c_str());
  if (hook != "trace_export") {
    EXPECT(!Exists(out + "/distprof-node0.jsonl"), "panic at %s: JSONL written after the panic",
           hook.c_str());
  }
  std::fprintf(stderr, "panic at %s: process still running\n", hook.c_str());
  return failures;
}

int RunScenario(const std::string& name) {
  if (name == "disabled") return Disabled();
  if (name == "bad_config") return BadConfig();
  if (name == "enabled") return Enabled();
  if (name == "compiled_out") return CompiledOut();
  if (name.rfind("panic_", 0) == 0) return Panic(name.substr(6));
  std::fprintf(stderr, "unknown scenario `%s`\n", name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return RunScenario(argv[1]) == 0 ? 0 : 1;
#ifdef DISTPROF_EXPECT_COMPILED_IN
  const std::vector<std::string> scenarios = {
      "disabled", "bad_config", "enabled", "panic_client_created", "panic_trace_start",
      "panic_trace_export"};
#else
  const std::vector<std::string> scenarios = {"compiled_out"};
#endif
  int failed = 0;
  for (const std::string& s : scenarios) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      // Each scenario in a fresh process: the plugin reads its configuration once.
      unsetenv("DISTPROF_TEST_FORCE_PANIC");
      execl("/proc/self/exe", argv[0], s.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", s.c_str());
    if (!ok && WIFSIGNALED(status)) std::printf("  killed by signal %d\n", WTERMSIG(status));
    failed += !ok;
  }
  return failed == 0 ? 0 : 1;
}
