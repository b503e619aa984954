//! One standalone node (no XLA, no GPU): runs the probe engine for a duration on an agreed
//! `RunContext`, writes its JSONL file and returns a summary. Used by `distprof run` and
//! `distprof local`.

use crate::clock::{realtime_ns, VirtualClock};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::jsonl::{JsonlWriter, Meta, FORMAT_VERSION};
use crate::min_rtt;
use crate::probe::{gap_preserved, Engine, EngineParams, EngineStats, PurityFn, PurityParams};
use crate::timestamp::{StampMode, StampedSocket};
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
    /// Offset of `dst` from this node by the `min_rtt` stand-in estimator, at the end of
    /// the run, in this node's clock; absent without a complete probe.
    pub min_rtt_offset_ns: Option<f64>,
    pub min_rtt_drift_ppb: Option<f64>,
    pub min_rtt_ns: Option<i64>,
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
    /// Name of the estimator that filled the offsets.
    pub estimator: String,
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
    let sock = StampedSocket::new(socket, config.timestamping).map_err(StandaloneError::Socket)?;
    let mode = sock.mode();
    let timestamp_note = sock.hardware_note.clone();
    let peers = &ctx.out_edges[node as usize];
    let params = EngineParams {
        node,
        session_token: ctx.session_token,
        out_edges: peers.iter().map(|&p| (p, ctx.nodes[p as usize].probe_addr)).collect(),
        addrs: ctx.nodes.iter().map(|n| n.probe_addr).collect(),
        expected_probers: (0..ctx.num_nodes).map(|i| ctx.out_edges[i as usize].contains(&node)).collect(),
        cadence: Duration::from_micros(config.probe_cadence_us),
        pair_gap: Duration::from_micros(config.packet_spacing_us),
        window: Duration::from_secs_f64(config.probe_window_s),
        down_after: Duration::from_millis(config.handshake_timeout_ms),
        clock: opts.clock,
        purity: opts.purity,
        purity_params: PurityParams::from_config(config),
    };
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
    let meta = Meta {
        meta: true,
        format_version: FORMAT_VERSION,
        node,
        session_id: ctx.session_id.clone(),
        session_token: ctx.session_token,
        reference_node: ctx.reference_node,
        timestamp_mode: mode,
        stamp_error_bound_ns: mode.stamp_error_bound_ns(),
        timestamp_note,
        virtual_clock: (opts.clock != VirtualClock::IDENTITY).then_some(opts.clock),
        out_edges: peers.clone(),
        start_local_ns,
        config: config.clone(),
    };
    let mut writer = JsonlWriter::create(std::path::Path::new(&config.output_dir), &meta).map_err(StandaloneError::Io)?;
    tracing::info!(node, ?mode, peers = ?peers, "probing for {:?}", opts.duration);
    let engine = Engine::new(params, sock);
    let never = AtomicBool::new(false);
    let stop = opts.stop.as_deref().unwrap_or(&never);
    let mut records: Vec<Vec<crate::record::ProbeRecord>> = vec![Vec::new(); peers.len()];
    let mut up_at_end = vec![true; peers.len()];
    let mut totals = vec![(0u64, 0u64); peers.len()];
    let stats = engine
        .run(Instant::now() + opts.duration, stop, &mut writer, &mut |w| {
            for (i, e) in w.edges.iter().enumerate() {
                up_at_end[i] = e.up;
                totals[i].0 += e.complete;
                totals[i].1 += e.lost;
            }
            for r in &w.records {
                if let Some(i) = peers.iter().position(|&p| p == r.dst) {
                    records[i].push(*r);
                }
            }
        })
        .map_err(StandaloneError::Io)?;
    let end_local_ns = opts.clock.apply(realtime_ns());
    let edges = peers
        .iter()
        .enumerate()
        .map(|(i, &dst)| {
            let fit = min_rtt::fit_edge(&records[i], min_rtt::BUCKET_NS);
            EdgeSummary {
                dst,
                sent: stats.per_edge_sent.get(i).map_or(0, |s| s.1),
                min_rtt_offset_ns: fit.map(|f| f.offset_at(end_local_ns)),
                min_rtt_drift_ppb: fit.map(|f| f.drift_ppb),
                min_rtt_ns: fit.map(|f| f.min_rtt_ns),
                complete: totals[i].0,
                lost: totals[i].1,
                up_at_end: up_at_end[i],
            }
        })
        .collect();
    Ok(NodeSummary {
        node,
        timestamp_mode: mode,
        jsonl_path: writer.path().to_path_buf(),
        start_local_ns,
        end_local_ns,
        stats,
        edges,
        estimator: min_rtt::NAME.to_string(),
    })
}
