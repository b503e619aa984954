//! `distprof bench scale`: what a node spends on distprof inside the job, and what the job's
//! coordination store carries, from 64 to 16,384 nodes (issue 27).
//!
//! **How nodes are modelled.** Every node of a row runs the real rendezvous
//! (`distprof::rendezvous::rendezvous`) on a bare thread of its own with a small stack,
//! through its own counting view of one shared `MemoryStore` (`distprof::kv::Counting`:
//! every call, every byte read and written, the largest value): the same run as
//! `bench rendezvous` (`super::rendezvous::agree_once`). 16,384 threads fit this machine
//! (2 cores, 24 GiB): a waiting node is a blocked thread, and each context is one node's
//! slice (its peers only). The store is in-process, so the figures are the protocol's own
//! traffic and CPU, not a network's latency; the rendezvous wall time is 16,384 threads
//! sharing 2 cores, an upper bound of what one process per host would see.
//!
//! Then the per-window work of a node inside the job, the same code the plugin's probe
//! thread runs (`probe_run::WindowCloser`: fit the window's records, its JSONL model and
//! line; `plugin::node_windows`: probe statistics, the smoother, the plane's fits and the
//! node's own solve), on the records of its k out-edges in the simulator's reference
//! clock scenario (`distprof-sim`, out-degree as configured), window after window, timed
//! by the thread's CPU clock. Only `--measured` nodes (spread over the ids, the reference
//! among them) are timed: a node's window touches nothing of another node's, so the
//! others would repeat the same work. After the rendezvous a node holds no store at all
//! (the plugin lets it go; the network solve is merge's), so its per-window store traffic
//! is zero by construction: `plugin::backend::tests` counts every store call of real
//! nodes through two traces and fails on any after the rendezvous.
//!
//! Last, `solve_ms`: one window's network solve at merge time (`solve_window_ms`), every
//! node's edge fits of one simulated window combined as merge combines the planes' and
//! solved with sigma.

use anyhow::bail;
use distprof::clock::thread_cpu_s;
use distprof::config::Config;
use distprof::context::{NodeId, RunContext};
use distprof::estimate::EstimatorSettings;
use distprof::jsonl::{JsonlWriter, Meta};
use distprof::kv::Traffic;
use distprof::plugin::node_windows::{NodeWindows, WindowsSoFar};
use distprof::probe::{gap_preserved, PurityParams};
use distprof::probe_run::WindowCloser;
use distprof::timestamp::{StampMode, TimestampQuality};
use distprof::window::{ClosedWindow, WindowAccumulator};
use distprof_sim::cluster::{Cluster, Scenario};
use serde::Serialize;
use std::process::ExitCode;

/// The goals: growth from 64 to 16,384 nodes, the largest value, the rendezvous
/// and the merge-time solve.
const GROWTH_GOAL: f64 = 1.5;
const MAX_VALUE_GOAL_BYTES: u64 = 65_536;
const RENDEZVOUS_GOAL_S: f64 = 10.0;
const SOLVE_GOAL_MS: f64 = 2_000.0;
/// Windows each measured node closes: enough for the smoother (one window either side)
/// to reach its steady state, where a window close makes one earlier window final.
const WINDOWS: u64 = 8;

#[derive(clap::Args)]
pub struct Args {
    /// Node counts to measure, comma-separated (e.g. `--nodes 64,1024` for a quick run).
    #[arg(long, value_delimiter = ',', default_values_t = [64u32, 1024, 4096, 16384])]
    nodes: Vec<u32>,
    /// Nodes whose per-window work is timed at each node count.
    #[arg(long, default_value_t = 16)]
    measured: u32,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// p50 and max over the nodes.
#[derive(Debug, Serialize, Clone, Copy)]
struct Spread {
    p50: f64,
    max: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread { p50: v.get(v.len() / 2).copied().unwrap_or(0.0), max: v.last().copied().unwrap_or(0.0) }
    }
}

/// One node's store traffic over a phase, p50 and max over the nodes.
#[derive(Debug, Serialize)]
struct Phase {
    bytes_read: Spread,
    bytes_written: Spread,
    calls: Spread,
}

