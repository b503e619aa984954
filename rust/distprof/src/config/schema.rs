//! The JSON Schema of a configuration file, generated from the Rust types by schemars and
//! completed from the field table (ranges), so that editors catch what the loader catches.
//! The checked-in copy is `schema/distprof-config.schema.json`; a test fails when it is stale.

use super::fields::{self, FieldKind};
use super::Config;
use serde_json::{json, Value};

/// Where the checked-in schema lives, relative to the repository root.
pub const SCHEMA_PATH: &str = "schema/distprof-config.schema.json";

/// The schema as a JSON value.
pub fn schema_value() -> Value {
    let mut schema = schemars::schema_for!(Config).to_value();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for spec in fields::FIELDS {
            let Some(prop) = properties.get_mut(spec.name).and_then(Value::as_object_mut) else {
                continue;
            };
            match spec.kind {
                FieldKind::Unsigned { min, max, .. } => {
                    prop.insert("minimum".into(), json!(min));
                    prop.insert("maximum".into(), json!(max));
                }
                FieldKind::Float { min, max } => {
                    prop.insert("minimum".into(), json!(min));
                    prop.insert("maximum".into(), json!(max));
                }
                _ => {}
            }
        }
        // The default output directory is the build host's temporary directory: left out so
        // the schema is the same on every machine (the description says what it is).
        if let Some(prop) = properties
            .get_mut("output_dir")
            .and_then(Value::as_object_mut)
        {
            prop.remove("default");
        }
        // Files name their schema and say what they are for; both keys are ignored.
        properties.insert(
            "$schema".into(),
            json!({"type": "string", "description": "Path or URL of this schema, for editors. Ignored by distprof."}),
        );
        properties.insert(
            "description".into(),
            json!({"type": "string", "description": "What this configuration is for. Ignored by distprof."}),
        );
    }
    schema
}

/// The schema as the checked-in file holds it: pretty JSON with a final newline.
pub fn schema_json() -> String {
    let mut text = serde_json::to_string_pretty(&schema_value()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn repo_root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn checked_in_schema_is_current() {
        let path = repo_root().join(SCHEMA_PATH);
        let fresh = schema_json();
        if std::env::var_os("DISTPROF_BLESS").is_some() {
            crate::atomic_file::write(&path, fresh.as_bytes()).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == fresh,
            "{SCHEMA_PATH} is stale; regenerate it with\n  \
             cargo run -q -p distprof-cli -- config schema > {SCHEMA_PATH}\n\
             or DISTPROF_BLESS=1 cargo nextest run -p distprof config::"
        );
    }

    #[test]
    fn schema_covers_every_field_with_its_doc_and_range() {
        let schema = schema_value();
        let props = schema["properties"].as_object().unwrap();
        assert_eq!(props.len(), fields::FIELDS.len() + 2);
        assert_eq!(schema["additionalProperties"], json!(false));
        assert!(
            schema.get("required").is_none(),
            "every key must be optional"
        );
        for spec in fields::FIELDS {
            let prop = &props[spec.name];
            let doc = prop["description"].as_str().unwrap_or_default();
            assert!(doc.len() > 20, "{} has no doc comment", spec.name);
            if let FieldKind::Unsigned { min, max, .. } = spec.kind {
                assert_eq!(prop["minimum"], json!(min), "{}", spec.name);
                assert_eq!(prop["maximum"], json!(max), "{}", spec.name);
            }
            if spec.name != "output_dir" {
                assert_eq!(
                    prop["default"],
                    Config::default().to_json_map()[spec.name],
                    "{}",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn schema_enums_match_the_field_table() {
        let schema = schema_value();
        for (def, names) in [
            ("TimestampMode", fields::TIMESTAMP_MODES),
            ("EstimatorKind", fields::ESTIMATORS),
        ] {
            let variants: Vec<&str> = schema["$defs"][def]["oneOf"]
                .as_array()
                .unwrap_or_else(|| panic!("{def}: {}", schema["$defs"][def]))
                .iter()
                .map(|v| v["const"].as_str().unwrap())
                .collect();
            assert_eq!(variants, names, "{def}");
        }
    }
}
