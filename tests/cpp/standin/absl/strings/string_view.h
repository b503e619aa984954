// Test stand-in (see ../../README.md): absl::string_view is std::string_view in C++17 builds.
#ifndef DISTPROF_STANDIN_ABSL_STRINGS_STRING_VIEW_H_
#define DISTPROF_STANDIN_ABSL_STRINGS_STRING_VIEW_H_
#include <string_view>
namespace absl {
using string_view = std::string_view;
}  // namespace absl
#endif
