//! The `log_filter` field's syntax: `tracing` filter directives. Validation judges a
//! configured filter with the same parser that `logging` installs it with.

use tracing_subscriber::EnvFilter;

/// Parses `tracing` filter directives with the blanks around each directive removed.
///
/// tracing-subscriber 0.3.23 parses a directive's trimmed text but slices the untrimmed
/// one with those positions, so a blank before a non-ASCII character (`" [é]"`,
/// `"info, é=debug"`) panics on a char boundary (found by the `config_env` fuzz target).
/// Trimmed directives mean the same and parse without the mismatch.
pub fn parse_filter(directives: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let trimmed: Vec<&str> = directives.split(',').map(str::trim).collect();
    EnvFilter::try_new(trimmed.join(","))
}
