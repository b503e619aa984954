//! The hooks in XLA's three core files: anchors, placement and inserted text.
//! Why these places: ../../../../shared/reference/xla-integration.md §3–§5 (summarised in
//! docs/upgrading-xla.md). Each hook is one call behind `#ifdef XLA_ENABLE_DISTRIBUTED_PROFILING`,
//! so without the Bazel define the compiled code is upstream's. The call signatures are those of
//! `cc_hooks/distprof_hooks.h`.

use crate::anchor::Anchor;
use crate::edit::{Edit, Placement};

/// The macro `distributed_profiling_defines()` sets; every hook is compiled only under it.
pub const DEFINE: &str = "XLA_ENABLE_DISTRIBUTED_PROFILING";
/// How a call site includes the hooks header: the `@distributed_profiling` repository root is on
/// the include path of every target depending on it, and the header sits at this path inside it.
pub const HEADER_INCLUDE: &str = "#include \"cc_hooks/distprof_hooks.h\"";

pub const PJRT_CLIENT: &str = "xla/pjrt/gpu/se_gpu_pjrt_client.cc";
pub const ROCM_TRACER: &str = "xla/backends/profiler/gpu/device_tracer_rocm.cc";
/// Coordination agent copy used by jax >= 0.8.2 (added to XLA 2025-12-03).
pub const AGENT_PJRT: &str = "xla/pjrt/distributed/coordination/coordination_service_agent.cc";
/// Coordination agent copy used by jax <= 0.8.1.
pub const AGENT_TSL: &str = "xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc";

/// Which coordination agent copy a tree carries (and the hooks go into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentCopy {
    /// `xla::CoordinationServiceAgent`; its task id is the member `task_id_` (an `int`).
    Pjrt,
    /// `tsl::CoordinationServiceAgent`; its task is the proto member `task_`.
    Tsl,
}

impl AgentCopy {
    pub fn path(self) -> &'static str {
        match self {
            AgentCopy::Pjrt => AGENT_PJRT,
            AgentCopy::Tsl => AGENT_TSL,
        }
    }
}

fn guarded(call: &str) -> Vec<String> {
    vec![format!("#ifdef {DEFINE}"), call.to_owned(), format!("#endif  // {DEFINE}")]
}

/// The header include, after the first quoted `#include` of the file (the file's own header
/// where it has one): at file scope and, unlike the last include, never inside a platform `#if`.
fn include_edit() -> Edit {
    Edit::Insert {
        anchor: Anchor::first("#include \""),
        placement: Placement::After,
        text: guarded(HEADER_INCLUDE),
        indent: false,
        purpose: "include of the distprof hooks header",
    }
}

/// Hook 1, `GetStreamExecutorGpuClient`: after `BuildDistributedDevices(...)` succeeded, so all
/// nodes are known alive and a failed client creation never leaves distprof holding the KV
/// store. The anchor is byte-identical from XLA 0.4.35 to main; the statement after it is found
/// by its call, whatever macro wraps it (`TF_ASSIGN_OR_RETURN`, `ASSIGN_OR_RETURN`,
/// `ABSL_ASSIGN_OR_RETURN`) and whatever fallback precedes it.
pub fn pjrt_client_edits() -> Vec<Edit> {
    vec![
        include_edit(),
        Edit::Insert {
            anchor: Anchor::unique("TF_RET_CHECK(options.num_nodes == 1 || kv_store != nullptr);"),
            placement: Placement::AfterStatement { call: "BuildDistributedDevices(", within_lines: 12 },
            text: guarded("distprof::OnGpuClientCreated(options.node_id, options.num_nodes, kv_store);"),
            indent: true,
            purpose: "hook 1: PJRT GPU client created",
        },
    ]
}

/// Hook 2, `GpuTracer` in `device_tracer_rocm.cc` (stable since 2022 upstream and in the AMD
/// fork, unlike `rocm_collector.cc`). The tracer clock reader is `RocmTracer::GetTimestamp`, a
/// static `uint64_t()` in every supported version (roctracer or rocprofiler-sdk timestamp).
pub fn rocm_tracer_edits() -> Vec<Edit> {
    vec![
        include_edit(),
        Edit::Insert {
            anchor: Anchor::unique("profiling_state_ = State::kStartedOk;"),
            placement: Placement::After,
            text: guarded("distprof::OnTraceStart(&RocmTracer::GetTimestamp);"),
            indent: true,
            purpose: "hook 2a: profiling started (success only)",
        },
        Edit::Insert {
            anchor: Anchor::unique("rocm_tracer_->Disable();"),
            placement: Placement::After,
            text: guarded("distprof::OnTraceStop();"),
            indent: true,
            purpose: "hook 2b: profiling stopped, collector flushed",
        },
        Edit::Insert {
            anchor: Anchor::unique("rocm_trace_collector_->Export(space);"),
            placement: Placement::After,
            text: guarded("distprof::OnTraceExport(space);"),
            indent: true,
            purpose: "hook 2c: GPU planes exported",
        },
    ]
}

/// Hook 3, the coordination agent's `Connect()`, after its success log line (byte-identical in
/// every version and both copies).
pub fn agent_edits(copy: AgentCopy) -> Vec<Edit> {
    let call = match copy {
        AgentCopy::Pjrt => "distprof::OnAgentConnected(task_id_);",
        AgentCopy::Tsl => "distprof::OnAgentConnected(task_.task_id());",
    };
    vec![
        include_edit(),
        Edit::Insert {
            anchor: Anchor::unique("LOG(INFO) << \"Coordination agent has successfully connected.\";"),
            placement: Placement::After,
            text: guarded(call),
            indent: true,
            purpose: "hook 3: coordination agent connected",
        },
    ]
}
