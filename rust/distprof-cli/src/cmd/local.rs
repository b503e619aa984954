//! `distprof local`: N node processes on this machine, each with a virtual clock, probing
//! each other through the user-space relay; prints true against estimated offset and drift.
//!
//! Each node is a `distprof run` child process: it binds its probe socket, agrees on the
//! run context with the others over the TCP store node 0 serves, and probes. The parent
//! gives each a config file (its probe port), and a test-network file (its virtual clock,
//! the relay faces its peers are reached through, the common start).

use crate::cluster::spawn::{free_loopback_addrs, spawn_cluster, wait_cluster, NodeClocks};
use crate::cluster::truth as local_truth;
use anyhow::{bail, Context as _};
use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::Config;
use distprof::context::NodeId;
use distprof::jsonl;
use distprof::nic_clock::{phc_scenario, PhcScenario, SimulatedNicClock, PHC_SCENARIOS};
use distprof_offline::run_dir_estimate::RunFile;
use distprof_sim::relay::{PathModel, Relay, RelayConfig, RelayEndpoint};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::collections::HashMap;
use std::net::UdpSocket;
use std::time::Duration;

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
    /// Length of a probe window, in seconds (default: the configuration's when
    /// `XLA_DIST_PROF_CONFIG` or `XLA_PROBE_WINDOW_S` sets it, else 2).
    #[arg(long)]
    window_s: Option<f64>,
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
    /// A named clock scenario (`distprof simulate --scenario`), as far as real processes
    /// on one clock can show it: `stamp-bias-*` as a relay delay per receiving node,
    /// `reference-dies` as the reference's process killed at the run's midpoint. The
    /// scenarios whose host clocks change frequency or step are refused, saying why.
    #[arg(long, default_value = "reference", value_parser = crate::scenario_arg::clock_scenarios())]
    clock_scenario: String,
    /// Fault injection: SIGKILL node NODE's process after SECONDS, e.g. `2@3.5`.
    #[arg(long, value_name = "NODE@SECONDS")]
    kill: Option<String>,
    /// Directory for the JSONL files (default: a new directory under the temp dir).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// Hardware stamps from simulated NIC clocks (this machine has no PHC): each node's NIC
    /// clock runs 37 s ahead (TAI) and 20 ppm fast (even nodes) or slow (odd), read with
    /// 500 ns of jitter; the stamps are mapped back to the host clock as real NIC stamps are.
    #[arg(long)]
    simulate_nic_clock: bool,
    /// With --simulate-nic-clock: the last node's NIC clock breaks as the named scenario
    /// does, 6 s after the start: phc-step (+20 us), phc-step-200us, phc-step-900us,
    /// phc-frequency-step (+10 ppm) or phc-latch-bias (biased 1.5 us reads from the start).
    /// `distprof bench nic-clock` replays every scenario, the host clock's too.
    #[arg(long, value_name = "SCENARIO", requires = "simulate_nic_clock")]
    nic_clock_fault: Option<String>,
    /// Judge a finished run again instead of running one: read --out's JSONL and its
    /// `local_clocks.json` (the true clocks the run wrote) and estimate with this binary.
    #[arg(long, requires = "out")]
    judge_only: bool,
}

/// The true virtual clocks of a run, written into its directory so that the run can be
/// judged again (`--judge-only`) after the estimator changed.
const CLOCKS_FILE: &str = "local_clocks.json";


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

/// Judges the configuration the flags make (window, cadence, out-degree, timeouts, bound)
/// with the same rules as a configuration file, before any node, relay or file is made.
fn check_flags(config: &Config) -> anyhow::Result<()> {
    let text = serde_json::to_string(config)?;
    let flags = std::path::Path::new("the flags of `distprof local`");
    distprof::config::check_text(flags, &text).map_err(|e| {
        anyhow::anyhow!(
            "invalid flags (--window-s sets probe_window_s, --cadence-us probe_cadence_us, --out-degree \
             probe_out_degree, --down-after-ms handshake_timeout_ms, --max-bound-ns max_bound_ns):\n{e}"
        )
    })?;
    Ok(())
}

/// The scenario `--nic-clock-fault` names: one the simulated NIC clock can play in a real
/// run (the PHC's own faults; the host clock's cannot be, this host's clock runs on).
fn parse_nic_clock_fault(name: &str) -> anyhow::Result<PhcScenario> {
    let playable: Vec<&str> = PHC_SCENARIOS.iter().filter(|s| !s.breaks_the_host_clock() && s.name != "phc-steady").map(|s| s.name).collect();
    match phc_scenario(name) {
        Some(sc) if playable.contains(&sc.name) => Ok(sc),
        Some(_) => bail!(
            "--nic-clock-fault {name}: a fault of the host clock cannot be played in a real run (the nodes' other stamps follow this host's clock); `distprof bench nic-clock` replays it; here use one of {}",
            playable.join(", ")
        ),
        None => bail!("--nic-clock-fault {name}: no such scenario; use one of {}", playable.join(", ")),
    }
}

