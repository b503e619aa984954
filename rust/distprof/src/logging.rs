//! Logging: `tracing` events to stderr, never stdout (stdout carries command output, and
//! inside XLA it belongs to the user's program).

use crate::config::fields::LOG_VAR;
use crate::config::log_filter::parse_filter;
use std::io::IsTerminal;
use std::sync::Once;
use tracing_subscriber::EnvFilter;

static INIT: Once = Once::new();

/// Installs the global subscriber: a fmt layer writing to stderr, filtered by
/// `XLA_DIST_PROF_LOG` when set and non-empty, else by `filter` (the config's `log_filter`).
///
/// Idempotent: only the first call in a process does anything. It never panics: an
/// invalid filter falls back to `info` and says so in the log; a subscriber installed by
/// someone else (a host program, a test harness) is left in place.
pub fn init_logging(filter: &str) {
    INIT.call_once(|| {
        let from_env = std::env::var(LOG_VAR).ok();
        let (directive, origin) = choose_filter(filter, from_env.as_deref());
        let (env_filter, fallback_note) = match parse_filter(directive) {
            Ok(f) => (f, None),
            Err(err) => (
                EnvFilter::new("info"),
                Some(format!("{origin} = {directive:?} is not a tracing filter ({err}); logging at `info` instead")),
            ),
        };
        let installed = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_env_filter(env_filter)
            .try_init()
            .is_ok();
        if let (true, Some(note)) = (installed, fallback_note) {
            tracing::warn!("{note}");
        }
    });
}

/// The directive in force and where it came from: the variable wins over the config.
fn choose_filter<'a>(
    config_filter: &'a str,
    env_value: Option<&'a str>,
) -> (&'a str, &'static str) {
    match env_value {
        Some(v) if !v.trim().is_empty() => (v, LOG_VAR),
        _ => (config_filter, "log_filter"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_overrides_the_config() {
        assert_eq!(choose_filter("info", None), ("info", "log_filter"));
        assert_eq!(choose_filter("info", Some("")), ("info", "log_filter"));
        assert_eq!(choose_filter("info", Some(" ")), ("info", "log_filter"));
        assert_eq!(
            choose_filter("info", Some("distprof=trace")),
            ("distprof=trace", LOG_VAR)
        );
    }

    #[test]
    fn second_call_is_a_no_op_and_nothing_panics() {
        // nextest runs each test in its own process, so this is the first install here.
        init_logging("not a [valid filter");
        assert!(tracing::dispatcher::has_been_set());
        init_logging("trace");
        init_logging("");
        // The first, invalid filter fell back to `info`: debug is off, info is on.
        assert!(!tracing::enabled!(tracing::Level::DEBUG));
        assert!(tracing::enabled!(tracing::Level::INFO));
    }
}
