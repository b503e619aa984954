# Sourced by compile_check.sh: compiles the units of one patched tree and records the result.
# Needs from the caller: work, repo_root, cxxbridge, and the DEP_*/PIN_* assignments that
# xla_deps.sh printed for the tree.

# A ref that could not be patched or given its dependencies: not ok, nothing compiled.
record_failure() { # name reason
  echo "$1: FAILED: $2"
  python3 - "$1" "$2" >"$work/results/$1.json" <<'PY'
import json, sys
print(json.dumps({"ref": sys.argv[1], "ok": False, "real_tu_compiled": False, "replaced": [],
                  "error": sys.argv[2], "units": {}}))
PY
}

# Include flags for one tree and one ROCm header set. Order as XLA's Bazel build maps them:
# generated protos, the tree (and, before TSL moved into xla/tsl, third_party/tsl for
# `tsl/...`), then the pinned dependencies; all XLA and third-party headers as system headers.
tree_includes() { # tree rocm_set gen
  local tree="$1" rocm="$2" gen="$3" p
  inc=(-I "$gen" -I "$repo_root" -I "$cxxbridge" -isystem "$gen" -isystem "$tree")
  [ -d "$tree/third_party/tsl" ] && inc+=(-isystem "$tree/third_party/tsl")
  # ml_dtypes: "ml_dtypes/include/float8.h" from XLA; "include/float8.h" within ml_dtypes.
  inc+=(-isystem "$DEP_ABSL" -isystem "$DEP_EIGEN" -isystem "$DEP_ML_DTYPES" -isystem "$DEP_ML_DTYPES/ml_dtypes")
  inc+=(-isystem "$DEP_FARMHASH")
  [ -z "$DEP_HIGHWAYHASH" ] || inc+=(-isystem "$DEP_HIGHWAYHASH")
  IFS=: read -ra pb <<<"$DEP_PROTOBUF"
  for p in "${pb[@]}"; do inc+=(-isystem "$p"); done
  # ROCm: `rocm/include/hip/...` as @local_config_rocm spells it, and `hip/...` as HIP does;
  # the set's rocm_config.h (below) is in $gen/<set>/rocm/.
  # roctracer's own headers include <ext/prof_protocol.h>: @local_config_rocm adds
  # rocm/include/roctracer too.
  inc+=(-isystem "$gen/$(basename "$rocm")" -isystem "$rocm" -isystem "$rocm/rocm/include"
    -isystem "$rocm/rocm/include/roctracer")
}

# The defines a Bazel build gives SRC by default: `"//conditions:default": ["NAME=VALUE"]` of a
# select() in its directory's BUILD (e.g. XLA_GPU_ROCM_TRACER_BACKEND=3 on rocm-jaxlib 0.7/0.9).
bazel_default_defines() { # src
  local build
  build="$(dirname "$1")/BUILD"
  [ -f "$build" ] || return 0
  grep -oE '"//conditions:default": \["[A-Z][A-Z0-9_]*=[^"]*"\]' "$build" | sed -E 's/.*\["([^"]+)"\]/-D\1/' | sort -u
}

# rocm/rocm_config.h as Bazel's rocm_configure writes it from the tree's template, with the
# version of the header set (TF_ROCM_VERSION = major*10000 + minor*100 + patch).
write_rocm_config() { # tree rocm_set version gen
  local tpl out="$4/$(basename "$2")/rocm"
  for tpl in "$1/third_party/gpus/rocm/rocm_config.h.tpl" "$1/third_party/tsl/third_party/gpus/rocm/rocm_config.h.tpl" ""; do
    [ -f "$tpl" ] && break
  done
  [ -n "$tpl" ] || return 0
  mkdir -p "$out"
  IFS=. read -r major minor patch <<<"$3"
  local number=$((major * 10000 + minor * 100 + patch))
  sed -e "s|%{rocm_toolkit_path}|$2|; s|%{rocm_version_number}|$number|" \
    -e "s|%{miopen_version_number}|0|; s|%{hipruntime_version_number}|$number|" \
    -e "s|%{[a-z_]*}|0|g" "$tpl" >"$out/rocm_config.h"
}

# Generates `<name>.pb.h` with the pinned protoc from the tree's `<name>.proto`.
generate_pb() { # tree gen header
  local tree="$1" gen="$2" proto="${3%.pb.h}.proto" roots=() r pb
  [ -d "$tree/third_party/tsl" ] && roots+=("$tree/third_party/tsl")
  roots+=("$tree")
  for r in "${roots[@]}"; do
    [ -f "$r/$proto" ] || continue
    local flags=()
    for r in "${roots[@]}"; do flags+=(-I "$r"); done
    IFS=: read -ra pb <<<"$DEP_PROTOBUF"
    flags+=(-I "${pb[0]}")
    (cd "$gen" && "$DEP_PROTOC" "${flags[@]}" --cpp_out="$gen" "$proto") 2>&1 | head -3
    return "${PIPESTATUS[0]}"
  done
  echo "no $proto in the tree"
  return 1
}