/// The probe window when neither `--window-s` nor the configuration sets one: shorter than
/// the configuration's default, so that a run of a few seconds closes several windows.
const LOCAL_WINDOW_S: f64 = 2.0;

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
    let mut kill = args.kill.as_deref().map(|k| parse_kill(k, n)).transpose()?;
    let epoch = realtime_ns();
    // The configuration every node starts from, loaded as `distprof run` and the XLA plugin
    // load it (defaults < XLA_DIST_PROF_CONFIG < XLA_* variables); the flags override it.
    let loaded = distprof::config::load_from_env().map_err(|e| {
        anyhow::anyhow!("invalid configuration (from XLA_DIST_PROF_CONFIG and the XLA_* variables):\n{e}")
    })?;
    let configured = |field: &str| {
        !matches!(loaded.sources.get(field), None | Some(distprof::config::ValueSource::Default))
    };
    let window_s = args.window_s.unwrap_or(if configured("probe_window_s") {
        loaded.config.probe_window_s
    } else {
        LOCAL_WINDOW_S
    });
    let defaults = loaded.config;
    let emulation = clock_scenario_emulation(&args, defaults.reference_node, &mut kill)?;
    let clocks = parse_clocks(&args, n, defaults.reference_node, epoch)?;
    let config = Config {
        enabled: true,
        probe_window_s: window_s,
        probe_cadence_us: args.cadence_us.unwrap_or(defaults.probe_cadence_us),
        probe_out_degree: args.out_degree.unwrap_or(defaults.probe_out_degree),
        handshake_timeout_ms: args.down_after_ms.unwrap_or(defaults.handshake_timeout_ms),
        max_bound_ns: args.max_bound_ns.unwrap_or(defaults.max_bound_ns),
        max_uncertainty_ns: args.max_uncertainty_ns.unwrap_or(defaults.max_uncertainty_ns),
        ..defaults
    };
    check_flags(&config)?;
    let out_dir = match &args.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("distprof-local-{}", std::process::id())),
    };
    distprof::atomic_file::create_dir_all(&out_dir).with_context(|| format!("creating --out `{}`", out_dir.display()))?;
    let config = Config { output_dir: out_dir.to_string_lossy().into_owned(), ..config };

    let clocks_path = out_dir.join(CLOCKS_FILE);
    let (clocks, reports_ok) = if args.judge_only {
        let text = std::fs::read_to_string(&clocks_path)
            .with_context(|| format!("--judge-only: reading the run's true clocks `{}`", clocks_path.display()))?;
        let clocks: Vec<VirtualClock> = serde_json::from_str(&text)
            .with_context(|| format!("--judge-only: `{}` is not a list of clocks", clocks_path.display()))?;
        (clocks, true)
    } else {
        distprof::atomic_file::write(&clocks_path, serde_json::to_string(&clocks)?.as_bytes())
            .with_context(|| format!("writing `{}`", clocks_path.display()))?;
        let reports = run_nodes(&args, &config, &clocks, &emulation, epoch, duration, kill, &out_dir)?;
        (clocks, reports == n as usize || kill.is_some())
    };
    let n = clocks.len() as u32;

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
    // Datagrams the nodes dropped, over every window of every node.
    let mut dropped_by_reason = std::collections::BTreeMap::new();
    for w in files.iter().flat_map(|f| &f.file.windows) {
        distprof::probe::drops::add_reasons(&mut dropped_by_reason, &w.dropped);
    }
    let drops = distprof::probe::DropCounts::from_reasons(&dropped_by_reason);
    let reference = config.reference_node;
    let verdict = local_truth::judge(&files, &clocks)?;
    let timestamps: Vec<_> = files.iter().map(|f| (f.file.meta.node, f.file.timestamps())).collect();
    for (node, t) in &timestamps {
        println!("node {node} timestamps: {}", t.describe());
    }

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
    let allowance_ns = verdict.asymmetry_allowance_ns;
    println!(
        "sigma assumes asymmetry within {allowance_ns} ns per hop (asymmetry_allowance_ns; {}) and includes it; \
         the relay's --asymmetry-us beyond it is error sigma cannot cover{}",
        stamped_modes(&timestamps),
        if verdict.beyond_allowance_node_windows > 0 {
            format!("; the loops show asymmetry beyond it in {} node-window(s) (flagged)", verdict.beyond_allowance_node_windows)
        } else {
            String::new()
        }
    );
    // The truth local alone knows: how far this machine's paths broke that assumption.
    let misses = verdict.samples - verdict.within_2_sigma;
    println!(
        "true path asymmetry to the reference (from the true clocks) beyond {allowance_ns} ns in {} of {} node-windows, \
         {} of the {misses} outside 2 sigma; within 2 sigma where it is within: {}",
        verdict.asymmetric_node_windows,
        verdict.samples,
        verdict.asymmetric_misses,
        fmt(verdict.coverage_2sigma_within_allowance, 1.0, 3),
    );
    println!(
        "datagrams dropped: {} ({} foreign, {} malformed, {} late or duplicate){}",
        drops.total(),
        drops.foreign,
        drops.malformed,
        drops.late_or_duplicate,
        if dropped_by_reason.is_empty() { String::new() } else { format!("; by reason {dropped_by_reason:?}") }
    );
    if verdict.unreachable_node_windows > 0 {
        println!(
            "unreachable node-windows: {} ({} of nodes still alive)",
            verdict.unreachable_node_windows, verdict.unreachable_surviving_node_windows
        );
    }
    for line in distprof::estimate::failover::describe(&verdict.anchors, reference) {
        println!("re-anchored {line}");
    }
    if !verdict.rejected_edges.is_empty() {
        println!("edges rejected by the network solve: {:?}", verdict.rejected_edges);
    }
    if let Some(w) = &verdict.worst {
        println!("{}", worst_window_line(w));
    }
    // The picture of the same run; a failure here costs the page, not the figures above.
    let report_path = out_dir.join("report.html");
    let report = match crate::run_dir_report::write_run_dir_report(&out_dir, &report_path) {
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
            "node_windows": verdict.node_windows,
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
            "asymmetry_allowance_ns": allowance_ns,
            "beyond_allowance_node_windows": verdict.beyond_allowance_node_windows,
            "asymmetric_node_windows": verdict.asymmetric_node_windows,
            "asymmetric_misses": verdict.asymmetric_misses,
            "coverage_2sigma_within_allowance": verdict.coverage_2sigma_within_allowance,
            "uncertainty_to_error_ratio_p50": verdict.uncertainty_to_error_ratio_p50,
            "estimate_ms_p50": verdict.estimate_ms_p50,
            "unreachable_node_windows": verdict.unreachable_node_windows,
            "unreachable_surviving_node_windows": verdict.unreachable_surviving_node_windows,
            "anchors": verdict.anchors,
            "rejected_edges": verdict.rejected_edges,
            "worst_node_window": verdict.worst,
            "records_outside": verdict.records_outside,
            "probes_sent": sent,
            "probes_lost": lost,
            "dropped": drops,
            "dropped_by_reason": dropped_by_reason,
            "timestamps": timestamps.iter().map(|(node, t)| serde_json::json!({ "node": node, "timestamps": t })).collect::<Vec<_>>(),
            "output_dir": out_dir,
            "clock_scenario": args.clock_scenario,
            "stamp_bias_ns": emulation.stamp_bias_ns,
        });
        println!("{obj}");
    }
    Ok(if reports_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The timestamp modes the nodes stamped in, for the allowance line: `kernel stamps`, or
/// `kernel stamps (nodes 0, 2), user stamps (node 1)` when they differ. The mode in force,
/// not the configured one: `auto` is no mode.
fn stamped_modes(timestamps: &[(NodeId, distprof::timestamp::TimestampQuality)]) -> String {
    let mut by_mode: std::collections::BTreeMap<String, Vec<NodeId>> = std::collections::BTreeMap::new();
    for (node, t) in timestamps {
        let mode = serde_json::to_value(t.mode).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        by_mode.entry(mode).or_default().push(*node);
    }
    if by_mode.len() == 1 {
        return by_mode.into_keys().map(|m| format!("{m} stamps")).collect();
    }
    let part = |(mode, nodes): (String, Vec<NodeId>)| {
        let ids: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        format!("{mode} stamps (node{} {})", if nodes.len() > 1 { "s" } else { "" }, ids.join(", "))
    };
    by_mode.into_iter().map(part).collect::<Vec<_>>().join(", ")
}

/// One line on the worst node-window: its error against its uncertainty, and each edge's
/// disagreement with the network in that window (`!` marks an edge the solve rejected).
fn worst_window_line(w: &local_truth::WorstNodeWindow) -> String {
    let nw = &w.node_window;
    let edges: Vec<String> = w
        .edges
        .iter()
        .map(|e| format!("{}->{} {:.0}{}", e.src, e.dst, e.offset_residual_ns, if e.rejected.is_some() { "!" } else { "" }))
        .collect();
    format!(
        "worst node-window: node {} window {} error {:.0} ns (uncertainty {:.0} ns{}); edge residuals there, ns: {}",
        nw.node,
        nw.window_id,
        nw.error_ns,
        nw.uncertainty_ns,
        nw.path_asymmetry_ns.map_or(String::new(), |a| format!(", true path asymmetry to the reference {a:.0} ns")),
        edges.join(", ")
    )
}

/// What `--clock-scenario` adds to the run.
#[derive(Default)]
struct Emulation {
    /// Per node, the delay the relay adds to every datagram the node receives, ns: a
    /// stamping bias as two-way probes see it (empty: none).
    stamp_bias_ns: Vec<f64>,
}

/// The run's part of `--clock-scenario`: a stamping bias per node, or the reference's kill
/// at the midpoint (into `kill`); an error for a scenario local cannot show.
fn clock_scenario_emulation(
    args: &Args,
    reference: NodeId,
    kill: &mut Option<(NodeId, Duration)>,
) -> anyhow::Result<Emulation> {
    use distprof_sim::cluster::scenarios::{find, LocalEmulation};
    let name = &args.clock_scenario;
    let named = find(name).map_err(|e| anyhow::anyhow!("--clock-scenario: {e}"))?;
    match named.local {
        LocalEmulation::Same => Ok(Emulation::default()),
        LocalEmulation::StampBias { max_ns } => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0xB1A5);
            Ok(Emulation { stamp_bias_ns: (0..args.nodes).map(|_| rng.gen_range(-max_ns..=max_ns)).collect() })
        }
        LocalEmulation::KillReferenceAtMidpoint => {
            if kill.is_some() {
                bail!("--clock-scenario {name} kills the reference at the midpoint; drop --kill, or drop --clock-scenario");
            }
            *kill = Some((reference, Duration::from_secs_f64(args.duration / 2.0)));
            Ok(Emulation::default())
        }
        LocalEmulation::Cannot(why) => bail!(
            "--clock-scenario {name}: `distprof local` cannot emulate it: {why}; run it in the simulator: \
             `distprof simulate --scenario {name}`"
        ),
    }
}

