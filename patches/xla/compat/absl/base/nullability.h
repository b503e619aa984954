// Written for distprof's compile check (patches/xla/compile_check.sh) only; not absl's file and
// never used in a build of XLA. absl added absl/base/nullability.h after the 20220623 release
// Debian 12 ships; XLA's headers from jax 0.9.0 on include it for pointer annotations that
// only inform static analysis (clang's _Nonnull/_Nullable) and change no type, layout or
// generated code. Defined empty here, the headers that use them declare the same C++.
// compile_check.sh puts this directory on the include path only for a unit that failed on
// this header, and reports the unit as compiled with it.
#ifndef DISTPROF_COMPAT_ABSL_BASE_NULLABILITY_H_
#define DISTPROF_COMPAT_ABSL_BASE_NULLABILITY_H_

#define absl_nonnull
#define absl_nullable
#define absl_nullability_unknown
#define ABSL_POINTERS_DEFAULT_NONNULL
#define ABSL_NULLABILITY_COMPATIBLE

namespace absl {
// The older spellings (absl 20240116 to 20250127): aliases of the annotated type itself.
template <typename T>
using Nonnull = T;
template <typename T>
using Nullable = T;
template <typename T>
using NullabilityUnknown = T;
}  // namespace absl

#endif  // DISTPROF_COMPAT_ABSL_BASE_NULLABILITY_H_
