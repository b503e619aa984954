//! `distprof local`: N node processes on this machine, each with a virtual clock, probing
//! each other through the user-space relay; prints true against estimated offset and drift.
//!
//! Each node is a `distprof run` child process: it binds its probe socket, agrees on the
//! run context with the others over the TCP store node 0 serves, and probes. The parent
//! gives each a config file (its probe port), and a test-network file (its virtual clock,
//! the relay faces its peers are reached through, the common start).

use super::local_truth;
use anyhow::{bail, Context as _};
use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::Config;
use distprof::context::{NodeId, RunContext};
use distprof::jsonl;
use distprof::offline_estimate::RunFile;
use distprof::standalone::{run_node, NodeOptions, NodeSummary};
use distprof_sim::relay::{route_through, PathModel, Relay, RelayConfig, RelayEndpoint};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Time between spawning the children and their common start: enough for a process to
/// start and bind on a busy 2-core machine.
const START_DELAY: Duration = Duration::from_millis(1000);
/// Extra time a child gets beyond its duration before it is killed as hung.
const CHILD_GRACE: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub struct Args {
    /// Number of node processes.
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// Seed of the random virtual clocks, the relay and the session token.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Explicit clock of one node, e.g. `2=+1500000ns,-12.5ppm` (repeatable); the others
    /// get random clocks from the seed.
    #[arg(long = "clock", value_name = "NODE=SPEC")]
    clocks: Vec<String>,
    /// How long the nodes probe, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Length of a probe window, in seconds.
    #[arg(long, default_value_t = 2.0)]
    window_s: f64,
    /// Probe interval per edge, in microseconds.
    #[arg(long)]
    cadence_us: Option<u64>,
    /// How many peers each node probes (default: all, up to the config default of 8).
    #[arg(long)]
    out_degree: Option<u32>,
    /// Relay: one-way delay in microseconds.
    #[arg(long, default_value_t = 100.0)]
    delay_us: f64,
    /// Relay: extra delay of every reverse direction (higher node id to lower), in
    /// microseconds; two-way probes cannot see it, so it shows up as error within the bound.
    #[arg(long, default_value_t = 0.0)]
    asymmetry_us: f64,
    /// Flag windows whose worst-case bound exceeds this, in nanoseconds (default: the
    /// configuration's, which flags nothing: through the relay every bound is at least its
    /// one-way delay, however good the sync).
    #[arg(long)]
    max_bound_ns: Option<u64>,
    /// Flag windows whose uncertainty exceeds this, in nanoseconds (default: the
    /// configuration's).
    #[arg(long)]
    max_uncertainty_ns: Option<u64>,
    /// Relay: mean exponential queueing delay in microseconds.
    #[arg(long, default_value_t = 0.0)]
    jitter_us: f64,
    /// Relay: loss probability per datagram.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Relay: duplication probability per datagram.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Relay: probability that a datagram is held back 1 ms (reordered).
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Silence after which a peer's edge is marked down, in milliseconds.
    #[arg(long)]
    down_after_ms: Option<u64>,
    /// Fault injection: SIGKILL node NODE's process after SECONDS, e.g. `2@3.5`.
    #[arg(long, value_name = "NODE@SECONDS")]
    kill: Option<String>,
    /// Directory for the JSONL files (default: a new directory under the temp dir).
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

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
pub(crate) struct WorkerReport {
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
pub(crate) fn probe_after_rendezvous(
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
        None => SimSpec { clock: VirtualClock::IDENTITY, faces: None, start_real_ns: None },
    };
    probe_and_report(ctx, node, sock, config, Duration::from_secs_f64(args.duration), &sim)
}

/// The test network a node runs in (written by `distprof local`, read by its nodes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SimSpec {
    /// Applied to every timestamp the node records.
    pub clock: VirtualClock,
    /// Relay faces of all nodes, indexed by node: peers are reached through them.
    pub faces: Option<Vec<SocketAddr>>,
    /// Common start (real CLOCK_REALTIME ns), so that windows line up across nodes.
    pub start_real_ns: Option<i64>,
}

