//! The environment layer: one variable per field (names in `fields::FIELDS`), parsed from
//! text into the field's JSON type. Ranges are checked later, on the merged config.

use super::error::{ConfigErrors, Location};
use super::fields::{self, FieldKind, FieldSpec};
use super::layers::Builder;
use super::suggest;
use super::ValueSource;
use serde_json::Value;

/// Booleans in variables accept the spellings shells and launchers use:
/// 1/0, true/false, yes/no, on/off, in any case, surrounding blanks ignored.
pub fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Reads every field's variable through `env` and applies the ones that are set.
pub(crate) fn apply_env(
    env: &dyn Fn(&str) -> Option<String>,
    builder: &mut Builder,
    errors: &mut ConfigErrors,
) {
    for spec in fields::FIELDS {
        let Some(raw) = env(spec.env) else { continue };
        match parse_env_value(spec, &raw) {
            Ok(value) => {
                tracing::debug!(
                    variable = spec.env,
                    field = spec.name,
                    "config value from environment"
                );
                builder.set(spec, value, ValueSource::Env(spec.env.to_string()));
            }
            Err((problem, fix)) => {
                builder.mark_broken(spec);
                errors.push(
                    Location::Env {
                        var: spec.env.to_string(),
                    },
                    problem,
                    fix,
                );
            }
        }
    }
}

/// The text of a variable as the field's JSON value, or (problem, fix).
pub(crate) fn parse_env_value(spec: &FieldSpec, raw: &str) -> Result<Value, (String, String)> {
    let text = raw.trim();
    let unset_hint = format!("or unset {} to keep the lower-precedence value", spec.env);
    if text.is_empty() && spec.kind != FieldKind::Text {
        return Err((
            format!("{} is set but empty", spec.env),
            format!("set it to {} {unset_hint}", spec.kind.allowed()),
        ));
    }
    match spec.kind {
        FieldKind::Bool => parse_bool(text).map(Value::Bool).ok_or_else(|| {
            (
                format!("{raw:?} is not a boolean"),
                format!("use one of 1/0, true/false, yes/no, on/off {unset_hint}"),
            )
        }),
        FieldKind::Unsigned { bits, min, max } => {
            let fix = format!("set an integer in {min}..={max} {unset_hint}");
            match text.parse::<u64>() {
                Ok(n) if n <= FieldKind::type_max(bits) => Ok(Value::from(n)),
                Ok(n) => Err((format!("{n} does not fit in u{bits}"), fix)),
                Err(_) if text.starts_with('-') && text[1..].parse::<u64>().is_ok() => {
                    Err((format!("{raw:?} is negative"), fix))
                }
                Err(_)
                    if text
                        .parse::<f64>()
                        .is_ok_and(|x| x.is_finite() && x.fract() != 0.0) =>
                {
                    Err((
                        format!("{raw:?} is not a whole number ({})", unit_of(spec.name)),
                        fix,
                    ))
                }
                Err(_) if text.bytes().all(|b| b.is_ascii_digit()) => {
                    Err((format!("{raw:?} does not fit in u{bits}"), fix))
                }
                Err(_) => Err((format!("{raw:?} is not a whole number"), fix)),
            }
        }
        FieldKind::Float { min, max } => match text.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(Value::from(x)),
            _ => Err((
                format!("{raw:?} is not a finite number"),
                format!("set a number in {min}..={max} {unset_hint}"),
            )),
        },
        FieldKind::Text => Ok(Value::String(raw.to_string())),
        FieldKind::Choice(names) => {
            let lower = text.to_ascii_lowercase();
            if names.contains(&lower.as_str()) {
                Ok(Value::String(lower))
            } else {
                let hint = suggest::did_you_mean(text, names.iter().copied());
                let fix = if hint.is_empty() {
                    format!("use one of {}", names.join(", "))
                } else {
                    format!("{hint} (one of {})", names.join(", "))
                };
                Err((format!("{raw:?} is not one of {}", names.join(", ")), fix))
            }
        }
    }
}

/// The unit a field name carries, for messages.
pub(crate) fn unit_of(name: &str) -> &'static str {
    match name.rsplit('_').next() {
        Some("us") => "microseconds",
        Some("ms") => "milliseconds",
        Some("ns") => "nanoseconds",
        Some("s") => "seconds",
        _ => "count",
    }
}

