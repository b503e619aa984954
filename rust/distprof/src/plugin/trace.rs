//! One profiling session inside XLA (hook 2): trace start launches the probe engine of
//! every node whose rendezvous has finished and the snapshot sampler; trace stop tells them
//! to stop; export turns what they have so far into the distprof plane.
//!
//! Nothing here waits on XLA's thread: start spawns threads, stop sets a flag and takes one
//! last snapshot pair, export copies shared state. The probe threads notice the flag within
//! the engine's poll interval, close the last window, write it to the JSONL file, fit, and
//! write the node's model file; the sampler thread ends at once.
//!
//! **A node whose rendezvous has not finished at trace start does not probe in this trace**
//! (one log line per trace names it): starting it later would give a trace whose probe
//! windows cover only part of the profile, and waiting would block XLA. Its plane still
//! carries the snapshot pairs. The next trace probes once the node has agreed.
//!
//! **What export sees.** XLA exports right after stop, before the probe threads have closed
//! their last (partial) window. The plane therefore holds the model and probe statistics of
//! every window closed before export; the last window is in the JSONL file, from which
//! `distprof merge --run-dir` solves the network offline.
//!
//! **Whose model.** Each node keeps only what its own edges give (`node_windows`): its
//! edge fits per window, which the plane carries for `distprof merge` to solve the whole
//! network from every trace, and its own model from those edges alone, which places it
//! only in windows where it probes the reference. Nothing is shared between nodes after
//! the rendezvous (docs/architecture.md, "Scale"). The model file
//! (`distprof-model-node<N>.json`) holds that own model and says so (`model_scope`); it is
//! for people and scripts: no command reads it (`--models` takes a JSON array of every
//! node's model).
//!
//! **Several traces in one process** write to separate directories ([`trace_output_dir`]):
//! the first that probes into `output_dir`, the next into `output_dir/trace1/`, and so on.

use super::node::{NodeSession, NodeState};
use super::{OnFailure, PluginError, TracerClock};
use crate::clock::{realtime_ns, VirtualClock};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::distprof_plane::{DistprofPlaneData, TracerStart};
use crate::model::NodeClockModel;
use super::node_windows::{NodeWindows, WindowsSoFar};
use crate::estimate::EstimatorSettings;
use crate::probe::gap_preserved;
use crate::probe_run::{run_probing, FittedWindow, ProbeRunError, ProbeRunSetup};
use crate::snapshot::{sample_pair, SnapshotPair};
use crate::timestamp::TimestampQuality;
use crate::xplane::XSpace;
use prost::Message;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bracketed reads per snapshot pair (the narrowest wins).
const SNAPSHOT_BEST_OF: u32 = 5;

/// A profile longer than this stops probing on its own: a forgotten trace must not probe
/// for the rest of the job.
const MAX_TRACE: Duration = Duration::from_secs(24 * 3600);

/// The tracer clock of this trace, shared by the hook thread and the sampler thread.
type SharedTracer = Arc<Mutex<Option<Box<dyn TracerClock>>>>;

fn read_tracer(tracer: &SharedTracer) -> u64 {
    match tracer.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        Some(clock) => clock.now_ns(),
        // No reader from XLA: the tracer clock is the host clock (R = S).
        None => realtime_ns() as u64,
    }
}

fn snapshot(tracer: &SharedTracer) -> SnapshotPair {
    sample_pair(SNAPSHOT_BEST_OF, &realtime_ns, &|| read_tracer(tracer))
}

/// What a node's probe thread has produced so far.
#[derive(Debug, Default)]
struct Progress {
    timestamp_mode: Option<String>,
    /// The timestamping so far (mode, worst stamp error, NIC clock mapping), for the plane.
    timestamps: Option<TimestampQuality>,
    /// Probe statistics, edge fits and the node's own model so far (`node_windows`).
    windows: WindowsSoFar,
    finished: bool,
}

struct ProbeRun {
    node: NodeId,
    context: Arc<RunContext>,
    progress: Arc<Mutex<Progress>>,
    thread: JoinHandle<()>,
}

