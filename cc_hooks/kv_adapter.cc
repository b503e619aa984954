// Hook 1: XLA's KeyValueStoreInterface behind the bridge's KvHandle (cc_hooks/kv_adapter.h;
// on XLA without KeyValueStoreInterface::TryGet, jax < 0.5, try_get asks Get with a zero
// timeout), for the clients cc_hooks/client_guard.h lets through.
#include <memory>
#include <string>
#include <utility>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/client_guard.h"
#include "cc_hooks/distprof_hooks.h"
#include "cc_hooks/kv_adapter.h"
#include "distprof-ffi/src/lib.rs.h"
#include "xla/pjrt/distributed/key_value_store_interface.h"

namespace distprof {

void OnGpuClientCreated(const char* platform_name, bool mock_nccl, int node_id,
                        int num_nodes,
                        std::shared_ptr<xla::KeyValueStoreInterface> kv_store) {
  if (bridge::PluginOff()) return;
  if (const char* why = ClientSkipReason(platform_name, mock_nccl)) {
    // Once per client creation, so the string is not on any hot path.
    const std::string reason = std::string(why) + " (platform `" +
                               (platform_name != nullptr ? platform_name : "(null)") + "`)";
    bridge::on_client_refused(reason);
    return;
  }
  // Rust owns the handle, and through it our reference to the store, only until the
  // rendezvous ends (rust/distprof/src/plugin/lease.rs): then it deletes the handle and the
  // store is XLA's alone again.
  std::unique_ptr<bridge::KvHandle> handle;
  if (kv_store != nullptr) {
    handle = std::make_unique<KvAdapter<xla::KeyValueStoreInterface>>(std::move(kv_store));
  }
  bridge::on_client_created(node_id, num_nodes, std::move(handle));
}

}  // namespace distprof
