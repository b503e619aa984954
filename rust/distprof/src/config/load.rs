//! Precedence: defaults < JSON file named by `XLA_DIST_PROF_CONFIG` < environment variables.
//!
//! Each layer writes type-checked JSON values over the one below and records the source;
//! the merged object becomes a `Config`, which `validate` then judges as a whole (ranges,
//! combinations), naming the layer each offending value came from.

use super::error::ConfigErrors;
use super::fields::CONFIG_FILE_VAR;
use super::layers::Builder;
use super::file::NamedBy;
use super::{env, file, Config, EffectiveConfig};
use std::path::Path;

/// The effective configuration of this process: defaults, then the file named by
/// `XLA_DIST_PROF_CONFIG`, then the variables. Variables that look like typos of distprof
/// variables are logged as warnings (they are not errors: other code may own them).
pub fn load_from_env() -> Result<EffectiveConfig, ConfigErrors> {
    for warning in
        env::unknown_env_warnings(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
    {
        tracing::warn!("{warning}");
    }
    // A value that is not UTF-8 is kept (lossily) so that it fails parsing with its name
    // rather than being silently ignored.
    load(&|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
}

/// Like `load_from_env`, reading variables through `env` (tests pass a map).
pub fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<EffectiveConfig, ConfigErrors> {
    layered(env_file(env).as_deref().map(|p| (p, NamedBy::Var(CONFIG_FILE_VAR))), None, env)
}

/// Like [`load`], with one more layer between the file of `XLA_DIST_PROF_CONFIG` and the
/// variables: the JSON object `text` that a host API was given (the Python package's
/// `config=` argument), named `label` in messages. Precedence: defaults < file < `text` <
/// environment, so a variable still wins as it does inside XLA.
pub fn load_with_text(
    label: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EffectiveConfig, ConfigErrors> {
    let file = env_file(env);
    layered(file.as_deref().map(|p| (p, NamedBy::Var(CONFIG_FILE_VAR))), Some((label, text)), env)
}

/// Like [`load`], with the file given by the command-line flag `flag` (`run --config`)
/// instead of the one `XLA_DIST_PROF_CONFIG` names: defaults < `file` < environment. A
/// file that cannot be read is blamed on `flag`, not on the variable.
pub fn load_with_file(
    file: &Path,
    flag: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EffectiveConfig, ConfigErrors> {
    layered(Some((file, NamedBy::Arg(flag))), None, env)
}

/// The file `XLA_DIST_PROF_CONFIG` names, if any. An empty value means "no file", as
/// launchers often export empty values.
fn env_file(env: &dyn Fn(&str) -> Option<String>) -> Option<std::path::PathBuf> {
    env(CONFIG_FILE_VAR).filter(|p| !p.trim().is_empty()).map(Into::into)
}

/// defaults < `file` < `text` (a host API's JSON object, named by its label) < environment.
fn layered(
    file: Option<(&Path, NamedBy<'_>)>,
    text: Option<(&Path, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EffectiveConfig, ConfigErrors> {
    let mut builder = Builder::defaults();
    let mut errors = ConfigErrors::default();
    if let Some((path, named_by)) = file {
        file::apply_file(path, named_by, &mut builder, &mut errors);
    }
    if let Some((label, text)) = text {
        file::apply_text(label, text, &mut builder, &mut errors);
    }
    env::apply_env(env, &mut builder, &mut errors);
    builder.finish(errors)
}

/// The configuration a file alone gives (defaults < file), ignoring the environment:
/// what `distprof config check` judges.
pub fn check_file(path: &Path) -> Result<Config, ConfigErrors> {
    let mut builder = Builder::defaults();
    let mut errors = ConfigErrors::default();
    file::apply_file(path, NamedBy::Path, &mut builder, &mut errors);
    builder.finish(errors).map(|effective| effective.config)
}

/// Like `check_file`, on text already read; `path` only names the source in messages
/// (the fuzz targets and property tests drive the file parser through it).
pub fn check_text(path: &Path, text: &str) -> Result<Config, ConfigErrors> {
    let mut builder = Builder::defaults();
    let mut errors = ConfigErrors::default();
    file::apply_text(path, text, &mut builder, &mut errors);
    builder.finish(errors).map(|effective| effective.config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::error::Location;
    use crate::config::fields;
    use crate::config::{EstimatorKind, TimestampMode, ValueSource};
    use std::collections::HashMap;
    use std::io::Write;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn write_file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn nothing_set_gives_defaults() {
        let eff = load(&env_of(&[])).unwrap();
        assert_eq!(eff.config, Config::default());
        assert_eq!(eff.sources.len(), fields::FIELDS.len());
        assert!(eff.sources.values().all(|s| *s == ValueSource::Default));
    }

    #[test]
    fn host_text_sits_between_file_and_env() {
        let f = write_file(r#"{"probe_cadence_us": 30000, "probe_window_s": 3.0}"#);
        let path = f.path().to_string_lossy().into_owned();
        let env = env_of(&[(CONFIG_FILE_VAR, path.as_str()), ("XLA_PROBE_WINDOW_S", "2.5")]);
        let label = Path::new("distprof.jax.start(config=...)");
        let text = r#"{"enabled": true, "probe_cadence_us": 20000, "probe_window_s": 4.0}"#;
        let eff = load_with_text(label, text, &env).unwrap();
        assert!(eff.config.enabled);
        assert_eq!(eff.config.probe_cadence_us, 20_000, "the text beats the file");
        assert_eq!(eff.config.probe_window_s, 2.5, "the variable beats the text");
        assert_eq!(eff.sources["probe_cadence_us"], ValueSource::File(label.to_path_buf()));
        let err = load_with_text(label, r#"{"probe_cadense_us": 1}"#, &env_of(&[])).unwrap_err();
        let line = err.one_line();
        assert!(line.contains("distprof.jax.start(config=...)") && line.contains("probe_cadence_us"), "{line}");
    }

    #[test]
    fn env_beats_file_beats_default() {
        let f = write_file(
            r#"{"$schema": "s.json", "description": "d", "probe_cadence_us": 30000,
                "probe_window_s": 8, "estimator": "ntp", "timestamping": "user"}"#,
        );
        let path = f.path().to_str().unwrap();
        let eff = load(&env_of(&[
            ("XLA_DIST_PROF_CONFIG", path),
            ("XLA_PROBE_CADENCE_US", "50000"),
            ("XLA_ENABLE_DISTRIBUTED_PROFILING", "yes"),
            ("XLA_DIST_PROF_PROBE_PORT", "9000"),
        ]))
        .unwrap();
        let c = &eff.config;
        assert_eq!(c.probe_cadence_us, 50_000);
        assert!(c.enabled);
        assert_eq!(c.probe_port, 9000);
        assert_eq!(c.probe_window_s, 8.0);
        assert_eq!(c.estimator, EstimatorKind::Ntp);
        assert_eq!(c.timestamping, TimestampMode::User);
        assert_eq!(c.packet_spacing_us, Config::default().packet_spacing_us);
        let src = |f: &str| eff.sources[f].to_string();
        assert_eq!(src("probe_cadence_us"), "env XLA_PROBE_CADENCE_US");
        assert_eq!(src("enabled"), "env XLA_ENABLE_DISTRIBUTED_PROFILING");
        assert_eq!(src("probe_window_s"), format!("file {path}"));
        assert_eq!(src("estimator"), format!("file {path}"));
        assert_eq!(src("packet_spacing_us"), "default");
    }

    #[test]
    fn all_problems_of_file_and_env_at_once() {
        let f = write_file(
            r#"{"probe_cadence_us": "fast", "probe_out_degree": 0, "estimatr": "hull"}"#,
        );
        let path = f.path().to_str().unwrap().to_string();
        let errs = load(&env_of(&[
            ("XLA_DIST_PROF_CONFIG", &path),
            ("XLA_PROBE_WINDOW_S", "four"),
            ("XLA_DIST_PROF_PROBE_PORT", "-1"),
        ]))
        .unwrap_err();
        let lines: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].starts_with(&format!(
            "{path}: $.probe_cadence_us: \"fast\" is a string, not a number"
        )));
        assert!(lines[1].starts_with(&format!("{path}: $.estimatr: unknown key")));
        assert!(lines[1].contains("did you mean `estimator`?"));
        assert!(lines[2].starts_with(
            "environment variable XLA_PROBE_WINDOW_S: \"four\" is not a finite number"
        ));
        assert!(lines[3]
            .starts_with("environment variable XLA_DIST_PROF_PROBE_PORT: \"-1\" is negative"));
        assert!(lines[4].starts_with(&format!(
            "{path}: $.probe_out_degree: probe_out_degree = 0 is below the minimum 1"
        )));
        assert_eq!(errs.to_string().lines().count(), 5);
    }

    #[test]
    fn env_override_is_judged_like_a_file_value() {
        let errs = load(&env_of(&[("XLA_PACKET_SPACING_US", "40000")])).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs}");
        let line = errs.to_string();
        assert!(line.starts_with("environment variable XLA_PACKET_SPACING_US: packet_spacing_us = 40000 is over a quarter of probe_cadence_us = 40000 (default)"), "{line}");
    }

    #[test]
    fn unreadable_file_blames_the_variable() {
        let errs = load(&env_of(&[(
            "XLA_DIST_PROF_CONFIG",
            "/nonexistent/distprof.json",
        )]))
        .unwrap_err();
        let line = errs.to_string();
        assert!(line.starts_with("environment variable XLA_DIST_PROF_CONFIG: cannot read /nonexistent/distprof.json:"), "{line}");
        assert!(
            line.contains("fix: point XLA_DIST_PROF_CONFIG at a readable JSON file"),
            "{line}"
        );
        // An empty value means no file.
        assert!(load(&env_of(&[("XLA_DIST_PROF_CONFIG", "")])).is_ok());
    }

    #[test]
    fn svm_follows_the_build() {
        let got = load(&env_of(&[("XLA_DIST_PROF_ESTIMATOR", "svm")]));
        if cfg!(feature = "svm") {
            assert_eq!(got.unwrap().config.estimator, EstimatorKind::Svm);
        } else {
            let line = got.unwrap_err().to_string();
            assert!(line.starts_with("environment variable XLA_DIST_PROF_ESTIMATOR: estimator = \"svm\" but this build of distprof lacks the `svm` cargo feature"), "{line}");
            assert!(line.contains("fix: use \"hull\""), "{line}");
        }
    }

    #[test]
    fn check_file_ignores_the_environment_and_reports_file_paths() {
        let f = write_file(r#"{"probe_window_s": 0.2, "probe_cadence_us": 20000}"#);
        let errs = check_file(f.path()).unwrap_err();
        assert_eq!(errs.len(), 1);
        let e = &errs.errors[0];
        assert_eq!(
            e.location,
            Location::Json {
                file: f.path().to_path_buf(),
                path: "$.probe_window_s".into()
            }
        );
        assert!(e.problem.contains("holds only 10 probes"), "{}", e.problem);
        let ok = write_file(r#"{"enabled": true}"#);
        assert!(check_file(ok.path()).unwrap().enabled);
        let missing = check_file(Path::new("/nonexistent.json")).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("/nonexistent.json: cannot read /nonexistent.json"),
            "{missing}"
        );
    }

    /// The plugin's config path (`load_from_env` reads `XLA_DIST_PROF_CONFIG` through
    /// `load`): a FIFO, a device, a directory and a 100 MB file are each a named error within
    /// a second; none blocks or is read whole.
    #[test]
    fn hostile_config_paths_are_named_errors_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config.fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let big = dir.path().join("big.json");
        std::fs::File::create(&big).unwrap().set_len(100 << 20).unwrap();
        let cases = [
            (fifo, "is a FIFO (named pipe), not a regular file"),
            (std::path::PathBuf::from("/dev/zero"), "is a device, not a regular file"),
            (dir.path().to_path_buf(), "is a directory, not a regular file"),
            (big, "is 104857600 bytes, over the 1048576-byte limit of a config file"),
        ];
        for (path, problem) in cases {
            let shown = path.to_str().unwrap().to_string();
            let start = std::time::Instant::now();
            let errs = load(&env_of(&[("XLA_DIST_PROF_CONFIG", &shown)])).unwrap_err();
            let took = start.elapsed();
            let line = errs.to_string();
            assert!(
                line.starts_with(&format!("environment variable XLA_DIST_PROF_CONFIG: {shown} {problem}")),
                "{line}"
            );
            assert!(line.contains("fix: point XLA_DIST_PROF_CONFIG at a"), "{line}");
            assert!(took < std::time::Duration::from_secs(1), "{shown}: {took:?}");
        }
    }

    /// Duplicate keys are found with a set: 160k keys (23 s with the old list scan) load
    /// in well under a second even in a debug build.
    #[test]
    fn many_keys_are_checked_in_linear_time() {
        let mut text = String::from("{");
        for i in 0..160_000 {
            text.push_str(&format!("\"k{i}\": 1,"));
        }
        text.push_str("\"k0\": 2}");
        let start = std::time::Instant::now();
        let errs = check_text(Path::new("many.json"), &text).unwrap_err();
        let took = start.elapsed();
        // The first 100 problems are listed, the other 159,901 (the duplicate among them) counted.
        assert_eq!(errs.len(), 101, "{errs}");
        assert!(errs.errors[100].problem.starts_with("159901 more key problem(s) not listed"), "{}", errs.errors[100]);
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        // Below the limit, the duplicate is named.
        let errs = check_text(Path::new("f.json"), r#"{"k1": 1, "enabled": true, "enabled": false}"#).unwrap_err();
        assert!(errs.errors[1].problem.contains("\"enabled\" appears more than once"), "{errs}");
    }
}
