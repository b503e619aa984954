//! Digests that nodes compare: of the configuration (must match the master's) and of the
//! agreed run context (printed by every node, so a reader sees agreement at a glance).
//!
//! Isolated here so the lead can swap in `Config::digest()` / `diff_fields()` from the
//! config module when it lands: [`config_digest`] and [`config_diff`] are the only two
//! entry points the rendezvous uses.

use crate::config::Config;
use crate::context::RunContext;
use serde_json::{Map, Value};

/// Fields that describe one host, not the shared run: they may differ between nodes
/// without changing what is measured (each host names its own NIC, port, output
/// directory and log verbosity, and decides how long it waits for the others). `enabled`
/// is true on every node that reaches the rendezvous inside XLA and means nothing to a
/// standalone node, so a file that spells it out must not make a node differ.
pub const NODE_LOCAL_FIELDS: &[&str] = &[
    "enabled",
    "interface",
    "probe_port",
    "output_dir",
    "log_filter",
    "rendezvous_timeout_ms",
];

/// 64-bit FNV-1a: small, stable forever, and enough to tell configurations apart (this is
/// a consistency check between cooperating nodes, not a defence against forgery).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shared part of a configuration as a JSON object, node-local fields removed.
pub fn shared_config_value(config: &Config) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        for f in NODE_LOCAL_FIELDS {
            map.remove(*f);
        }
    }
    v
}

/// Digest of the shared configuration, as 16 hex digits.
pub fn config_digest(config: &Config) -> String {
    let text = serde_json::to_string(&shared_config_value(config)).unwrap_or_default();
    format!("{:016x}", fnv1a64(text.as_bytes()))
}

/// Names of shared fields whose values differ, each with both values, e.g.
/// `probe_out_degree (master 8, this node 4)`.
pub fn config_diff(master_shared: &Value, ours: &Config) -> Vec<String> {
    let empty = Map::new();
    let theirs = master_shared.as_object().unwrap_or(&empty);
    let ours_v = shared_config_value(ours);
    let ours_map = ours_v.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = theirs.keys().chain(ours_map.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (theirs.get(k), ours_map.get(k));
            (a != b).then(|| {
                let show =
                    |v: Option<&Value>| v.map(|v| v.to_string()).unwrap_or_else(|| "absent".into());
                format!("{k} (master {}, this node {})", show(a), show(b))
            })
        })
        .collect()
}

/// Digest of the agreed run context, as 16 hex digits.
pub fn context_digest(context: &RunContext) -> String {
    let text = serde_json::to_string(context).unwrap_or_default();
    format!("{:016x}", fnv1a64(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn node_local_fields_do_not_change_the_digest_shared_ones_do() {
        let a = Config::default();
        let mut b = a.clone();
        b.interface = "eth1".into();
        b.probe_port = 9000;
        b.output_dir = "/elsewhere".into();
        assert_eq!(config_digest(&a), config_digest(&b));
        b.probe_out_degree = 4;
        b.graph_seed = 99;
        assert_ne!(config_digest(&a), config_digest(&b));
        let diff = config_diff(&shared_config_value(&a), &b);
        assert_eq!(
            diff,
            vec![
                "graph_seed (master 1, this node 99)".to_string(),
                "probe_out_degree (master 8, this node 4)".to_string()
            ]
        );
    }
}