/// Warnings for variables that look like a mistyped distprof variable: an `XLA_*` name that
/// nothing here reads but that is close to one that is. Names are compared without their
/// `XLA_` / `XLA_DIST_PROF_` prefix, and also against field names, so that
/// `XLA_DIST_PROF_PROBE_CADENCE_US` and `XLA_DIST_PROF_ENABLED` point at the real names.
/// Not errors: other parts of distprof (tests, the FFI) may read their own variables.
pub fn unknown_env_warnings(names: impl IntoIterator<Item = String>) -> Vec<String> {
    fn stem(name: &str) -> &str {
        name.strip_prefix(fields::ENV_PREFIX)
            .or_else(|| name.strip_prefix("XLA_"))
            .unwrap_or(name)
    }
    let known: Vec<&str> = fields::all_env_vars().collect();
    // (what a typo is compared with, the variable to suggest)
    let mut keys: Vec<(&str, &str)> = known.iter().map(|v| (stem(v), *v)).collect();
    keys.extend(fields::FIELDS.iter().map(|f| (f.name, f.env)));
    names
        .into_iter()
        .filter(|n| n.starts_with("XLA_") && !known.contains(&n.as_str()))
        .filter_map(|n| {
            let key = suggest::closest(stem(&n), keys.iter().map(|(k, _)| *k))?;
            let var = keys.iter().find(|(k, _)| *k == key)?.1;
            Some(format!(
                "environment variable {n} is not read by distprof; did you mean {var}?"
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fields::by_name;
    use serde_json::json;

    fn parse(field: &str, raw: &str) -> Result<Value, (String, String)> {
        parse_env_value(by_name(field).unwrap(), raw)
    }

    #[test]
    fn booleans_accept_every_documented_spelling() {
        for t in ["1", "true", "TRUE", "yes", "Yes", "on", " ON "] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "false", "False", "no", "off", "OFF"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "2", "y", "enable", "truee"] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
        assert_eq!(parse("enabled", "on"), Ok(json!(true)));
        let (problem, fix) = parse("enabled", "maybe").unwrap_err();
        assert!(problem.contains("\"maybe\""), "{problem}");
        assert!(fix.contains("yes/no"), "{fix}");
    }

    #[test]
    fn integers() {
        assert_eq!(parse("probe_cadence_us", " 40000 "), Ok(json!(40000)));
        assert_eq!(parse("probe_port", "65535"), Ok(json!(65535)));
        let cases = [
            ("probe_port", "65536", "does not fit in u16"),
            ("probe_cadence_us", "-5", "is negative"),
            (
                "probe_cadence_us",
                "1.5",
                "not a whole number (microseconds)",
            ),
            ("probe_cadence_us", "fast", "not a whole number"),
            (
                "probe_cadence_us",
                "99999999999999999999999",
                "does not fit in u64",
            ),
            ("probe_cadence_us", "", "set but empty"),
        ];
        for (field, raw, want) in cases {
            let (problem, fix) = parse(field, raw).unwrap_err();
            assert!(problem.contains(want), "{field}={raw}: {problem}");
            assert!(fix.contains("unset"), "{fix}");
        }
    }

    #[test]
    fn floats_and_text_and_choices() {
        assert_eq!(parse("probe_window_s", "2.5"), Ok(json!(2.5)));
        assert!(parse("probe_window_s", "NaN").is_err());
        assert!(parse("probe_window_s", "inf").is_err());
        assert_eq!(parse("interface", ""), Ok(json!("")));
        assert_eq!(parse("output_dir", "/a b"), Ok(json!("/a b")));
        assert_eq!(parse("estimator", "HULL"), Ok(json!("hull")));
        let (problem, fix) = parse("estimator", "hul").unwrap_err();
        assert_eq!(problem, "\"hul\" is not one of hull, svm, ntp, two_point");
        assert!(fix.starts_with("did you mean `hull`?"), "{fix}");
        let (_, fix) = parse("timestamping", "ptp").unwrap_err();
        assert_eq!(fix, "use one of auto, hardware, kernel, user");
    }

    #[test]
    fn typos_of_variables_are_warned_about() {
        let names = [
            "XLA_PROBE_CADENCE_US",           // known
            "XLA_PROBE_CADENCE_MS",           // typo
            "XLA_DIST_PROF_ESTIMATR",         // typo
            "XLA_FLAGS",                      // XLA's own
            "XLA_DIST_PROF_TEST_SOMETHING",   // someone else's, far from every name
            "XLA_DIST_PROF_PROBE_CADENCE_US", // the wrong family of names
            "XLA_DIST_PROF_ENABLED",          // the field name
            "PATH",
        ]
        .map(String::from);
        let warnings = unknown_env_warnings(names);
        assert_eq!(
            warnings,
            vec![
                "environment variable XLA_PROBE_CADENCE_MS is not read by distprof; did you mean XLA_PROBE_CADENCE_US?",
                "environment variable XLA_DIST_PROF_ESTIMATR is not read by distprof; did you mean XLA_DIST_PROF_ESTIMATOR?",
                "environment variable XLA_DIST_PROF_PROBE_CADENCE_US is not read by distprof; did you mean XLA_PROBE_CADENCE_US?",
                "environment variable XLA_DIST_PROF_ENABLED is not read by distprof; did you mean XLA_ENABLE_DISTRIBUTED_PROFILING?",
            ]
        );
    }
}