/// Probes on an agreed run context, then prints the node's report as one JSON line on
/// stdout. Shared by the `distprof local` workers and `distprof run`.
pub(crate) fn probe_and_report(
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
            routed = route_through(ctx, node, faces);
            &routed
        }
        None => ctx,
    };
    let mut opts = NodeOptions::new(duration);
    opts.clock = sim.clock;
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

/// Picks free loopback ports for the nodes (bound and released; the children bind them).
fn free_loopback_addrs(n: u32) -> anyhow::Result<Vec<SocketAddr>> {
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    Ok(socks.iter().map(|s| s.local_addr()).collect::<Result<_, _>>()?)
}

pub(crate) struct Cluster {
    pub children: Vec<(NodeId, Child)>,
    pub start_real_ns: i64,
}

/// Writes node `node`'s config and test-network files into `out_dir`, the ones
/// `distprof run --config FILE --sim-file FILE` reads, and returns their paths.
pub(crate) fn write_node_files(out_dir: &Path, node: NodeId, cfg: &Config, sim: &SimSpec) -> anyhow::Result<(PathBuf, PathBuf)> {
    let cfg_path = out_dir.join(format!("node{node}.config.json"));
    distprof::atomic_file::write(&cfg_path, serde_json::to_string_pretty(cfg)?.as_bytes()).with_context(|| format!("writing `{}`", cfg_path.display()))?;
    let sim_path = out_dir.join(format!("node{node}.sim.json"));
    distprof::atomic_file::write(&sim_path, serde_json::to_string(sim)?.as_bytes()).with_context(|| format!("writing `{}`", sim_path.display()))?;
    Ok((cfg_path, sim_path))
}

