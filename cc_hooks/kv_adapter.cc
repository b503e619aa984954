// Hook 1: XLA's KeyValueStoreInterface behind the bridge's KvHandle (cc_hooks/kv_adapter.h;
// on XLA without KeyValueStoreInterface::TryGet, jax < 0.5, try_get asks Get with a zero
// timeout).
#include <memory>
#include <utility>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "cc_hooks/kv_adapter.h"
#include "distprof-ffi/src/lib.rs.h"
#include "xla/pjrt/distributed/key_value_store_interface.h"

namespace distprof {

void OnGpuClientCreated(int node_id, int num_nodes,
                        std::shared_ptr<xla::KeyValueStoreInterface> kv_store) {
  if (bridge::PluginOff()) return;
  std::unique_ptr<bridge::KvHandle> handle;
  if (kv_store != nullptr) {
    handle = std::make_unique<KvAdapter<xla::KeyValueStoreInterface>>(std::move(kv_store));
  }
  bridge::on_client_created(node_id, num_nodes, std::move(handle));
}

}  // namespace distprof
