//! The field table: every configuration field, its environment variable, its type and its
//! allowed range. The loader, the validator, the JSON Schema, the documentation and
//! `distprof config show` all read this one table, so a field cannot be half-added.

/// The variable naming the JSON configuration file.
pub const CONFIG_FILE_VAR: &str = "XLA_DIST_PROF_CONFIG";
/// The variable that overrides `log_filter` when logging starts (see `crate::logging`).
pub const LOG_VAR: &str = "XLA_DIST_PROF_LOG";
/// Prefix of every distprof variable that is not one of the historical `XLA_*` names.
pub const ENV_PREFIX: &str = "XLA_DIST_PROF_";
/// Keys a JSON file may carry that are not fields: they are allowed and ignored.
pub const IGNORED_FILE_KEYS: [&str; 2] = ["$schema", "description"];

/// The JSON type of a field and, for numbers, the range the validator enforces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldKind {
    Bool,
    /// A whole number stored in a Rust integer of `bits` bits; `min..=max` is the allowed range.
    Unsigned {
        bits: u32,
        min: u64,
        max: u64,
    },
    /// A finite floating-point number in `min..=max`.
    Float {
        min: f64,
        max: f64,
    },
    /// Free text; field-specific checks live in `validate.rs`.
    Text,
    /// One of a fixed set of lower-case names (a serde `snake_case` enum).
    Choice(&'static [&'static str]),
}

impl FieldKind {
    /// How the type reads in messages and in the docs.
    pub fn describe(&self) -> String {
        match self {
            FieldKind::Bool => "boolean".to_string(),
            FieldKind::Unsigned { bits, .. } => format!("integer (u{bits})"),
            FieldKind::Float { .. } => "number".to_string(),
            FieldKind::Text => "string".to_string(),
            FieldKind::Choice(names) => format!("one of {}", names.join(", ")),
        }
    }

    /// What a valid value looks like, for the "fix" half of a message.
    pub fn allowed(&self) -> String {
        match self {
            FieldKind::Bool => "true or false".to_string(),
            FieldKind::Unsigned { min, max, .. } => format!("an integer in {min}..={max}"),
            FieldKind::Float { min, max } => format!("a number in {min}..={max}"),
            FieldKind::Text => "a string".to_string(),
            FieldKind::Choice(names) => format!("one of {}", names.join(", ")),
        }
    }

    /// The largest value the Rust type of an unsigned field can hold.
    pub fn type_max(bits: u32) -> u64 {
        if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }
}

/// Whether a field must agree across the nodes of one job. Rendezvous compares
/// `Config::digest` and reports `Config::diff_fields`; node-local fields may legitimately
/// differ (each host has its own disk, NIC name and log verbosity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Node,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    /// The JSON key and Rust field name.
    pub name: &'static str,
    /// The environment variable that overrides the field.
    pub env: &'static str,
    pub kind: FieldKind,
    pub scope: Scope,
    /// Why the range is what it is; quoted in out-of-range errors and the docs.
    pub range_reason: &'static str,
}

/// Bytes on the wire of one probe exchange: ~5-6 UDP packets of ~100 bytes (coded pair each
/// way plus follow-ups carrying the TX stamps). Used to derive the cadence floor.
pub const PROBE_EXCHANGE_BYTES: u64 = 600;
/// Bandwidth goal per probed edge, bytes per second.
pub const EDGE_BUDGET_BYTES_PER_S: u64 = 625_000;
/// 600 B per exchange at 625,000 B/s is one exchange every 960 us; rounded up.
pub const MIN_PROBE_CADENCE_US: u64 = 1_000;

use FieldKind::{Bool, Choice, Float, Text, Unsigned};
use Scope::{Cluster, Node};

/// Names of `TimestampMode` as serde spells them.
pub const TIMESTAMP_MODES: &[&str] = &["auto", "hardware", "kernel", "user"];
/// Names of `EstimatorKind` as serde spells them.
pub const ESTIMATORS: &[&str] = &["hull", "svm", "ntp", "two_point"];