# Compiles SRC; sets `status` to "ok", "blocked: <header> ..." or "error: <first error>".
# MODE real: -fsyntax-only of an XLA translation unit; adapter: an object file, -Wall -Werror.
compile_one() { # tree rocm_set gen mode src log
  local tree="$1" rocm="$2" gen="$3" mode="$4" src="$5" log="$6" missing why from flags
  tree_includes "$tree" "$rocm" "$gen"
  if [ "$mode" = real ]; then
    flags=(-fsyntax-only -w)
    mapfile -t -O 2 flags < <(bazel_default_defines "$src")
  else
    flags=(-c -o "$work/unit.o" -fno-exceptions -Wall -Werror -Wno-unused-function)
  fi
  # Generates the `.pb.h` files the unit includes in rounds of the preprocessor's dependency
  # list (-MG names a missing header instead of stopping), so the compile below runs about once.
  local round pbs h
  for round in 1 2 3 4 5 6 7 8; do
    pbs="$(g++ -std=c++17 -MM -MG -DTENSORFLOW_USE_ROCM=1 -DXLA_ENABLE_DISTRIBUTED_PROFILING=1 \
      -D__HIP_PLATFORM_AMD__ "${inc[@]}" "$src" 2>/dev/null | tr ' \\' '\n\n' | grep -E '^[^/].*\.pb\.h$' | sort -u || true)"
    [ -n "$pbs" ] || break
    for h in $pbs; do generate_pb "$tree" "$gen" "$h" >/dev/null || true; done
  done
  for _ in $(seq 1 400); do
    if g++ -std=c++17 "${flags[@]}" -DTENSORFLOW_USE_ROCM=1 -DXLA_ENABLE_DISTRIBUTED_PROFILING=1 \
         -D__HIP_PLATFORM_AMD__ "${inc[@]}" "$src" 2>"$log"; then
      status=ok
      return
    fi
    missing="$(grep -m1 -oE "fatal error: [^:]+: No such file or directory" "$log" | sed -E 's/fatal error: ([^:]+):.*/\1/' || true)"
    if [ -z "$missing" ]; then
      status="error: $(grep -m1 -E 'error' "$log" | sed "s|$tree/||; s|$repo_root/||" | cut -c1-400)"
      return
    fi
    case "$missing" in
      *.pb.h)
        why="$(generate_pb "$tree" "$gen" "$missing")" ||
          { status="error: protoc on ${missing%.pb.h}.proto: $(echo "$why" | head -1 | cut -c1-200)"; return; }
        ;;
      *)
        from="$(grep -m1 "fatal error: $missing" "$log" | sed -E 's/^([^:]+):.*/\1/' | sed "s|$tree/||")"
        status="blocked: $missing (included from $from)"
        return
        ;;
    esac
  done
  status="error: more than 400 generated protos"
}

# The hook 1 call as patched into the client file, in a function declaring what it passes
# with the tree's own declaration lines (from `distprof xla check --json`) and the tree's
# real KeyValueStoreInterface. Compiled only when the client TU itself cannot be. The
# platform name is a `const char*` parameter: the tree declares it from xla::RocmName(),
# whose header reaches MLIR like the client file itself.
write_hook1_call_site() { # tree client_file out
  local tree="$1" client="$2" out="$3"
  "$distprof" xla check --xla-dir "$tree" --json 2>/dev/null | tail -1 >"$work/check.json"
  local node num mock call
  decl() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for s in d["sites"]:
    for x in s["declared"]:
        if x["passes"]==sys.argv[2]: print(x["text"]); sys.exit(0)
sys.exit(1)' "$work/check.json" "$1"
  }
  node="$(decl options.node_id)" && num="$(decl options.num_nodes)" && mock="$(decl options.enable_mock_nccl)" || return 1
  # The call as patched, over as many lines as it is wrapped.
  call="$(awk '/distprof::OnGpuClientCreated\(/ {on = 1} on {print} on && /;/ {exit}' "$client")"
  [ -n "$call" ] || return 1
  cat >"$out" <<CC
// Generated by patches/xla/compile_check.sh: hook 1's call as patched into
// $(basename "$client"), with the tree's declarations of what it passes.
#include <memory>
#include "xla/pjrt/distributed/key_value_store_interface.h"
#include "cc_hooks/distprof_hooks.h"
namespace xla {
struct GpuClientOptions {
  $node
  $num
  $mock
};
void Hook1(const GpuClientOptions& options, const char* pjrt_platform_name,
           std::shared_ptr<KeyValueStoreInterface> kv_store) {
$call
}
}  // namespace xla
CC
}

# A real TU: Debian's ROCm headers first, ROCm 6.2.0's when those do not suffice. Sets
# `status` and `rocm_used`, and appends to `replaced` when the newer set was needed.
compile_real() { # tree gen src log
  local tree="$1" gen="$2" src="$3" log="$4" debian_status
  compile_one "$tree" "$DEP_ROCM_DEBIAN" "$gen" real "$src" "$log"
  rocm_used="Debian HIP 5.2.3 (+ roctracer rocm-5.2.3 headers)"
  [ "$status" = ok ] && return
  debian_status="$status"
  # A header no ROCm set has (LLVM, MLIR) stops the newer set at the same place.
  if [[ "$status" == blocked:* ]] && ! [[ "$status" =~ (hip|hsa|roctracer|rocprofiler|rocm) ]]; then
    return
  fi
  compile_one "$tree" "$DEP_ROCM_NEW" "$gen" real "$src" "$log.new"
  rocm_used="ROCm ${ROCM_NEW_TAG#rocm-}"
  if [ "$status" = ok ]; then
    replaced+=("$(basename "$src"): ROCm ${ROCM_NEW_TAG#rocm-} headers instead of Debian's HIP 5.2.3, which stops at: ${debian_status#* }")
  fi
}

