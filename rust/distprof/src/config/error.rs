//! Configuration problems. They are collected, never thrown one at a time, so a user sees
//! every mistake of a file and of the environment in one run.

use serde_json::Value;
use std::fmt;
use std::path::PathBuf;

/// Where a bad value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A key inside a JSON file; `path` is a JSONPath such as `$.probe_cadence_us`.
    Json { file: PathBuf, path: String },
    /// A whole file (unreadable, not JSON, not an object).
    File { file: PathBuf },
    /// An environment variable.
    Env { var: String },
    /// A field that kept its default (only reachable through inconsistent combinations whose
    /// other side is also a default, i.e. a bug in the defaults; named rather than hidden).
    Default { field: String },
    /// A field of a configuration built in code rather than loaded
    /// (`config::validate_config`).
    Field { field: String },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Json { file, path } => write!(f, "{}: {path}", file.display()),
            Location::File { file } => write!(f, "{}", file.display()),
            Location::Env { var } => write!(f, "environment variable {var}"),
            Location::Default { field } => write!(f, "default of {field}"),
            Location::Field { field } => write!(f, "config field {field}"),
        }
    }
}

/// One problem: where, what is wrong with which value, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub location: Location,
    /// Names the value, e.g. `"fast" is not a whole number of microseconds`.
    pub problem: String,
    /// What to do next, e.g. `set an integer such as 40000`.
    pub fix: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; fix: {}", self.location, self.problem, self.fix)
    }
}

/// Every problem found, in the order found (file before environment before combinations).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.errors.iter()
    }

    /// Every problem on one line, for a host log that must get exactly one line (the XLA
    /// plugin logs this when it stays disabled).
    pub fn one_line(&self) -> String {
        let all: Vec<String> = self.errors.iter().map(|e| e.to_string()).collect();
        format!(
            "{} configuration problem(s): {}",
            all.len(),
            all.join(" | ")
        )
    }

    pub(crate) fn push(&mut self, location: Location, problem: String, fix: String) {
        self.errors.push(ConfigError {
            location,
            problem,
            fix,
        });
    }
}

/// One problem per line, no trailing newline.
impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// JSONPath of a top-level key: `$.name`, or `$["odd key"]` when the key is not a plain name.
pub(crate) fn json_path(key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("$.{key}")
    } else {
        format!("$[{}]", Value::String(key.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_one_problem_per_line() {
        let mut errs = ConfigErrors::default();
        errs.push(
            Location::Json {
                file: "a.json".into(),
                path: "$.probe_port".into(),
            },
            "70000 does not fit".into(),
            "use 0..=65535".into(),
        );
        errs.push(
            Location::Env {
                var: "XLA_PROBE_CADENCE_US".into(),
            },
            "\"x\" is not a number".into(),
            "set 40000".into(),
        );
        assert_eq!(
            errs.to_string(),
            "a.json: $.probe_port: 70000 does not fit; fix: use 0..=65535\n\
             environment variable XLA_PROBE_CADENCE_US: \"x\" is not a number; fix: set 40000"
        );
        assert_eq!(errs.len(), 2);
        let one = errs.one_line();
        assert!(!one.contains('\n'));
        assert_eq!(
            one,
            "2 configuration problem(s): a.json: $.probe_port: 70000 does not fit; fix: use 0..=65535 | \
             environment variable XLA_PROBE_CADENCE_US: \"x\" is not a number; fix: set 40000"
        );
    }
}
