//! `distprof bench nic-clock`: for every named NIC clock scenario (`nic_clock::scenarios`:
//! PHC steps of 20, 200 and 900 us, a 10 ppm PHC frequency step, a leap second and a
//! 500 ppm slew of the host clock, biased latch reads, and the steady reference), how many
//! converted stamps carry more error than the mapping states for them (the goal is 0), how
//! many were converted across a detected break, and what the mapping states.
//!
//! Each seed replays the scenario's 12 s through the same `PhcMapping` the socket uses,
//! in simulated time (no sleeping: the whole bench takes well under a second).

use anyhow::bail;
use distprof::nic_clock::scenarios::{replay, ReplayOutcome};
use distprof::nic_clock::PHC_SCENARIOS;
use serde_json::json;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print, as the last line, {"nic_clock":[{scenario,...}],"stamps_outside_stated_error":..}.
    #[arg(long)]
    json: bool,
    /// First seed of the read jitter and stamp instants (the tests use 41-46).
    #[arg(long, default_value_t = 101)]
    first_seed: u64,
    /// Seeds per scenario.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// One stamp per this many microseconds.
    #[arg(long, default_value_t = 5_000)]
    stamp_every_us: u64,
}

/// The sum of the seeds' counts and the worst of their figures.
fn pooled(outs: &[ReplayOutcome]) -> ReplayOutcome {
    let mut p = ReplayOutcome::default();
    let mut medians: Vec<f64> = outs.iter().map(|o| o.median_stated_ns).collect();
    medians.sort_by(f64::total_cmp);
    for o in outs {
        p.stamps += o.stamps;
        p.not_converted += o.not_converted;
        p.across_break += o.across_break;
        p.outside_stated += o.outside_stated;
        p.breaks += o.breaks;
        p.worst_excess_ns = p.worst_excess_ns.max(o.worst_excess_ns);
        p.worst_error_ns = p.worst_error_ns.max(o.worst_error_ns);
        p.max_stated_ns = p.max_stated_ns.max(o.max_stated_ns);
    }
    p.median_stated_ns = medians.get(medians.len() / 2).copied().unwrap_or(0.0);
    p
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.seeds == 0 {
        bail!("--seeds 0: at least one seed is needed; use e.g. --seeds 10");
    }
    if args.stamp_every_us == 0 || args.stamp_every_us > 1_000_000 {
        bail!("--stamp-every-us {}: must be 1 to 1000000 (one stamp per that many us); use e.g. --stamp-every-us 5000", args.stamp_every_us);
    }
    let seeds = args.first_seed..args.first_seed.saturating_add(args.seeds);
    println!("NIC clock mapping, {} seeds x 12 s per scenario, a stamp every {} us; each stamp against the simulated truth", args.seeds, args.stamp_every_us);
    println!("{:<20} {:>7} {:>8} {:>7} {:>7} {:>11} {:>11} {:>13}", "scenario", "stamps", "outside", "across", "breaks", "median_us", "max_us", "worst_err_us");
    let mut rows = Vec::new();
    let mut outside_total = 0;
    for sc in PHC_SCENARIOS {
        let outs: Vec<ReplayOutcome> = seeds.clone().map(|seed| replay(sc.nic(1_790_000_000_000_000_000), seed, args.stamp_every_us as i64 * 1_000)).collect();
        let p = pooled(&outs);
        outside_total += p.outside_stated;
        println!(
            "{:<20} {:>7} {:>8} {:>7} {:>7} {:>11.3} {:>11.3} {:>13.3}",
            sc.name,
            p.stamps,
            p.outside_stated,
            p.across_break,
            p.breaks,
            p.median_stated_ns / 1e3,
            p.max_stated_ns / 1e3,
            p.worst_error_ns / 1e3
        );
        rows.push(json!({
            "scenario": sc.name,
            "what": sc.what,
            "stamps": p.stamps,
            "outside_stated_error": p.outside_stated,
            "worst_excess_ns": p.worst_excess_ns,
            "across_break": p.across_break,
            "breaks_detected": p.breaks,
            "median_stated_error_ns": p.median_stated_ns,
            "max_stated_error_ns": p.max_stated_ns,
            "worst_error_ns": p.worst_error_ns,
            "not_converted": p.not_converted,
        }));
    }
    println!("outside: stamps whose error exceeds the error stated for them (goal 0); across: stamps converted across a detected break, stated with its size");
    println!("median_us / max_us: stated error of the other stamps; worst_err_us: their largest error against the truth");
    if args.json {
        println!("{}", json!({ "nic_clock": rows, "stamps_outside_stated_error": outside_total }));
    }
    Ok(ExitCode::SUCCESS)
}
