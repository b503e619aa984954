//! `distprof validate`: collective happens-before violations, before and after correction.

use crate::model_source::ModelSource;
use distprof_offline::merge::MergeOptions;
use distprof_offline::validate::validate;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Per-node `.xplane.pb` files or directories (one run's raw node traces, or one
    /// merge's output; not both).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Check traces without a usable clock model as they are.
    #[arg(long)]
    allow_uncorrected: bool,
    #[command(flatten)]
    models: ModelSource,
    /// Check although traces and models do not belong together (other sessions, another
    /// host's plane, a profile outside the model's windows), as `merge --force`.
    #[arg(long)]
    force: bool,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when no violation remains after correction, 1 otherwise; an error (no collective
/// in traces that ran XLA ops, inputs that do not belong together) exits 2.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = MergeOptions {
        allow_uncorrected: args.allow_uncorrected,
        models: args.models.load()?,
        models_origin: args.models.origin()?,
        force: args.force,
        ..Default::default()
    };
    let r = validate(&args.inputs, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} nodes{}, {} collectives, {} occurrences compared",
            r.nodes,
            if r.merged { " (merged outputs)" } else { "" },
            r.collective_kinds,
            r.before.checked
        );
        for (kind, seen) in &r.kinds {
            let ops: Vec<&str> = seen.ops.iter().map(String::as_str).collect();
            println!("  {kind:<26} {:>6} events  ({})", seen.events, ops.join(", "));
        }
        for (label, v) in [
            ("before correction", &r.before),
            ("after correction", &r.after),
        ] {
            println!(
                "  {label:<18} {:>6} violations, worst gap {:>14.3} us, smallest overlap {:>14.3} us",
                v.violations,
                v.worst_gap_ns / 1e3,
                v.min_overlap_ns / 1e3
            );
        }
        if r.kinds.is_empty() {
            println!("  no collective and no XLA op in the traces: nothing to check");
        } else if r.before.checked == 0 {
            println!("  no collective was seen on two or more nodes: nothing to compare; give every node's trace of the run");
        }
    }
    Ok(if r.after.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
