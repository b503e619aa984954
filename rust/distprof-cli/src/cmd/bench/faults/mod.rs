//! `distprof bench faults`: the network fault suite. Every scenario runs real node
//! processes (`distprof run`) probing through the user-space relay, with one kind of
//! fault, under a watchdog; then reads every node's JSONL as a user would and judges the
//! estimates against the true virtual clocks, next to a clean baseline.
//!
//! Scenarios: clean, 30% loss, reordering + duplication, 10 ms delay spikes, asymmetric
//! paths, a blackholed peer, a peer killed and restarted mid-run, and a flood of foreign,
//! malformed and replayed datagrams at one node's probe port.
//!
//! Per scenario it prints datagrams tried, faults injected by kind, crashes, hangs,
//! windows written against expected, peak RSS and relay queue, windows flagged (an edge
//! down), drop counters, and offset error against truth; with `--json` one object as the
//! last line, with every invariant that failed under `violations` (exit code 1 if any).

use crate::cluster::node_run::{SimSpec, WorkerReport};
use crate::cluster::spawn::{common_start_real_ns, free_loopback_addrs, read_report, spawn_node, write_node_files, Meeting, CHILD_GRACE};
use crate::cluster::truth::{self as local_truth, Verdict};
use crate::stats::quantile;
use anyhow::{bail, Context as _};
use distprof::clock::{realtime_ns, VirtualClock};
use distprof::config::Config;
use distprof::context::{GraphParams, NodeId, NodeInfo, RunContext};
use distprof::jsonl::{self, NodeFile};
use distprof_offline::run_dir_estimate::RunFile;
use distprof::rendezvous::digest;
use distprof_sim::inject::{Flood, FloodCounts, FloodPlan};
use distprof_sim::relay::{Blackhole, PathModel, Relay, RelayConfig, RelayEndpoint, RelayStats};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

mod invariants;
mod tables;

use invariants::check;
use tables::{print_store_table, print_table};

/// Probe window and cadence of every scenario: short windows so that a few seconds give
/// enough of them to see faults come and go.
const WINDOW_S: f64 = 0.5;
const CADENCE_US: u64 = 20_000;
/// Silence after which an edge is marked down.
const DOWN_AFTER_MS: u64 = 300;
/// One-way delay of a clean path.
const DELAY_US: f64 = 100.0;
/// The watchdog: a node still running this long after its duration is hung, and killed
/// (the cluster spawner's grace, as for `distprof local`).
const HANG_GRACE: Duration = CHILD_GRACE;
/// The estimator flags a window whose error bound exceeds this: above the relay's clean
/// bound (~130 us), so that a clean run flags nothing and a degraded path shows.
const MAX_BOUND_NS: u64 = 300_000;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds each scenario probes (at least 2).
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Node processes per scenario (3 to 8).
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Flood rate at the attacked node, datagrams per second, all kinds together.
    #[arg(long, default_value_t = 1000.0)]
    flood_rate_per_s: f64,
    /// Run only the scenarios whose name contains this word (the clean baseline always runs).
    #[arg(long)]
    only: Option<String>,
    /// Keep the JSONL files here (default: a temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// store_flood: ranks that rendezvous while the store is flooded.
    #[arg(long, default_value_t = 64)]
    store_flood_ranks: u32,
    /// store_flood: idle connections held open against the store.
    #[arg(long, default_value_t = 10_000)]
    store_flood_connections: usize,
    /// store_flood: the ranks' rendezvous timeout, ms.
    #[arg(long, default_value_t = 120_000)]
    store_flood_timeout_ms: u64,
    /// store_greeted_flood: connections that say the public HELLO, held against the store.
    #[arg(long, default_value_t = 10_000)]
    store_greeted_flood_connections: usize,
    /// store_greeted_flood: loopback addresses they come from (127.0.0.10 and up).
    #[arg(long, default_value_t = 40)]
    store_greeted_flood_addresses: u8,
    /// store_greeted_flood: the 3 ranks' rendezvous timeout, ms.
    #[arg(long, default_value_t = 60_000)]
    store_greeted_flood_timeout_ms: u64,
    /// late_rank: how long after the others rank 0 starts, seconds.
    #[arg(long, default_value_t = 90.0)]
    late_rank_delay_s: f64,
    /// late_rank: the ranks' rendezvous timeout, ms.
    #[arg(long, default_value_t = 120_000)]
    late_rank_timeout_ms: u64,
}

