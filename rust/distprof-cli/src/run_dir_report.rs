//! The report page of a run directory: estimated from every node's JSONL and written
//! atomically. `distprof report --run-dir` and the end of `distprof local` both use it.

use anyhow::bail;
use distprof_offline::report::{render, ReportInput};
use std::path::Path;

/// Reads and estimates a run directory; a cut-off last line is reported, not fatal.
pub fn load_run_dir(dir: &Path) -> anyhow::Result<ReportInput> {
    let (input, notes) = distprof_offline::report::load::from_run_dir_with_notes(dir)?;
    for path in &notes.truncated_tails {
        eprintln!(
            "distprof report: `{}`: last line cut short (the node died while writing it); that window is left out",
            path.display()
        );
    }
    warn_missing_nodes(&input, &dir.display().to_string());
    tracing::info!(
        windows = notes.windows,
        records = notes.records,
        records_outside = notes.records_outside,
        "run directory estimated (records_outside: prober stamp in no common window, not drawn)"
    );
    Ok(input)
}

/// Says on stderr which nodes of the run have no data in `source` (the page says it too).
pub fn warn_missing_nodes(input: &ReportInput, source: &str) {
    let missing = &input.facts.nodes_without_data;
    if !missing.is_empty() {
        eprintln!(
            "distprof report: warning: {source}: {}; the page draws a partial run (the network solved from a part of its edges); give every node's JSONL",
            distprof_offline::report::page::missing_nodes_sentence(missing, input.nodes.len())
        );
    }
}

/// Reads and estimates the run in `dir` and writes its page to `out` (atomically); returns
/// what the page draws. `distprof report --run-dir` and the end of `distprof local` both
/// call this.
pub fn write_run_dir_report(dir: &Path, out: &Path) -> anyhow::Result<ReportInput> {
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
    Ok(input)
}

/// Writes `bytes` to `out` so that a reader sees either the old file or the whole new one
/// (`distprof::atomic_file`).
pub fn write_atomically(out: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if out.file_name().is_none() {
        bail!("--out `{}` names no file; give a file path such as report.html", out.display());
    }
    distprof::atomic_file::write(out, bytes).map_err(|e| {
        anyhow::anyhow!("cannot write the report: {e}; check that the directory exists and is writable")
    })
}
