//! Configuration: every knob the system has, its default, and where its value came from.
//!
//! Precedence: defaults < JSON file named by `XLA_DIST_PROF_CONFIG` < environment variables.
//! Every field is honoured by the code that its name points at; the JSON Schema under
//! `schema/` is generated from these types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which timestamps the probe engine records. The mode actually in force is recorded in
/// every output together with the error it contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimestampMode {
    /// NIC hardware stamps where the interface offers them, else kernel software stamps,
    /// else user-space stamps.
    Auto,
    /// NIC hardware stamps; an error at start if the interface cannot provide them.
    Hardware,
    /// Kernel software stamps (`SO_TIMESTAMPING`, TX read from the error queue).
    Kernel,
    /// `clock_gettime` around `sendmsg`/`recvmsg`: the fallback, with scheduler noise.
    User,
}

/// The per-edge offset/drift estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EstimatorKind {
    /// Exact max-margin line from the convex hulls of forward and reverse points (default).
    Hull,
    /// linfa-svm on standardized features: the reference estimator, slow.
    Svm,
    /// NTP-style: offset from the minimum round trip, RTT/2. For comparison only.
    Ntp,
    /// Score-P-style interpolation between the first and last probe. For comparison only.
    TwoPoint,
}

/// The effective configuration of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Master switch. When false no thread, socket or file is created.
    pub enabled: bool,
    /// Interval between two probes on one edge, in microseconds.
    pub probe_cadence_us: u64,
    /// Length of an estimation window, in seconds.
    pub probe_window_s: f64,
    /// Gap between the two packets of a coded pair, in microseconds.
    pub packet_spacing_us: u64,
    /// Interval between two (host clock, tracer clock) snapshot pairs, in milliseconds.
    pub snapshot_period_ms: u64,
    /// Directory for the per-node JSONL files.
    pub output_dir: String,
    /// The node whose host clock is the global timeline.
    pub reference_node: u32,
    /// How many peers each node probes (clamped to node count - 1).
    pub probe_out_degree: u32,
    /// Seed of the probe graph; the graph is a pure function of (node count, seed).
    pub graph_seed: u64,
    /// Network interface for probes; empty means NCCL_SOCKET_IFNAME, then the default route.
    pub interface: String,
    /// UDP port of the probe socket; 0 lets the kernel choose.
    pub probe_port: u16,
    /// Timestamping mode.
    pub timestamping: TimestampMode,
    /// Per-edge estimator.
    pub estimator: EstimatorKind,
    /// How long a peer may stay silent before its edge is marked down, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// Upper bound on the rendezvous (key-value exchange), in milliseconds.
    pub rendezvous_timeout_ms: u64,
    /// `tracing` filter directive for distprof's log, e.g. `info` or `distprof=debug`.
    pub log_filter: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            enabled: false,
            // 50 probes/s per edge: ~200 pairs per 4 s window, well under 1% of a core.
            probe_cadence_us: 20_000,
            probe_window_s: 4.0,
            packet_spacing_us: 50,
            snapshot_period_ms: 100,
            output_dir: default_output_dir(),
            reference_node: 0,
            probe_out_degree: 8,
            graph_seed: 1,
            interface: String::new(),
            probe_port: 0,
            timestamping: TimestampMode::Auto,
            estimator: EstimatorKind::Hull,
            handshake_timeout_ms: 2_000,
            rendezvous_timeout_ms: 120_000,
            log_filter: "info".to_string(),
        }
    }
}

fn default_output_dir() -> String {
    std::env::temp_dir().join("xla_dist_prof").to_string_lossy().into_owned()
}