/// Writes each node's config and test-network files and spawns one `distprof run` per node.
pub(crate) fn spawn_cluster(
    num_nodes: u32,
    addrs: &[SocketAddr],
    faces: Option<&[SocketAddr]>,
    config: &Config,
    clocks: &[VirtualClock],
    duration: Duration,
    out_dir: &Path,
) -> anyhow::Result<Cluster> {
    let exe = std::env::current_exe().context("locating the distprof binary")?;
    let store = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let start_real_ns = realtime_ns() + START_DELAY.as_nanos() as i64;
    let mut children = Vec::new();
    for node in 0..num_nodes {
        let cfg = Config { probe_port: addrs[node as usize].port(), ..config.clone() };
        let sim = SimSpec { clock: clocks[node as usize], faces: faces.map(<[_]>::to_vec), start_real_ns: Some(start_real_ns) };
        let (cfg_path, sim_path) = write_node_files(out_dir, node, &cfg, &sim)?;
        let child = Command::new(&exe)
            .args(["run", "--rank", &node.to_string(), "--nodes", &num_nodes.to_string()])
            .args(["--rendezvous", &store.to_string(), "--bind", "127.0.0.1"])
            .args(["--duration", &duration.as_secs_f64().to_string()])
            .arg("--config")
            .arg(&cfg_path)
            .arg("--sim-file")
            .arg(&sim_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting node {node} (`{} run`)", exe.display()))?;
        children.push((node, child));
    }
    Ok(Cluster { children, start_real_ns })
}

/// Waits for every child (bounded), killing the ones that overrun; returns the reports of
/// those that finished cleanly.
pub(crate) fn wait_cluster(
    cluster: &mut Cluster,
    duration: Duration,
    kill: Option<(NodeId, Duration)>,
) -> anyhow::Result<HashMap<NodeId, WorkerReport>> {
    let t0 = Instant::now();
    let start_in = Duration::from_nanos((cluster.start_real_ns - realtime_ns()).max(0) as u64);
    let deadline = t0 + start_in + duration + CHILD_GRACE;
    let mut kill = kill.map(|(n, after)| (n, t0 + start_in + after));
    let mut reports = HashMap::new();
    let mut pending: Vec<usize> = (0..cluster.children.len()).collect();
    while !pending.is_empty() {
        if let Some((victim, at)) = kill {
            if Instant::now() >= at {
                if let Some((_, c)) = cluster.children.iter_mut().find(|(n, _)| *n == victim) {
                    eprintln!("distprof local: killing node {victim} (SIGKILL), as asked");
                    let _ = c.kill();
                }
                kill = None;
            }
        }
        let mut still = Vec::new();
        for &i in &pending {
            let (node, child) = &mut cluster.children[i];
            match child.try_wait()? {
                Some(status) => {
                    let mut out = String::new();
                    if let Some(mut s) = child.stdout.take() {
                        std::io::Read::read_to_string(&mut s, &mut out)?;
                    }
                    if status.success() {
                        let last = out.trim().lines().last().unwrap_or("");
                        let r: WorkerReport = serde_json::from_str(last)
                            .with_context(|| format!("node {node}: unreadable report `{}`", out.trim()))?;
                        reports.insert(*node, r);
                    } else {
                        eprintln!("distprof local: node {node} ended with {status}");
                    }
                }
                None if Instant::now() > deadline => {
                    eprintln!("distprof local: node {node} overran its duration by {CHILD_GRACE:?}; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                }
                None => still.push(i),
            }
        }
        pending = still;
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(reports)
}

fn parse_clocks(args: &Args, n: u32, reference: NodeId, epoch: i64) -> anyhow::Result<Vec<VirtualClock>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0xC10C);
    // The reference keeps the real clock unless given one, so that an explicit clock of
    // another node reads directly as its truth against the reference.
    let mut clocks: Vec<VirtualClock> = (0..n)
        .map(|i| {
            let random = VirtualClock {
                offset_ns: rng.gen_range(-5_000_000..=5_000_000),
                drift_ppb: rng.gen_range(-50_000.0..=50_000.0),
                wander_ns: rng.gen_range(0.0..=200.0),
                epoch_real_ns: epoch,
            };
            if i == reference {
                VirtualClock { epoch_real_ns: epoch, ..VirtualClock::IDENTITY }
            } else {
                random
            }
        })
        .collect();
    for c in &args.clocks {
        let (node, spec) = c
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--clock `{c}`: expected NODE=SPEC, e.g. `2=+1500000ns,-12.5ppm`"))?;
        let node: u32 = node
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--clock `{c}`: `{node}` is not a node id"))?;
        if node >= n {
            bail!("--clock `{c}`: node {node} does not exist with --nodes {n}; use 0..{}", n - 1);
        }
        let mut vc = VirtualClock::parse(spec).map_err(|e| anyhow::anyhow!("--clock: {e}"))?;
        vc.epoch_real_ns = epoch;
        clocks[node as usize] = vc;
    }
    Ok(clocks)
}

fn parse_kill(s: &str, n: u32) -> anyhow::Result<(NodeId, Duration)> {
    let err = || anyhow::anyhow!("--kill `{s}`: expected NODE@SECONDS with NODE below {n}, e.g. `2@3.5`");
    let (node, secs) = s.split_once('@').ok_or_else(err)?;
    let node: u32 = node.parse().map_err(|_| err())?;
    let secs: f64 = secs.parse().map_err(|_| err())?;
    if node >= n || !(secs.is_finite() && secs >= 0.0) {
        return Err(err());
    }
    Ok((node, Duration::from_secs_f64(secs)))
}

#[derive(Serialize)]
struct EdgeResult {
    src: NodeId,
    dst: NodeId,
    sent: u64,
    complete: u64,
    pure: u64,
    lost: u64,
    windows: usize,
    windows_down: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let n = args.nodes;
    if n < 2 {
        bail!("--nodes {n}: a run needs at least 2 nodes");
    }
    if n > 64 {
        bail!("--nodes {n}: at most 64 node processes on one machine; use `distprof simulate` for more");
    }
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration {}: use 0 < seconds <= 3600", args.duration);
    }
    let duration = Duration::from_secs_f64(args.duration);
    let kill = args.kill.as_deref().map(|k| parse_kill(k, n)).transpose()?;
    let epoch = realtime_ns();
    let clocks = parse_clocks(&args, n, Config::default().reference_node, epoch)?;
    let defaults = Config::default();
    let config = Config {
        enabled: true,
        probe_window_s: args.window_s,
        probe_cadence_us: args.cadence_us.unwrap_or(defaults.probe_cadence_us),
        probe_out_degree: args.out_degree.unwrap_or(defaults.probe_out_degree),
        handshake_timeout_ms: args.down_after_ms.unwrap_or(defaults.handshake_timeout_ms),
        max_bound_ns: args.max_bound_ns.unwrap_or(defaults.max_bound_ns),
        max_uncertainty_ns: args.max_uncertainty_ns.unwrap_or(defaults.max_uncertainty_ns),
        ..defaults
    };
    let out_dir = match &args.output_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("distprof-local-{}", std::process::id())),
    };
    distprof::atomic_file::create_dir_all(&out_dir).with_context(|| format!("creating --output-dir `{}`", out_dir.display()))?;
    let config = Config { output_dir: out_dir.to_string_lossy().into_owned(), ..config };

    let addrs = free_loopback_addrs(n)?;
    let path = PathModel {
        delay_us: args.delay_us,
        jitter_us: args.jitter_us,
        loss: args.loss,
        duplicate: args.duplicate,
        reorder: args.reorder,
        reorder_us: 1000.0,
        spike: 0.0,
        spike_us: 0.0,
    };
    let mut relay_cfg = RelayConfig { seed: args.seed, default_path: path, paths: HashMap::new(), blackholes: Vec::new() };
    if args.asymmetry_us != 0.0 {
        for a in 0..n {
            for b in 0..a {
                relay_cfg.paths.insert((a, b), PathModel { delay_us: path.delay_us + args.asymmetry_us, ..path });
            }
        }
    }
    let endpoints = (0..n)
        .map(|i| {
            Ok(RelayEndpoint { node: i, face: UdpSocket::bind("127.0.0.1:0")?, node_addr: addrs[i as usize] })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let relay = Relay::start(endpoints, relay_cfg).map_err(|e| anyhow::anyhow!(e))?;
    eprintln!(
        "distprof local: {n} nodes for {:.1} s through the relay ({} us one way), output in {}",
        args.duration,
        args.delay_us,
        out_dir.display()
    );
    let mut cluster = spawn_cluster(n, &addrs, Some(relay.faces()), &config, &clocks, duration, &out_dir)?;
    let reports = wait_cluster(&mut cluster, duration, kill)?;
    let relay_stats = relay.stop();
    eprintln!(
        "distprof local: relay forwarded {} datagrams (lost {}, duplicated {}, reordered {})",
        relay_stats.forwarded, relay_stats.lost, relay_stats.duplicated, relay_stats.reordered
    );

    // Offline: read every node's JSONL, as a user would.
    let mut files = Vec::new();
    for node in 0..n {
        let path = out_dir.join(jsonl::file_name(node));
        match jsonl::read(&path) {
            Ok(file) => files.push(RunFile { path, file }),
            Err(e) => eprintln!("distprof local: node {node}: {e}"),
        }
    }
    let mut edges = Vec::new();
    for f in files.iter().map(|f| &f.file) {
        for &dst in &f.meta.out_edges {
            let stats: Vec<_> = f.windows.iter().filter_map(|w| w.edges.iter().find(|e| e.dst == dst)).collect();
            edges.push(EdgeResult {
                src: f.meta.node,
                dst,
                sent: stats.iter().map(|e| e.sent).sum(),
                complete: stats.iter().map(|e| e.complete).sum(),
                pure: stats.iter().map(|e| e.pure).sum(),
                lost: stats.iter().map(|e| e.lost).sum(),
                windows: stats.len(),
                windows_down: stats.iter().filter(|e| !e.up).count(),
            });
        }
    }
    let reference = config.reference_node;
    let verdict = local_truth::judge(&files, &clocks)?;

    let fmt = |v: Option<f64>, scale: f64, prec: usize| v.map_or("-".to_string(), |v| format!("{:.*}", prec, v / scale));
    println!(
        "estimator: {:?} with network correction over {} windows ({} full); reference node {reference}; \
         per node: the last full window it was estimated in",
        config.estimator, verdict.windows, verdict.full_windows
    );
    println!(
        "{:>4} {:>6} {:>14} {:>14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "node", "window", "true_off_us", "est_off_us", "err_us", "true_ppm", "est_ppm", "sigma_us", "bound_us", "p99err_us", "in_bound"
    );
    for r in &verdict.nodes {
        if !r.reachable {
            println!("{:>4} unreachable: no window connected it to the reference (no estimate)", r.node);
            continue;
        }
        println!(
            "{:>4} {:>6} {:>14} {:>14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            r.node,
            r.window_id.map_or("-".into(), |w| w.to_string()),
            fmt(r.true_offset_ns, 1e3, 3),
            fmt(r.est_offset_ns, 1e3, 3),
            fmt(r.error_ns, 1e3, 3),
            fmt(r.true_drift_ppm, 1.0, 3),
            fmt(r.est_drift_ppm, 1.0, 3),
            fmt(r.uncertainty_ns, 1e3, 3),
            fmt(r.bound_ns, 1e3, 3),
            fmt(r.p99_error_ns, 1e3, 3),
            format!("{}/{}", r.windows_within_bound, r.windows_estimated),
        );
    }
    let lost: u64 = edges.iter().map(|e| e.lost).sum();
    let sent: u64 = edges.iter().map(|e| e.sent).sum();
    println!(
        "edges: {}, probes sent {sent}, lost {lost}; offset error over all nodes and full windows: p50 {} us, p99 {} us; drift p99 {} ppb; \
         within 2 sigma: {}/{} node-windows",
        edges.len(),
        fmt(verdict.p50_offset_error_ns, 1e3, 3),
        fmt(verdict.p99_offset_error_ns, 1e3, 3),
        fmt(verdict.p99_drift_error_ppb, 1.0, 1),
        verdict.within_2_sigma,
        verdict.samples,
    );
    if !verdict.rejected_edges.is_empty() {
        println!("edges rejected by the network solve: {:?}", verdict.rejected_edges);
    }
    // The picture of the same run; a failure here costs the page, not the figures above.
    let report_path = out_dir.join("report.html");
    let report = match super::report::write_run_dir_report(&out_dir, &report_path) {
        Ok(_) => {
            println!("report: {}", report_path.display());
            Some(report_path)
        }
        Err(e) => {
            eprintln!("distprof local: no report written: {e:#}");
            None
        }
    };
    if args.json {
        let obj = serde_json::json!({
            "report": report,
            "nodes": verdict.nodes,
            "edges": edges,
            "windows": verdict.windows,
            "full_windows": verdict.full_windows,
            "estimator": config.estimator,
            "network_correction": true,
            "samples": verdict.samples,
            "p50_offset_error_ns": verdict.p50_offset_error_ns,
            "p99_offset_error_ns": verdict.p99_offset_error_ns,
            "p50_drift_error_ppb": verdict.p50_drift_error_ppb,
            "p99_drift_error_ppb": verdict.p99_drift_error_ppb,
            "bound_ns_p50": verdict.bound_ns_p50,
            "flagged_fraction": verdict.flagged_fraction,
            "uncertainty_ns_p50": verdict.uncertainty_ns_p50,
            "within_2_sigma": verdict.within_2_sigma,
            "uncertainty_coverage_2sigma": verdict.uncertainty_coverage_2sigma,
            "uncertainty_to_error_ratio_p50": verdict.uncertainty_to_error_ratio_p50,
            "estimate_ms_p50": verdict.estimate_ms_p50,
            "unreachable_node_windows": verdict.unreachable_node_windows,
            "rejected_edges": verdict.rejected_edges,
            "records_outside": verdict.records_outside,
            "probes_sent": sent,
            "probes_lost": lost,
            "output_dir": out_dir,
        });
        println!("{obj}");
    }
    let all_ran = reports.len() == n as usize || kill.is_some();
    Ok(if all_ran { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_spec_errors_name_the_fix() {
        assert_eq!(parse_kill("2@3.5", 4).unwrap(), (2, Duration::from_millis(3500)));
        let e = parse_kill("7@1", 4).unwrap_err().to_string();
        assert!(e.contains("`7@1`") && e.contains("2@3.5"), "{e}");
    }
}
