//! `distprof merge`: every node's trace onto one timeline (see docs/merge.md).

use distprof_offline::merge::{merge, MergeOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Per-node `.xplane.pb` files, XProf run directories or logdirs holding them.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output directory; the XProf run goes to `<out>/plugins/profile/<run>/`.
    #[arg(short, long)]
    out: PathBuf,
    /// Chrome Trace Event JSON for Perfetto (default `<out>/merged.trace.json`).
    #[arg(long)]
    chrome: Option<PathBuf>,
    /// Do not write the Chrome JSON.
    #[arg(long, conflicts_with = "chrome")]
    no_chrome: bool,
    /// Merge nodes without a usable clock model (no distprof plane, unreachable) as they are.
    #[arg(long)]
    allow_uncorrected: bool,
    #[command(flatten)]
    models: crate::model_source::ModelSource,
    /// Merge although traces and models do not belong together (other sessions, another
    /// host's plane, a profile outside the model's windows): for experts who know why.
    /// Absurd model values are refused even so.
    #[arg(long)]
    force: bool,
    /// Print the merge report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let chrome = if args.no_chrome {
        None
    } else {
        Some(
            args.chrome
                .unwrap_or_else(|| args.out.join("merged.trace.json")),
        )
    };
    distprof::atomic_file::create_dir_all(&args.out).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot create output directory: {e}",
            args.out.display()
        )
    })?;
    let models = args.models.load()?;
    let opts = MergeOptions {
        out_dir: args.out,
        chrome,
        allow_uncorrected: args.allow_uncorrected,
        models,
        models_origin: args.models.origin()?,
        force: args.force,
    };
    let start = std::time::Instant::now();
    let report = merge(&args.inputs, &opts, &mut |line| {
        eprintln!("distprof merge: {line}")
    })?;
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "merged {} nodes ({:.1} MB in, {:.1} MB out) in {secs:.2} s",
            report.nodes.len(),
            report.bytes_in as f64 / 1e6,
            report.bytes_out as f64 / 1e6
        );
        for n in &report.nodes {
            let model = if n.corrected {
                format!(
                    "corrected, bound <= {:.0} ns, timestamps {}",
                    n.max_bound_ns,
                    n.timestamps.as_ref().map_or(n.timestamp_mode.clone(), |t| t.describe())
                )
            } else {
                "UNCORRECTED".to_string()
            };
            println!(
                "  node {}: {} events, {} -> {}",
                n.node,
                n.events,
                model,
                n.output.display()
            );
            if n.device_events_without_fit > 0 {
                println!("    {} device events had no R->S fit (no tracer start pair or snapshots); taken as host time", n.device_events_without_fit);
            }
        }
        println!("XProf run: {}", report.run_dir.display());
        if let Some(c) = &report.chrome {
            println!("Perfetto/Chrome JSON: {}", c.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
