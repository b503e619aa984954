//! One node's probing run on an agreed run context: the timestamped socket, the probe
//! engine, the JSONL file, and at every window close one fit of the node's records (kept in
//! the window line as its online model, then handed to the caller). Shared by the two ways
//! a node runs: a standalone node (`standalone::run_node`: `distprof run` and `distprof
//! local`) and a node inside XLA (the plugin's probe thread, `plugin/trace.rs`).

use crate::clock::VirtualClock;
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::estimate::node_edges::NodeEdgeEstimator;
use crate::estimate::{fit_window, EstimatorSettings, WindowFits, WindowSpec};
use crate::jsonl::{JsonlWriter, Meta};
use crate::probe::{Engine, EngineParams, EngineStats, PurityFn};
use crate::nic_clock::SimulatedNicClock;
use crate::timestamp::{StampMode, StampedSocket, TimestampQuality};
use crate::window::ClosedWindow;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// What a probing run needs besides its socket.
#[derive(Clone, Copy)]
pub struct ProbeRunSetup<'a> {
    pub ctx: &'a RunContext,
    pub node: NodeId,
    pub config: &'a Config,
    /// Applied to every timestamp the node records (identity inside XLA).
    pub clock: VirtualClock,
    pub purity: PurityFn,
    /// The run's start in the node's clock, written to the JSONL meta line.
    pub start_local_ns: i64,
    /// Tests and `distprof local`: hardware stamps from this simulated NIC clock instead of
    /// the configured `timestamping` (`None` everywhere else, the plugin included).
    pub simulated_nic: Option<SimulatedNicClock>,
}

/// Why a probing run could not start or ended early.
#[derive(Debug, thiserror::Error)]
pub enum ProbeRunError {
    #[error("probe socket: {0}")]
    Socket(std::io::Error),
    #[error("probe output: {0}")]
    Output(std::io::Error),
    #[error("probe engine: {0}")]
    Engine(std::io::Error),
}

/// One closed window as the caller sees it: the line as written (with this node's online
/// model), and the fit of its records, computed once for every use.
pub struct FittedWindow<'a> {
    pub window: &'a ClosedWindow,
    pub fits: WindowFits,
}

/// What a finished run hands back.
#[derive(Debug)]
pub struct ProbeRunOutcome {
    pub mode: StampMode,
    /// The timestamping over the whole run: mode, worst stamp error, NIC clock mapping.
    pub timestamps: TimestampQuality,
    pub jsonl_path: PathBuf,
    pub stats: EngineStats,
}

/// Runs the engine for `run_for` (counted from when it starts, after the socket and the
/// file are set up) or until `stop`, writing every closed window to the node's
/// JSONL file in `config.output_dir`. `on_started` learns the timestamping once the
/// socket is set up; `on_window` gets each closed window just before its line is written.
pub fn run_probing(
    setup: ProbeRunSetup<'_>,
    socket: UdpSocket,
    run_for: Duration,
    stop: &AtomicBool,
    on_started: &mut dyn FnMut(&TimestampQuality),
    on_window: &mut dyn FnMut(FittedWindow<'_>),
) -> Result<ProbeRunOutcome, ProbeRunError> {
    let ProbeRunSetup { ctx, node, config, clock, purity, start_local_ns, simulated_nic } = setup;
    let sock = match simulated_nic {
        Some(nic) => StampedSocket::with_simulated_nic(socket, nic),
        None => StampedSocket::new(socket, config.timestamping),
    }
    .map_err(ProbeRunError::Socket)?;
    let mode = sock.mode();
    let mut timestamps = sock.quality();
    on_started(&timestamps);
    let meta = Meta {
        virtual_clock: (clock != VirtualClock::IDENTITY).then_some(clock),
        ..Meta::for_node(ctx, node, &timestamps, start_local_ns, config)
    };
    let writer = JsonlWriter::create(Path::new(&config.output_dir), &meta).map_err(ProbeRunError::Output)?;
    let params = EngineParams::for_node(ctx, node, config, clock, purity);
    let mut closer = WindowCloser::new(node, ctx.num_nodes, ctx.reference_node, EstimatorSettings::from_config(config), writer);
    let stats = Engine::new(params, sock)
        .run(Instant::now() + run_for, stop, &mut |mut w: ClosedWindow| {
            timestamps.absorb_window(w.nic_clock.as_ref());
            let fits = closer.fit(&mut w);
            on_window(FittedWindow { window: &w, fits });
            closer.write(&w)
        })
        .map_err(ProbeRunError::Engine)?;
    Ok(ProbeRunOutcome { mode, timestamps, jsonl_path: closer.path().to_path_buf(), stats })
}

/// What a node does with each window its engine closes, whatever runs it (the plugin's
/// probe thread, `distprof run`, `distprof bench scale`): fit the window's records once, put
/// the node's own edge model into the window's line and write the line. It knows the node
/// count and the reference, never another node's data: its cost is the node's own edges.
pub struct WindowCloser {
    node: NodeId,
    num_nodes: u32,
    reference: NodeId,
    settings: EstimatorSettings,
    own_edges: NodeEdgeEstimator,
    writer: JsonlWriter,
}

impl WindowCloser {
    pub fn new(node: NodeId, num_nodes: u32, reference: NodeId, settings: EstimatorSettings, writer: JsonlWriter) -> Self {
        Self { node, num_nodes, reference, settings, own_edges: NodeEdgeEstimator::new(node, num_nodes, settings), writer }
    }

    /// Fits `w`'s records (the node's own out-edges) and sets the line's online model;
    /// returns the fits, computed once for every use.
    pub fn fit(&mut self, w: &mut ClosedWindow) -> WindowFits {
        let spec = WindowSpec {
            window_id: w.window_id,
            start_local_ns: w.start_local_ns,
            end_local_ns: w.end_local_ns,
            num_nodes: self.num_nodes,
            reference: self.reference,
        };
        debug_assert!(w.node == self.node, "window of node {} closed by node {}'s closer", w.node, self.node);
        let fits = fit_window(&w.records, &spec, &self.settings);
        w.model = Some(self.own_edges.window_fitted(w, fits.clone()));
        fits
    }

    /// Appends `w`'s line to the JSONL file, flushed: a crash loses at most the open window.
    pub fn write(&mut self, w: &ClosedWindow) -> std::io::Result<()> {
        self.writer.write_window(w)
    }

    pub fn path(&self) -> &Path {
        self.writer.path()
    }
}
