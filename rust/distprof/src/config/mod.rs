//! Configuration: every knob the system has, its default, and where its value came from.
//!
//! Precedence: defaults < JSON file named by `XLA_DIST_PROF_CONFIG` < environment variables.
//! Every field is honoured by the code that its name points at; the JSON Schema under
//! `schema/` is generated from these types.
//!
//! Modules: `fields` (the one table of fields, variables and ranges), `file` and `env` (the
//! two layers), `load` (precedence), `validate` (ranges, combinations, build features),
//! `error`, `suggest` ("did you mean"), `digest`, `schema`, `docs`.
//!
//! ```
//! let effective = distprof::config::load(&|var| match var {
//!     "XLA_PROBE_CADENCE_US" => Some("50000".to_string()),
//!     _ => None,
//! })
//! .unwrap();
//! assert_eq!(effective.config.probe_cadence_us, 50_000);
//! assert_eq!(effective.sources["probe_cadence_us"].to_string(), "env XLA_PROBE_CADENCE_US");
//! ```

pub(crate) mod digest;
pub mod docs;
mod env;
mod error;
pub mod fields;
mod file;
mod layers;
mod load;
pub mod log_filter;
pub mod schema;
mod suggest;
mod validate;

pub use env::{parse_bool, unknown_env_warnings};
pub use error::{ConfigError, ConfigErrors, Location};
pub use file::{read_config_file, NamedBy, MAX_CONFIG_BYTES};
pub use load::{check_file, check_text, load, load_from_env, load_with_file, load_with_text};
pub use validate::validate_config;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

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

/// The configuration of one distprof node. In a file every key is optional: a missing key
/// keeps its default, and an environment variable overrides the file.
// Field order is the order of `fields::FIELDS` (and so of the docs and `config show`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(title = "distprof configuration")]
pub struct Config {
    /// Master switch. When false no thread, socket or file is created.
    pub enabled: bool,
    /// Interval between two probe exchanges on one edge, in microseconds. Sets the
    /// overhead: each exchange is ~600 bytes on the wire.
    pub probe_cadence_us: u64,
    /// Length of an estimation window, in seconds: one offset/drift line per edge per window.
    /// The default 15 s takes 375 probes at the default cadence: the offset error of the
    /// extreme-point fit falls as 1 / probes per window (docs/estimation.md).
    pub probe_window_s: f64,
    /// Gap between the two packets of a coded pair, in microseconds; at most a quarter of
    /// the cadence.
    pub packet_spacing_us: u64,
    /// Interval between two (host clock, tracer clock) snapshot pairs, in milliseconds.
    pub snapshot_period_ms: u64,
    /// Directory for the per-node JSONL files. Default: `$TMPDIR/xla_dist_prof` (the
    /// system temporary directory).
    pub output_dir: String,
    /// The node whose host clock is the global timeline (checked against the node count at
    /// rendezvous).
    pub reference_node: u32,
    /// How many peers each node probes (clamped to node count - 1).
    pub probe_out_degree: u32,
    /// Seed of the probe graph; the graph is a pure function of (node count, seed).
    pub graph_seed: u64,
    /// Network interface for probes; empty means NCCL_SOCKET_IFNAME, then the default route.
    pub interface: String,
    /// UDP port of the probe socket; 0 lets the kernel choose.
    pub probe_port: u16,
    /// Which probe timestamps to take: hardware, kernel or user space (auto picks the best
    /// the interface offers).
    pub timestamping: TimestampMode,
    /// Per-edge offset/drift estimator; `svm` needs a build with the `svm` feature.
    pub estimator: EstimatorKind,
    /// How long a peer may stay silent before its edge is marked down, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// Upper bound on the rendezvous (key-value exchange), in milliseconds.
    pub rendezvous_timeout_ms: u64,
    /// `tracing` filter directive for distprof's log, e.g. `info` or `distprof=debug`;
    /// the variable `XLA_DIST_PROF_LOG` overrides it when logging starts.
    pub log_filter: String,
    /// Absolute tolerance of the coded-pair purity test, in nanoseconds: a pair is pure when
    /// its receive gap is within this (or the relative tolerance) of its send gap.
    pub purity_abs_tolerance_ns: u64,
    /// Relative tolerance of the purity test, as a fraction of the send gap (0.1 = 10%).
    pub purity_rel_tolerance: f64,
    /// Largest acceptable uncertainty of a window (one standard deviation: the statistical
    /// part from the data and the asymmetry allowance), in nanoseconds; windows whose
    /// uncertainty exceeds it are flagged in the outputs, as are nodes whose loops show an
    /// asymmetry beyond the allowance.
    pub max_uncertainty_ns: u64,
    /// Largest acceptable worst-case error bound of a window (any path asymmetry), in
    /// nanoseconds; windows whose bound exceeds it are flagged. The bound is at least half
    /// the smallest round trip per hop however good the sync, so the default (1 s) flags
    /// nothing; set it where a worst-case guarantee matters.
    pub max_bound_ns: u64,
    /// The path and stamping asymmetry the uncertainty assumes, in nanoseconds per hop:
    /// two-way probes cannot see an asymmetry, so every uncertainty states this one and
    /// includes it (each node's stamping bias uniform within +- this: this / sqrt(6) per
    /// node, docs/estimation.md). 0 chooses it by the timestamp mode: 20 ns for hardware
    /// stamps, 100 ns for kernel stamps (and `auto`), 1000 ns for user-space stamps.
    pub asymmetry_allowance_ns: u64,
    /// Each (host, tracer) snapshot is the tightest of this many bracketed reads (best of N).
    pub snapshot_best_of: u32,
}