/// Every field of `Config`, in declaration order. A unit test checks this table against
/// the struct (names, types) and against the schema (choices, descriptions).
pub const FIELDS: &[FieldSpec] = &[
    FieldSpec {
        name: "enabled",
        env: "XLA_ENABLE_DISTRIBUTED_PROFILING",
        kind: Bool,
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "probe_cadence_us",
        env: "XLA_PROBE_CADENCE_US",
        kind: Unsigned {
            bits: 64,
            min: MIN_PROBE_CADENCE_US,
            max: 10_000_000,
        },
        scope: Cluster,
        range_reason: "below 1000 us one edge's ~600-byte exchanges exceed the 625,000 bytes/s \
                       per-edge budget; above 10 s a window holds too few probes to follow drift",
    },
    FieldSpec {
        name: "probe_window_s",
        env: "XLA_PROBE_WINDOW_S",
        kind: Float {
            min: 0.1,
            max: 3_600.0,
        },
        scope: Cluster,
        range_reason: "below 0.1 s no cadence leaves enough probes per window; above an hour a \
                       single line hides the drift wander of real oscillators",
    },
    FieldSpec {
        name: "packet_spacing_us",
        env: "XLA_PACKET_SPACING_US",
        kind: Unsigned {
            bits: 64,
            min: 1,
            max: 1_000_000,
        },
        scope: Cluster,
        range_reason: "the purity test compares the receive gap of a coded pair with a known \
                       non-zero send gap; above 1 s the pair no longer sees the same queue",
    },
    FieldSpec {
        name: "snapshot_period_ms",
        env: "XLA_SNAPSHOT_PERIOD_MS",
        kind: Unsigned {
            bits: 64,
            min: 1,
            max: 60_000,
        },
        scope: Node,
        range_reason: "0 would read the clocks in a tight loop; above a minute the tracer-clock \
                       map cannot follow its drift",
    },
    FieldSpec {
        name: "output_dir",
        env: "XLA_DIST_PROF_OUTPUT_DIR",
        kind: Text,
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "reference_node",
        env: "XLA_DIST_PROF_REFERENCE_NODE",
        kind: Unsigned {
            bits: 32,
            min: 0,
            max: u32::MAX as u64,
        },
        scope: Cluster,
        range_reason: "checked against the node count at rendezvous",
    },
    FieldSpec {
        name: "probe_out_degree",
        env: "XLA_DIST_PROF_PROBE_OUT_DEGREE",
        kind: Unsigned {
            bits: 32,
            min: 1,
            max: crate::topology::MAX_OUT_DEGREE as u64,
        },
        scope: Cluster,
        range_reason: "every node must probe at least one peer; per-node cost grows linearly \
                       with the degree and Huygens saw no gain beyond 10-20 peers",
    },
    FieldSpec {
        name: "graph_seed",
        env: "XLA_DIST_PROF_GRAPH_SEED",
        kind: Unsigned {
            bits: 64,
            min: 0,
            max: u64::MAX,
        },
        scope: Cluster,
        range_reason: "",
    },
    FieldSpec {
        name: "interface",
        env: "XLA_DIST_PROF_INTERFACE",
        kind: Text,
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "probe_port",
        env: "XLA_DIST_PROF_PROBE_PORT",
        kind: Unsigned {
            bits: 16,
            min: 0,
            max: u16::MAX as u64,
        },
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "timestamping",
        env: "XLA_DIST_PROF_TIMESTAMPING",
        kind: Choice(TIMESTAMP_MODES),
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "estimator",
        env: "XLA_DIST_PROF_ESTIMATOR",
        kind: Choice(ESTIMATORS),
        scope: Cluster,
        range_reason: "",
    },
    FieldSpec {
        name: "handshake_timeout_ms",
        env: "XLA_DIST_PROF_HANDSHAKE_TIMEOUT_MS",
        kind: Unsigned {
            bits: 64,
            min: 10,
            max: 600_000,
        },
        scope: Cluster,
        range_reason: "below 10 ms scheduler hiccups mark healthy edges down; above 10 minutes \
                       a dead peer is kept for most of a profile",
    },
    FieldSpec {
        name: "rendezvous_timeout_ms",
        env: "XLA_DIST_PROF_RENDEZVOUS_TIMEOUT_MS",
        kind: Unsigned {
            bits: 64,
            min: 100,
            max: 3_600_000,
        },
        scope: Node,
        range_reason: "below 100 ms even a local key-value store cannot answer N nodes; above an \
                       hour the job has long started without clock sync",
    },
    FieldSpec {
        name: "log_filter",
        env: "XLA_DIST_PROF_LOG_FILTER",
        kind: Text,
        scope: Node,
        range_reason: "",
    },
    FieldSpec {
        name: "purity_abs_tolerance_ns",
        env: "XLA_DIST_PROF_PURITY_ABS_TOLERANCE_NS",
        kind: Unsigned {
            bits: 64,
            min: 0,
            max: 10_000_000,
        },
        scope: Cluster,
        range_reason: "a tolerance above 10 ms accepts pairs that queued behind whole bursts",
    },
    FieldSpec {
        name: "purity_rel_tolerance",
        env: "XLA_DIST_PROF_PURITY_REL_TOLERANCE",
        kind: Float { min: 0.0, max: 1.0 },
        scope: Cluster,
        range_reason: "a fraction of the send gap: above 1 the receive gap could be zero or \
                       double and still pass",
    },
    FieldSpec {
        name: "max_uncertainty_ns",
        env: "XLA_DIST_PROF_MAX_UNCERTAINTY_NS",
        kind: Unsigned {
            bits: 64,
            min: 1,
            max: 1_000_000_000,
        },
        scope: Cluster,
        range_reason: "0 would flag every window; an uncertainty above 1 s says nothing about a trace",
    },
    FieldSpec {
        name: "max_bound_ns",
        env: "XLA_DIST_PROF_MAX_BOUND_NS",
        kind: Unsigned {
            bits: 64,
            min: 1,
            max: 1_000_000_000,
        },
        scope: Cluster,
        range_reason: "0 would flag every window; a bound above 1 s says nothing about a trace",
    },
    FieldSpec {
        name: "asymmetry_allowance_ns",
        env: "XLA_DIST_PROF_ASYMMETRY_ALLOWANCE_NS",
        kind: Unsigned {
            bits: 64,
            min: 0,
            max: 1_000_000,
        },
        scope: Cluster,
        range_reason: "0 chooses by timestamp mode; an asymmetry above 1 ms per hop is not a \
                       network path, and an uncertainty that allows it says nothing",
    },
    FieldSpec {
        name: "snapshot_best_of",
        env: "XLA_DIST_PROF_SNAPSHOT_BEST_OF",
        kind: Unsigned {
            bits: 32,
            min: 1,
            max: 100,
        },
        scope: Node,
        range_reason: "at least one read; beyond 100 bracketed reads the snapshot itself costs \
                       more than the noise it removes",
    },
];

