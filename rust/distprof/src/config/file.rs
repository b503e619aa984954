//! The file layer: a JSON object whose keys are field names. Every key is checked (unknown,
//! duplicated, wrong type) and every problem is collected; ranges are checked later, on the
//! merged config, so that an environment override can be judged the same way.

use super::error::{json_path, ConfigErrors, Location};
use super::fields::{self, FieldKind, FieldSpec, IGNORED_FILE_KEYS};
use super::layers::Builder;
use super::suggest;
use super::ValueSource;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// The largest configuration file read. Every preset is under 2 kB and a file listing
/// every key with a long description stays far below this; past it the file is not a
/// distprof config (a log, a core dump, a device) and reading it would only cost memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Problems listed one by one per file; past this the rest are counted in one line. A file
/// with thousands of bad keys is not a config with typos, and suggesting a name for each of
/// 100k unknown keys took seconds.
const MAX_LISTED_KEY_PROBLEMS: usize = 100;

/// Why a config file could not be read: `problem` names the path, `kind` selects the fix.
pub(crate) struct ReadError {
    pub(crate) problem: String,
    pub(crate) kind: ReadErrorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadErrorKind {
    Unreadable,
    NotRegular,
    TooLarge,
    NotText,
}

impl ReadErrorKind {
    /// What the path must name instead, completing "point it at ...".
    fn wanted(self) -> String {
        match self {
            ReadErrorKind::Unreadable => "a readable JSON file".to_string(),
            ReadErrorKind::NotRegular => {
                "a regular JSON file (not a pipe, device or directory)".to_string()
            }
            ReadErrorKind::TooLarge => {
                format!("a JSON config file of at most {MAX_CONFIG_BYTES} bytes")
            }
            ReadErrorKind::NotText => "a UTF-8 JSON file".to_string(),
        }
    }
}

/// Reads a config file without ever blocking or reading without limit: the file is opened
/// non-blocking (a FIFO with no writer would otherwise block `open` forever), must be a
/// regular file (not a FIFO, device, socket or directory) and at most
/// [`MAX_CONFIG_BYTES`] long. The XLA plugin reads its config through this, so a bad path
/// can never stall XLA's client creation.
pub(crate) fn read_config_text(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| ReadError {
            problem: format!("cannot read {shown}: {err}"),
            kind: ReadErrorKind::Unreadable,
        })?;
    let meta = file.metadata().map_err(|err| ReadError {
        problem: format!("cannot read {shown}: {err}"),
        kind: ReadErrorKind::Unreadable,
    })?;
    let kind = meta.file_type();
    let not_regular = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else if !kind.is_file() {
        Some("not a regular file")
    } else {
        None
    };
    if let Some(what) = not_regular {
        return Err(ReadError {
            problem: format!("{shown} is {what}, not a regular file"),
            kind: ReadErrorKind::NotRegular,
        });
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(ReadError {
            problem: format!(
                "{shown} is {} bytes, over the {MAX_CONFIG_BYTES}-byte limit of a config file",
                meta.len()
            ),
            kind: ReadErrorKind::TooLarge,
        });
    }
    // The file may grow between the stat and the read: read at most one byte past the cap.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| ReadError {
            problem: format!("cannot read {shown}: {err}"),
            kind: ReadErrorKind::Unreadable,
        })?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ReadError {
            problem: format!("{shown} grew past the {MAX_CONFIG_BYTES}-byte limit of a config file while being read"),
            kind: ReadErrorKind::TooLarge,
        });
    }
    String::from_utf8(bytes).map_err(|err| ReadError {
        problem: format!("{shown} is not UTF-8 text (invalid byte at offset {})", err.utf8_error().valid_up_to()),
        kind: ReadErrorKind::NotText,
    })
}

