//! The hooks in XLA's two core files (the PJRT GPU client and the ROCm GPU tracer): anchors,
//! placement and inserted text.
//! Why these places: docs/upgrading-xla.md. Each hook is one call behind `#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING`,
//! so without the Bazel define the compiled code is upstream's. The call signatures are those of
//! `cc_hooks/distprof_hooks.h`.

use crate::anchor::Anchor;
use crate::decls::{CallForm, ClassName, Decl, Scope};
use crate::edit::{Edit, Placement};

/// The macro `distributed_profiling_defines()` sets; every hook is compiled only under it.
pub const DEFINE: &str = "XLA_ENABLE_DISTRIBUTED_PROFILING";
/// How a call site includes the hooks header: the `@distributed_profiling` repository root is on
/// the include path of every target depending on it, and the header sits at this path inside it.
pub const HEADER_INCLUDE: &str = "#include \"cc_hooks/distprof_hooks.h\"";

pub const PJRT_CLIENT: &str = "xla/pjrt/gpu/se_gpu_pjrt_client.cc";
pub const ROCM_TRACER: &str = "xla/backends/profiler/gpu/device_tracer_rocm.cc";
/// A hook call inserted after an anchor, in the first of its call forms whose names the tree
/// declares (crate::decls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEdit {
    pub anchor: Anchor,
    pub placement: Placement,
    pub forms: Vec<CallForm>,
    pub purpose: &'static str,
}

impl HookEdit {
    /// The edit inserting `call` behind the define.
    pub fn edit(&self, call: &str) -> Edit {
        Edit::Insert {
            anchor: self.anchor,
            placement: self.placement,
            text: guarded(call),
            indent: true,
            purpose: self.purpose,
        }
    }
    /// `distprof::OnX(`: how any spelling of this hook's call is recognised in a patched file.
    pub fn call_prefix(&self) -> &'static str {
        let call = self.forms[0].call;
        &call[..call.find('(').map_or(call.len(), |i| i + 1)]
    }
}

fn local(passes: &'static str, declared_as: &'static str) -> Decl {
    Decl { passes, declared_as: vec![declared_as], scope: Scope::Enclosing }
}

fn member(passes: &'static str, declared_as: Vec<&'static str>, class: ClassName, files: Vec<&'static str>) -> Decl {
    Decl { passes, declared_as, scope: Scope::Member { class, files } }
}

fn form(call: &'static str, decls: Vec<Decl>) -> CallForm {
    CallForm { call, decls }
}

fn guarded(call: &str) -> Vec<String> {
    vec![format!("#ifdef {DEFINE}"), call.to_owned(), format!("#endif  // {DEFINE}")]
}

/// The header include, after the file's include block (`Placement::AfterIncludes`) and set
/// off by a blank line: Google style puts a conditional include after the unconditional ones,
/// and there clang-format's include sorting (XLA's `.clang-format`, IncludeBlocks Regroup)
/// leaves every block as it was (patches/xla/include_order_check.sh). After the file's own
/// header or inside the absl block it would split a sorted block in two.
fn include_edit() -> Edit {
    let mut text = vec![String::new()];
    text.extend(guarded(HEADER_INCLUDE));
    Edit::Insert {
        anchor: Anchor::first("#include"),
        placement: Placement::AfterIncludes,
        text,
        indent: false,
        purpose: "include of the distprof hooks header",
    }
}

/// Hook 1, `GetStreamExecutorGpuClient`: right before the `return` that hands out the client,
/// so every step that can fail (`BuildDistributedDevices`, from jax 0.10 `GpuTopology::FromProto`)
/// has succeeded and a failed creation never starts a rendezvous or leaves distprof holding
/// the KV store; what the `return` still runs is constructors, which cannot return an error.
/// The hook passes the platform XLA built this client for (`pjrt_platform_name`, `RocmName()`
/// only in a ROCm build: CUDA and SYCL share this function) and `enable_mock_nccl`, and
/// `OnGpuClientCreated` leaves other platforms and mock-NCCL clients alone
/// (cc_hooks/client_guard.h). The anchor is byte-identical from XLA 0.4.35 to main.
pub fn pjrt_client_edits() -> Vec<Edit> {
    vec![include_edit()]
}

/// `GpuClientOptions` moved to its own header in Nov 2024; before that it was declared with
/// the client.
const GPU_CLIENT_OPTIONS_FILES: [&str; 2] =
    ["xla/pjrt/plugin/xla_gpu/xla_gpu_client_options.h", "xla/pjrt/gpu/se_gpu_pjrt_client.h"];