impl Config {
    /// Kernel software stamps on a datacenter LAN give uncertainties of tens to hundreds of
    /// ns; 1 us flags windows clearly worse than the mode can do (the local relay with
    /// 20 us of jitter stays under it).
    pub const DEFAULT_MAX_UNCERTAINTY_NS: u64 = 1_000;
    /// The largest value the field takes: the worst-case bound flags nothing by default.
    pub const DEFAULT_MAX_BOUND_NS: u64 = 1_000_000_000;
}

impl TimestampMode {
    /// The asymmetry per hop the uncertainty assumes with these stamps when the config
    /// leaves it to the mode (`asymmetry_allowance_ns` = 0), in ns. NIC hardware stamps are
    /// taken at the wire on both sides: what is left is the PHYs' and cables' difference,
    /// tens of ns. Kernel stamps are taken in the drivers, after the receive interrupt and
    /// before the transmit DMA: on like hosts those latencies largely cancel between the
    /// two directions, and their difference between hosts is of order 100 ns. User-space
    /// stamps add each host's scheduler and system-call latency, of order 1 us. `auto`
    /// assumes kernel stamps, the fallback it reaches on most hosts (hardware stamps only
    /// narrow the truth, so the stated allowance still holds).
    pub fn default_asymmetry_allowance_ns(self) -> u64 {
        match self {
            TimestampMode::Hardware => 20,
            TimestampMode::Auto | TimestampMode::Kernel => 100,
            TimestampMode::User => 1_000,
        }
    }
}

impl Config {
    /// The asymmetry per hop the uncertainty assumes, ns: the configured one, or the
    /// timestamp mode's (`TimestampMode::default_asymmetry_allowance_ns`).
    pub fn effective_asymmetry_allowance_ns(&self) -> u64 {
        match self.asymmetry_allowance_ns {
            0 => self.timestamping.default_asymmetry_allowance_ns(),
            v => v,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            enabled: false,
            // 25 exchanges/s per edge, 100 per 4 s window. Measured on this machine: one UDP
            // packet costs ~4.2 us of CPU (send + receive, loopback), so with 8 peers out and
            // ~8 in, each node spends ~16 x 25 x 15 us = 6 ms/s = 0.6% of a core (50/s would
            // be 1.2%, over the 1% goal); 15 kB/s per edge, far under 625 kB/s.
            probe_cadence_us: 40_000,
            probe_window_s: 15.0,
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
            // Timer and interrupt noise on a loaded host is ~1 us; 2 us keeps pairs that
            // only suffered that, 10% covers the spacing's own jitter at larger gaps.
            purity_abs_tolerance_ns: 2_000,
            purity_rel_tolerance: 0.1,
            max_uncertainty_ns: Self::DEFAULT_MAX_UNCERTAINTY_NS,
            max_bound_ns: Self::DEFAULT_MAX_BOUND_NS,
            asymmetry_allowance_ns: 0,
            // Five bracketed reads take ~1 us and the tightest of five rarely includes a
            // preemption.
            snapshot_best_of: 5,
        }
    }
}

/// Where the effective value of a field came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    Default,
    /// The JSON file named by `XLA_DIST_PROF_CONFIG` (or given to `config check`).
    File(PathBuf),
    /// The environment variable of that name.
    Env(String),
}

/// `default`, `file PATH` or `env VAR`, as `distprof config show` prints it.
impl fmt::Display for ValueSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSource::Default => write!(f, "default"),
            ValueSource::File(path) => write!(f, "file {}", path.display()),
            ValueSource::Env(var) => write!(f, "env {var}"),
        }
    }
}

