//! `distprof merge`: every node's trace onto one timeline (see docs/merge.md).

use distprof_offline::merge::shard::NodeSet;
use distprof_offline::merge::{merge_with, shard, MergeOptions, RunOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Per-node `.xplane.pb` files, XProf run directories or logdirs holding them (with
    /// `--join`: the `--out` directories of the shards).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Nodes merged at once, one per thread (default: the available cores). The outputs
    /// are the same for every count.
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Merge only these nodes, as one shard of a larger merge (e.g. `0-127`, `0-3,8`):
    /// every input is scanned, only these nodes are written; join the shards with `--join`.
    #[arg(long, conflicts_with = "join")]
    nodes: Option<NodeSet>,
    /// Join shard directories (the `--out` of `distprof merge --nodes ...` runs) into the
    /// outputs of one merge of every node.
    #[arg(long, conflicts_with_all = ["allow_uncorrected", "force"])]
    join: bool,
    /// Show input MB done, rate and ETA on stderr (on by default when stderr is a terminal).
    #[arg(long)]
    progress: bool,
    /// Output directory; the XProf run goes to `<out>/plugins/profile/<run>/`.
    #[arg(short, long)]
    out: PathBuf,
    /// Chrome Trace Event JSON for Perfetto (default `<out>/merged.trace.json`).
    #[arg(long)]
    chrome: Option<PathBuf>,
    /// Do not write the Chrome JSON.
    #[arg(long, conflicts_with = "chrome")]
    no_chrome: bool,
    /// Link each collective's participants across nodes with flow arrows in the Chrome
    /// JSON, in the order they started (Perfetto draws them). Reads the merged outputs once
    /// more; a whole merge only (not with --nodes or --join).
    #[arg(long, conflicts_with_all = ["no_chrome", "nodes", "join"])]
    flows: bool,
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
    // Flags are checked before anything is created.
    if args.jobs == Some(0) {
        anyhow::bail!("--jobs 0: give at least 1 (or leave it out for every core)");
    }
    if args.nodes.is_some() && args.chrome.is_some() {
        anyhow::bail!("--chrome with --nodes: a shard writes its Chrome JSON records into its --out as {}; give --chrome to the --join step", shard::FRAGMENT_FILE);
    }
    let chrome = if args.no_chrome {
        None
    } else {
        Some(
            args.chrome
                .clone()
                .unwrap_or_else(|| args.out.join("merged.trace.json")),
        )
    };
    distprof::atomic_file::create_dir_all(&args.out).map_err(|e| {
        anyhow::anyhow!(
            "{}: cannot create output directory: {e}",
            args.out.display()
        )
    })?;
    let start = std::time::Instant::now();
    if args.join {
        if args.models.given() {
            anyhow::bail!("--join takes the shards as they were merged; give --models/--run-dir to every shard's merge instead");
        }
        let report = shard::join(&args.inputs, &args.out, chrome.as_deref())?;
        return print_report(&report, start.elapsed().as_secs_f64(), args.json);
    }
    let models = args.models.load()?;
    let opts = MergeOptions {
        out_dir: args.out,
        chrome,
        allow_uncorrected: args.allow_uncorrected,
        models,
        models_origin: args.models.origin()?,
        force: args.force,
        flows: args.flows,
    };
    let run = RunOptions {
        jobs: args.jobs.unwrap_or(0),
        nodes: args.nodes,
        meter: args.progress || std::io::stderr().is_terminal(),
    };
    let report = merge_with(&args.inputs, &opts, &run, &mut |line| {
        eprintln!("distprof merge: {line}")
    })?;
    print_report(&report, start.elapsed().as_secs_f64(), args.json)
}

fn print_report(report: &distprof_offline::merge::MergeReport, secs: f64, json: bool) -> anyhow::Result<ExitCode> {
    if json {
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
