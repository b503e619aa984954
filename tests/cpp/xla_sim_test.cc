// Plays XLA against the distprof hooks: an in-memory key-value store with XLA's
// Get(key, timeout) / TryGet / Set shape, N nodes as threads calling the hooks in XLA's
// order (agent connected, GPU client created, trace start, stop, export).
//
// Run without arguments it re-executes itself once per scenario, so every scenario gets a
// fresh process (the plugin reads its configuration once per process):
//   compiled in  (DISTPROF_EXPECT_COMPILED_IN): disabled, bad_config, enabled, single_node,
//                master_missing, panic_client_created, panic_trace_start,
//                panic_trace_export
//   compiled out (the empty plugin):            compiled_out
// A scenario prints one FAIL line per broken expectation and exits 1.
//
// With the plugin enabled the real rendezvous runs on distprof's threads across the N node
// threads over the store below; every node's agreed context digest is read through the
// test-only accessor of cc_hooks/distprof_test_hooks.h and must be the same. Every hook
// call is timed and must return within kHookBoundUs, also while the rendezvous waits.
//
// DISTPROF_TEST_FORCE_PANIC is a TEST-ONLY switch of the Rust bridge
// (rust/distprof-ffi/src/test_switch.rs): it makes the named hook panic inside Rust.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
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
#ifdef DISTPROF_EXPECT_COMPILED_IN
// Only the real plugin defines the test accessors; compiled out, the binary must hold no
// distprof symbol beyond the six hooks (//:plugin_symbols_test).
#include "cc_hooks/distprof_test_hooks.h"
#endif
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

using Clock = std::chrono::steady_clock;

// XLA's in-memory store semantics: Get blocks until the key exists or the timeout ends.
// Counts the calls and remembers when the last one returned: distprof may use the store
// only for a bounded time after the GPU client's creation.
class InMemoryKv : public xla::KeyValueStoreInterface {
 public:
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++gets_[std::string(key)];
    const bool found = cv_.wait_for(lock, timeout.chrono(), [&] {
      return values_.count(std::string(key)) > 0;
    });
    Returned();
    if (!found) return absl::DeadlineExceededError("timed out waiting for " + std::string(key));
    return values_[std::string(key)];
  }
  absl::StatusOr<std::string> TryGet(absl::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    Returned();
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return absl::NotFoundError(std::string(key));
    return it->second;
  }
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[std::string(key)] = std::string(value);
      Returned();
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  int Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  Clock::time_point LastCallEnd() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_call_end_;
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
  int calls_ = 0;
  Clock::time_point last_call_end_{};

  void Returned() {  // with mu_ held
    ++calls_;
    last_call_end_ = Clock::now();
  }
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

// Every hook must return within microseconds, including the first one (which reads the
// configuration) and calls made while the rendezvous waits: XLA calls them on its own
// threads and must never wait for distprof. Each call is measured twice:
// - its CPU time (CLOCK_THREAD_CPUTIME_ID) must stay under kHookCpuBoundUs: the work the
//   hook does on XLA's thread;
// - its wall time must stay under kHookWallBoundUs, half the shortest wait of the
//   rendezvous (a 50 ms poll of the store), so a hook that waited for the rendezvous, the
//   store or a distprof thread fails. Wall time above the CPU time is scheduling: on the
//   shared 2-core test machine a runnable thread can wait several ms for a core.
//   The first hook of the process is held to the CPU bound only: it pages the plugin's
//   code in from disk (measured 18 ms of wall time for 0.4 ms of CPU under Bazel on a busy
//   machine), which is I/O, not distprof waiting for anything.
constexpr char kFirstHook[] = "first hook (OnAgentConnected)";
constexpr int64_t kHookCpuBoundUs = 1000;
constexpr int64_t kHookWallBoundUs = 25000;
struct Slowest {
  int64_t wall_us = 0;
  int64_t cpu_us = 0;
  int calls = 0;
};
std::mutex timing_mu;
std::map<std::string, Slowest> slowest;  // per hook

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct HookTimer {
  const char* hook;
  Clock::time_point wall_start = Clock::now();
  int64_t cpu_start_ns = ThreadCpuNs();
  ~HookTimer() {
    const int64_t cpu_us = (ThreadCpuNs() - cpu_start_ns) / 1000;
    const int64_t wall_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - wall_start).count();
    std::lock_guard<std::mutex> lock(timing_mu);
    Slowest& s = slowest[hook];
    if (wall_us > s.wall_us) s.wall_us = wall_us;
    if (cpu_us > s.cpu_us) s.cpu_us = cpu_us;
    ++s.calls;
  }
};

template <typename F>
auto Timed(const char* hook, F&& f) {
  HookTimer timer{hook};
  return f();
}

