//! One standalone node (no XLA, no GPU): runs the probe engine for a duration on an agreed
//! `RunContext`, writes its JSONL file and returns a summary. Used by `distprof run` and
//! `distprof local`.

use crate::clock::{realtime_ns, VirtualClock};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::estimate::EstimatorSettings;
use crate::probe::{gap_preserved, EngineStats, PurityFn};
use crate::probe_run::{run_probing, FittedWindow, ProbeRunError, ProbeRunSetup};
use crate::timestamp::StampMode;
use crate::window::EdgeFit;
use serde::{Deserialize, Serialize};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a node waits for an agreed start time; a start further away is a mistake.
const MAX_START_WAIT: Duration = Duration::from_secs(60);

/// How one standalone node runs.
#[derive(Clone)]
pub struct NodeOptions {
    /// Applied to every timestamp the node records (tests and `distprof local`).
    pub clock: VirtualClock,
    /// How long to probe.
    pub duration: Duration,
    /// Real CLOCK_REALTIME instant at which all nodes start probing (so their windows line
    /// up); `None` starts at once.
    pub start_at_real_ns: Option<i64>,
    /// Set to stop early (e.g. on SIGTERM); checked at least every 50 ms.
    pub stop: Option<Arc<AtomicBool>>,
    pub purity: PurityFn,
}

impl NodeOptions {
    pub fn new(duration: Duration) -> Self {
        NodeOptions { clock: VirtualClock::IDENTITY, duration, start_at_real_ns: None, stop: None, purity: gap_preserved }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    #[error("run context: {0}")]
    Context(String),
    #[error("config: {0}")]
    Config(String),
    #[error("probe socket: {0}")]
    Socket(std::io::Error),
    #[error("probe output: {0}")]
    Io(std::io::Error),
}

/// Per out-edge result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeSummary {
    pub dst: NodeId,
    pub sent: u64,
    /// The edge's fit in the last window that gave it a line (the online model of the
    /// window lines, see docs/jsonl.md): theta = S_dst - S_src at `fit_mid_local_ns`.
    pub fit: Option<EdgeFit>,
    pub fit_window_id: Option<u64>,
    pub fit_mid_local_ns: Option<i64>,
    /// Smallest round trip of a complete probe (first packets), ns.
    pub min_round_trip_ns: Option<i64>,
    pub complete: u64,
    pub lost: u64,
    pub up_at_end: bool,
}

/// What a node reports when its run ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSummary {
    pub node: NodeId,
    pub timestamp_mode: StampMode,
    pub jsonl_path: PathBuf,
    pub start_local_ns: i64,
    pub end_local_ns: i64,
    pub stats: EngineStats,
    pub edges: Vec<EdgeSummary>,
    /// The estimator of the per-edge fits.
    pub estimator: crate::config::EstimatorKind,
}

fn check(ctx: &RunContext, node: NodeId, config: &Config) -> Result<(), StandaloneError> {
    let n = ctx.num_nodes as usize;
    if node as usize >= n {
        return Err(StandaloneError::Context(format!("node {node} is not in a run of {n} nodes; use a node id below {n}")));
    }
    if ctx.nodes.len() != n || ctx.out_edges.len() != n {
        return Err(StandaloneError::Context(format!(
            "run context lists {} nodes and {} edge lists for num_nodes = {n}",
            ctx.nodes.len(),
            ctx.out_edges.len()
        )));
    }
    for (i, info) in ctx.nodes.iter().enumerate() {
        if info.node as usize != i {
            return Err(StandaloneError::Context(format!("nodes[{i}] has id {}, expected {i}", info.node)));
        }
    }
    for (i, peers) in ctx.out_edges.iter().enumerate() {
        if let Some(p) = peers.iter().find(|&&p| p as usize >= n || p as usize == i) {
            return Err(StandaloneError::Context(format!("out_edges[{i}] contains {p}, not a peer of node {i}")));
        }
    }
    if config.probe_cadence_us == 0 {
        return Err(StandaloneError::Config("probe_cadence_us = 0; set it to the probe interval, e.g. 20000".into()));
    }
    if config.packet_spacing_us.saturating_mul(4) > config.probe_cadence_us {
        return Err(StandaloneError::Config(format!(
            "packet_spacing_us = {} leaves no room in probe_cadence_us = {}; keep the pair gap under a quarter of the cadence",
            config.packet_spacing_us, config.probe_cadence_us
        )));
    }
    if !(config.probe_window_s.is_finite() && config.probe_window_s >= 0.1) {
        return Err(StandaloneError::Config(format!(
            "probe_window_s = {}; use a window of at least 0.1 s, e.g. 4",
            config.probe_window_s
        )));
    }
    if config.handshake_timeout_ms < 20 {
        return Err(StandaloneError::Config(format!(
            "handshake_timeout_ms = {}; use at least 20 ms",
            config.handshake_timeout_ms
        )));
    }
    Ok(())
}

