//! The config digest: a stable fingerprint that nodes exchange at rendezvous.
//!
//! FNV-1a over 128 bits: the digest only has to tell honest configurations apart (nobody
//! forges one), it must be identical on every host and Rust version (std's `Hasher` is not
//! promised to be), and it needs no dependency.

use serde_json::{Map, Value};

const FNV128_OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV128_PRIME: u128 = 0x0000000001000000000000000000013B;

/// FNV-1a 128 of `text`, as 32 lower-case hex digits.
pub(crate) fn hex_digest(text: &str) -> String {
    let mut hash = FNV128_OFFSET;
    for byte in text.as_bytes() {
        hash ^= u128::from(*byte);
        hash = hash.wrapping_mul(FNV128_PRIME);
    }
    format!("{hash:032x}")
}

/// Compact JSON with object keys sorted at every level, whatever map order serde_json was
/// built with (its `preserve_order` feature may be switched on by any crate in the graph).
pub(crate) fn canonical_json(map: &Map<String, Value>) -> String {
    canonical(&Value::Object(map.clone())).to_string()
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn fnv128_known_vectors() {
        // Published FNV-1a 128-bit test vectors.
        assert_eq!(hex_digest(""), "6c62272e07bb014262b821756295c58d");
        assert_eq!(hex_digest("a"), "d228cb696f1a8caf78912b704e4a8964");
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let v: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"d": 2, "c": [3, {"f": 4, "e": 5}]}}"#).unwrap();
        assert_eq!(
            canonical_json(v.as_object().unwrap()),
            r#"{"a":{"c":[3,{"e":5,"f":4}],"d":2},"b":1}"#
        );
    }

    #[test]
    fn digest_tracks_every_field_and_only_values() {
        let base = Config {
            output_dir: "/x".into(),
            ..Config::default()
        };
        let d0 = base.digest();
        assert_eq!(d0.len(), 32);
        assert_eq!(d0, base.clone().digest());
        let mut other = base.clone();
        other.probe_cadence_us += 1;
        assert_ne!(other.digest(), d0);
        assert_eq!(
            base.diff_fields(&other),
            vec!["probe_cadence_us".to_string()]
        );
        other.log_filter = "warn".into();
        other.purity_rel_tolerance = 0.2;
        assert_eq!(
            base.diff_fields(&other),
            vec!["probe_cadence_us", "log_filter", "purity_rel_tolerance"]
        );
        assert!(base.diff_fields(&base).is_empty());
        // Pinned: the digest of this exact config must never change across builds, or
        // nodes built from different commits would disagree on identical configs.
        assert_eq!(
            base.canonical_json(),
            r#"{"asymmetry_allowance_ns":0,"enabled":false,"estimator":"hull","graph_seed":1,"handshake_timeout_ms":2000,"interface":"","log_filter":"info","max_bound_ns":1000000000,"max_uncertainty_ns":1000,"output_dir":"/x","packet_spacing_us":50,"probe_cadence_us":40000,"probe_out_degree":8,"probe_port":0,"probe_window_s":15.0,"purity_abs_tolerance_ns":2000,"purity_rel_tolerance":0.1,"reference_node":0,"rendezvous_timeout_ms":120000,"snapshot_best_of":5,"snapshot_period_ms":100,"timestamping":"auto"}"#
        );
        // Computed independently (Python, FNV-1a 128 over the string above).
        assert_eq!(d0, "d790f985a30ca2dbad8eeb2582d1cbab");
    }
}