pub struct TraceSession {
    stop: Arc<AtomicBool>,
    tracer: SharedTracer,
    tracer_clock_name: &'static str,
    tracer_start: TracerStart,
    snapshots: Arc<Mutex<Vec<SnapshotPair>>>,
    sampler: JoinHandle<()>,
    probes: Vec<ProbeRun>,
    stopped: bool,
    /// 0 for the first trace of the process that probes, then 1, 2, ...: see
    /// [`trace_output_dir`].
    index: u32,
}

/// Where trace `index` writes its JSONL and model files (traces that probed nothing are
/// not counted): the first trace into
/// `output_dir` itself, trace k >= 1 into `output_dir/trace<k>/`, so that a second profile
/// in the same process does not overwrite the first one's files and every directory holds
/// one run for `distprof report/merge --run-dir`.
pub fn trace_output_dir(output_dir: &str, index: u32) -> String {
    if index == 0 {
        output_dir.to_string()
    } else {
        Path::new(output_dir).join(format!("trace{index}")).to_string_lossy().into_owned()
    }
}

impl TraceSession {
    /// Starts sampling and the probe engine of every agreed node; returns at once.
    /// `collector_pair` is the (host, tracer) pair XLA's device collector normalised its
    /// planes with (hook 3): recorded as the trace's start pair, so `distprof merge` undoes
    /// XLA's own mapping exactly. Without it (or without a tracer clock, when the snapshot
    /// pairs are host against host) the first snapshot pair stands in, which is off by the
    /// time between XLA's two reads and this one.
    pub fn start(
        config: &Config,
        nodes: &[NodeSession],
        previous: Option<&TraceSession>,
        tracer_clock: Option<Box<dyn TracerClock>>,
        collector_pair: Option<TracerStart>,
        on_failure: &OnFailure,
    ) -> Result<Self, PluginError> {
        let tracer_clock_name = if tracer_clock.is_some() {
            "rocm"
        } else {
            "host"
        };
        // A trace that probed nothing (every node still pending) wrote no files: the next
        // one may use its directory.
        let index = previous.map_or(0, |p| if p.probes.is_empty() { p.index } else { p.index.saturating_add(1) });
        let tracer: SharedTracer = Arc::new(Mutex::new(tracer_clock));
        let first = snapshot(&tracer);
        // The pair is in the tracer clock XLA's collector reads; with no tracer clock given,
        // the snapshot pairs are host against host and the pair would not match them.
        let collector_pair = collector_pair.filter(|_| tracer_clock_name == "rocm");
        let tracer_start = collector_pair.unwrap_or(TracerStart {
            s_ns: first.s_ns,
            r_ns: first.r_ns,
        });
        let snapshots = Arc::new(Mutex::new(vec![first]));
        let stop = Arc::new(AtomicBool::new(false));

        let sampler = {
            let (stop, tracer, snapshots) = (
                Arc::clone(&stop),
                Arc::clone(&tracer),
                Arc::clone(&snapshots),
            );
            let period = Duration::from_millis(config.snapshot_period_ms.max(1));
            let on_failure = Arc::clone(on_failure);
            std::thread::Builder::new()
                .name("distprof-snapshot".into())
                .spawn(move || {
                    super::mark_thread_panics_reported();
                    // The tracer clock is the host's code: a panic (or a bug of ours) here
                    // turns the plugin off with one line instead of ending the sampling
                    // silently.
                    let sampled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
                        std::thread::park_timeout(period);
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        let pair = snapshot(&tracer);
                        snapshots
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(pair);
                    }));
                    if let Err(panic) = sampled {
                        on_failure(
                            "snapshot sampler",
                            &format!(
                                "internal error: the snapshot thread panicked: {}",
                                super::panic_message(panic.as_ref())
                            ),
                        );
                    }
                })
                .map_err(|e| PluginError::new(format!("cannot start the snapshot thread: {e}")))?
        };

        let mut probes = Vec::new();
        let mut waiting = Vec::new();
        for n in nodes {
            let NodeState::Agreed { context, .. } = n.state() else {
                waiting.push(n.node);
                continue;
            };
            // The previous trace's engine may still be draining on the same socket.
            if previous.is_some_and(|p| {
                p.probes
                    .iter()
                    .any(|r| r.node == n.node && !r.thread.is_finished())
            }) {
                tracing::warn!(
                    "distprof: node {}'s probe engine from the previous trace is still finishing; \
                     this trace has no probes for it",
                    n.node
                );
                continue;
            }
            let socket = match n.probe_socket() {
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    return Err(PluginError::new(format!(
                        "cannot duplicate node {}'s probe socket: {e}",
                        n.node
                    )))
                }
                None => {
                    return Err(PluginError::new(format!(
                        "node {} agreed but holds no probe socket",
                        n.node
                    )))
                }
            };
            let progress = Arc::new(Mutex::new(Progress::default()));
            let thread = {
                let (config, context, stop, progress) = (
                    Config { output_dir: trace_output_dir(&config.output_dir, index), ..config.clone() },
                    Arc::clone(&context),
                    Arc::clone(&stop),
                    Arc::clone(&progress),
                );
                let on_failure = Arc::clone(on_failure);
                let node = n.node;
                std::thread::Builder::new()
                    .name(format!("distprof-probe-{node}"))
                    .spawn(move || {
                        super::mark_thread_panics_reported();
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            probe(node, &context, socket, &config, &stop, &progress)
                        }))
                        .unwrap_or_else(|panic| {
                            Err(format!(
                                "internal error: the probe thread panicked: {}",
                                super::panic_message(panic.as_ref())
                            ))
                        });
                        progress.lock().unwrap_or_else(|p| p.into_inner()).finished = true;
                        if let Err(reason) = result {
                            on_failure(&format!("probe engine of node {node}"), &reason);
                        }
                    })
                    .map_err(|e| {
                        PluginError::new(format!(
                            "cannot start the probe thread of node {node}: {e}"
                        ))
                    })?
            };
            probes.push(ProbeRun {
                node: n.node,
                context,
                progress,
                thread,
            });
        }
        if !waiting.is_empty() {
            tracing::warn!(
                "distprof: trace started before the rendezvous of node(s) {waiting:?} finished; \
                 this trace carries their snapshot pairs but no probes (the next trace probes once they agree)"
            );
        }
        Ok(Self {
            stop,
            tracer,
            tracer_clock_name,
            tracer_start,
            snapshots,
            sampler,
            probes,
            stopped: false,
            index,
        })
    }

    /// Tells every thread of this trace to stop and takes the last snapshot pair, so the
    /// R -> S fit covers the profile's end. Never waits.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.stop.store(true, Ordering::Release);
        self.sampler.thread().unpark();
        let last = snapshot(&self.tracer);
        self.snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(last);
    }

    /// The distprof plane of every node in `nodes`, as a serialized `XSpace` holding only
    /// those planes.
    pub fn export(&self, config: &Config, nodes: &[NodeSession]) -> Vec<u8> {
        let snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let hostname = crate::rendezvous::address::hostname();
        let mut space = XSpace::default();
        for n in nodes {
            let run = self.probes.iter().find(|r| r.node == n.node);
            let reference_node = run.map_or(config.reference_node, |r| r.context.reference_node);
            let (timestamp_mode, timestamps, model, probe_stats, edge_fits) = match run {
                Some(r) => {
                    let p = r.progress.lock().unwrap_or_else(|p| p.into_inner());
                    (
                        p.timestamp_mode
                            .clone()
                            .unwrap_or_else(|| "starting".into()),
                        p.timestamps.clone(),
                        p.windows.model(n.node, reference_node),
                        p.windows.probe_stats.clone(),
                        p.windows.plane_fits(),
                    )
                }
                None => (
                    "none".to_string(),
                    None,
                    NodeClockModel { node: n.node, reachable: n.node == reference_node, segments: Vec::new() },
                    Vec::new(),
                    Vec::new(),
                ),
            };
            let session_id = match n.state() {
                NodeState::Agreed { context, .. } => context.session_id.clone(),
                _ => String::new(),
            };
            let data = DistprofPlaneData {
                session_id,
                node: n.node,
                reference_node,
                hostname: hostname.clone(),
                timestamp_mode,
                timestamps,
                tracer_clock: self.tracer_clock_name.to_string(),
                tracer_start: Some(self.tracer_start),
                model,
                snapshots: snapshots.clone(),
                probe_stats,
                edge_fits,
            };
            space.planes.push(data.to_xplane());
        }
        encode_space(&space)
    }

    /// True once every probe thread of this trace has ended (after [`TraceSession::stop`]:
    /// last window closed, fitted and written).
    pub fn probes_finished(&self) -> bool {
        self.probes.iter().all(|r| r.thread.is_finished())
    }

    /// Windows closed so far by node `node`'s engine (tests and diagnostics).
    pub fn windows_closed(&self, node: NodeId) -> Option<u64> {
        let r = self.probes.iter().find(|r| r.node == node)?;
        let p = r.progress.lock().unwrap_or_else(|p| p.into_inner());
        Some(p.windows.windows)
    }
}