// Fails for every hook whose slowest call broke a bound; logs all of them.
// Unused when compiled out (those scenarios only check that nothing happens).
[[maybe_unused]] void ExpectHooksFast(const char* scenario) {
  std::lock_guard<std::mutex> lock(timing_mu);
  std::string summary;
  for (const auto& [hook, s] : slowest) {
    summary += " " + hook + "=" + std::to_string(s.cpu_us) + "/" + std::to_string(s.wall_us) +
               "us(" + std::to_string(s.calls) + ")";
    EXPECT(s.cpu_us < kHookCpuBoundUs, "%s: a call of %s used %lld us of CPU (bound %lld us)",
           scenario, hook.c_str(), static_cast<long long>(s.cpu_us),
           static_cast<long long>(kHookCpuBoundUs));
    EXPECT(hook == kFirstHook || s.wall_us < kHookWallBoundUs,
           "%s: a call of %s took %lld us (bound %lld us)",
           scenario, hook.c_str(), static_cast<long long>(s.wall_us),
           static_cast<long long>(kHookWallBoundUs));
  }
  std::fprintf(stderr, "%s: slowest hook calls, CPU/wall (calls):%s\n", scenario,
               summary.c_str());
}

void CreateClient(int node, int num_nodes, std::shared_ptr<xla::KeyValueStoreInterface> kv) {
  Timed("OnGpuClientCreated",
        [&] { distprof::OnGpuClientCreated(node, num_nodes, std::move(kv)); });
}

// XLA's order: agent connected, then the GPU clients of `nodes` (one thread per node, all
// sharing the store).
void CreateClients(const std::shared_ptr<InMemoryKv>& kv, const std::vector<int>& nodes,
                   int num_nodes = kNumNodes) {
  Timed(kFirstHook, [] { distprof::OnAgentConnected(0); });
  std::vector<std::thread> threads;
  for (int node : nodes) {
    threads.emplace_back([node, num_nodes, kv] { CreateClient(node, num_nodes, kv); });
  }
  for (auto& t : threads) t.join();
}
void CreateClients(const std::shared_ptr<InMemoryKv>& kv) {
  std::vector<int> all;
  for (int node = 0; node < kNumNodes; ++node) all.push_back(node);
  CreateClients(kv, all);
}

// One profiling session driven by one thread, `profile_ms` long.
void Profile(tensorflow::profiler::XSpace* space, int profile_ms = 0) {
  Timed("OnTraceStart", [] { distprof::OnTraceStart(&FakeTracerClock); });
  if (profile_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(profile_ms));
  Timed("OnTraceStop", [] { distprof::OnTraceStop(); });
  Timed("OnTraceExport", [&] { distprof::OnTraceExport(space); });
}

// Unused when compiled out (those scenarios only check that nothing happens).
[[maybe_unused]] bool IsEnabledTimed() {
  return Timed("IsEnabled", [] { return distprof::IsEnabled(); });
}

#ifdef DISTPROF_EXPECT_COMPILED_IN
int StateOf(int node, std::string* digest = nullptr) {
  return Timed("RendezvousState",
               [&] { return distprof::testing::RendezvousState(node, digest); });
}
#endif

// Unused when compiled out (those scenarios only check that nothing happens).
[[maybe_unused]] bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
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

// The distprof plane's name (rust/distprof/src/distprof_plane.rs).
constexpr char kClockPlaneName[] = "/host:distprof";

// One distprof plane per node in `space`; with `probed`, every node's probe engine wrote
// its JSONL file (meta line and closed windows) and, after stopping, its model file with
// a clock model against the reference node.
[[maybe_unused]] void ExpectTraceOutput(const char* scenario, const std::string& out,
                                        const tensorflow::profiler::XSpace& space, int num_nodes,
                                        bool probed) {
  const std::vector<std::string> names = PlaneNames(space);
  int planes = 0;
  for (const auto& n : names) planes += n == kClockPlaneName;
  EXPECT(planes == num_nodes && names.size() == static_cast<size_t>(num_nodes),
         "%s: %d %s planes among %zu exported, want %d", scenario, planes, kClockPlaneName,
         names.size(), num_nodes);
  if (!probed) return;
  for (int node = 0; node < num_nodes; ++node) {
    const std::string n = std::to_string(node);
    // Written by distprof's probe thread, which ends on its own after trace stop.
    const std::string model_path = out + "/distprof-model-node" + n + ".json";
    std::string model;
    WaitFor([&] { return (model = ReadFile(model_path)).find('\n') != std::string::npos; },
            10000);
    EXPECT(model.find("\"reachable\":true") != std::string::npos,
           "%s: node %d has no clock model against the reference: `%s`", scenario, node,
           model.c_str());
    const std::string jsonl = ReadFile(out + "/probe_windows_node" + n + ".jsonl");
    int lines = 0;
    for (char c : jsonl) lines += c == '\n';
    EXPECT(jsonl.rfind("{\"meta\":true", 0) == 0 && lines >= 3,
           "%s: node %d's JSONL has %d lines (want a meta line and >= 2 windows)", scenario,
           node, lines);
  }
}

