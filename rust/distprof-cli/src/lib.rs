//! `distprof`: one command for standalone runs, offline merging and validation, reports,
//! configuration, XLA patching and benchmarks.
//!
//! The command is this library's [`main`]: the `distprof` binary (`src/main.rs`) and the
//! Python package's console script (rust/distprof-py, `distprof._cli`) both run it, so the
//! wheel ships this CLI, not a second one.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::OnceLock;

mod cluster;
mod cmd;
mod model_source;
mod run_dir_report;
mod scenario_arg;
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

/// Runs the command line `args` (the program name first, as `std::env::args_os`) and gives
/// the process's exit status. Output goes to this process's stdout and stderr; clap's
/// `--help`, `--version` and usage errors exit the process from here, as in any clap program.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let args = cmd::spelling::modernize(args, &mut |w| eprintln!("distprof: warning: {w}"));
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

/// How to start this CLI again in a child process: the program and the arguments that come
/// before a subcommand (`distprof local` spawns its nodes as `distprof run`; benchmarks spawn
/// themselves). Unset, the child is this executable. Under Python this executable is the
/// interpreter, so the console script sets `python -m distprof` ([`main_relaunched_as`]).
static RELAUNCH: OnceLock<Vec<OsString>> = OnceLock::new();

/// [`main`] in a process whose executable is not the CLI (the Python interpreter): children
/// that the command spawns run `relaunch` followed by their subcommand.
pub fn main_relaunched_as(relaunch: Vec<OsString>, args: Vec<OsString>) -> ExitCode {
    if !relaunch.is_empty() {
        let _ = RELAUNCH.set(relaunch);
    }
    main(args)
}

/// A command that runs this CLI again; the caller adds the subcommand and its arguments.
pub(crate) fn self_command() -> anyhow::Result<std::process::Command> {
    use anyhow::Context;
    Ok(match RELAUNCH.get().and_then(|r| r.split_first()) {
        Some((program, before)) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(before);
            cmd
        }
        None => std::process::Command::new(std::env::current_exe().context("locating the distprof binary")?),
    })
}

/// The number behind an [`ExitCode`] (std has no stable accessor), for callers that exit
/// by themselves: the Python console script hands it to `sys.exit`.
pub fn exit_status(code: ExitCode) -> u8 {
    (0..=u8::MAX).find(|&n| ExitCode::from(n) == code).unwrap_or(1)
}

#[cfg(test)]
mod docs_commands {
    //! Every `distprof` command in README.md and docs/*.md (fenced blocks, inline code)
    //! names a subcommand and flags that exist. A renamed flag fails here until the docs
    //! follow. (Whether the documented commands also succeed is not checked here.)
    use super::Cli;
    use clap::CommandFactory;
    use std::path::Path;

    /// The commands of one Markdown text: (line number, words after `distprof`).
    fn commands(text: &str) -> Vec<(usize, Vec<String>)> {
        let mut out = Vec::new();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let mut spans: Vec<&str> = Vec::new();
            if fenced {
                let l = line.trim_start().trim_start_matches("$ ");
                let l = l.split(" #").next().unwrap_or_default();
                if let Some(rest) = l.strip_prefix("distprof ") {
                    spans.push(rest);
                } else if let Some((_, rest)) = l.split_once("-p distprof-cli -- ") {
                    spans.push(rest);
                }
            } else {
                for (k, part) in line.split('`').enumerate() {
                    if k % 2 == 1 {
                        if let Some(rest) = part.strip_prefix("distprof ") {
                            spans.push(rest);
                        }
                    }
                }
            }
            for s in spans {
                out.push((i + 1, s.split_whitespace().map(str::to_string).collect()));
            }
        }
        out
    }

    /// Spans that start like a command but are something else: the plugin's log line
    /// `distprof disabled: <why>`.
    const NOT_COMMANDS: &[&str] = &["disabled"];

    /// Problems of one command: an unknown subcommand or flag.
    fn check(words: &[String]) -> Option<String> {
        if words.first().is_some_and(|w| NOT_COMMANDS.contains(&w.trim_end_matches(':'))) {
            return None;
        }
        let mut cmd = Cli::command();
        let mut at = 0;
        while let Some(w) = words.get(at) {
            // Alternatives (`check\|show`, `report/merge`) name no one command.
            if w.contains('|') || w.contains('/') {
                return None;
            }
            if w.starts_with('<') || w.starts_with('[') || w.starts_with('-') {
                break;
            }
            match cmd.find_subcommand(w) {
                Some(sub) => {
                    cmd = sub.clone();
                    at += 1;
                }
                None if cmd.has_subcommands() => return Some(format!("no subcommand `{w}`")),
                None => break,
            }
        }
        for w in &words[at..] {
            let w = w.trim_start_matches('[').trim_end_matches([']', ',', '.', ')']);
            let Some(flag) = w.strip_prefix("--") else { continue };
            let flag = flag.split('=').next().unwrap_or_default();
            if flag.is_empty() || flag == "help" || flag == "version" {
                continue;
            }
            let known = cmd.get_arguments().any(|a| {
                a.get_long() == Some(flag) || a.get_all_aliases().is_some_and(|al| al.contains(&flag))
            });
            if !known {
                return Some(format!("`distprof {}` has no flag `--{flag}`", cmd.get_name()));
            }
        }
        None
    }

    #[test]
    fn every_documented_command_names_existing_flags() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("README.md")];
        let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        let (mut checked, mut problems) = (0, Vec::new());
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (line, words) in commands(&text) {
                checked += 1;
                if let Some(p) = check(&words) {
                    problems.push(format!("{}:{line}: {p} (`distprof {}`)", file.display(), words.join(" ")));
                }
            }
        }
        assert!(checked > 50, "only {checked} commands found: is the extraction broken?");
        assert!(problems.is_empty(), "{} documented commands are stale:\n{}", problems.len(), problems.join("\n"));
    }

    #[test]
    fn a_stale_flag_is_caught() {
        let words: Vec<String> = ["simulate", "--nodes", "64", "--duration-s", "12"].map(String::from).to_vec();
        assert!(check(&words).unwrap().contains("--duration-s"));
        let text = "run `distprof local --output-dir X` or\n```\ndistprof simulate --nodes 8 # eight\n```\n";
        let found = commands(text);
        assert_eq!(found.len(), 2);
        assert!(check(&found[0].1).is_some());
        assert!(check(&found[1].1).is_none());
    }
}