pub fn pjrt_client_hooks() -> Vec<HookEdit> {
    let options = ClassName::Named("GpuClientOptions");
    vec![HookEdit {
        anchor: Anchor::unique("TF_RET_CHECK(options.num_nodes == 1 || kv_store != nullptr);"),
        // The `return` is 12 lines below the anchor up to jax 0.9 and 29 on main.
        placement: Placement::BeforeReturn { call: "StreamExecutorGpuClient", within_lines: 50 },
        forms: vec![form(
            "distprof::OnGpuClientCreated(pjrt_platform_name, options.enable_mock_nccl, options.node_id, options.num_nodes, kv_store);",
            vec![
                local("pjrt_platform_name", "auto pjrt_platform_name"),
                member("options.enable_mock_nccl", vec!["bool enable_mock_nccl"], options.clone(), GPU_CLIENT_OPTIONS_FILES.to_vec()),
                local("options", "GpuClientOptions& options"),
                member("options.node_id", vec!["int node_id"], options.clone(), GPU_CLIENT_OPTIONS_FILES.to_vec()),
                member("options.num_nodes", vec!["int num_nodes"], options, GPU_CLIENT_OPTIONS_FILES.to_vec()),
                local("kv_store", "std::shared_ptr<KeyValueStoreInterface> kv_store"),
            ],
        )],
        purpose: "hook 1: PJRT GPU client created",
    }]
}

/// Hook 2, `GpuTracer` in `device_tracer_rocm.cc` (stable since 2022 upstream and in the AMD
/// fork, unlike `rocm_collector.cc`). The tracer clock reader is `RocmTracer::GetTimestamp`, a
/// static `uint64_t()` in every supported version (roctracer or rocprofiler-sdk timestamp).
pub fn rocm_tracer_edits() -> Vec<Edit> {
    vec![include_edit()]
}

/// Headers declaring `class RocmTracer`: `rocm_tracer.h` upstream; the AMD fork's v0.7.1
/// declares it in `rocm_tracer_v1.h` and `rocm_profiler_sdk.h` (chosen by a macro).
const ROCM_TRACER_HEADERS: [&str; 3] = [
    "xla/backends/profiler/gpu/rocm_tracer.h",
    "xla/backends/profiler/gpu/rocm_tracer_v1.h",
    "xla/backends/profiler/gpu/rocm_profiler_sdk.h",
];

pub fn rocm_tracer_hooks() -> Vec<HookEdit> {
    vec![
        // Hook 3, `GpuTracer::DoStart()`: right after the collector is created with XLA's own
        // GPU/host clock pair, read just before into two locals of the same names in every
        // supported version. The collector exports every device event as
        // `start_walltime_ns + (gpu - start_gputime_ns)`, so with this pair in the distprof
        // plane `distprof merge` recovers the GPU time exactly (docs/upgrading-xla.md).
        HookEdit {
            anchor: Anchor::unique("rocm_trace_collector_ = CreateRocmCollector("),
            placement: Placement::AfterAnchorStatement,
            forms: vec![form(
                "distprof::OnTraceClockPair(start_walltime_ns, start_gputime_ns);",
                vec![
                    local("start_walltime_ns", "uint64_t start_walltime_ns"),
                    local("start_gputime_ns", "uint64_t start_gputime_ns"),
                ],
            )],
            purpose: "hook 3: collector created with XLA's GPU/host clock pair",
        },
        HookEdit {
            anchor: Anchor::unique("profiling_state_ = State::kStartedOk;"),
            placement: Placement::After,
            forms: vec![form(
                "distprof::OnTraceStart(&RocmTracer::GetTimestamp);",
                vec![member(
                    "RocmTracer::GetTimestamp",
                    vec!["static uint64_t GetTimestamp()"],
                    ClassName::Named("RocmTracer"),
                    ROCM_TRACER_HEADERS.to_vec(),
                )],
            )],
            purpose: "hook 2a: profiling started (success only)",
        },
        HookEdit {
            anchor: Anchor::unique("rocm_tracer_->Disable();"),
            placement: Placement::After,
            forms: vec![form("distprof::OnTraceStop();", vec![])],
            purpose: "hook 2b: profiling stopped, collector flushed",
        },
        HookEdit {
            anchor: Anchor::unique("rocm_trace_collector_->Export(space);"),
            placement: Placement::After,
            forms: vec![form("distprof::OnTraceExport(space);", vec![local("space", "XSpace* space")])],
            purpose: "hook 2c: GPU planes exported",
        },
    ]
}