#ifdef DISTPROF_EXPECT_COMPILED_IN
// Waits until every node in [0, num_nodes) has agreed; returns their context digests.
std::vector<std::string> AgreedDigests(const char* scenario, int num_nodes) {
  std::vector<std::string> digests(num_nodes);
  const bool agreed = WaitFor(
      [&] {
        for (int node = 0; node < num_nodes; ++node) {
          if (StateOf(node, &digests[node]) != distprof::testing::kRendezvousAgreed) return false;
        }
        return true;
      },
      20000);
  for (int node = 0; node < num_nodes; ++node) {
    std::fprintf(stderr, "%s: node %d state %d context %s\n", scenario, node, StateOf(node),
                 digests[node].c_str());
  }
  EXPECT(agreed, "%s: not every node agreed within 20 s", scenario);
  for (int node = 0; node < num_nodes; ++node) {
    EXPECT(digests[node].size() >= 16 && digests[node] == digests[0],
           "%s: node %d agreed on context `%s`, node 0 on `%s`", scenario, node,
           digests[node].c_str(), digests[0].c_str());
  }
  return digests;
}

// Short windows so that a profile of about a second closes several; probes over loopback.
void SetProbeEnv(const std::string& out) {
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  setenv("XLA_DIST_PROF_OUTPUT_DIR", out.c_str(), 1);
  setenv("XLA_PROBE_CADENCE_US", "10000", 1);
  setenv("XLA_PROBE_WINDOW_S", "0.4", 1);
  setenv("XLA_SNAPSHOT_PERIOD_MS", "50", 1);
  setenv("XLA_DIST_PROF_INTERFACE", "lo", 1);
}
constexpr int kProfileMs = 1300;

int Enabled() {
  const std::string out = MakeTempDir() + "/out";
  SetProbeEnv(out);
  auto kv = std::make_shared<InMemoryKv>();

  // All nodes but the last: the rendezvous must wait for it, and the hooks must not.
  std::vector<int> early;
  for (int node = 0; node < kNumNodes - 1; ++node) early.push_back(node);
  CreateClients(kv, early);
  EXPECT(IsEnabledTimed(), "enabled: IsEnabled() is false");
  for (int node : early) {
    EXPECT(StateOf(node) == distprof::testing::kRendezvousPending,
           "enabled: node %d is in state %d before the last node arrived, want pending", node,
           StateOf(node));
  }
  // A whole profiling session while the rendezvous waits.
  tensorflow::profiler::XSpace early_space;
  Profile(&early_space);
  for (int i = 0; i < 20; ++i) {
    IsEnabledTimed();
    StateOf(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT(StateOf(0) == distprof::testing::kRendezvousPending,
         "enabled: node 0 left pending without node %d", kNumNodes - 1);
  EXPECT(PlaneNames(early_space).size() == early.size(),
         "enabled: %zu planes exported while pending, want %zu", PlaneNames(early_space).size(),
         early.size());

  CreateClient(kNumNodes - 1, kNumNodes, kv);
  const std::vector<std::string> digests = AgreedDigests("enabled", kNumNodes);
  // The real protocol ran on this store: the master's announcement, every join, the context.
  EXPECT(kv->CountKeysWithPrefix("distprof/round/") == 1, "enabled: %d rounds in the store",
         kv->CountKeysWithPrefix("distprof/round/"));
  EXPECT(kv->CountKeysWithPrefix("distprof/s/") >= kNumNodes,
         "enabled: %d session keys in the store, want >= %d (joins, context)",
         kv->CountKeysWithPrefix("distprof/s/"), kNumNodes);
  // Agreed means the store has been let go: no further call reaches it.
  const int calls = kv->Calls();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT(kv->Calls() == calls, "enabled: %d store calls after every node agreed",
         kv->Calls() - calls);

  // Nothing probed before every node agreed.
  EXPECT(!Exists(out + "/probe_windows_node0.jsonl"), "enabled: node 0 probed while pending");

  tensorflow::profiler::XSpace space;
  const int reads_before = tracer_reads;
  Profile(&space, kProfileMs);
  // The sampler reads the tracer clock every 50 ms (best of 5 reads per pair).
  EXPECT(tracer_reads - reads_before >= 10 * 5, "enabled: tracer clock read %d times in %d ms",
         tracer_reads - reads_before, kProfileMs);
  ExpectTraceOutput("enabled", out, space, kNumNodes, true);
  EXPECT(IsEnabledTimed(), "enabled: disabled itself during a normal run");
  ExpectHooksFast("enabled");
  return failures;
}

// num_nodes == 1, no store (XLA passes none): the node agrees with itself.
int SingleNode() {
  const std::string out = MakeTempDir() + "/out";
  SetProbeEnv(out);
  Timed(kFirstHook, [] { distprof::OnAgentConnected(0); });
  CreateClient(0, 1, nullptr);
  AgreedDigests("single_node", 1);
  tensorflow::profiler::XSpace space;
  Profile(&space, kProfileMs);
  // No peers: snapshot pairs only, and the node is its own reference.
  ExpectTraceOutput("single_node", out, space, 1, true);
  EXPECT(IsEnabledTimed(), "single_node: disabled itself");
  ExpectHooksFast("single_node");
  return failures;
}

// Redirects this process's stderr (fd 2) to a file until Stop(), which returns the text.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  std::string Stop() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    return ReadFile(path_);
  }

 private:
  std::string path_;
  int saved_;
};