/// Runs the relay and the node processes; the number of nodes that reported.
#[allow(clippy::too_many_arguments)]
fn run_nodes(
    args: &Args,
    config: &Config,
    clocks: &[VirtualClock],
    emulation: &Emulation,
    epoch: i64,
    duration: Duration,
    kill: Option<(NodeId, Duration)>,
    out_dir: &std::path::Path,
) -> anyhow::Result<usize> {
    let n = args.nodes;
    let nic_fault = args.nic_clock_fault.as_deref().map(parse_nic_clock_fault).transpose()?;
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
    if args.asymmetry_us != 0.0 || !emulation.stamp_bias_ns.is_empty() {
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                // --asymmetry-us on every reverse direction (higher id to lower), plus the
                // receiver's stamping bias.
                let asymmetry_us = if b < a { args.asymmetry_us } else { 0.0 };
                let bias_us = emulation.stamp_bias_ns.get(b as usize).map_or(0.0, |ns| ns / 1e3);
                relay_cfg.paths.insert((a, b), PathModel { delay_us: path.delay_us + asymmetry_us + bias_us, ..path });
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
    let nic_clocks: Option<Vec<SimulatedNicClock>> = args.simulate_nic_clock.then(|| {
        (0..n)
            .map(|i| {
                let nic = SimulatedNicClock { drift_ppm: if i % 2 == 0 { 20.0 } else { -20.0 }, ..SimulatedNicClock::tai_20ppm(epoch) };
                match nic_fault {
                    Some(sc) if i == n - 1 => sc.applied_to(nic, epoch),
                    _ => nic,
                }
            })
            .collect()
    });
    let mut cluster = spawn_cluster(n, &addrs, Some(relay.faces()), config, NodeClocks { host: clocks, nic: nic_clocks.as_deref() }, duration, out_dir)?;
    let reports = wait_cluster(&mut cluster, duration, kill)?;
    let relay_stats = relay.stop();
    eprintln!(
        "distprof local: relay forwarded {} datagrams (lost {}, duplicated {}, reordered {})",
        relay_stats.forwarded, relay_stats.lost, relay_stats.duplicated, relay_stats.reordered
    );
    // The relay's own lateness is one-way delay that no real link adds: it is printed so
    // that a run's error can be told apart from the emulator's.
    eprintln!(
        "distprof local: relay read datagrams late by {} (those read while it was already polling: {}); \
         started sends late by {}; they reached the wire late by {}",
        relay_stats.pickup_lateness.summary(),
        relay_stats.pickup_while_awake.summary(),
        relay_stats.send_lateness.summary(),
        relay_stats.wire_lateness.summary(),
    );
    eprintln!(
        "distprof local: relay timed wake-ups late by {}; awake {} us before each due datagram at the end; \
         relay thread CPU {:.0} ms ({:.1} % of a core over the probing time)",
        relay_stats.wake_lateness.summary(),
        relay_stats.spin_margin_ns / 1000,
        relay_stats.cpu_ns as f64 / 1e6,
        relay_stats.cpu_ns as f64 / 1e9 / args.duration.max(1e-9) * 100.0
    );
    Ok(reports.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_window_line_names_the_node_window_and_marks_rejected_edges() {
        use distprof::estimate::network::{EdgeVerdict, RejectReason};
        let edge = |src, dst, r, rejected| EdgeVerdict { src, dst, rejected, offset_residual_ns: r, drift_residual_ppb: 0.0 };
        let w = local_truth::WorstNodeWindow {
            node_window: local_truth::NodeWindow {
                node: 3,
                window_id: 5,
                error_ns: -1884.2,
                uncertainty_ns: 1606.0,
                bound_ns: 50_000.0,
                drift_error_ppb: 0.6,
                path_asymmetry_ns: Some(-1702.4),
            },
            edges: vec![edge(0, 3, -1591.0, None), edge(3, 0, -6390.4, Some(RejectReason::DisagreesWithNetwork))],
        };
        assert_eq!(
            worst_window_line(&w),
            "worst node-window: node 3 window 5 error -1884 ns (uncertainty 1606 ns, true path asymmetry to the reference -1702 ns); edge residuals there, ns: 0->3 -1591, 3->0 -6390!"
        );
    }

    #[test]
    fn the_allowance_line_names_the_modes_stamped_in() {
        use distprof::timestamp::{StampMode, TimestampQuality};
        let q = |mode| TimestampQuality { mode, stamp_error_bound_ns: 5_000, note: String::new(), nic_clock: None };
        assert_eq!(stamped_modes(&[(0, q(StampMode::Kernel)), (1, q(StampMode::Kernel))]), "kernel stamps");
        let mixed = [(0, q(StampMode::Kernel)), (1, q(StampMode::User)), (2, q(StampMode::Kernel))];
        assert_eq!(stamped_modes(&mixed), "kernel stamps (nodes 0, 2), user stamps (node 1)");
    }

    #[test]
    fn kill_spec_errors_name_the_fix() {
        assert_eq!(parse_kill("2@3.5", 4).unwrap(), (2, Duration::from_millis(3500)));
        let e = parse_kill("7@1", 4).unwrap_err().to_string();
        assert!(e.contains("`7@1`") && e.contains("2@3.5"), "{e}");
    }
}

#[cfg(test)]
mod clock_scenario_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(extra: &[&str]) -> Args {
        Cli::parse_from(["local"].iter().chain(extra)).args
    }

    #[test]
    fn a_scenario_local_cannot_show_is_refused_with_the_reason_and_the_simulator_command() {
        let e = clock_scenario_emulation(&args(&["--clock-scenario", "disciplined"]), 0, &mut None).err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("cannot emulate") && e.contains("frequency") && e.contains("distprof simulate --scenario disciplined"), "{e}");
    }

    #[test]
    fn stamp_bias_is_per_node_within_its_bound_and_the_dying_reference_is_killed_at_the_midpoint() {
        let e = clock_scenario_emulation(&args(&["--clock-scenario", "stamp-bias-1us", "--nodes", "6"]), 0, &mut None).unwrap();
        assert_eq!(e.stamp_bias_ns.len(), 6);
        assert!(e.stamp_bias_ns.iter().all(|b| b.abs() <= 1000.0) && e.stamp_bias_ns.iter().any(|b| b.abs() > 100.0), "{:?}", e.stamp_bias_ns);
        let mut kill = None;
        let e = clock_scenario_emulation(&args(&["--clock-scenario", "reference-dies", "--duration", "30"]), 0, &mut kill).unwrap();
        assert!(e.stamp_bias_ns.is_empty());
        assert_eq!(kill, Some((0, Duration::from_secs(15))));
        let mut kill = Some((1, Duration::from_secs(2)));
        assert!(clock_scenario_emulation(&args(&["--clock-scenario", "reference-dies"]), 0, &mut kill).is_err());
    }
}
