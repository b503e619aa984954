//! The plugin's configuration and logging: the config module's loader (defaults < file <
//! environment) and stderr logging, started before any error is reported.

use distprof::config::Config;
use std::time::Duration;

/// Longest the first hook waits for the configuration on XLA's thread. A local file reads
/// in well under a millisecond (regular files of at most 1 MiB only); past this the file
/// system is hung, and XLA's client creation must not wait for it.
const CONFIG_LOAD_LIMIT: Duration = Duration::from_secs(1);

/// The effective configuration from the process environment, or every problem in one line.
pub fn load_config() -> Result<Config, String> {
    match distprof::config::load_from_env_within(CONFIG_LOAD_LIMIT) {
        Ok(effective) => {
            distprof::logging::init_logging(&effective.config.log_filter);
            Ok(effective.config)
        }
        Err(errors) => {
            // Logging first, so the configuration error below is printed with it.
            start_logging_with_defaults();
            Err(errors.one_line())
        }
    }
}

/// Starts stderr logging with the default filter unless it runs already (idempotent).
pub fn start_logging_with_defaults() {
    distprof::logging::init_logging(&Config::default().log_filter);
}