/// What named a config file, so that a file that cannot be read blames that input and the
/// fix says where to give another path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy<'a> {
    /// An environment variable (`XLA_DIST_PROF_CONFIG`).
    Var(&'a str),
    /// A command-line flag or API argument, as the user wrote it (`--config`,
    /// `distprof.jax.start(config=...)`).
    Arg(&'a str),
    /// The path itself (`distprof config check FILE`).
    Path,
}

/// The text of the config file at `path`, read through the guarded reader: a FIFO, device,
/// socket, directory or a file over [`MAX_CONFIG_BYTES`] is refused by its type and size
/// before any read, with the reason and a fix that names `named_by`. Every entry point
/// (the CLI, the XLA plugin, the Python package) reads config files through this.
pub fn read_config_file(path: &Path, named_by: NamedBy<'_>) -> Result<String, ConfigErrors> {
    read_config_text(path).map_err(|err| {
        let what = err.kind.wanted();
        let (location, fix) = match named_by {
            NamedBy::Var(var) => (
                Location::Env { var: var.to_string() },
                format!("point {var} at {what}, or unset it to use defaults and environment variables only"),
            ),
            NamedBy::Arg(arg) => (
                Location::File { file: path.to_path_buf() },
                format!("give {arg} the path of {what}"),
            ),
            NamedBy::Path => (Location::File { file: path.to_path_buf() }, format!("give the path of {what}")),
        };
        let mut errors = ConfigErrors::default();
        errors.push(location, err.problem, fix);
        errors
    })
}

/// Reads `path` and applies its keys; `named_by` is the input that pointed at the file.
pub(crate) fn apply_file(
    path: &Path,
    named_by: NamedBy<'_>,
    builder: &mut Builder,
    errors: &mut ConfigErrors,
) {
    let text = match read_config_file(path, named_by) {
        Ok(text) => text,
        Err(unreadable) => {
            errors.errors.extend(unreadable.errors);
            return;
        }
    };
    tracing::debug!(file = %path.display(), "reading config file");
    apply_text(path, &text, builder, errors);
}

/// Applies the JSON `text` of the file at `path` (the path only names the source).
pub(crate) fn apply_text(
    path: &Path,
    text: &str,
    builder: &mut Builder,
    errors: &mut ConfigErrors,
) {
    let entries = match serde_json::from_str::<Entries>(text) {
        Ok(Entries(entries)) => entries,
        Err(err) => {
            let fix = if err.is_data() {
                "the file must hold one JSON object, e.g. {\"enabled\": true}".to_string()
            } else {
                format!(
                    "correct the JSON at line {} column {} (JSON allows no comments and no trailing commas)",
                    err.line(),
                    err.column()
                )
            };
            errors.push(
                Location::File {
                    file: path.to_path_buf(),
                },
                format!("not valid JSON: {err}"),
                fix,
            );
            return;
        }
    };
    // A set, not a list: a file of 160k keys must not take quadratic time.
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let listed_before = errors.len();
    let mut unlisted = 0usize;
    for (key, value) in &entries {
        if errors.len() - listed_before >= MAX_LISTED_KEY_PROBLEMS {
            // Still apply the fields that are right, so that later checks judge them; only
            // the listing of problems stops.
            let duplicate = !seen.insert(key.as_str());
            match fields::by_name(key) {
                Some(spec) if !duplicate && check_json_value(spec, value).is_ok() => {
                    builder.set(spec, value.clone(), ValueSource::File(path.to_path_buf()))
                }
                Some(spec) => {
                    builder.mark_broken(spec);
                    unlisted += 1;
                }
                None if !duplicate && IGNORED_FILE_KEYS.contains(&key.as_str()) && value.is_string() => {}
                None => unlisted += 1,
            }
            continue;
        }
        let location = Location::Json {
            file: path.to_path_buf(),
            path: json_path(key),
        };
        if !seen.insert(key.as_str()) {
            errors.push(
                location,
                format!("key {key:?} appears more than once"),
                "keep one of them".to_string(),
            );
            continue;
        }
        if IGNORED_FILE_KEYS.contains(&key.as_str()) {
            if !value.is_string() {
                errors.push(
                    location,
                    format!("{} is {}, not a string", show(value), a_json_type(value)),
                    format!("make {key:?} a string (it is documentation and is otherwise ignored)"),
                );
            }
            continue;
        }
        let Some(spec) = fields::by_name(key) else {
            let candidates = fields::FIELDS
                .iter()
                .map(|f| f.name)
                .chain(IGNORED_FILE_KEYS);
            let hint = suggest::did_you_mean(key, candidates);
            let fix = if hint.is_empty() {
                "remove it; `distprof config schema` lists every key".to_string()
            } else {
                format!("{hint} (or remove it)")
            };
            errors.push(location, format!("unknown key {key:?}"), fix);
            continue;
        };
        match check_json_value(spec, value) {
            Ok(()) => builder.set(spec, value.clone(), ValueSource::File(path.to_path_buf())),
            Err((problem, fix)) => {
                builder.mark_broken(spec);
                errors.push(location, problem, fix);
            }
        }
    }
    if unlisted > 0 {
        errors.push(
            Location::File {
                file: path.to_path_buf(),
            },
            format!("{unlisted} more key problem(s) not listed (only the first {MAX_LISTED_KEY_PROBLEMS} are)"),
            "this does not look like a distprof config; `distprof config schema` lists every key".to_string(),
        );
    }
}

/// Whether `value` has the JSON type of the field (and fits its Rust type).
pub(crate) fn check_json_value(spec: &FieldSpec, value: &Value) -> Result<(), (String, String)> {
    let shown = show(value);
    if value.is_null() {
        return Err((
            "null is not a value".to_string(),
            format!(
                "remove the key to keep the default, or give {}",
                spec.kind.allowed()
            ),
        ));
    }
    // A quoted number or boolean is the commonest slip; say so precisely.
    let unquote = |what: &str| -> Option<(String, String)> {
        let s = value.as_str()?;
        let looks_right = match spec.kind {
            FieldKind::Bool => s == "true" || s == "false",
            FieldKind::Unsigned { .. } | FieldKind::Float { .. } => s.trim().parse::<f64>().is_ok(),
            _ => false,
        };
        looks_right.then(|| {
            (
                format!("{shown} is a string, not {what}"),
                format!("write {s} without quotes"),
            )
        })
    };
    match spec.kind {
        FieldKind::Bool if value.is_boolean() => Ok(()),
        FieldKind::Bool => Err(unquote("a boolean").unwrap_or_else(|| {
            (
                format!("{shown} is {}, not a boolean", a_json_type(value)),
                "write true or false (no quotes)".to_string(),
            )
        })),
        FieldKind::Unsigned { bits, min, max } => {
            let fix = format!("use an integer in {min}..={max}");
            if let Some(n) = value.as_u64() {
                if n > FieldKind::type_max(bits) {
                    return Err((format!("{n} does not fit in u{bits}"), fix));
                }
                return Ok(());
            }
            if value.as_i64().is_some() {
                return Err((format!("{shown} is negative"), fix));
            }
            if let Some(x) = value.as_f64() {
                return Err(if x.fract() != 0.0 {
                    (format!("{shown} is not a whole number"), fix)
                } else if x < 0.0 {
                    (format!("{shown} is negative"), fix)
                } else {
                    (format!("{shown} does not fit in u{bits}"), fix)
                });
            }
            Err(unquote("a number").unwrap_or_else(|| {
                (
                    format!("{shown} is {}, not a number", a_json_type(value)),
                    fix,
                )
            }))
        }
        FieldKind::Float { min, max } => {
            if value.is_number() {
                return Ok(());
            }
            Err(unquote("a number").unwrap_or_else(|| {
                (
                    format!("{shown} is {}, not a number", a_json_type(value)),
                    format!("use a number in {min}..={max}"),
                )
            }))
        }
        FieldKind::Text if value.is_string() => Ok(()),
        FieldKind::Text => Err((
            format!("{shown} is {}, not a string", a_json_type(value)),
            "write the value in double quotes".to_string(),
        )),
        FieldKind::Choice(names) => match value.as_str() {
            Some(s) if names.contains(&s) => Ok(()),
            Some(s) => {
                let hint = suggest::did_you_mean(s, names.iter().copied());
                let fix = if hint.is_empty() {
                    format!("use one of {}", names.join(", "))
                } else {
                    format!("{hint} (one of {})", names.join(", "))
                };
                Err((format!("{shown} is not one of {}", names.join(", ")), fix))
            }
            None => Err((
                format!("{shown} is {}, not a string", a_json_type(value)),
                format!("use one of {} (in double quotes)", names.join(", ")),
            )),
        },
    }
}

fn a_json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value as JSON, shortened so that a pasted blob does not flood the message.
fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 60 {
        text
    } else {
        format!("{}...", text.chars().take(57).collect::<String>())
    }
}

