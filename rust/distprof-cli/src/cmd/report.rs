//! `distprof report`: draw a run's synchronization quality as one self-contained HTML file.
//!
//! Input today: a `ReportInput` as JSON (`--input`), or a seeded synthetic run
//! (`--synthetic N`) to see what the panels look like. The page is written atomically
//! (temporary file in the same directory, then rename), and its path printed on stdout.

use anyhow::{bail, Context};
use distprof::report::synthetic::{synthetic_input, SyntheticSpec};
use distprof::report::{render, ReportInput};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The report input: a `ReportInput` JSON file (see docs/report.md).
    #[arg(
        long,
        value_name = "FILE.json",
        conflicts_with = "synthetic",
        required_unless_present = "synthetic"
    )]
    pub input: Option<PathBuf>,
    /// Instead of an input, draw a generated run of this many nodes (labelled synthetic).
    #[arg(long, value_name = "NODES", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub synthetic: Option<u32>,
    /// Seed of the synthetic run.
    #[arg(long, default_value_t = 1, requires = "synthetic")]
    pub seed: u64,
    /// Where to write the HTML page.
    #[arg(long, value_name = "report.html", default_value = "report.html")]
    pub out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let input = match (&args.input, args.synthetic) {
        (Some(path), _) => load_input(path)?,
        (None, Some(nodes)) => synthetic_input(&SyntheticSpec::new(nodes, args.seed)),
        (None, None) => {
            bail!("no input: pass --input FILE.json (a ReportInput) or --synthetic NODES")
        }
    };
    let html = render(&input);
    write_atomically(&args.out, html.as_bytes())?;
    tracing::info!(bytes = html.len(), "report written");
    println!("{}", args.out.display());
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

/// Writes `bytes` to `out` so that a reader sees either the old file or the whole new one.
fn write_atomically(out: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out.file_name().with_context(|| {
        format!(
            "--out `{}` names no file; give a file path such as report.html",
            out.display()
        )
    })?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, out)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        bail!(
            "cannot write the report to `{}`: {e}; check that the directory exists and is writable",
            out.display()
        );
    }
    Ok(())
}