/// One fault, placed in time as fractions of the probing duration.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    Path(PathModel),
    /// Forward (lower id to higher) and reverse paths differ.
    Asymmetric { forward: PathModel, reverse: PathModel },
    Blackhole { from: f64, until: f64 },
    Restart { kill_at: f64, restart_at: f64 },
    Flood { from: f64, until: f64 },
}

struct Scenario {
    name: &'static str,
    what: &'static str,
    fault: Fault,
}

fn scenarios() -> Vec<Scenario> {
    let clean = PathModel::fixed(DELAY_US);
    vec![
        Scenario { name: "clean", what: "no fault (the baseline)", fault: Fault::None },
        Scenario { name: "loss30", what: "30% of datagrams lost", fault: Fault::Path(PathModel { loss: 0.3, ..clean }) },
        Scenario {
            name: "reorder_dup",
            what: "20% held back 1 ms (reordered), 20% duplicated",
            fault: Fault::Path(PathModel { reorder: 0.2, reorder_us: 1000.0, duplicate: 0.2, ..clean }),
        },
        Scenario {
            name: "spikes",
            what: "10% of datagrams delayed 10 ms extra",
            fault: Fault::Path(PathModel { spike: 0.1, spike_us: 10_000.0, ..clean }),
        },
        Scenario {
            name: "asymmetric",
            what: "forward 100 us, reverse 400 us + 50 us jitter",
            fault: Fault::Asymmetric { forward: clean, reverse: PathModel { delay_us: 400.0, jitter_us: 50.0, ..clean } },
        },
        Scenario {
            name: "blackhole",
            what: "last node cut off from 30% to 60% of the run",
            fault: Fault::Blackhole { from: 0.3, until: 0.6 },
        },
        Scenario {
            name: "restart",
            what: "last node killed (SIGKILL) at 30%, restarted at 55%",
            fault: Fault::Restart { kill_at: 0.3, restart_at: 0.55 },
        },
        Scenario {
            name: "flood",
            what: "foreign, malformed and replayed datagrams at node 1 from 20% to 80%",
            fault: Fault::Flood { from: 0.2, until: 0.8 },
        },
    ]
}