# Compiles every unit of the patched TREE and writes its result file.
compile_tree() { # name tree commit patched_by
  local name="$1" tree="$2" commit="$3" patched_by="$4" gen="$work/gen" status rocm_used
  local tracer client unit
  replaced=()
  declare -A units rocm_of
  rm -rf "$gen"
  mkdir -p "$gen"
  write_rocm_config "$tree" "$DEP_ROCM_DEBIAN" 5.2.3 "$gen"
  write_rocm_config "$tree" "$DEP_ROCM_NEW" "${ROCM_NEW_TAG#rocm-}" "$gen"
  tracer="$(grep -rl --include='*.cc' 'distprof::OnTraceStart(' "$tree/xla" | head -1)"
  client="$(grep -rl --include='*.cc' 'distprof::OnGpuClientCreated(' "$tree/xla" | head -1)"
  [ -n "$tracer" ] && [ -n "$client" ] ||
    { record_failure "$name" "the patched tree has no distprof hook call (tracer: ${tracer:-none}, client: ${client:-none})"; return; }
  local real_ok=true
  for src in "$tracer" "$client"; do
    unit="$(basename "$src")"
    echo "$name: compiling $unit ($(date +%T))" >&2
    compile_real "$tree" "$gen" "$src" "$work/$unit.log"
    units[$unit]="$status"
    rocm_of[$unit]="$rocm_used"
    [ "$status" = ok ] || real_ok=false
  done
  # The client TU stopped at a header no offline source has (LLVM/MLIR): hook 1's call alone.
  if [[ "${units[$(basename "$client")]}" == blocked:* ]]; then
    if write_hook1_call_site "$tree" "$client" "$work/hook1_call_site.cc"; then
      compile_one "$tree" "$DEP_ROCM_DEBIAN" "$gen" adapter "$work/hook1_call_site.cc" "$work/hook1.log"
      units[hook1_call_site]="$status"
      replaced+=("$(basename "$client"): the whole TU stops at ${units[$(basename "$client")]#blocked: }; its hook 1 call is compiled in hook1_call_site.cc, with the tree's KeyValueStoreInterface and GpuClientOptions field declarations and the platform name as a const char* parameter")
    else
      units[hook1_call_site]="error: distprof xla check found no declaration of options.node_id / num_nodes / enable_mock_nccl, or no hook 1 call in the client file"
    fi
  fi
  for unit in kv_adapter xspace_adapter plugin_hooks; do
    compile_one "$tree" "$DEP_ROCM_DEBIAN" "$gen" adapter "$repo_root/cc_hooks/$unit.cc" "$work/$unit.log"
    units[$unit]="$status"
  done
  for unit in "${!units[@]}"; do printf '%s: %-26s %s\n' "$name" "$unit" "${units[$unit]}"; done | sort
  local args=()
  for unit in "${!units[@]}"; do args+=("unit=$unit=${units[$unit]}"); done
  for unit in "${!rocm_of[@]}"; do args+=("rocm=$unit=${rocm_of[$unit]}"); done
  for r in "${replaced[@]}"; do args+=("replaced=$r"); done
  python3 - "$name" "$commit" "$patched_by" "$real_ok" "$PIN_ABSL" "$PIN_EIGEN" "$PIN_PROTOBUF" \
    "$PIN_ML_DTYPES" "$("$DEP_PROTOC" --version)" "${args[@]}" >"$work/results/$name.json" <<'PY'
import json, sys
name, commit, patched_by, real_ok, absl, eigen, protobuf, ml_dtypes, protoc, *rest = sys.argv[1:]
units, rocm, replaced = {}, {}, []
for a in rest:
    kind, _, value = a.partition("=")
    if kind == "replaced":
        replaced.append(value)
    else:
        key, _, v = value.partition("=")
        (units if kind == "unit" else rocm)[key] = v
# ok: every unit compiled, counting a blocked client TU as covered by its hook 1 call site.
ok = all(v == "ok" for k, v in units.items()
         if not (v.startswith("blocked:") and k.endswith("pjrt_client.cc") and units.get("hook1_call_site") == "ok"))
print(json.dumps({"ref": name, "commit": commit, "patched_by": patched_by,
                  "real_tu_compiled": real_ok == "true", "replaced": replaced, "ok": ok,
                  "units": dict(sorted(units.items())), "rocm_headers": rocm,
                  "deps": {"absl": absl, "eigen": eigen, "protobuf": protobuf, "protoc": protoc,
                           "ml_dtypes": ml_dtypes}}))
PY
}