#[derive(Debug, Serialize)]
struct Row {
    nodes: u32,
    rendezvous: Phase,
    /// The node with the most rendezvous bytes.
    rendezvous_busiest_node: NodeId,
    /// Store calls per node and window of probing, after the rendezvous: none, the node
    /// holds no store then (see the module doc).
    per_window_store_calls: u64,
    /// Thread CPU per node and window (`measured_nodes` nodes), ms.
    cpu_ms_per_window: Spread,
    measured_nodes: Vec<NodeId>,
    windows: u64,
    window_s: f64,
    largest_value_bytes: u64,
    /// Every byte every node read or wrote.
    coordinator_bytes: u64,
    rendezvous_s: f64,
    /// One window's merge-time network solve with sigma (`solve_window_ms`).
    solve_ms: f64,
    /// Nodes that solve placed against the reference.
    solve_placed: u32,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut ns = args.nodes.clone();
    ns.sort_unstable();
    ns.dedup();
    if ns.is_empty() || ns[0] < 2 || *ns.last().unwrap_or(&0) > 65_536 {
        bail!("--nodes {:?}: give node counts from 2 to 65536, e.g. --nodes 64,1024", args.nodes);
    }
    if args.measured == 0 {
        bail!("--measured 0: time at least one node's windows");
    }
    let mut rows = Vec::new();
    for &n in &ns {
        rows.push(measure(n, args.measured)?);
        let r = rows.last().expect("just pushed");
        println!(
            "{n:>6} nodes: rendezvous {:.2} s, per node p50/max {:.0}/{:.0} B read, {:.0}/{:.0} B written, {:.0}/{:.0} calls; \
             per window {} store calls; CPU {:.2}/{:.2} ms per node and window; largest value {} B; \
             coordinator {:.1} MB ({:.0} B per node); solve {:.0} ms ({} placed)",
            r.rendezvous_s,
            r.rendezvous.bytes_read.p50,
            r.rendezvous.bytes_read.max,
            r.rendezvous.bytes_written.p50,
            r.rendezvous.bytes_written.max,
            r.rendezvous.calls.p50,
            r.rendezvous.calls.max,
            r.per_window_store_calls,
            r.cpu_ms_per_window.p50,
            r.cpu_ms_per_window.max,
            r.largest_value_bytes,
            r.coordinator_bytes as f64 / 1e6,
            r.coordinator_bytes as f64 / n as f64,
            r.solve_ms,
            r.solve_placed,
        );
    }
    let at = |n: u32| rows.iter().find(|r| r.nodes == n);
    let (first, last) = (&rows[0], rows.last().expect("at least one row"));
    // Rendezvous plus one window of sharing (none: the node holds no store then), per node.
    let store_bytes = |r: &Row, pick: fn(&Spread) -> f64| pick(&r.rendezvous.bytes_read) + pick(&r.rendezvous.bytes_written);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let store_growth = ratio(store_bytes(last, |s| s.p50), store_bytes(first, |s| s.p50));
    let store_growth_max = ratio(store_bytes(last, |s| s.max), store_bytes(first, |s| s.max));
    let cpu_growth = ratio(last.cpu_ms_per_window.p50, first.cpu_ms_per_window.p50);
    let per_node = |r: &Row| r.coordinator_bytes as f64 / r.nodes as f64;
    let coordinator_growth = ratio(per_node(last), per_node(first));
    let max_value = rows.iter().map(|r| r.largest_value_bytes).max().unwrap_or(0);
    let rendezvous_16384_s = at(16_384).map(|r| r.rendezvous_s);
    let solve_16384_ms = at(16_384).map(|r| r.solve_ms);
    let span = format!("{} over {} nodes", last.nodes, first.nodes);
    println!(
        "growth {span}: per-node store bytes (rendezvous + one window) x{store_growth:.2} at p50 (goal <= {GROWTH_GOAL}), \
         x{store_growth_max:.2} for the busiest node; CPU per node and window x{cpu_growth:.2} (goal <= {GROWTH_GOAL}); \
         coordinator bytes per node x{coordinator_growth:.2} (goal <= {GROWTH_GOAL}); largest value {max_value} B (goal <= {MAX_VALUE_GOAL_BYTES})"
    );
    if args.json {
        let goal = |v: Option<f64>, ok: fn(f64) -> bool| v.map(ok);
        println!(
            "{}",
            serde_json::json!({
                "rows": rows,
                "growth_span": span,
                "per_node_store_bytes_growth": store_growth,
                "per_node_store_bytes_growth_busiest": store_growth_max,
                "per_node_cpu_ms_growth": cpu_growth,
                "max_value_bytes": max_value,
                "rendezvous_16384_s": rendezvous_16384_s,
                "coordinator_bytes_per_node_growth": coordinator_growth,
                "solve_16384_ms": solve_16384_ms,
                "goals": {
                    "per_node_store_bytes_growth": store_growth <= GROWTH_GOAL,
                    "per_node_cpu_ms_growth": cpu_growth <= GROWTH_GOAL,
                    "max_value_bytes": max_value <= MAX_VALUE_GOAL_BYTES,
                    "rendezvous_16384_s": goal(rendezvous_16384_s, |s| s < RENDEZVOUS_GOAL_S),
                    "coordinator_bytes_per_node_growth": coordinator_growth <= GROWTH_GOAL,
                    "solve_16384_ms": goal(solve_16384_ms, |ms| ms < SOLVE_GOAL_MS),
                },
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One row: the rendezvous of `n` threads, the per-window work of `measured` of them, the
/// merge-time solve of one window.
fn measure(n: u32, measured: u32) -> anyhow::Result<Row> {
    let config = Config { rendezvous_timeout_ms: 1_800_000, ..Config::default() };
    eprintln!("bench scale: {n} nodes: rendezvous ({n} threads)");
    let agreed = super::rendezvous::agree_once(n, &config)?;
    let rendezvous_s = agreed.wall_ms / 1e3;
    let spread = |f: fn(&Traffic) -> u64| Spread::of(agreed.traffic.iter().map(|t| f(t) as f64).collect());
    let rendezvous = Phase { bytes_read: spread(|t| t.bytes_read), bytes_written: spread(|t| t.bytes_written), calls: spread(|t| t.calls) };
    let busiest = (0..n as usize)
        .max_by_key(|&i| agreed.traffic[i].bytes_read + agreed.traffic[i].bytes_written)
        .unwrap_or(0) as NodeId;
    let coordinator_bytes = agreed.traffic.iter().map(|t| t.bytes_read + t.bytes_written).sum();
    let largest_value_bytes = agreed.traffic.iter().map(|t| t.largest_value_bytes).max().unwrap_or(0);

    let reference = agreed.contexts[0].reference_node;
    let nodes = measured_nodes(n, measured, reference);
    eprintln!("bench scale: {n} nodes: per-window work of {} node(s), {WINDOWS} windows each", nodes.len());
    let contexts: Vec<&RunContext> = nodes.iter().map(|&i| &agreed.contexts[i as usize]).collect();
    let cost = node_window_cost(&contexts, WINDOWS)?;
    drop(agreed);

    eprintln!("bench scale: {n} nodes: one window's network solve (fitting {n} nodes' edges first)");
    let (solve_ms, solve_placed) = solve_window_ms(n)?;
    Ok(Row {
        nodes: n,
        rendezvous,
        rendezvous_busiest_node: busiest,
        per_window_store_calls: 0,
        cpu_ms_per_window: Spread::of(cost.cpu_ms.clone()),
        measured_nodes: nodes,
        windows: cost.windows,
        window_s: cost.window_s,
        largest_value_bytes,
        coordinator_bytes,
        rendezvous_s,
        solve_ms,
        solve_placed,
    })
}

/// About `measured` node ids spread evenly over `0..n`, and the reference.
fn measured_nodes(n: u32, measured: u32, reference: NodeId) -> Vec<NodeId> {
    let k = measured.min(n) as u64;
    let mut nodes: Vec<NodeId> = (0..k).map(|i| (i * n as u64 / k) as NodeId).chain([reference]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// What `node_window_cost` measured.
pub(super) struct WindowCost {
    /// Thread CPU per window of each measured node, ms.
    pub cpu_ms: Vec<f64>,
    pub windows: u64,
    pub window_s: f64,
}

/// The per-window work of a node inside the job (the plugin's probe thread after each
/// window close: `WindowCloser` and `NodeWindows`, the JSONL line written to a temporary
/// directory), for each node whose context is in `contexts`, over `windows` windows of the
/// simulator's reference scenario at the run's node count; thread CPU per window. The window's records are put
/// together outside the timing, as the probe engine does while probing (its cost is
/// `bench overhead`'s probing figure).
pub(super) fn node_window_cost(contexts: &[&RunContext], windows: u64) -> anyhow::Result<WindowCost> {
    let Some(first) = contexts.first() else { bail!("no node to measure") };
    let config = Config::default();
    let settings = EstimatorSettings::from_config(&config);
    let scenario = Scenario {
        nodes: first.num_nodes,
        out_degree: config.probe_out_degree,
        duration_s: config.probe_window_s * windows as f64,
        window_s: config.probe_window_s,
        ..Scenario::reference()
    };
    let c = Cluster::new(scenario).map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
    let window_ns = (c.scenario.window_s * 1e9) as i64;
    // Removed when this returns, whatever happened.
    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = TempDir(std::env::temp_dir().join(format!("distprof-bench-scale-{}-{}", std::process::id(), first.num_nodes)));
    let stamps = TimestampQuality {
        mode: StampMode::Kernel,
        stamp_error_bound_ns: StampMode::Kernel.stamp_error_bound_ns(),
        note: String::new(),
        nic_clock: None,
    };
    let purity = PurityParams::from_config(&config);
    let mut cpu_ms = Vec::with_capacity(contexts.len());
    for ctx in contexts {
        let node = ctx.node;
        let start = c.window_spec(0).start_local_ns;
        let writer = JsonlWriter::create(&dir.0, &Meta::for_node(ctx, &stamps, start, &config))?;
        let mut closer = WindowCloser::new(node, ctx.num_nodes, ctx.reference_node, settings, writer);
        let mut own = NodeWindows::new(node, settings, window_ns);
        let mut so_far = WindowsSoFar::default();
        let mut cpu_s = 0.0;
        for k in 0..c.num_windows() {
            let mut w = closed_window(&c, node, k, &purity);
            let started = thread_cpu_s();
            let fits = closer.fit(&mut w);
            so_far.add(own.closed(&w, fits));
            closer.write(&w)?;
            cpu_s += thread_cpu_s() - started;
        }
        let started = thread_cpu_s();
        so_far.add(own.finish());
        cpu_s += thread_cpu_s() - started;
        if so_far.windows != c.num_windows() || so_far.plane_fits().len() as u64 != c.num_windows() {
            bail!("node {node}: {} windows closed, {} with fits, of {}", so_far.windows, so_far.plane_fits().len(), c.num_windows());
        }
        cpu_ms.push(cpu_s * 1e3 / c.num_windows().max(1) as f64);
    }
    Ok(WindowCost { cpu_ms, windows: c.num_windows(), window_s: c.scenario.window_s })
}

/// Window `k` of `node` as its probe engine closes it: the records of its out-edges, each
/// judged pure or not by the engine's own test.
fn closed_window(c: &Cluster, node: NodeId, k: u64, purity: &PurityParams) -> ClosedWindow {
    let spec = c.window_spec(k);
    let outs = &c.graph[node as usize];
    let mut acc = WindowAccumulator::new(node, outs, spec.start_local_ns);
    for r in c.records_from(node, k) {
        if let Some(e) = outs.iter().position(|&d| d == r.dst) {
            acc.sent(e);
            acc.complete(e, r, gap_preserved(&r, purity));
        }
    }
    let mut w = acc.close(spec.end_local_ns);
    w.window_id = k;
    w
}

/// One window's network solve as merge does it, with sigma, at `n` nodes: every node's
/// own edge fits of window 0 (as its plane carries them) combined, then solved; the solve
/// alone is timed (thread CPU, ms; `distprof_sim::window_solve::time_window_solve`).
/// Returns the time and the nodes it placed.
fn solve_window_ms(n: u32) -> anyhow::Result<(f64, u32)> {
    let scenario = Scenario { nodes: n, ..Scenario::reference() };
    let t = distprof_sim::window_solve::time_window_solve(&scenario, &EstimatorSettings::default())
        .map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
    Ok((t.solve_ms, n - t.unreachable_nodes as u32))
}