/// The top-level object as (key, value) pairs in file order, keeping duplicates, which a
/// `serde_json::Map` would silently collapse to the last one.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fields::by_name;
    use serde_json::json;

    fn check(field: &str, value: Value) -> Result<(), (String, String)> {
        check_json_value(by_name(field).unwrap(), &value)
    }

    fn problems(text: &str) -> Vec<String> {
        let mut builder = Builder::defaults();
        let mut errors = ConfigErrors::default();
        apply_text(Path::new("f.json"), text, &mut builder, &mut errors);
        errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn type_checks_name_the_value() {
        assert_eq!(check("probe_cadence_us", json!(40000)), Ok(()));
        assert_eq!(check("probe_window_s", json!(4)), Ok(()));
        let cases = [
            (
                "probe_cadence_us",
                json!("40000"),
                "\"40000\" is a string, not a number",
                "write 40000 without quotes",
            ),
            (
                "probe_cadence_us",
                json!(-1),
                "-1 is negative",
                "1000..=10000000",
            ),
            (
                "probe_cadence_us",
                json!(1.5),
                "1.5 is not a whole number",
                "integer",
            ),
            (
                "probe_cadence_us",
                json!(1e30),
                "1e+30 does not fit in u64",
                "integer",
            ),
            (
                "probe_port",
                json!(70000),
                "70000 does not fit in u16",
                "0..=65535",
            ),
            (
                "enabled",
                json!("true"),
                "\"true\" is a string, not a boolean",
                "write true without quotes",
            ),
            (
                "enabled",
                json!(1),
                "1 is a number, not a boolean",
                "true or false",
            ),
            (
                "output_dir",
                json!(7),
                "7 is a number, not a string",
                "double quotes",
            ),
            (
                "estimator",
                json!("SVM "),
                "\"SVM \" is not one of",
                "did you mean `svm`?",
            ),
            (
                "estimator",
                json!(["hull"]),
                "[\"hull\"] is an array, not a string",
                "one of hull",
            ),
            (
                "probe_window_s",
                json!(null),
                "null is not a value",
                "remove the key",
            ),
            (
                "probe_window_s",
                json!({"s": 1}),
                "{\"s\":1} is an object, not a number",
                "0.1..=3600",
            ),
        ];
        for (field, value, want_problem, want_fix) in cases {
            let (problem, fix) = check(field, value.clone()).unwrap_err();
            assert!(problem.contains(want_problem), "{field}={value}: {problem}");
            assert!(fix.contains(want_fix), "{field}={value}: {fix}");
        }
    }

    #[test]
    fn every_key_problem_is_reported_with_its_path() {
        let got = problems(
            r#"{
                "$schema": "x.json",
                "description": "test",
                "probe_cadance_us": 100,
                "probe_port": "8000",
                "estimator": "hul",
                "enabled": true,
                "enabled": false,
                "totally unrelated": 1
            }"#,
        );
        assert_eq!(
            got,
            vec![
                "f.json: $.probe_cadance_us: unknown key \"probe_cadance_us\"; fix: did you mean `probe_cadence_us`? (or remove it)",
                "f.json: $.probe_port: \"8000\" is a string, not a number; fix: write 8000 without quotes",
                "f.json: $.estimator: \"hul\" is not one of hull, svm, ntp, two_point; fix: did you mean `hull`? (one of hull, svm, ntp, two_point)",
                "f.json: $.enabled: key \"enabled\" appears more than once; fix: keep one of them",
                "f.json: $[\"totally unrelated\"]: unknown key \"totally unrelated\"; fix: remove it; `distprof config schema` lists every key",
            ]
        );
    }

    #[test]
    fn whole_file_problems() {
        let got = problems("{\"enabled\": true,}");
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("f.json: not valid JSON: trailing comma at line 1 column 18"),
            "{}",
            got[0]
        );
        assert!(
            got[0].contains("fix: correct the JSON at line 1 column 18"),
            "{}",
            got[0]
        );
        let got = problems("[1, 2]");
        assert!(got[0].contains("expected a JSON object"), "{}", got[0]);
        assert!(
            got[0].contains("the file must hold one JSON object"),
            "{}",
            got[0]
        );
        let got = problems(r#"{"$schema": 3}"#);
        assert_eq!(got, vec!["f.json: $[\"$schema\"]: 3 is a number, not a string; fix: make \"$schema\" a string (it is documentation and is otherwise ignored)"]);
    }

    #[test]
    fn json_paths() {
        assert_eq!(json_path("probe_port"), "$.probe_port");
        assert_eq!(json_path("a b"), "$[\"a b\"]");
        assert_eq!(json_path("$schema"), "$[\"$schema\"]");
        assert_eq!(json_path(""), "$[\"\"]");
    }
}
