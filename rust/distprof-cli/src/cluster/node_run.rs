//! What one standalone node does once the run context is agreed: probe through the
//! test network it was given (if any), then print its report as one JSON line on stdout.
//! `distprof run` calls it after its rendezvous; `distprof local` and the benches read the
//! reports of the children they spawned (`cluster::spawn`).

use anyhow::{bail, Context as _};
use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::Config;
use distprof::context::{NodeId, RunContext};
use distprof::standalone::{run_node, NodeOptions, NodeSummary};
use distprof_sim::relay::route_through;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How a standalone node probes once the run context is agreed (flags of `distprof run`).
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// How long to probe after the rendezvous, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Test network written by `distprof local`: virtual clock, relay faces, common start.
    #[arg(long, hide = true, value_name = "FILE")]
    pub sim_file: Option<PathBuf>,
}

/// What a worker prints on stdout.
#[derive(Serialize, Deserialize)]
pub struct WorkerReport {
    pub summary: NodeSummary,
    /// CPU time (user + system) of the probe engine alone, and its wall time.
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

fn cpu_time_ns() -> u64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime) + us(ru.ru_stime)) * 1000
}

/// `distprof run` after its rendezvous.
pub fn probe_after_rendezvous(
    ctx: &RunContext,
    node: NodeId,
    sock: UdpSocket,
    config: &Config,
    args: &ProbeArgs,
) -> anyhow::Result<WorkerReport> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 7.0 * 86_400.0) {
        bail!("--duration {}: give the probing time in seconds, more than 0 and at most a week", args.duration);
    }
    let sim = match &args.sim_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading --sim-file `{}`", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing --sim-file `{}`", path.display()))?
        }
        None => SimSpec { clock: VirtualClock::IDENTITY, faces: None, start_real_ns: None, nic_clock: None },
    };
    probe_and_report(ctx, node, sock, config, Duration::from_secs_f64(args.duration), &sim)
}

/// The test network a node runs in (written by `distprof local`, read by its nodes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimSpec {
    /// Applied to every timestamp the node records.
    pub clock: VirtualClock,
    /// Relay faces of all nodes, indexed by node: peers are reached through them.
    pub faces: Option<Vec<SocketAddr>>,
    /// Common start (real CLOCK_REALTIME ns), so that windows line up across nodes.
    pub start_real_ns: Option<i64>,
    /// Hardware stamps from this simulated NIC clock (`distprof local --simulate-nic-clock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_clock: Option<distprof::nic_clock::SimulatedNicClock>,
}

/// Probes on an agreed run context, then prints the node's report as one JSON line on
/// stdout. Shared by the `distprof local` workers and `distprof run`.
pub fn probe_and_report(
    ctx: &RunContext,
    node: NodeId,
    sock: UdpSocket,
    config: &Config,
    duration: Duration,
    sim: &SimSpec,
) -> anyhow::Result<WorkerReport> {
    let routed;
    let ctx = match &sim.faces {
        Some(faces) => {
            if faces.len() != ctx.num_nodes as usize {
                bail!("test network lists {} relay faces for {} nodes", faces.len(), ctx.num_nodes);
            }
            routed = route_through(ctx, faces);
            &routed
        }
        None => ctx,
    };
    let mut opts = NodeOptions::new(duration);
    opts.clock = sim.clock;
    opts.simulated_nic = sim.nic_clock;
    // Wait for the common start here, so that the CPU measured is the engine's alone.
    if let Some(start) = sim.start_real_ns {
        let wait_ns = start - realtime_ns();
        if wait_ns > 0 && wait_ns < 60_000_000_000 {
            std::thread::sleep(Duration::from_nanos(wait_ns as u64));
        }
    }
    let (cpu0, t0) = (cpu_time_ns(), Instant::now());
    let summary = run_node(ctx, node, sock, config, &opts)?;
    let report = WorkerReport { summary, cpu_ns: cpu_time_ns() - cpu0, wall_ns: t0.elapsed().as_nanos() as u64 };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &report)?;
    writeln!(out)?;
    Ok(report)
}
