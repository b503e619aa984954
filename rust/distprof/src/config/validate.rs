//! Judging the merged configuration: ranges (from the field table), per-field text checks,
//! combinations of fields, and features missing from this build. Each error is located at
//! the layer (file key or variable) that supplied the offending value.
//!
//! `reference_node` is not checked here: only rendezvous knows the node count.

use super::error::{json_path, ConfigErrors, Location};
use super::fields::{self, FieldKind};
use super::{Config, EstimatorKind, ValueSource};
use std::collections::{BTreeMap, BTreeSet};

/// Fewest probes a window must hold. The purity filter drops a share of the pairs and the
/// hull needs points in both directions on both sides of the midpoint; below ~20 the line
/// rests on a handful of samples.
pub const MIN_PROBES_PER_WINDOW: u64 = 20;

/// A peer is silent for up to one cadence between probes in the normal course of things;
/// the handshake timeout must cover at least this many cadences or healthy edges flap down.
pub const MIN_TIMEOUT_CADENCES: u64 = 2;

/// The pair gap may take at most this share of a probe interval. Each tick the probe engine
/// sleeps one pair gap between the first and second packets of its probes and one more
/// between those of its answers (probe/engine.rs, `send_probes` and `answer_batch`); at a
/// quarter of the cadence those gaps fill half the tick and the engine still keeps time.
pub const MIN_CADENCE_PER_SPACING: u64 = 4;

/// Linux interface names are at most IFNAMSIZ - 1 bytes.
const MAX_INTERFACE_NAME_BYTES: usize = 15;

struct Judge<'a> {
    sources: &'a BTreeMap<String, ValueSource>,
    broken: &'a BTreeSet<&'static str>,
    errors: &'a mut ConfigErrors,
}

impl Judge<'_> {
    /// Where the value of `field` came from.
    fn locate(&self, field: &str) -> Location {
        match self.sources.get(field) {
            Some(ValueSource::File(file)) => Location::Json {
                file: file.clone(),
                path: json_path(field),
            },
            Some(ValueSource::Env(var)) => Location::Env { var: var.clone() },
            Some(ValueSource::Default) => Location::Default {
                field: field.to_string(),
            },
            None => Location::Field {
                field: field.to_string(),
            },
        }
    }

    fn origin(&self, field: &str) -> String {
        self.sources
            .get(field)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "given".to_string())
    }

    /// For a combination, blame the first field (in the order given) that someone set:
    /// defaults are consistent with each other, so one of the fields was set.
    fn locate_any(&self, fields: &[&str]) -> Location {
        fields
            .iter()
            .find(|f| !matches!(self.sources.get(**f), Some(ValueSource::Default) | None))
            .map(|f| self.locate(f))
            .unwrap_or_else(|| self.locate(fields[0]))
    }

    fn usable(&self, fields: &[&str]) -> bool {
        fields.iter().all(|f| !self.broken.contains(f))
    }

    fn push(&mut self, location: Location, problem: String, fix: String) {
        self.errors.push(location, problem, fix);
    }
}