/// Everything measured in one scenario.
#[derive(Debug, Clone, Serialize)]
struct ScenarioResult {
    name: &'static str,
    what: &'static str,
    /// Probe datagrams the nodes sent, and datagrams the relay received.
    packets_sent: u64,
    relay_received: u64,
    /// Faults injected, by kind.
    faults: BTreeMap<&'static str, u64>,
    flood: Option<FloodCounts>,
    /// UDP datagrams the kernel dropped for a full socket buffer during the flood, on the
    /// whole host (`RcvbufErrors` of /proc/net/snmp): the most a node can have missed.
    kernel_rcvbuf_drops: Option<u64>,
    crashes: u32,
    hangs: u32,
    /// Windows of the nodes that stayed alive: expected from the duration, and written.
    windows_expected: u64,
    windows_written: u64,
    windows_lost: u64,
    /// The restarted node's windows, before and after its restart.
    restarted_windows: Option<(usize, usize)>,
    /// Node-windows in which some edge was down (or went down).
    flagged_windows: u64,
    /// Node-windows in which some edge lost probes.
    windows_with_lost_probes: u64,
    edges_went_down: u64,
    edges_came_up: u64,
    /// Largest resident set of any node process, MiB; largest relay queue, datagrams.
    peak_rss_mib: f64,
    peak_relay_queue: u64,
    probes_sent: u64,
    probes_lost: u64,
    /// Datagrams dropped by the nodes, per reason (all nodes; the flood's target alone
    /// under `dropped_at_target`).
    dropped: BTreeMap<String, u64>,
    dropped_at_target: BTreeMap<String, u64>,
    /// Offset error against the truth over non-reference node-windows; the share of
    /// them the estimator flagged (bound or uncertainty over `MAX_BOUND_NS`).
    p50_offset_error_ns: Option<f64>,
    p99_offset_error_ns: Option<f64>,
    /// The same median per node: where the nodes differ (the asymmetric scenario spreads
    /// the edges' bias unevenly over them) the pooled median lands between them.
    p50_offset_error_ns_by_node: BTreeMap<NodeId, f64>,
    bound_ns_p50: Option<f64>,
    node_windows_estimated: usize,
    node_windows_within_bound: usize,
    unreachable_node_windows: usize,
    flagged_fraction: f64,
    wall_s: f64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(args.duration.is_finite() && (2.0..=120.0).contains(&args.duration)) {
        bail!("--duration {}: use 2 to 120 seconds per scenario", args.duration);
    }
    if !(3..=8).contains(&args.nodes) {
        bail!("--nodes {}: use 3 to 8 node processes (the suite needs a victim, a target and the reference)", args.nodes);
    }
    if !(args.flood_rate_per_s.is_finite() && (1.0..=100_000.0).contains(&args.flood_rate_per_s)) {
        bail!("--flood-rate-per-s {}: use 1 to 100000 datagrams per second", args.flood_rate_per_s);
    }
    let (root, temporary) = match &args.out {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("distprof-bench-faults-{}", std::process::id())), true),
    };
    if !(2..=256).contains(&args.store_flood_ranks) {
        bail!("--store-flood-ranks {}: use 2 to 256 ranks", args.store_flood_ranks);
    }
    if !(args.late_rank_delay_s.is_finite() && args.late_rank_delay_s >= 0.0)
        || args.late_rank_delay_s * 1000.0 >= args.late_rank_timeout_ms as f64
    {
        bail!(
            "--late-rank-delay-s {} must be at least 0 and shorter than --late-rank-timeout-ms {} (the goal is that the late rank still agrees)",
            args.late_rank_delay_s, args.late_rank_timeout_ms
        );
    }
    let wanted = |name: &str| args.only.as_deref().is_none_or(|w| name.contains(w));
    let selected: Vec<Scenario> = scenarios()
        .into_iter()
        .filter(|s| s.name == "clean" || args.only.as_deref().is_none_or(|w| s.name.contains(w)))
        .collect();
    let mut results = Vec::new();
    for s in &selected {
        eprintln!("bench faults: {} ({})", s.name, s.what);
        let dir = root.join(s.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating `{}`", dir.display()))?;
        results.push(run_scenario(s, args.nodes, Duration::from_secs_f64(args.duration), args.flood_rate_per_s, &dir)?);
    }
    if temporary {
        let _ = std::fs::remove_dir_all(&root);
    }
    let mut violations = check(&results, args.nodes);
    let store_flood = if wanted("store_flood") {
        eprintln!("bench faults: store_flood");
        Some(super::store_faults::store_flood(args.store_flood_ranks, args.store_flood_connections, args.store_flood_timeout_ms)?)
    } else {
        None
    };
    let greeted_flood = if wanted("store_greeted_flood") {
        eprintln!("bench faults: store_greeted_flood");
        Some(super::store_faults::store_greeted_flood(
            3,
            args.store_greeted_flood_connections,
            args.store_greeted_flood_addresses,
            args.store_greeted_flood_timeout_ms,
        )?)
    } else {
        None
    };
    let late_rank = if wanted("late_rank") {
        eprintln!("bench faults: late_rank");
        Some(super::store_faults::late_rank(4, Duration::from_secs_f64(args.late_rank_delay_s), args.late_rank_timeout_ms)?)
    } else {
        None
    };
    for s in store_flood.iter().chain(&late_rank) {
        violations.extend(s.violations());
    }
    if let Some(g) = &greeted_flood {
        violations.extend(g.violations());
    }
    print_table(&results);
    print_store_table(store_flood.iter().chain(greeted_flood.iter().map(|g| &g.scenario)).chain(&late_rank));
    if let Some(g) = &greeted_flood {
        println!(
            "store_greeted_flood: {} connections from {} addresses; agreed {} ms after the last start (unflooded {} ms); flood held {}, refused busy {}, evicted for a lighter address {}; rank 0 logged {} lines in {:.1} s ({:.2}/s), its last summary counted {} refusals",
            g.connections,
            g.addresses,
            g.flooded_all_agreed_ms.map_or("-".into(), |v| v.to_string()),
            g.unflooded_all_agreed_ms.map_or("-".into(), |v| v.to_string()),
            g.held_at_start,
            g.refused_busy,
            g.store_evicted_for_lighter,
            g.rank0_log_lines,
            g.rank0_lifetime_s,
            g.rank0_log_lines_per_s,
            g.store_refusals_logged.map_or("-".into(), |v| v.to_string()),
        );
    }
    for v in &violations {
        println!("VIOLATION: {v}");
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "nodes": args.nodes,
                "duration_s": args.duration,
                "window_s": WINDOW_S,
                "probe_cadence_us": CADENCE_US,
                "flood_rate_per_s": args.flood_rate_per_s,
                "scenarios": results,
                "store_flood": store_flood,
                "store_greeted_flood": greeted_flood,
                "late_rank": late_rank,
                "violations": violations,
            })
        );
    }
    Ok(if violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A node process under the watchdog.
struct Proc {
    node: NodeId,
    child: Child,
    deadline: Instant,
    /// Killed on purpose (the restart scenario): its end is no crash.
    killed_on_purpose: bool,
    done: bool,
}

/// The outcome of the watchdog over every process.
#[derive(Default)]
struct Outcome {
    crashes: u32,
    hangs: u32,
    peak_rss_kib: i64,
    reports: HashMap<NodeId, WorkerReport>,
}

fn run_scenario(s: &Scenario, n: u32, duration: Duration, flood_rate_per_s: f64, dir: &Path) -> anyhow::Result<ScenarioResult> {
    let t0 = Instant::now();
    let victim = n - 1;
    let target: NodeId = 1;
    let seed = 0xFA17 ^ s.name.len() as u64;
    let config = Config {
        enabled: true,
        probe_window_s: WINDOW_S,
        probe_cadence_us: CADENCE_US,
        handshake_timeout_ms: DOWN_AFTER_MS,
        max_bound_ns: MAX_BOUND_NS,
        // This bench judges the worst case (asymmetry, outages): its 0.5 s windows of 25
        // probes give uncertainties of a few us on clean paths, which the default 1 us
        // limit would flag; the same limit as the bound's keeps the flags on what it tests.
        max_uncertainty_ns: MAX_BOUND_NS,
        probe_port: 0,
        output_dir: dir.to_string_lossy().into_owned(),
        ..Config::default()
    };
    let epoch = realtime_ns();
    let clocks = clocks(n, config.reference_node, epoch);
    // Real addresses of the nodes (bound here and released; the nodes bind them).
    let addrs = free_loopback_addrs(n)?;
    let start_real_ns = common_start_real_ns();
    let at = |frac: f64| start_real_ns + (duration.as_secs_f64() * frac * 1e9) as i64;

    let mut relay_cfg = RelayConfig { seed, ..RelayConfig::clean(DELAY_US) };
    match s.fault {
        Fault::Path(p) => relay_cfg.default_path = p,
        Fault::Asymmetric { forward, reverse } => {
            relay_cfg.default_path = forward;
            for a in 0..n {
                for b in 0..a {
                    relay_cfg.paths.insert((a, b), reverse);
                }
            }
        }
        Fault::Blackhole { from, until } => {
            relay_cfg.blackholes.push(Blackhole { node: victim, from_real_ns: at(from), until_real_ns: at(until) })
        }
        _ => {}
    }
    let endpoints = (0..n)
        .map(|i| Ok(RelayEndpoint { node: i, face: UdpSocket::bind("127.0.0.1:0")?, node_addr: addrs[i as usize] }))
        .collect::<std::io::Result<Vec<_>>>()?;
    let relay = Relay::start(endpoints, relay_cfg).map_err(|e| anyhow::anyhow!(e))?;

    let infos: Vec<NodeInfo> = (0..n).map(|i| NodeInfo { node: i, probe_addr: addrs[i as usize], hostname: "localhost".into() }).collect();
    let ctxs = RunContext::all_from_graph(
        &format!("faults-{}-{}", s.name, std::process::id()),
        distprof::rendezvous::session::new_session_token(),
        config.reference_node,
        &digest::config_digest(&config),
        GraphParams { out_degree: config.probe_out_degree, seed: config.graph_seed },
        &infos,
    );
    // One context file per node, as the rendezvous gives each node its own context.
    let ctx_path = |node: NodeId| dir.join(format!("context-{node}.json"));
    for ctx in &ctxs {
        std::fs::write(ctx_path(ctx.node), serde_json::to_string(ctx)?)?;
    }
    let faces = relay.faces().to_vec();
    let spawn = |node: NodeId, out: &Path, probe_for: Duration| -> anyhow::Result<Proc> {
        std::fs::create_dir_all(out)?;
        let cfg = Config { output_dir: out.to_string_lossy().into_owned(), ..config.clone() };
        let sim = SimSpec { clock: clocks[node as usize], faces: Some(faces.clone()), start_real_ns: Some(start_real_ns), nic_clock: None };
        let (cfg_path, sim_path) = write_node_files(out, node, &cfg, &sim)?;
        let child = spawn_node(node, &Meeting::ContextFile(&ctx_path(node)), probe_for, &cfg_path, &sim_path)?;
        let start_in = Duration::from_nanos((start_real_ns - realtime_ns()).max(0) as u64);
        Ok(Proc { node, child, deadline: Instant::now() + start_in + probe_for + HANG_GRACE, killed_on_purpose: false, done: false })
    };
    let mut procs = (0..n).map(|i| spawn(i, dir, duration)).collect::<anyhow::Result<Vec<_>>>()?;

    // Timed faults, at real instants after the common start.
    let until_real = |t: i64| {
        let wait = t - realtime_ns();
        if wait > 0 {
            std::thread::sleep(Duration::from_nanos(wait as u64));
        }
    };
    let restarted_dir = dir.join("restarted");
    let mut flood_counts = None;
    let mut kernel_rcvbuf_drops = None;
    let mut outcome = Outcome::default();
    match s.fault {
        Fault::Restart { kill_at, restart_at } => {
            watch_until(&mut procs, &mut outcome, at(kill_at));
            let v = &mut procs[victim as usize];
            eprintln!("bench faults: killing node {victim} (SIGKILL)");
            let _ = v.child.kill();
            v.killed_on_purpose = true;
            watch_until(&mut procs, &mut outcome, at(restart_at));
            let left = Duration::from_nanos((at(1.0) - realtime_ns()).max(1_000_000_000) as u64);
            eprintln!("bench faults: restarting node {victim} for {:.1} s", left.as_secs_f64());
            procs.push(spawn(victim, &restarted_dir, left)?);
        }
        Fault::Flood { from, until } => {
            watch_until(&mut procs, &mut outcome, at(from));
            let rcvbuf_before = udp_rcvbuf_errors();
            let replays = relay.captured(target);
            let flood = Flood::start(FloodPlan {
                node: target,
                target: addrs[target as usize],
                session_token: ctxs[0].session_token,
                rate_per_s: flood_rate_per_s,
                replays,
                seed,
            })
            .map_err(|e| anyhow::anyhow!(e))?;
            watch_until(&mut procs, &mut outcome, at(until));
            flood_counts = Some(flood.stop());
            // The node reads what is queued within a few ms; then the count is final.
            watch_until(&mut procs, &mut outcome, realtime_ns() + 100_000_000);
            kernel_rcvbuf_drops = rcvbuf_before.zip(udp_rcvbuf_errors()).map(|(a, b)| b.saturating_sub(a));
        }
        _ => {}
    }
    until_real(start_real_ns);
    watch_until(&mut procs, &mut outcome, i64::MAX);
    let relay_stats = relay.stop();

    // Offline, as a user would: every node's file (the restarted node's two joined).
    let mut files: Vec<Option<NodeFile>> = Vec::new();
    let mut restarted_windows = None;
    for node in 0..n {
        let mut f = jsonl::read(&dir.join(jsonl::file_name(node))).map_err(|e| eprintln!("bench faults: {e}")).ok();
        if matches!(s.fault, Fault::Restart { .. }) && node == victim {
            let second = jsonl::read(&restarted_dir.join(jsonl::file_name(node))).map_err(|e| eprintln!("bench faults: {e}")).ok();
            restarted_windows = Some((f.as_ref().map_or(0, |f| f.windows.len()), second.as_ref().map_or(0, |f| f.windows.len())));
            match (&mut f, second) {
                (Some(first), Some(second)) => first.windows.extend(second.windows),
                (None, second) => f = second,
                _ => {}
            }
        }
        files.push(f);
    }
    // The estimate reads each file's own meta config (the nodes ran with this scenario's).
    let run_files: Vec<RunFile> = (0..n)
        .zip(&files)
        .filter_map(|(node, f)| f.clone().map(|file| RunFile { path: dir.join(jsonl::file_name(node)), file }))
        .collect();
    let verdict = local_truth::judge(&run_files, &clocks).map_err(|e| anyhow::anyhow!("bench faults: {e}"))?;
    let mut result = summarize(s, n, duration, &files, &verdict, &relay_stats, flood_counts, outcome, restarted_windows, config.reference_node, t0);
    result.kernel_rcvbuf_drops = kernel_rcvbuf_drops;
    Ok(result)
}

/// Waits on every process until the real instant `until_real_ns` (or until all ended),
/// recording crashes, hangs (killed at their deadline) and peak RSS.
fn watch_until(procs: &mut [Proc], out: &mut Outcome, until_real_ns: i64) {
    loop {
        let mut running = 0;
        for p in procs.iter_mut().filter(|p| !p.done) {
            let pid = p.child.id() as libc::pid_t;
            let mut status = 0;
            // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: pid is our child, not yet reaped (done is false).
            let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
            if r == pid {
                p.done = true;
                out.peak_rss_kib = out.peak_rss_kib.max(ru.ru_maxrss);
                let clean = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                if clean {
                    match read_report(p.node, &mut p.child) {
                        Ok(rep) => {
                            out.reports.insert(p.node, rep);
                        }
                        Err(e) => {
                            eprintln!("bench faults: {e:#}");
                            out.crashes += 1;
                        }
                    }
                } else if !p.killed_on_purpose {
                    eprintln!("bench faults: node {} CRASHED (wait status {status:#x})", p.node);
                    out.crashes += 1;
                }
                continue;
            }
            if r < 0 {
                // Not our child any more (cannot happen); do not wait on it forever.
                p.done = true;
                out.crashes += 1;
                continue;
            }
            if Instant::now() > p.deadline {
                eprintln!("bench faults: node {} HUNG past its duration + {HANG_GRACE:?}; killing it", p.node);
                out.hangs += 1;
                p.killed_on_purpose = true;
                // SAFETY: pid is our unreaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            running += 1;
        }
        if running == 0 || realtime_ns() >= until_real_ns {
            return;
        }
        let step_ns = (until_real_ns - realtime_ns()).clamp(0, 20_000_000);
        std::thread::sleep(Duration::from_nanos(step_ns as u64));
    }
}

/// `RcvbufErrors` of the `Udp:` lines of /proc/net/snmp (this network namespace).
fn udp_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

fn clocks(n: u32, reference: NodeId, epoch: i64) -> Vec<VirtualClock> {
    (0..n)
        .map(|i| {
            if i == reference {
                VirtualClock { epoch_real_ns: epoch, ..VirtualClock::IDENTITY }
            } else {
                // Known, different offsets and drifts: +-1.5 ms, -+12 ppm and so on.
                let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                VirtualClock {
                    offset_ns: (sign * 1_500_000.0 * i as f64) as i64,
                    drift_ppb: -sign * 12_000.0 * i as f64,
                    wander_ns: 50.0,
                    epoch_real_ns: epoch,
                }
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    s: &Scenario,
    n: u32,
    duration: Duration,
    files: &[Option<NodeFile>],
    verdict: &Verdict,
    relay: &RelayStats,
    flood: Option<FloodCounts>,
    outcome: Outcome,
    restarted_windows: Option<(usize, usize)>,
    reference: NodeId,
    t0: Instant,
) -> ScenarioResult {
    let victim = n - 1;
    let restart = matches!(s.fault, Fault::Restart { .. });
    let mut faults = BTreeMap::new();
    for (k, v) in [
        ("lost", relay.lost),
        ("duplicated", relay.duplicated),
        ("reordered", relay.reordered),
        ("spiked", relay.spiked),
        ("blackholed", relay.blackholed),
    ] {
        if v > 0 {
            faults.insert(k, v);
        }
    }
    if let Fault::Asymmetric { .. } = s.fault {
        faults.insert("slow_reverse_path", relay.override_path);
    }
    if restart {
        faults.insert("killed", 1);
        faults.insert("restarted", 1);
    }
    if let Some(f) = &flood {
        faults.insert("flood_datagrams", f.total());
    }
    // Every node writes a window each WINDOW_S from its start until it stops, plus the
    // last one; at least floor(duration / window) + 1 of them, ids without a gap.
    let per_node_expected = (duration.as_secs_f64() / WINDOW_S).floor() as u64 + 1;
    let (mut expected, mut written, mut lost) = (0u64, 0u64, 0u64);
    let (mut flagged, mut lossy, mut down, mut up) = (0u64, 0u64, 0u64, 0u64);
    let (mut probes_sent, mut probes_lost) = (0u64, 0u64);
    let mut dropped: BTreeMap<String, u64> = BTreeMap::new();
    let mut dropped_at_target = BTreeMap::new();
    for (node, f) in files.iter().enumerate() {
        let survivor = !(restart && node as u32 == victim);
        let windows = f.as_ref().map_or(&[][..], |f| &f.windows[..]);
        if survivor {
            expected += per_node_expected;
            written += windows.len() as u64;
            let gaps = windows.windows(2).filter(|w| w[1].window_id != w[0].window_id + 1).count() as u64;
            lost += per_node_expected.saturating_sub(windows.len() as u64) + gaps;
        }
        for w in windows {
            flagged += w.edges.iter().any(|e| !e.up || e.went_down > 0) as u64;
            lossy += w.edges.iter().any(|e| e.lost > 0) as u64;
            for e in &w.edges {
                down += e.went_down as u64;
                up += e.came_up as u64;
                probes_sent += e.sent;
                probes_lost += e.lost;
            }
            for (reason, c) in &w.dropped {
                *dropped.entry(reason.clone()).or_default() += c;
                if node == 1 {
                    *dropped_at_target.entry(reason.clone()).or_default() += c;
                }
            }
        }
    }
    let packets_sent = outcome.reports.values().map(|r| r.summary.stats.packets_sent).sum();
    let others = verdict.nodes.iter().filter(|r| r.node != reference);
    let (est, within) = others.fold((0, 0), |(a, b), r| (a + r.windows_estimated, b + r.windows_within_bound));
    ScenarioResult {
        name: s.name,
        what: s.what,
        packets_sent,
        relay_received: relay.received,
        faults,
        flood,
        kernel_rcvbuf_drops: None,
        crashes: outcome.crashes,
        hangs: outcome.hangs,
        windows_expected: expected,
        windows_written: written,
        windows_lost: lost,
        restarted_windows,
        flagged_windows: flagged,
        windows_with_lost_probes: lossy,
        edges_went_down: down,
        edges_came_up: up,
        peak_rss_mib: outcome.peak_rss_kib as f64 / 1024.0,
        peak_relay_queue: relay.peak_queued,
        probes_sent,
        probes_lost,
        dropped,
        dropped_at_target,
        p50_offset_error_ns: verdict.p50_offset_error_ns,
        p99_offset_error_ns: verdict.p99_offset_error_ns,
        p50_offset_error_ns_by_node: median_error_by_node(&verdict),
        bound_ns_p50: verdict.bound_ns_p50,
        node_windows_estimated: est,
        node_windows_within_bound: within,
        unreachable_node_windows: verdict.unreachable_node_windows,
        flagged_fraction: verdict.flagged_fraction,
        wall_s: t0.elapsed().as_secs_f64(),
    }
}

/// Each non-reference node's median |offset error| over its node-windows.
fn median_error_by_node(verdict: &Verdict) -> BTreeMap<NodeId, f64> {
    let mut errors: BTreeMap<NodeId, Vec<f64>> = BTreeMap::new();
    for nw in &verdict.node_windows {
        errors.entry(nw.node).or_default().push(nw.error_ns.abs());
    }
    errors.into_iter().filter_map(|(node, mut e)| Some((node, quantile(&mut e, 0.5)?))).collect()
}

