// Test stand-in (see ../../../README.md): the one XSpace method the export adapter calls.
// A real XSpace parses and appends the planes; this one keeps the serialized fragments so
// the test can decode them with its own wire reader.
#ifndef DISTPROF_STANDIN_TSL_PROFILER_PROTOBUF_XPLANE_PB_H_
#define DISTPROF_STANDIN_TSL_PROFILER_PROTOBUF_XPLANE_PB_H_
#include <string>
#include <vector>
namespace tensorflow {
namespace profiler {
class XSpace {
 public:
  [[nodiscard]] bool MergeFromString(const std::string& data) {
    fragments_.push_back(data);
    return true;
  }
  const std::vector<std::string>& fragments() const { return fragments_; }

 private:
  std::vector<std::string> fragments_;
};
}  // namespace profiler
}  // namespace tensorflow
#endif
