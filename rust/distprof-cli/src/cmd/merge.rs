//! `distprof merge`: every node's trace onto one timeline (see docs/merge.md).

use distprof_offline::merge::shard::NodeSet;
use distprof_offline::merge::pftrace::PftraceCompression;
use distprof_offline::merge::trace_out::TraceFormat;
use distprof_offline::merge::{merge_planned, merge_with, plan, shard, MergeOptions, Plan, RunOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Per-node `.xplane.pb` files, XProf run directories or logdirs holding them (with
    /// `--join`: the `--out` directories of the shards; with `--plan`: none, the plan
    /// lists them).
    #[arg(required_unless_present = "plan")]
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
    /// Only solve: scan every input's small planes (not its events), solve the clock models
    /// and fix the origin and every node's ids, and write that plan to --out (a JSON file)
    /// for `--plan`. Takes the model flags (--models, --run-dir, --allow-uncorrected, --force).
    #[arg(long, conflicts_with_all = ["join", "nodes", "plan", "chrome", "pftrace", "no_perfetto", "pftrace_compression", "flows", "jobs"])]
    solve_only: bool,
    /// Merge from a plan that `--solve-only` wrote (with --nodes: a shard) instead of
    /// scanning every input: reads the traces of its nodes and no other.
    #[arg(long, value_name = "PLAN.json", conflicts_with_all = ["join", "allow_uncorrected", "force"])]
    plan: Option<PathBuf>,
    /// Show input MB done, rate and ETA on stderr (on by default when stderr is a terminal).
    #[arg(long)]
    progress: bool,
    /// Output directory; the XProf run goes to `<out>/plugins/profile/<run>/`.
    #[arg(short, long)]
    out: PathBuf,
    /// Where the Perfetto output goes, in Perfetto's own protobuf format (default
    /// `<out>/merged.pftrace`).
    #[arg(long, value_name = "PATH")]
    pftrace: Option<PathBuf>,
    /// Write the Perfetto output as Chrome Trace Event JSON instead (for chrome://tracing and
    /// tools that read only JSON), to PATH (default `<out>/merged.trace.json`). With
    /// --nodes: give no PATH (the shard's fragment is in its --out). A bare --chrome takes
    /// the next word as its PATH unless it is a flag: put it after the inputs.
    #[arg(long, value_name = "PATH", num_args = 0..=1, conflicts_with = "pftrace")]
    chrome: Option<Option<PathBuf>>,
    /// How merged.pftrace stores its packets: `deflate` (the default) deflates them in runs
    /// of 128 KiB, each one of Perfetto's `compressed_packets`, which its trace processor and
    /// UI inflate (about a quarter of the bytes); `none` writes them plain, for tools that
    /// cannot inflate them.
    #[arg(long, value_name = "deflate|none", default_value = "deflate", conflicts_with_all = ["chrome", "no_perfetto", "join"])]
    pftrace_compression: PftraceCompression,
    /// Do not write the Perfetto output (only the XProf run directory).
    #[arg(long, alias = "no-chrome", conflicts_with_all = ["chrome", "pftrace"])]
    no_perfetto: bool,
    /// Link each collective's participants across nodes with flow arrows, in the order they
    /// started (Perfetto draws them), in merged.pftrace or the Chrome JSON. Each node's
    /// collectives are found before its rewrite (merged.pftrace), or the merged outputs are
    /// read once more (--chrome); a whole merge only (not with --nodes or --join).
    #[arg(long, conflicts_with_all = ["no_perfetto", "nodes", "join"])]
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
    if args.nodes.is_some() && (matches!(args.chrome, Some(Some(_))) || args.pftrace.is_some()) {
        anyhow::bail!("--chrome PATH or --pftrace with --nodes: a shard writes its Perfetto records into its --out as {}; give the path to the --join step (and --chrome without a path to every shard and the join for JSON)", shard::FRAGMENT_FILE);
    }
    if args.plan.is_some() && !args.inputs.is_empty() {
        anyhow::bail!("--plan lists the inputs its solve step was given; give no inputs with --plan (or leave out --plan)");
    }
    if args.plan.is_some() && args.models.given() {
        anyhow::bail!("--plan holds the models its solve step applied; give --models/--run-dir to `distprof merge --solve-only` instead");
    }
    if args.solve_only {
        return solve_only(args);
    }
    let format = if args.chrome.is_some() { TraceFormat::ChromeJson } else { TraceFormat::Pftrace };
    let chrome = if args.no_perfetto {
        None
    } else {
        let given = args.chrome.clone().flatten().or_else(|| args.pftrace.clone());
        Some(given.unwrap_or_else(|| args.out.join(format.default_file_name())))
    };
    // Nothing is created here: merge writes its output directory whole or not at all.
    let start = std::time::Instant::now();
    if args.join {
        if args.models.given() {
            anyhow::bail!("--join takes the shards as they were merged; give --models/--run-dir to every shard's merge instead");
        }
        let report = shard::join(&args.inputs, &args.out, chrome.as_deref(), format)?;
        return print_report(&report, start.elapsed().as_secs_f64(), args.json);
    }
    let opts = merge_options(&args, chrome, format)?;
    let run = RunOptions {
        jobs: args.jobs.unwrap_or(0),
        nodes: args.nodes,
        meter: args.progress || std::io::stderr().is_terminal(),
    };
    let mut progress = |line: &str| eprintln!("distprof merge: {line}");
    let report = match &args.plan {
        Some(path) => merge_planned(&Plan::read(path)?, path, &opts, &run, &mut progress)?,
        None => merge_with(&args.inputs, &opts, &run, &mut progress)?,
    };
    print_report(&report, start.elapsed().as_secs_f64(), args.json)
}

fn merge_options(args: &Args, chrome: Option<PathBuf>, trace_format: TraceFormat) -> anyhow::Result<MergeOptions> {
    Ok(MergeOptions {
        out_dir: args.out.clone(),
        chrome,
        trace_format,
        allow_uncorrected: args.allow_uncorrected,
        models: args.models.load()?,
        models_origin: args.models.origin()?,
        force: args.force,
        flows: args.flows,
        pftrace_compression: args.pftrace_compression,
    })
}

/// `--solve-only`: the plan of a merge of every input, to `--out`.
fn solve_only(args: Args) -> anyhow::Result<ExitCode> {
    let start = std::time::Instant::now();
    if args.out.is_dir() {
        anyhow::bail!("--out {} is a directory; with --solve-only, --out names the plan file to write (e.g. --out plan.json)", args.out.display());
    }
    let opts = merge_options(&args, None, TraceFormat::default())?;
    let (plan, _, stats) = plan::solve(&args.inputs, &opts, &mut |line| eprintln!("distprof merge: {line}"))?;
    plan.write(&args.out)?;
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        let report = serde_json::json!({
            "plan": args.out,
            "nodes": plan.nodes.len(),
            "g0_ns": plan.g0_ns,
            "bytes_in": stats.bytes_in,
            "bytes_read": stats.bytes_read,
            "seconds": secs,
        });
        println!("{report}");
    } else {
        println!(
            "solved {} nodes in {secs:.2} s, reading {:.2} MB of their {:.1} MB (their small planes, not their events); plan: {}",
            plan.nodes.len(),
            stats.bytes_read as f64 / 1e6,
            stats.bytes_in as f64 / 1e6,
            args.out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(report: &distprof_offline::merge::MergeReport, secs: f64, json: bool) -> anyhow::Result<ExitCode> {
    // On stderr whatever the format: a merged node placed less surely than its model's
    // windows are trusted to must not pass unnoticed.
    for n in report.nodes.iter().filter(|n| n.uncertainty_exceeded) {
        eprintln!(
            "distprof merge: WARNING: node {}: its correction's uncertainty reaches {:.0} ns over the profile ({:.1} s outside the model's windows), beyond the {:.0} ns a clock window is trusted to: its events are placed, not to that accuracy; profile within the probing, or probe longer",
            n.node,
            n.max_uncertainty_ns,
            n.extrapolated_ns as f64 / 1e9,
            distprof_offline::merge::belong::MAX_MERGE_UNCERTAINTY_NS
        );
    }
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
                    "corrected, sigma <= {:.0} ns, bound <= {:.0} ns, timestamps {}",
                    n.max_uncertainty_ns,
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
            println!("Perfetto: {}", c.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
