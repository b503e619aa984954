//! MERGE SEAM: the plugin's configuration and logging, isolated here until the config
//! system lands. At merge, `load_config` becomes
//! `distprof::config::load_from_env().map(|e| e.config).map_err(|e| e.to_string())`
//! followed by `distprof::logging::init_logging(&config.log_filter)`; nothing else in the
//! bridge changes.

use distprof::config::Config;

/// Defaults, then `XLA_ENABLE_DISTRIBUTED_PROFILING` and `XLA_DIST_PROF_OUTPUT_DIR`.
pub fn load_config() -> Result<Config, String> {
    let mut config = Config::default();
    let result = apply_env(&mut config);
    // Logging first, so a configuration error below is printed with it.
    init_logging(&config.log_filter);
    result.map(|()| config)
}

fn apply_env(config: &mut Config) -> Result<(), String> {
    if let Some(raw) = std::env::var_os("XLA_ENABLE_DISTRIBUTED_PROFILING") {
        let raw = raw.to_string_lossy();
        config.enabled = match raw.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" | "" => false,
            _ => {
                return Err(format!(
                    "XLA_ENABLE_DISTRIBUTED_PROFILING=`{raw}` is not a boolean; use 1 or 0"
                ))
            }
        };
    }
    if let Some(dir) = std::env::var_os("XLA_DIST_PROF_OUTPUT_DIR") {
        config.output_dir = dir.to_string_lossy().into_owned();
    }
    Ok(())
}

/// `tracing` to stderr, never stdout. Leaves a subscriber already installed by the host
/// process (e.g. the `distprof` CLI) in place.
fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .try_init();
}
