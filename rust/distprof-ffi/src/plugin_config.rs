//! The plugin's configuration and logging: the config module's loader (defaults < file <
//! environment) and stderr logging, started before any error is reported.

use distprof::config::Config;

/// The effective configuration from the process environment, or every problem in one line.
/// Read on the caller's thread: a disabled plugin creates no thread. The read cannot block
/// (the file is opened non-blocking and must be a regular file) and is bounded (1 MiB).
pub fn load_config() -> Result<Config, String> {
    match distprof::config::load_from_env() {
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
