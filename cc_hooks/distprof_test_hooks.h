// Diagnostics for tests, not for XLA: the XLA patches never include this header, and the
// empty plugin does not define it (a compiled-out build has nothing to query).
// Defined in plugin_hooks.cc, next to the hooks.
#ifndef DISTPROF_CC_HOOKS_DISTPROF_TEST_HOOKS_H_
#define DISTPROF_CC_HOOKS_DISTPROF_TEST_HOOKS_H_

#include <string>

namespace distprof {
namespace testing {

// Values of RendezvousState (mirrored in rust/distprof-ffi/src/lib.rs).
// The plugin is off, or this process hosts no such node.
constexpr int kRendezvousNone = 0;
// The node's thread is binding its probe socket or waiting for the other nodes.
constexpr int kRendezvousPending = 1;
// Every node of the session holds the same run context; `*context_digest` is its digest.
constexpr int kRendezvousAgreed = 2;
// The rendezvous failed; the plugin has turned itself off with one log line.
constexpr int kRendezvousFailed = 3;

// Where node `node_id`'s rendezvous stands. Returns within microseconds (never waits for
// the rendezvous); `context_digest` may be null.
int RendezvousState(int node_id, std::string* context_digest);

}  // namespace testing
}  // namespace distprof

#endif  // DISTPROF_CC_HOOKS_DISTPROF_TEST_HOOKS_H_