/// Judges a configuration built in code (not loaded from a file or the environment): the
/// same rules `load` applies, so that whatever runs a config (`distprof run`, `local`, the
/// plugin, the standalone node) accepts exactly what `distprof config check` accepts.
/// Errors are located at the field (`config field NAME`).
pub fn validate_config(config: &Config) -> Result<(), ConfigErrors> {
    let mut errors = ConfigErrors::default();
    check(
        config,
        &BTreeMap::new(),
        &BTreeSet::new(),
        cfg!(feature = "svm"),
        &mut errors,
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

pub(crate) fn check(
    config: &Config,
    sources: &BTreeMap<String, ValueSource>,
    broken: &BTreeSet<&'static str>,
    svm_built: bool,
    errors: &mut ConfigErrors,
) {
    let mut judge = Judge {
        sources,
        broken,
        errors,
    };
    check_ranges(config, &mut judge);
    check_text(config, &mut judge);
    check_combinations(config, &mut judge);
    check_features(config, svm_built, &mut judge);
}

fn check_ranges(config: &Config, judge: &mut Judge<'_>) {
    let values = config.to_json_map();
    for spec in fields::FIELDS {
        if !judge.usable(&[spec.name]) {
            continue;
        }
        let value = &values[spec.name];
        let (below, above) = match spec.kind {
            FieldKind::Unsigned { min, max, .. } => match value.as_u64() {
                Some(n) => (n < min, n > max),
                None => continue,
            },
            FieldKind::Float { min, max } => match value.as_f64() {
                Some(x) => (x < min, x > max),
                // serde_json turns NaN/inf into null; only reachable from code, not input.
                None => (true, false),
            },
            _ => continue,
        };
        if !(below || above) {
            continue;
        }
        let (min, max) = match spec.kind {
            FieldKind::Unsigned { min, max, .. } => (min.to_string(), max.to_string()),
            FieldKind::Float { min, max } => (min.to_string(), max.to_string()),
            _ => unreachable!("filtered above"),
        };
        let limit = if below {
            format!("below the minimum {min}")
        } else {
            format!("above the maximum {max}")
        };
        let reason = if spec.range_reason.is_empty() {
            String::new()
        } else {
            format!(" ({})", spec.range_reason)
        };
        let location = judge.locate(spec.name);
        judge.push(
            location,
            format!("{} = {value} is {limit}{reason}", spec.name),
            format!("set {} to {}", spec.name, spec.kind.allowed()),
        );
    }
}

fn check_text(config: &Config, judge: &mut Judge<'_>) {
    if judge.usable(&["output_dir"]) && config.output_dir.trim().is_empty() {
        let location = judge.locate("output_dir");
        judge.push(
            location,
            format!("output_dir = {:?} is empty", config.output_dir),
            "name a writable directory, e.g. /tmp/xla_dist_prof".to_string(),
        );
    }
    let iface = &config.interface;
    if judge.usable(&["interface"]) && !iface.is_empty() {
        let bad_char = iface
            .chars()
            .find(|c| *c == '/' || c.is_whitespace() || c.is_control());
        if iface.len() > MAX_INTERFACE_NAME_BYTES || bad_char.is_some() {
            let why = match bad_char {
                Some(c) => format!("contains {c:?}"),
                None => format!("is longer than {MAX_INTERFACE_NAME_BYTES} bytes"),
            };
            let location = judge.locate("interface");
            judge.push(
                location,
                format!("interface = {iface:?} {why}, so it cannot be a Linux interface name"),
                "use a name from `ip -brief link` (e.g. eth0), or \"\" to follow NCCL_SOCKET_IFNAME and then the default route".to_string(),
            );
        }
    }
    if judge.usable(&["log_filter"]) {
        let problem = if config.log_filter.trim().is_empty() {
            Some("is empty".to_string())
        } else {
            super::log_filter::parse_filter(&config.log_filter)
                .err()
                .map(|e| format!("is not a tracing filter: {e}"))
        };
        if let Some(problem) = problem {
            let location = judge.locate("log_filter");
            judge.push(
                location,
                format!("log_filter = {:?} {problem}", config.log_filter),
                "use a level (error, warn, info, debug, trace) or directives such as `warn,distprof=debug`".to_string(),
            );
        }
    }
}

fn check_combinations(config: &Config, judge: &mut Judge<'_>) {
    let cadence_us = config.probe_cadence_us;
    if judge.usable(&["packet_spacing_us", "probe_cadence_us"])
        && config.packet_spacing_us.saturating_mul(MIN_CADENCE_PER_SPACING) > cadence_us
    {
        let location = judge.locate_any(&["packet_spacing_us", "probe_cadence_us"]);
        let problem = format!(
            "packet_spacing_us = {} is over a quarter of probe_cadence_us = {cadence_us} ({}): the probe \
             engine sleeps one pair gap for its probes and one for its answers in every interval",
            config.packet_spacing_us,
            judge.origin("probe_cadence_us"),
        );
        let fix = format!(
            "lower packet_spacing_us to at most {} (default {}) or raise probe_cadence_us to at least {}",
            cadence_us / MIN_CADENCE_PER_SPACING,
            Config::default().packet_spacing_us,
            config.packet_spacing_us.saturating_mul(MIN_CADENCE_PER_SPACING)
        );
        judge.push(location, problem, fix);
    }

    if judge.usable(&["probe_window_s", "probe_cadence_us"]) && cadence_us > 0 {
        let window_us = config.probe_window_s * 1e6;
        // The epsilon keeps an exact multiple (1.001 s at 50050 us = 20) from flooring to 19
        // through binary rounding.
        let probes = (window_us / cadence_us as f64 + 1e-9).floor() as u64;
        if probes < MIN_PROBES_PER_WINDOW {
            let location = judge.locate_any(&["probe_window_s", "probe_cadence_us"]);
            // In f64: a cadence far above its range (reported on its own) must not overflow.
            let need_window_s = MIN_PROBES_PER_WINDOW as f64 * cadence_us as f64 / 1e6;
            let need_cadence_us = (window_us / MIN_PROBES_PER_WINDOW as f64).floor() as u64;
            let problem = format!(
                "probe_window_s = {} ({}) holds only {probes} probes at probe_cadence_us = {cadence_us} ({}); \
                 a window needs at least {MIN_PROBES_PER_WINDOW} for a stable fit",
                config.probe_window_s,
                judge.origin("probe_window_s"),
                judge.origin("probe_cadence_us"),
            );
            let fix = format!(
                "raise probe_window_s to at least {need_window_s} or lower probe_cadence_us to at most {need_cadence_us}"
            );
            judge.push(location, problem, fix);
        }
    }

    if judge.usable(&["handshake_timeout_ms", "probe_cadence_us"]) {
        let timeout_us = config.handshake_timeout_ms.saturating_mul(1_000);
        let need_us = MIN_TIMEOUT_CADENCES.saturating_mul(cadence_us);
        if timeout_us < need_us {
            let location = judge.locate_any(&["handshake_timeout_ms", "probe_cadence_us"]);
            let problem = format!(
                "handshake_timeout_ms = {} ({}) is shorter than {MIN_TIMEOUT_CADENCES} probe intervals \
                 (probe_cadence_us = {cadence_us}, {}): healthy peers would be marked down between probes",
                config.handshake_timeout_ms,
                judge.origin("handshake_timeout_ms"),
                judge.origin("probe_cadence_us"),
            );
            let fix = format!(
                "raise handshake_timeout_ms to at least {} or lower probe_cadence_us",
                need_us.div_ceil(1_000)
            );
            judge.push(location, problem, fix);
        }
    }
}

fn check_features(config: &Config, svm_built: bool, judge: &mut Judge<'_>) {
    if config.estimator == EstimatorKind::Svm && !svm_built && judge.usable(&["estimator"]) {
        let location = judge.locate("estimator");
        judge.push(
            location,
            "estimator = \"svm\" but this build of distprof lacks the `svm` cargo feature (the XLA plugin \
             leaves linfa-svm out to stay small)"
                .to_string(),
            "use \"hull\" (the exact max-margin fit, same answer, faster), or rebuild the distprof crate with `--features svm`".to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the checks on `config` as if every field in `set` came from a file `f.json`.
    fn judge(config: &Config, set: &[&str], svm_built: bool) -> Vec<String> {
        let mut sources: BTreeMap<String, ValueSource> = fields::FIELDS
            .iter()
            .map(|f| (f.name.to_string(), ValueSource::Default))
            .collect();
        for f in set {
            sources.insert(f.to_string(), ValueSource::File("f.json".into()));
        }
        let mut errors = ConfigErrors::default();
        check(config, &sources, &BTreeSet::new(), svm_built, &mut errors);
        errors.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn defaults_pass_with_and_without_svm() {
        assert!(judge(&Config::default(), &[], true).is_empty());
        assert!(judge(&Config::default(), &[], false).is_empty());
    }

    #[test]
    fn ranges_name_the_field_the_value_and_the_reason() {
        let c = Config {
            probe_cadence_us: 500,
            probe_window_s: 0.05,
            snapshot_best_of: 0,
            ..Config::default()
        };
        let got = judge(
            &c,
            &["probe_cadence_us", "probe_window_s", "snapshot_best_of"],
            true,
        );
        assert_eq!(got[0], "f.json: $.probe_cadence_us: probe_cadence_us = 500 is below the minimum 1000 (below 1000 us one edge's ~600-byte exchanges exceed the 625,000 bytes/s per-edge budget; above 10 s a window holds too few probes to follow drift); fix: set probe_cadence_us to an integer in 1000..=10000000");
        assert!(
            got[1].starts_with(
                "f.json: $.probe_window_s: probe_window_s = 0.05 is below the minimum 0.1"
            ),
            "{}",
            got[1]
        );
        assert!(
            got[2].starts_with(
                "f.json: $.snapshot_best_of: snapshot_best_of = 0 is below the minimum 1"
            ),
            "{}",
            got[2]
        );
        // The window combination: 0.05 s at 500 us is 100 probes, enough; no fourth error.
        assert_eq!(got.len(), 3, "{got:#?}");
        let c = Config {
            purity_rel_tolerance: 1.5,
            max_bound_ns: 2_000_000_000,
            ..Config::default()
        };
        let got = judge(&c, &["purity_rel_tolerance", "max_bound_ns"], true);
        assert!(
            got[0].contains("purity_rel_tolerance = 1.5 is above the maximum 1"),
            "{}",
            got[0]
        );
        assert!(
            got[1].contains("max_bound_ns = 2000000000 is above the maximum 1000000000"),
            "{}",
            got[1]
        );
    }

    #[test]
    fn spacing_must_be_at_most_a_quarter_of_the_cadence() {
        let c = Config {
            packet_spacing_us: 10_001,
            ..Config::default()
        };
        let got = judge(&c, &["packet_spacing_us"], true);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("f.json: $.packet_spacing_us: packet_spacing_us = 10001 is over a quarter of probe_cadence_us = 40000 (default)"), "{}", got[0]);
        assert!(got[0].contains("fix: lower packet_spacing_us to at most 10000 (default 50) or raise probe_cadence_us to at least 40004"), "{}", got[0]);
        // Exactly a quarter is fine.
        let c = Config {
            packet_spacing_us: 10_000,
            ..Config::default()
        };
        assert!(judge(&c, &["packet_spacing_us"], true).is_empty());
        // When only the cadence was set, the cadence is blamed.
        let c = Config {
            probe_cadence_us: 1_000,
            packet_spacing_us: 1_000,
            probe_window_s: 1.0,
            ..Config::default()
        };
        let got = judge(&c, &["probe_cadence_us", "packet_spacing_us"], true);
        assert!(
            got[0].starts_with("f.json: $.packet_spacing_us:"),
            "{}",
            got[0]
        );
        let got = judge(&c, &["probe_cadence_us"], true);
        assert!(
            got[0]
                .starts_with("f.json: $.probe_cadence_us: packet_spacing_us = 1000 is over a quarter"),
            "{}",
            got[0]
        );
    }

    #[test]
    fn a_config_built_in_code_is_located_at_its_field() {
        assert_eq!(validate_config(&Config::default()), Ok(()));
        let c = Config {
            packet_spacing_us: 20_000,
            ..Config::default()
        };
        let got = validate_config(&c).unwrap_err().to_string();
        assert!(got.starts_with("config field packet_spacing_us: packet_spacing_us = 20000 is over a quarter of probe_cadence_us = 40000 (given)"), "{got}");
    }

    #[test]
    fn window_must_hold_enough_probes() {
        // The default 15 s at 750 ms = 20 probes: exactly enough.
        let c = Config {
            probe_cadence_us: 750_000,
            ..Config::default()
        };
        assert!(judge(&c, &["probe_cadence_us"], true).is_empty());
        // 15 s at 1 s = 15 probes.
        let c = Config {
            probe_cadence_us: 1_000_000,
            ..Config::default()
        };
        let got = judge(&c, &["probe_cadence_us"], true);
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(got[0].starts_with("f.json: $.probe_cadence_us: probe_window_s = 15 (default) holds only 15 probes at probe_cadence_us = 1000000 (file f.json)"), "{}", got[0]);
        assert!(got[0].ends_with("fix: raise probe_window_s to at least 20 or lower probe_cadence_us to at most 750000"), "{}", got[0]);
    }

    #[test]
    fn exact_multiples_are_not_rounded_down() {
        // 1.001 * 1e6 is 1000999.9999999999 in binary floating point.
        let c = Config {
            probe_window_s: 1.001,
            probe_cadence_us: 50_050,
            ..Config::default()
        };
        assert!(judge(&c, &["probe_window_s", "probe_cadence_us"], true).is_empty());
    }

    #[test]
    fn handshake_timeout_must_cover_two_cadences() {
        let c = Config {
            probe_cadence_us: 100_000,
            probe_window_s: 10.0,
            handshake_timeout_ms: 150,
            ..Config::default()
        };
        let got = judge(&c, &["handshake_timeout_ms"], true);
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(got[0].starts_with("f.json: $.handshake_timeout_ms: handshake_timeout_ms = 150 (file f.json) is shorter than 2 probe intervals"), "{}", got[0]);
        assert!(
            got[0].ends_with(
                "fix: raise handshake_timeout_ms to at least 200 or lower probe_cadence_us"
            ),
            "{}",
            got[0]
        );
        let c = Config {
            handshake_timeout_ms: 200,
            ..c
        };
        assert!(judge(&c, &["handshake_timeout_ms"], true).is_empty());
    }

    #[test]
    fn text_fields() {
        let c = Config {
            output_dir: " ".into(),
            interface: "a-very-long-interface-name".into(),
            log_filter: "info,[".into(),
            ..Config::default()
        };
        let got = judge(&c, &["output_dir", "interface", "log_filter"], true);
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(
            got[0].starts_with("f.json: $.output_dir: output_dir = \" \" is empty"),
            "{}",
            got[0]
        );
        assert!(
            got[1].contains("interface = \"a-very-long-interface-name\" is longer than 15 bytes"),
            "{}",
            got[1]
        );
        assert!(
            got[2].contains("log_filter = \"info,[\" is not a tracing filter"),
            "{}",
            got[2]
        );
        let c = Config {
            interface: "eth 0".into(),
            ..Config::default()
        };
        assert!(judge(&c, &["interface"], true)[0].contains("contains ' '"));
        let c = Config {
            interface: "enp65s0f1".into(),
            log_filter: "warn,distprof=debug".into(),
            ..Config::default()
        };
        assert!(judge(&c, &["interface", "log_filter"], true).is_empty());
    }

    #[test]
    fn svm_without_the_feature_says_so() {
        let c = Config {
            estimator: EstimatorKind::Svm,
            ..Config::default()
        };
        assert!(judge(&c, &["estimator"], true).is_empty());
        let got = judge(&c, &["estimator"], false);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("f.json: $.estimator: estimator = \"svm\" but this build of distprof lacks the `svm` cargo feature"), "{}", got[0]);
        assert!(got[0].contains("fix: use \"hull\""), "{}", got[0]);
    }

    #[test]
    fn broken_fields_are_not_judged_again() {
        let c = Config {
            packet_spacing_us: 40_000,
            ..Config::default()
        };
        let sources = fields::FIELDS
            .iter()
            .map(|f| (f.name.to_string(), ValueSource::Default))
            .collect();
        let broken: BTreeSet<&'static str> = ["probe_cadence_us"].into_iter().collect();
        let mut errors = ConfigErrors::default();
        check(&c, &sources, &broken, true, &mut errors);
        assert!(errors.is_empty(), "{errors}");
    }
}
