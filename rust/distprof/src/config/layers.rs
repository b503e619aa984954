//! The merge of configuration layers in progress: each layer (defaults, file, environment)
//! writes type-checked JSON values over the one below and records where each came from;
//! `finish` turns the result into a `Config` and judges it as a whole (`validate`).

use super::error::{ConfigErrors, Location};
use super::fields::{self, FieldSpec};
use super::{validate, Config, EffectiveConfig, ValueSource};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The merge in progress.
pub(crate) struct Builder {
    values: Map<String, Value>,
    sources: BTreeMap<String, ValueSource>,
    /// Fields that some layer got wrong: range and combination checks skip them, so one
    /// mistake is reported once, not again as a spurious inconsistency.
    broken: BTreeSet<&'static str>,
}

impl Builder {
    pub(crate) fn defaults() -> Self {
        let values = Config::default().to_json_map();
        let sources = fields::FIELDS
            .iter()
            .map(|f| (f.name.to_string(), ValueSource::Default))
            .collect();
        Self {
            values,
            sources,
            broken: BTreeSet::new(),
        }
    }

    pub(crate) fn set(&mut self, spec: &FieldSpec, value: Value, source: ValueSource) {
        self.values.insert(spec.name.to_string(), value);
        self.sources.insert(spec.name.to_string(), source);
    }

    pub(crate) fn mark_broken(&mut self, spec: &'static FieldSpec) {
        self.broken.insert(spec.name);
    }

    pub(crate) fn finish(self, mut errors: ConfigErrors) -> Result<EffectiveConfig, ConfigErrors> {
        let config: Config = match serde_json::from_value(Value::Object(self.values)) {
            Ok(config) => config,
            Err(err) => {
                // Every value was type-checked against the field table, so this means the
                // table and the struct disagree: a distprof bug, reported rather than hidden.
                errors.push(
                    Location::Default {
                        field: "(all)".to_string(),
                    },
                    format!("internal: merged configuration does not deserialize: {err}"),
                    "report this as a distprof bug".to_string(),
                );
                return Err(errors);
            }
        };
        validate::check(
            &config,
            &self.sources,
            &self.broken,
            cfg!(feature = "svm"),
            &mut errors,
        );
        if errors.is_empty() {
            Ok(EffectiveConfig {
                config,
                sources: self.sources,
            })
        } else {
            Err(errors)
        }
    }
}
