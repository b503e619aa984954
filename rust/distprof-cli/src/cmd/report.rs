//! `distprof report`: draw a run's synchronization quality as one self-contained HTML file.
//!
//! Input: a run directory of per-node JSONL files (`--run-dir`, estimated again offline by
//! `report::load`; `distprof simulate --out DIR` writes one for any node count), or a
//! `ReportInput` as JSON (`--input`). The page is written atomically (temporary file in the
//! same directory, then rename), and its path printed on stdout.

use anyhow::{bail, Context};
use distprof_offline::report::{render, ReportInput};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A run's output directory: every `probe_windows_node<id>.jsonl` in it is read and
    /// estimated with the configured estimator (see docs/report.md).
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with = "input",
        required_unless_present = "input"
    )]
    pub run_dir: Option<PathBuf>,
    /// The report input: a `ReportInput` JSON file (see docs/report.md).
    #[arg(long, value_name = "FILE.json")]
    pub input: Option<PathBuf>,
    /// Where to write the HTML page [default: DIR/report.html with --run-dir, else
    /// report.html].
    #[arg(long, value_name = "report.html")]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    if let Some(dir) = &args.run_dir {
        let out = args.out.clone().unwrap_or_else(|| dir.join("report.html"));
        write_run_dir_report(dir, &out)?;
        println!("{}", out.display());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = &args.input else {
        bail!("no input: pass --run-dir DIR (a run's output directory, e.g. of `distprof simulate --out DIR`) or --input FILE.json (a ReportInput)")
    };
    let input = load_input(path)?;
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

/// Reads and estimates a run directory; a cut-off last line is reported, not fatal.
pub fn load_run_dir(dir: &Path) -> anyhow::Result<ReportInput> {
    let (input, notes) = distprof_offline::report::load::from_run_dir_with_notes(dir)?;
    for path in &notes.truncated_tails {
        eprintln!(
            "distprof report: `{}`: last line cut short (the node died while writing it); that window is left out",
            path.display()
        );
    }
    tracing::info!(
        windows = notes.windows,
        records = notes.records,
        records_outside = notes.records_outside,
        "run directory estimated (records_outside: prober stamp in no common window, not drawn)"
    );
    Ok(input)
}

/// Reads and estimates the run in `dir` and writes its page to `out` (atomically); returns
/// the page's size in bytes. `distprof report --run-dir` and the end of `distprof local`
/// both call this.
pub fn write_run_dir_report(dir: &Path, out: &Path) -> anyhow::Result<usize> {
    let started = std::time::Instant::now();
    let input = load_run_dir(dir)?;
    let loaded = started.elapsed();
    let html = render(&input);
    write_atomically(out, html.as_bytes())?;
    tracing::info!(
        bytes = html.len(),
        load_ms = loaded.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "report written"
    );
    Ok(html.len())
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

/// Writes `bytes` to `out` so that a reader sees either the old file or the whole new one
/// (`distprof::atomic_file`).
fn write_atomically(out: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if out.file_name().is_none() {
        bail!("--out `{}` names no file; give a file path such as report.html", out.display());
    }
    distprof::atomic_file::write(out, bytes).map_err(|e| {
        anyhow::anyhow!("cannot write the report: {e}; check that the directory exists and is writable")
    })
}
