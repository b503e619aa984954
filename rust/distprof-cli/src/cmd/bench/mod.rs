//! `distprof bench ...`: each benchmark prints its figures and, as its last line with
//! `--json`, one JSON object.

use clap::Subcommand;
use std::process::ExitCode;

mod accuracy;
mod estimator;
mod failover;
mod faults;
mod hooks;
mod local_runs;
mod merge;
mod nic_clock;
mod overhead;
mod real_clocks;
mod rendezvous;
mod run_queue;
mod scale;
mod store_faults;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Cost of a disabled hook call next to an empty C++ call.
    Hooks(hooks::Args),
    /// Time for many simulated nodes to agree on one run context.
    Rendezvous(rendezvous::Args),
    /// CPU and bandwidth of a real probe run at the default cadence.
    Overhead(overhead::Args),
    /// Fit time and accuracy of the hull method against linfa-svm.
    Estimator(estimator::Args),
    /// Offset and drift error of every estimator, simulated and real.
    Accuracy(accuracy::Args),
    /// Merge throughput and peak memory against a decode-everything baseline.
    Merge(merge::Args),
    /// The network fault suite: loss, reordering, spikes, asymmetry, a blackholed and a
    /// restarted peer, a flood at the probe port, a flooded rendezvous store and a late
    /// rank; invariants checked, figures printed.
    Faults(faults::Args),
    /// Per-node store traffic and CPU from 64 to 16,384 simulated nodes: the real
    /// rendezvous over a counting store, each node's per-window work, the merge-time solve.
    Scale(scale::Args),
    /// Stamps outside the error the NIC clock mapping states for them, per named PHC and
    /// host clock fault (steps, frequency steps, a leap second, a slew, biased latch reads).
    NicClock(nic_clock::Args),
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.bench {
        Bench::Hooks(a) => hooks::run(a),
        Bench::Rendezvous(a) => rendezvous::run(a),
        Bench::Overhead(a) => overhead::run(a),
        Bench::Estimator(a) => estimator::run(a),
        Bench::Accuracy(a) => accuracy::run(a),
        Bench::Merge(a) => merge::run(a),
        Bench::Faults(a) => faults::run(a),
        Bench::Scale(a) => scale::run(a),
        Bench::NicClock(a) => nic_clock::run(a),
    }
}
