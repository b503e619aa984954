//! `distprof`: one command for standalone runs, offline merging and validation, reports,
//! configuration, XLA patching and benchmarks.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cluster;
mod cmd;
mod stats;

#[derive(Parser)]
#[command(name = "distprof", version, about = "One timeline for multi-node GPU traces")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check, show or print the schema of the configuration.
    Config(cmd::config::Args),
    /// Run one standalone node (no XLA, no GPU) of a multi-host probe run.
    Run(cmd::run::Args),
    /// Run N nodes on this machine through an emulated network and compare against truth.
    Local(cmd::local::Args),
    /// Run the real estimator on N simulated nodes.
    Simulate(cmd::simulate::Args),
    /// Put every node's trace on one timeline.
    Merge(cmd::merge::Args),
    /// Count happens-before violations of collectives, before and after correction.
    Validate(cmd::validate::Args),
    /// Draw the synchronization quality of a run as a self-contained HTML file.
    Report(cmd::report::Args),
    /// Apply, check or regenerate the hooks in an XLA source tree.
    Xla(cmd::xla::Args),
    /// Benchmarks that print figures and ratios against baselines.
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    let args = cmd::spelling::modernize(std::env::args_os().collect(), &mut |w| eprintln!("distprof: warning: {w}"));
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Config(args) => cmd::config::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Local(args) => cmd::local::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Xla(args) => cmd::xla::run(args),
        Command::Bench(args) => cmd::bench::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("distprof: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