/// Runs node `node` of `ctx` on `socket` (already bound to `ctx.nodes[node].probe_addr`
/// or to the address the peers reach through a relay) for `opts.duration`.
pub fn run_node(
    ctx: &RunContext,
    node: NodeId,
    socket: UdpSocket,
    config: &Config,
    opts: &NodeOptions,
) -> Result<NodeSummary, StandaloneError> {
    check(ctx, node, config)?;
    let peers = &ctx.out_edges[node as usize];
    if let Some(start) = opts.start_at_real_ns {
        let wait_ns = start - realtime_ns();
        if wait_ns > MAX_START_WAIT.as_nanos() as i64 {
            return Err(StandaloneError::Context(format!(
                "start time is {} s away (over {} s); check the clocks or the start time",
                wait_ns / 1_000_000_000,
                MAX_START_WAIT.as_secs()
            )));
        }
        if wait_ns > 0 {
            std::thread::sleep(Duration::from_nanos(wait_ns as u64));
        }
    }
    let start_local_ns = opts.clock.apply(realtime_ns());
    let setup = ProbeRunSetup { ctx, node, config, clock: opts.clock, purity: opts.purity, start_local_ns };
    let never = AtomicBool::new(false);
    let stop = opts.stop.as_deref().unwrap_or(&never);
    let mut up_at_end = vec![true; peers.len()];
    let mut totals = vec![(0u64, 0u64); peers.len()];
    let mut min_round_trip: Vec<Option<i64>> = vec![None; peers.len()];
    let mut last_fit: Vec<Option<(u64, i64, EdgeFit)>> = vec![None; peers.len()];
    let settings = EstimatorSettings::from_config(config);
    let outcome = run_probing(
        setup,
        socket,
        Instant::now() + opts.duration,
        stop,
        &mut |mode| tracing::info!(node, ?mode, peers = ?peers, "probing for {:?}", opts.duration),
        &mut |FittedWindow { window: w, .. }| {
            for (i, e) in w.edges.iter().enumerate() {
                up_at_end[i] = e.up;
                totals[i].0 += e.complete;
                totals[i].1 += e.lost;
            }
            for r in &w.records {
                if let Some(i) = peers.iter().position(|&p| p == r.dst) {
                    let rtt = r.round_trip_ns();
                    min_round_trip[i] = Some(min_round_trip[i].map_or(rtt, |m| m.min(rtt)));
                }
            }
            // The online model: this node's edge fits, in the window line itself.
            if let Some(m) = &w.model {
                for f in &m.edges {
                    if let (Some(i), Some(_)) = (peers.iter().position(|&p| p == f.dst), f.theta_ns) {
                        last_fit[i] = Some((w.window_id, m.mid_local_ns, f.clone()));
                    }
                }
            }
        },
    )
    .map_err(|e| match e {
        ProbeRunError::Socket(e) => StandaloneError::Socket(e),
        ProbeRunError::Output(e) | ProbeRunError::Engine(e) => StandaloneError::Io(e),
    })?;
    let (mode, stats) = (outcome.mode, outcome.stats);
    let end_local_ns = opts.clock.apply(realtime_ns());
    let edges = peers
        .iter()
        .enumerate()
        .map(|(i, &dst)| EdgeSummary {
            dst,
            sent: stats.per_edge_sent.get(i).map_or(0, |s| s.1),
            fit_window_id: last_fit[i].as_ref().map(|f| f.0),
            fit_mid_local_ns: last_fit[i].as_ref().map(|f| f.1),
            fit: last_fit[i].take().map(|f| f.2),
            min_round_trip_ns: min_round_trip[i],
            complete: totals[i].0,
            lost: totals[i].1,
            up_at_end: up_at_end[i],
        })
        .collect();
    Ok(NodeSummary {
        node,
        timestamp_mode: mode,
        jsonl_path: outcome.jsonl_path,
        start_local_ns,
        end_local_ns,
        stats,
        edges,
        estimator: settings.estimator,
    })
}
