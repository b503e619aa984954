//! `distprof report`: draw a run's synchronization quality as one self-contained HTML file.
//!
//! Input: a run directory of per-node JSONL files (`--run-dir`, estimated again offline by
//! `report::load`; `distprof simulate --out DIR` writes one for any node count), or a
//! `ReportInput` as JSON (`--input`). The page is written atomically (temporary file in the
//! same directory, then rename), and its path printed on stdout.

use anyhow::{bail, Context};
use crate::run_dir_report::{warn_missing_nodes, write_atomically, write_run_dir_report};
use distprof_offline::report::{render, ReportInput};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A run's output directory: every `probe_windows_node<id>.jsonl` in it is read and
    /// estimated with the configured estimator (see docs/report.md).
    #[arg(long, value_name = "DIR", conflicts_with = "input")]
    pub run_dir: Option<PathBuf>,
    /// The report input: a `ReportInput` JSON file (see docs/report.md).
    #[arg(long, value_name = "FILE.json")]
    pub input: Option<PathBuf>,
    /// Where to write the HTML page [default: DIR/report.html with --run-dir, else
    /// report.html].
    #[arg(long, value_name = "report.html")]
    pub out: Option<PathBuf>,
    /// With --run-dir: also write the estimated `ReportInput` as JSON, so the page can be
    /// drawn again (`--input`) or the numbers attached to a bug report without the JSONL.
    #[arg(long, value_name = "FILE.json", requires = "run_dir")]
    pub save_input: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    if let Some(dir) = &args.run_dir {
        let out = args.out.clone().unwrap_or_else(|| dir.join("report.html"));
        let input = write_run_dir_report(dir, &out)?;
        if let Some(path) = &args.save_input {
            let json = serde_json::to_vec(&input).context("cannot encode the report input")?;
            write_atomically(path, &json)?;
        }
        println!("{}", out.display());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = &args.input else {
        bail!("no input: pass --run-dir DIR (a run's output directory, e.g. of `distprof simulate --out DIR`) or --input FILE.json (a ReportInput)")
    };
    let input = load_input(path)?;
    warn_missing_nodes(&input, &path.display().to_string());
    let loaded = started.elapsed();
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("report.html"));
    let html = render(&input);
    write_atomically(&out, html.as_bytes())?;
    tracing::info!(
        bytes = html.len(),
        load_ms = loaded.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "report written"
    );
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}



fn load_input(path: &Path) -> anyhow::Result<ReportInput> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the report input `{}`; pass an existing ReportInput JSON file to --input",
            path.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "`{}` is not a valid ReportInput: {e} (line {}, column {}); see docs/report.md for the format",
            path.display(),
            e.line(),
            e.column()
        )
    })
}