/// The configuration in force and, for every field (keyed by its JSON name), where its
/// value came from.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveConfig {
    pub config: Config,
    pub sources: BTreeMap<String, ValueSource>,
}

impl Config {
    /// Stable hex digest of the canonical JSON (keys sorted, no whitespace). Equal configs
    /// give equal digests on every host and build; rendezvous compares them across nodes.
    /// It covers node-local fields too (`fields::Scope::Node`); use `diff_fields` to see
    /// which fields differ.
    pub fn digest(&self) -> String {
        digest::hex_digest(&self.canonical_json())
    }

    /// The canonical JSON the digest is taken over.
    pub fn canonical_json(&self) -> String {
        digest::canonical_json(&self.to_json_map())
    }

    /// The fields every node of a run must agree on (scope `Cluster` in the field table),
    /// as a JSON object. Node-local fields (a host's NIC, port, output directory, log
    /// verbosity, how long it waits) may differ without changing what is measured.
    pub fn shared_json_map(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut map = self.to_json_map();
        map.retain(|name, _| fields::by_name(name).is_some_and(|f| f.scope == fields::Scope::Cluster));
        map
    }

    /// Digest of the shared fields: equal on every node whose configuration agrees with
    /// the master's where it matters. The rendezvous compares it.
    pub fn shared_digest(&self) -> String {
        digest::hex_digest(&digest::canonical_json(&self.shared_json_map()))
    }

    /// JSON names of the fields whose values differ, in table order.
    pub fn diff_fields(&self, other: &Config) -> Vec<String> {
        let (a, b) = (self.to_json_map(), other.to_json_map());
        fields::FIELDS
            .iter()
            .filter(|f| a.get(f.name) != b.get(f.name))
            .map(|f| f.name.to_string())
            .collect()
    }

    /// The config as a JSON object, one key per field.
    pub fn to_json_map(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(map)) => map,
            // A struct of plain fields always serializes to an object (serde_json turns a
            // non-finite float into null rather than failing).
            _ => serde_json::Map::new(),
        }
    }
}

fn default_output_dir() -> String {
    std::env::temp_dir()
        .join("xla_dist_prof")
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn presets() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/configs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn every_preset_is_valid_names_the_schema_and_says_what_it_is_for() {
        let files = presets();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "default.json",
                "high-accuracy.json",
                "large-cluster.json",
                "low-overhead.json"
            ]
        );
        for file in &files {
            let config = check_file(file).unwrap_or_else(|e| panic!("{}:\n{e}", file.display()));
            let raw: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
            assert_eq!(
                raw["$schema"],
                "../../schema/distprof-config.schema.json",
                "{}",
                file.display()
            );
            assert!(
                raw["description"].as_str().unwrap().len() > 80,
                "{}",
                file.display()
            );
            // The per-edge bandwidth goal holds for every preset.
            let bytes_per_s = fields::PROBE_EXCHANGE_BYTES * 1_000_000 / config.probe_cadence_us;
            assert!(
                bytes_per_s <= fields::EDGE_BUDGET_BYTES_PER_S,
                "{}",
                file.display()
            );
        }
    }

    #[test]
    fn default_preset_is_the_builtin_default() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/configs/default.json");
        assert_eq!(check_file(&path).unwrap(), Config::default());
        // It spells out every field but the machine-dependent output_dir.
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for f in fields::FIELDS.iter().filter(|f| f.name != "output_dir") {
            assert!(raw.get(f.name).is_some(), "default.json lacks {}", f.name);
        }
    }

    #[test]
    fn presets_differ_from_the_default_where_they_say() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/configs");
        let d = Config::default();
        let high = check_file(&dir.join("high-accuracy.json")).unwrap();
        let low = check_file(&dir.join("low-overhead.json")).unwrap();
        let large = check_file(&dir.join("large-cluster.json")).unwrap();
        assert!(high.probe_cadence_us < d.probe_cadence_us && high.max_uncertainty_ns < d.max_uncertainty_ns);
        assert!(
            low.probe_cadence_us > d.probe_cadence_us && low.probe_out_degree < d.probe_out_degree
        );
        assert!(large.rendezvous_timeout_ms > d.rendezvous_timeout_ms);
        // Every preset keeps the window at 100 probes or more.
        for c in [&d, &high, &low, &large] {
            assert!(c.probe_window_s * 1e6 / c.probe_cadence_us as f64 >= 100.0);
        }
    }
}
