//! `distprof config`: check files, show the effective configuration, print the schema.

use anyhow::Context;
use distprof::config::{self, fields, EffectiveConfig};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Check configuration files (defaults < file; the environment is ignored). Exits 0 when
    /// every file is valid, 1 after listing every problem of every file.
    Check {
        /// JSON files, e.g. examples/configs/*.json.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Show the effective configuration of this environment (defaults < the file named by
    /// XLA_DIST_PROF_CONFIG < environment variables) and where each value came from.
    /// Exits 1 listing every problem when it is invalid.
    Show {
        /// Print one JSON object ({"config", "sources", "digest"}) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of configuration files.
    Schema,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Only the `info` default: the config being inspected may itself be invalid.
    distprof::logging::init_logging("info");
    match args.command {
        Command::Check { files } => check(&files),
        Command::Show { json } => show(json),
        Command::Schema => {
            write_stdout(&config::schema::schema_json())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut out = String::new();
    let mut bad_files = 0;
    let mut problems = 0;
    for file in files {
        match config::check_file(file) {
            Ok(_) => out.push_str(&format!("{}: ok\n", file.display())),
            Err(errors) => {
                bad_files += 1;
                problems += errors.len();
                // Every location of a file check already starts with the file's path.
                for error in errors.iter() {
                    out.push_str(&format!("{error}\n"));
                }
            }
        }
    }
    write_stdout(&out)?;
    if bad_files == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "distprof: {problems} problem(s) in {bad_files} of {} file(s)",
            files.len()
        );
        Ok(ExitCode::from(1))
    }
}

fn show(as_json: bool) -> anyhow::Result<ExitCode> {
    let effective = match config::load_from_env() {
        Ok(effective) => effective,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "distprof: the configuration of this environment is invalid ({} problem(s)); inside XLA, \
                 distributed profiling would stay off",
                errors.len()
            );
            return Ok(ExitCode::from(1));
        }
    };
    let text = if as_json {
        render_json(&effective)?
    } else {
        render_table(&effective)
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// One row per field, in table order: field, value (as JSON, so "" is visible), source.
fn render_table(effective: &EffectiveConfig) -> String {
    let values = effective.config.to_json_map();
    let rows: Vec<[String; 3]> = fields::FIELDS
        .iter()
        .map(|f| {
            let value = values.get(f.name).map(Value::to_string).unwrap_or_default();
            let source = effective
                .sources
                .get(f.name)
                .map(|s| s.to_string())
                .unwrap_or_default();
            [f.name.to_string(), value, source]
        })
        .collect();
    let header = [
        "field".to_string(),
        "value".to_string(),
        "source".to_string(),
    ];
    let width = |i: usize| {
        rows.iter()
            .chain([&header])
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1) = (width(0), width(1));
    let mut out = String::new();
    for row in [&header].into_iter().chain(&rows) {
        out.push_str(&format!("{:<w0$}  {:<w1$}  {}\n", row[0], row[1], row[2]));
    }
    out
}

fn render_json(effective: &EffectiveConfig) -> anyhow::Result<String> {
    let sources: serde_json::Map<String, Value> = effective
        .sources
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.to_string())))
        .collect();
    let doc = json!({
        "config": effective.config,
        "sources": sources,
        "digest": effective.config.digest(),
    });
    let mut text = serde_json::to_string_pretty(&doc).context("serializing the configuration")?;
    text.push('\n');
    Ok(text)
}

/// Writes command output; a closed pipe (`| head`) is not an error worth a message.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(err).context("writing to stdout")
        }
        _ => Ok(()),
    }
}
