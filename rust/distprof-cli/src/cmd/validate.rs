//! `distprof validate`: collective happens-before violations, before and after correction.

use crate::model_source::ModelSource;
use distprof_offline::validate::validate;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Per-node `.xplane.pb` files or directories (raw node traces or a merge output).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Check traces without a usable clock model as they are.
    #[arg(long)]
    allow_uncorrected: bool,
    #[command(flatten)]
    models: ModelSource,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when no violation remains after correction, 1 otherwise.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let models = args.models.load()?;
    let r = validate(&args.inputs, args.allow_uncorrected, &models)?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} nodes, {} collective kinds, {} occurrences compared",
            r.nodes, r.collective_kinds, r.before.checked
        );
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
        if r.before.checked == 0 {
            println!("  no collective was seen on two or more nodes: nothing to check");
        }
    }
    Ok(if r.after.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
