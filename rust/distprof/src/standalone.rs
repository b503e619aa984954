//! One standalone node (no XLA, no GPU): runs the probe engine for a duration on an agreed
//! `RunContext`, writes its JSONL file and returns a summary. Used by `distprof run` and
//! `distprof local`.

use crate::clock::{realtime_ns, VirtualClock};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::estimate::EstimatorSettings;
use crate::probe::{gap_preserved, EngineStats, PurityFn};
use crate::probe_run::{run_probing, FittedWindow, ProbeRunError, ProbeRunSetup};
use crate::nic_clock::SimulatedNicClock;
use crate::timestamp::{StampMode, TimestampQuality};
use crate::window::EdgeFit;
use serde::{Deserialize, Serialize};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

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
    /// Hardware stamps from a simulated NIC clock (tests, `distprof local --nic-clock`).
    pub simulated_nic: Option<SimulatedNicClock>,
}

impl NodeOptions {
    pub fn new(duration: Duration) -> Self {
        NodeOptions {
            clock: VirtualClock::IDENTITY,
            duration,
            start_at_real_ns: None,
            stop: None,
            purity: gap_preserved,
            simulated_nic: None,
        }
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
    /// The timestamping over the run: worst stamp error, note, NIC clock mapping (absent in
    /// summaries written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamps: Option<TimestampQuality>,
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
    if ctx.node != node {
        return Err(StandaloneError::Context(format!(
            "the run context is node {}'s, not node {node}'s; give node {node} its own context",
            ctx.node
        )));
    }
    if let Some(p) = ctx.out_edges.iter().chain(&ctx.in_edges).find(|&&p| p as usize >= n || p == node || ctx.info(p).is_none()) {
        return Err(StandaloneError::Context(format!(
            "node {node}'s context has an edge with {p}, which is not a peer with an address in its `nodes` (ids below {n})"
        )));
    }
    if !ctx.nodes.windows(2).all(|w| w[0].node < w[1].node) || ctx.me().is_none() {
        return Err(StandaloneError::Context(format!(
            "node {node}'s context must list its `nodes` by ascending id, itself included"
        )));
    }
    // The one validation every entry point shares (`distprof config check`, `run`, the
    // plugin): a config that loads is a config that runs.
    crate::config::validate_config(config).map_err(|errors| StandaloneError::Config(errors.one_line()))?;
    Ok(())
}

/// Runs node `node` of `ctx` on `socket` (already bound to its address in `ctx.nodes`
/// or to the address the peers reach through a relay) for `opts.duration`.
pub fn run_node(
    ctx: &RunContext,
    node: NodeId,
    socket: UdpSocket,
    config: &Config,
    opts: &NodeOptions,
) -> Result<NodeSummary, StandaloneError> {
    check(ctx, node, config)?;
    let peers = &ctx.out_edges;
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
    let setup = ProbeRunSetup {
        ctx,
        config,
        clock: opts.clock,
        purity: opts.purity,
        start_local_ns,
        simulated_nic: opts.simulated_nic,
    };
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
        opts.duration,
        stop,
        &mut |stamps| tracing::info!(node, peers = ?peers, "probing for {:?}; timestamps: {}", opts.duration, stamps.describe()),
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
    let (mode, stats, timestamps) = (outcome.mode, outcome.stats, outcome.timestamps);
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
        timestamps: Some(timestamps),
        jsonl_path: outcome.jsonl_path,
        start_local_ns,
        end_local_ns,
        stats,
        edges,
        estimator: settings.estimator,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, fields};
    use crate::context::NodeInfo;
    use std::path::{Path, PathBuf};

    fn one_node() -> RunContext {
        RunContext::without_rendezvous(
            "agree",
            1,
            &[NodeInfo { node: 0, probe_addr: "127.0.0.1:9".parse().unwrap(), hostname: "h".into() }],
            &[vec![]],
        )
        .remove(0)
    }

    /// The configs to judge: every preset, and a grid over the fields of the combination
    /// rules around their edges (spacing at and past a quarter of the cadence, the
    /// handshake at the old 20 ms rule and at two cadences, windows at 20 probes).
    fn configs() -> Vec<(String, Config)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/configs");
        let mut out: Vec<(String, Config)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| (p.display().to_string(), config::check_file(&p).unwrap()))
            .collect();
        assert_eq!(out.len(), 4, "the four presets");
        for cadence in [1_000u64, 4_000, 40_000, 750_000, 1_000_000] {
            for spacing in [1u64, 250, 251, 1_000, 10_000, 10_001, 39_999, 40_000] {
                for handshake in [10u64, 19, 20, 80, 2_000, 600_001] {
                    for window in [0.1f64, 0.5, 15.0] {
                        let c = Config {
                            probe_cadence_us: cadence,
                            packet_spacing_us: spacing,
                            handshake_timeout_ms: handshake,
                            probe_window_s: window,
                            ..Config::default()
                        };
                        out.push((format!("cadence {cadence} spacing {spacing} handshake {handshake} window {window}"), c));
                    }
                }
            }
        }
        out
    }

    /// The config as the environment variables the plugin and `distprof run` read.
    fn as_env(c: &Config) -> std::collections::HashMap<String, String> {
        c.to_json_map()
            .into_iter()
            .map(|(name, value)| {
                let var = fields::by_name(&name).unwrap().env.to_string();
                let text = match value {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                (var, text)
            })
            .collect()
    }

    /// One validation: `distprof config check` (a file), `distprof run` and the plugin (the
    /// environment), code-built configs and the standalone node all accept exactly the same
    /// configurations.
    #[test]
    fn every_entry_point_accepts_exactly_the_same_configs() {
        let ctx = one_node();
        let (mut accepted, mut refused) = (0, 0);
        for (name, c) in configs() {
            let file = config::check_text(&PathBuf::from("f.json"), &serde_json::to_string(&c).unwrap()).is_ok();
            let env = as_env(&c);
            let environment = config::load(&|var| env.get(var).cloned()).is_ok();
            let built = config::validate_config(&c).is_ok();
            let node = check(&ctx, 0, &c).is_ok();
            assert_eq!([file, environment, built], [node; 3], "{name}: file, environment, built vs node");
            if node {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        // The grid straddles the rules: both outcomes occur often.
        assert!(accepted > 100 && refused > 100, "{accepted} accepted, {refused} refused");
    }
}