// Node 0 never creates its client: the others give up within rendezvous_timeout_ms, the
// plugin turns off with one log line, and the store is not called after the timeout.
int MasterMissing() {
  constexpr int kTimeoutMs = 300;
  const std::string dir = MakeTempDir();
  setenv("XLA_ENABLE_DISTRIBUTED_PROFILING", "1", 1);
  setenv("XLA_DIST_PROF_OUTPUT_DIR", (dir + "/out").c_str(), 1);
  setenv("XLA_DIST_PROF_RENDEZVOUS_TIMEOUT_MS", std::to_string(kTimeoutMs).c_str(), 1);
  StderrCapture capture(dir + "/stderr.txt");
  auto kv = std::make_shared<InMemoryKv>();
  const auto created = Clock::now();
  std::vector<int> nodes;
  for (int node = 1; node < kNumNodes; ++node) nodes.push_back(node);
  CreateClients(kv, nodes);
  EXPECT(IsEnabledTimed(), "master_missing: disabled before the timeout");
  tensorflow::profiler::XSpace space;
  Profile(&space);
  const bool off = WaitFor([] { return !IsEnabledTimed(); }, kTimeoutMs + 5000);
  const auto off_at = Clock::now();
  EXPECT(off, "master_missing: still enabled %d ms after the rendezvous timeout", 5000);
  const auto ms = [](Clock::duration d) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  EXPECT(ms(off_at - created) >= kTimeoutMs - 10,
         "master_missing: disabled after %lld ms, before the %d ms timeout", ms(off_at - created),
         kTimeoutMs);
  // Calls in flight end at the lease's end at the latest (timeout after the hook); after
  // that the store is never called again.
  constexpr int kSlackMs = 100;
  std::this_thread::sleep_until(created + std::chrono::milliseconds(kTimeoutMs + kSlackMs));
  const int calls = kv->Calls();
  const long long last_ms = ms(kv->LastCallEnd() - created);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT(last_ms <= kTimeoutMs + kSlackMs, "master_missing: store called until %lld ms after "
         "the clients' creation (timeout %d ms)", last_ms, kTimeoutMs);
  EXPECT(kv->Calls() == calls, "master_missing: %d store calls after the lease ended",
         kv->Calls() - calls);
  for (int node : nodes) {
    EXPECT(StateOf(node) == distprof::testing::kRendezvousNone,
           "master_missing: node %d reports state %d after the plugin turned off", node,
           StateOf(node));
  }
  const std::string log = capture.Stop();
  std::fprintf(stderr, "%s", log.c_str());
  int lines = 0;
  for (size_t at = log.find("distprof disabled"); at != std::string::npos;
       at = log.find("distprof disabled", at + 1)) {
    ++lines;
  }
  EXPECT(lines == 1, "master_missing: %d `distprof disabled` log lines, want 1", lines);
  EXPECT(log.find("master (node 0)") != std::string::npos,
         "master_missing: the log line does not name the missing master");
  ExpectHooksFast("master_missing");
  return failures;
}
#endif

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
    EXPECT(!Exists(out + "/probe_windows_node0.jsonl"), "panic at %s: JSONL written after the panic",
           hook.c_str());
  }
  std::fprintf(stderr, "panic at %s: process still running\n", hook.c_str());
  return failures;
}

int RunScenario(const std::string& name) {
  if (name == "disabled") return Disabled();
  if (name == "bad_config") return BadConfig();
#ifdef DISTPROF_EXPECT_COMPILED_IN
  if (name == "enabled") return Enabled();
  if (name == "single_node") return SingleNode();
  if (name == "master_missing") return MasterMissing();
#endif
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
      "disabled",         "bad_config",           "enabled",          "single_node",
      "master_missing",   "panic_client_created", "panic_trace_start", "panic_trace_export"};
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
