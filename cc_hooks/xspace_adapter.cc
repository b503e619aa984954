// Hook 2's export: appends distprof's planes to XLA's XSpace. Rust returns a serialized
// XSpace holding only those planes; merging it appends them (repeated fields concatenate),
// so no plane needs to be built field by field on this side.
#include <cstdint>
#include <string>

#include "cc_hooks/bridge_types.h"
#include "cc_hooks/distprof_hooks.h"
#include "distprof-ffi/src/lib.rs.h"

// XLA moved the TSL protos under xla/tsl/; accept either location.
#if __has_include("xla/tsl/profiler/protobuf/xplane.pb.h")
#include "xla/tsl/profiler/protobuf/xplane.pb.h"
#else
#include "tsl/profiler/protobuf/xplane.pb.h"
#endif

namespace distprof {

void OnTraceExport(tensorflow::profiler::XSpace* space) {
  if (space == nullptr || bridge::PluginOff()) return;
  rust::Vec<uint8_t> planes;
  if (!bridge::on_trace_export(planes)) return;
  // A parse failure leaves `space` with whatever merged before the error; the bytes come
  // from our own encoder, so it is not expected. The result is consumed explicitly because
  // protobuf marks it must-use.
  const bool merged = space->MergeFromString(
      std::string(reinterpret_cast<const char*>(planes.data()), planes.size()));
  (void)merged;
}

}  // namespace distprof
