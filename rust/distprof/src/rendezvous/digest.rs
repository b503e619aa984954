//! Digests that nodes compare: of the configuration (must match the master's) and of the
//! agreed session (printed by every node, so a reader sees agreement at a glance).
//!
//! The hash and the split into shared and node-local fields belong to the config module;
//! this file only says what the rendezvous compares and prints.

use crate::config::digest::hex_digest;
use crate::config::Config;
use crate::context::RunContext;
use serde_json::{Map, Value};

/// The shared part of a configuration as a JSON object (node-local fields removed; which
/// fields are node-local is the config field table's `Scope`).
pub fn shared_config_value(config: &Config) -> Value {
    Value::Object(config.shared_json_map())
}

/// Digest of the shared configuration.
pub fn config_digest(config: &Config) -> String {
    config.shared_digest()
}

/// Names of shared fields whose values differ, each with both values, e.g.
/// `probe_out_degree (master 8, this node 4)`.
pub fn config_diff(master_shared: &Value, ours: &Config) -> Vec<String> {
    let empty = Map::new();
    let theirs = master_shared.as_object().unwrap_or(&empty);
    let ours_map = ours.shared_json_map();
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

/// Digest of what every node of the run agreed on (session, token, node count,
/// reference, configuration digest, graph parameters; not the node's own peers), printed
/// by every node: the same digest everywhere means they agreed.
pub fn context_digest(context: &RunContext) -> String {
    hex_digest(&context.shared_json())
}

#[cfg(test)]
mod tests {
    use super::*;

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