impl Drop for TraceSession {
    /// The plugin turned off or a new trace replaced this one: stop the threads (they end
    /// on their own; nobody waits for them).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.sampler.thread().unpark();
    }
}

fn encode_space(space: &XSpace) -> Vec<u8> {
    space.encode_to_vec()
}

/// The planes of an exported `XSpace` (tests).
#[cfg(test)]
pub fn decode_planes(bytes: &[u8]) -> Result<Vec<crate::xplane::XPlane>, prost::DecodeError> {
    Ok(XSpace::decode(bytes)?.planes)
}

/// Path of the model file the probe thread writes when it ends.
pub fn model_path(dir: &Path, node: NodeId) -> PathBuf {
    dir.join(format!("distprof-model-node{node}.json"))
}

/// What the model file says of its model: solved from this node's own out-edges only.
pub const MODEL_SCOPE: &str = "own_edges";
/// Where the model file sends a reader for every node's model against the reference.
pub const NETWORK_MODEL_FROM: &str =
    "distprof merge solves every node against the reference from all traces' distprof planes (or --run-dir from the JSONL files)";

/// The probe thread: the engine on the agreed context until `stop`, each closed window
/// fitted and written to the JSONL file at once (`WindowCloser`), then made final and
/// solved over the node's own edges (`NodeWindows`); the model file is written when
/// probing stops. Nothing here reads or writes the key-value store.
fn probe(
    node: NodeId,
    ctx: &RunContext,
    socket: UdpSocket,
    config: &Config,
    stop: &AtomicBool,
    progress: &Mutex<Progress>,
) -> Result<(), String> {
    let setup = ProbeRunSetup {
        ctx,
        node,
        config,
        clock: VirtualClock::IDENTITY,
        purity: gap_preserved,
        start_local_ns: realtime_ns(),
        simulated_nic: None,
    };
    let mut own = NodeWindows::new(node, EstimatorSettings::from_config(config), (config.probe_window_s * 1e9) as i64);
    let mut mode_name = String::new();
    let ran = run_probing(
        setup,
        socket,
        MAX_TRACE,
        stop,
        &mut |stamps| {
            mode_name = serde_json::to_value(stamps.mode)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
            p.timestamp_mode = Some(mode_name.clone());
            p.timestamps = Some(stamps.clone());
        },
        &mut |FittedWindow { window: w, fits }| {
            // The work outside the lock: export must never wait for a solve.
            let closed = own.closed(w, fits);
            let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = &mut p.timestamps {
                t.absorb_window(w.nic_clock.as_ref());
            }
            p.windows.add(closed);
        },
    );
    let closed = own.finish();
    let (windows, model) = {
        let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
        p.windows.add(closed);
        (p.windows.windows, p.windows.model(node, ctx.reference_node))
    };
    let dir = PathBuf::from(&config.output_dir);
    let timestamps = match ran {
        Ok(outcome) => outcome.timestamps,
        Err(e @ ProbeRunError::Output(_)) => return Err(format!("{e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory")),
        Err(e) => return Err(e.to_string()),
    };
    let model = serde_json::json!({
        "node": node,
        "session_id": ctx.session_id,
        "reference_node": ctx.reference_node,
        "timestamp_mode": mode_name,
        "timestamps": timestamps,
        "windows": windows,
        "model_scope": MODEL_SCOPE,
        "network_model": NETWORK_MODEL_FROM,
        "model": model,
    });
    let path = model_path(&dir, node);
    // Whole or absent: a reader must never see half a model.
    crate::atomic_file::write(&path, format!("{model}\n").as_bytes())
        .map_err(|e| format!("{e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory"))?;
    tracing::info!(
        node,
        windows,
        "distprof: probing stopped; own-edge model in {} (the network's: distprof merge)",
        path.display()
    );
    Ok(())
}