/// The row of a field, by JSON key.
pub fn by_name(name: &str) -> Option<&'static FieldSpec> {
    FIELDS.iter().find(|f| f.name == name)
}

/// The row of a field, by environment variable.
pub fn by_env(var: &str) -> Option<&'static FieldSpec> {
    FIELDS.iter().find(|f| f.env == var)
}

/// Every environment variable distprof reads.
pub fn all_env_vars() -> impl Iterator<Item = &'static str> {
    FIELDS
        .iter()
        .map(|f| f.env)
        .chain([CONFIG_FILE_VAR, LOG_VAR])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The five historical names; every other field follows the prefix rule.
    const LEGACY: [(&str, &str); 5] = [
        ("enabled", "XLA_ENABLE_DISTRIBUTED_PROFILING"),
        ("probe_cadence_us", "XLA_PROBE_CADENCE_US"),
        ("probe_window_s", "XLA_PROBE_WINDOW_S"),
        ("packet_spacing_us", "XLA_PACKET_SPACING_US"),
        ("snapshot_period_ms", "XLA_SNAPSHOT_PERIOD_MS"),
    ];

    #[test]
    fn table_names_match_config_fields_in_order() {
        let value = serde_json::to_value(Config::default()).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        keys.sort_unstable();
        names.sort_unstable();
        assert_eq!(keys, names);
        assert_eq!(FIELDS.len(), 22);
    }

    #[test]
    fn env_names_follow_the_rule() {
        for f in FIELDS {
            let expected = LEGACY
                .iter()
                .find(|(name, _)| *name == f.name)
                .map(|(_, var)| var.to_string())
                .unwrap_or_else(|| format!("{ENV_PREFIX}{}", f.name.to_uppercase()));
            assert_eq!(f.env, expected, "field {}", f.name);
            assert_eq!(by_env(f.env).unwrap().name, f.name);
            assert_eq!(by_name(f.name).unwrap().env, f.env);
        }
        let mut vars: Vec<&str> = all_env_vars().collect();
        let n = vars.len();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), n, "two fields share a variable");
    }

    #[test]
    fn defaults_have_the_declared_kind_and_lie_in_range() {
        let value = serde_json::to_value(Config::default()).unwrap();
        for f in FIELDS {
            let v = &value[f.name];
            match f.kind {
                FieldKind::Bool => assert!(v.is_boolean(), "{}", f.name),
                FieldKind::Unsigned { bits, min, max } => {
                    let n = v.as_u64().unwrap_or_else(|| panic!("{} not u64", f.name));
                    assert!(
                        min <= n && n <= max,
                        "{} = {n} outside {min}..={max}",
                        f.name
                    );
                    assert!(max <= FieldKind::type_max(bits), "{}", f.name);
                }
                FieldKind::Float { min, max } => {
                    let x = v.as_f64().unwrap();
                    assert!(min <= x && x <= max, "{}", f.name);
                }
                FieldKind::Text => assert!(v.is_string(), "{}", f.name),
                FieldKind::Choice(names) => {
                    assert!(names.contains(&v.as_str().unwrap()), "{}", f.name)
                }
            }
        }
    }

    #[test]
    fn choices_are_exactly_the_serde_names() {
        use crate::config::{EstimatorKind, TimestampMode};
        for name in TIMESTAMP_MODES {
            serde_json::from_value::<TimestampMode>(serde_json::json!(name)).unwrap();
        }
        for name in ESTIMATORS {
            serde_json::from_value::<EstimatorKind>(serde_json::json!(name)).unwrap();
        }
        // That no variant is missing from these lists is checked against the schema in
        // schema.rs (`schema_enums_match_the_field_table`).
    }

    #[test]
    fn cadence_floor_follows_from_the_bandwidth_budget() {
        let floor_us = PROBE_EXCHANGE_BYTES * 1_000_000 / EDGE_BUDGET_BYTES_PER_S;
        assert_eq!(floor_us, 960);
        assert!(MIN_PROBE_CADENCE_US >= floor_us);
    }
}
