//! `distprof bench hooks`: what a disabled hook costs XLA, next to the cheapest possible
//! call.
//!
//! Both loops run in C++ (rust/distprof-ffi/cpp/bench_hooks.cc): one calls
//! `distprof::OnTraceStop()`, the real hook entry, which crosses the cxx bridge into the
//! disabled plugin (one atomic load); the other calls an empty function in another
//! translation unit that the compiler cannot inline. Rounds of the two alternate so both
//! see the same machine; the figure reported per kind is the fastest round (least
//! disturbed by other processes), with the median alongside.

use anyhow::{bail, Context};
use distprof_ffi::bench;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print, as the last line, {"disabled_hook_ns":..,"empty_call_ns":..}.
    #[arg(long)]
    json: bool,
    /// Calls per timed round.
    #[arg(long, default_value_t = 2_000_000)]
    iterations: u64,
    /// Timed rounds of each kind.
    #[arg(long, default_value_t = 15)]
    rounds: u32,
}

/// Nanoseconds per call of every round, per kind.
struct Samples {
    disabled_hook_ns: Vec<f64>,
    empty_call_ns: Vec<f64>,
}

fn measure(iterations: u64, rounds: u32) -> Samples {
    // Warm-up: the first hook call loads the configuration; caches and branch predictors.
    bench::time_disabled_hook_ns(iterations.min(10_000));
    bench::time_empty_call_ns(iterations.min(10_000));
    let per_call = |ns: u64| ns as f64 / iterations as f64;
    let mut s = Samples { disabled_hook_ns: Vec::new(), empty_call_ns: Vec::new() };
    for _ in 0..rounds {
        s.disabled_hook_ns.push(per_call(bench::time_disabled_hook_ns(iterations)));
        s.empty_call_ns.push(per_call(bench::time_empty_call_ns(iterations)));
    }
    s
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.iterations == 0 {
        bail!("--iterations 0: each round must make at least one call; use e.g. --iterations 1000000");
    }
    if args.rounds == 0 {
        bail!("--rounds 0: at least one round is needed; use e.g. --rounds 15");
    }
    if bench::hook_is_enabled() {
        bail!(
            "distprof is enabled in this environment (XLA_ENABLE_DISTRIBUTED_PROFILING or the \
             file in XLA_DIST_PROF_CONFIG), but this benchmark measures the disabled hook; \
             unset XLA_ENABLE_DISTRIBUTED_PROFILING or set it to 0"
        );
    }
    let s = measure(args.iterations, args.rounds);
    if bench::hook_is_enabled() {
        bail!("the plugin turned itself on during the benchmark; the figures are not of the disabled path");
    }
    let (hook_min, empty_min) = (min(&s.disabled_hook_ns), min(&s.empty_call_ns));
    println!(
        "hook benchmark: {} rounds of {} calls each, alternating",
        args.rounds, args.iterations
    );
    println!(
        "disabled hook (distprof::OnTraceStop):  fastest {:.2} ns/call, median {:.2} ns/call",
        hook_min,
        median(&s.disabled_hook_ns)
    );
    println!(
        "empty C++ call (non-inlined):          fastest {:.2} ns/call, median {:.2} ns/call",
        empty_min,
        median(&s.empty_call_ns)
    );
    println!("difference (fastest rounds):           {:+.2} ns/call", hook_min - empty_min);
    if args.json {
        let line = serde_json::json!({
            "disabled_hook_ns": round2(hook_min),
            "empty_call_ns": round2(empty_min),
        });
        println!("{}", serde_json::to_string(&line).context("encoding the JSON summary")?);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_loops_run_and_the_hook_stays_disabled() {
        let s = measure(1_000, 3);
        assert_eq!(s.disabled_hook_ns.len(), 3);
        assert_eq!(s.empty_call_ns.len(), 3);
        // A call takes time; a loop of 1000 calls finishes well under a millisecond each.
        for v in s.disabled_hook_ns.iter().chain(&s.empty_call_ns) {
            assert!(*v > 0.0 && *v < 1_000_000.0, "{v} ns per call");
        }
        assert!(!bench::hook_is_enabled());
    }

    #[test]
    fn statistics() {
        assert_eq!(min(&[3.0, 1.5, 2.0]), 1.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(round2(1.23456), 1.23);
    }
}
