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
//! `distprof merge --run-dir` solves the network offline. The model file
//! (`distprof-model-node<N>.json`, one node's model) is for people and scripts: no command
//! reads it (`--models` takes a JSON array of every node's model).
//!
//! **Several traces in one process** write to separate directories ([`trace_output_dir`]):
//! the first that probes into `output_dir`, the next into `output_dir/trace1/`, and so on.

use super::node::{NodeSession, NodeState};
use super::{OnFailure, PluginError, TracerClock};
use crate::clock::{realtime_ns, VirtualClock};
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::distprof_plane::{DistprofPlaneData, ProbeEdgeStats, TracerStart};
use super::fit_exchange::{Exchange, ExchangeState, FINAL_WAIT_MAX};
use super::lease::KvLease;
use crate::estimate::WindowFits;
use crate::estimate::{EstimatorSettings, NodeWindowFits, Smoother};
use crate::model::NodeClockModel;
use crate::probe::gap_preserved;
use crate::probe_run::{run_probing, FittedWindow, ProbeRunError, ProbeRunSetup};
use crate::record::ProbeRecord;
use crate::snapshot::{sample_pair, SnapshotPair};
use crate::timestamp::TimestampQuality;
use crate::xplane::XSpace;
use prost::Message;
use std::net::UdpSocket;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    probe_stats: Vec<ProbeEdgeStats>,
    /// This node's final edge fits per window (drift fit centred on the window,
    /// `Smoother`), as shared with the other nodes.
    final_fits: Vec<NodeWindowFits>,
    /// Closed windows not final yet (the smoother waits for the windows after them): their
    /// own fits, until the final ones replace them.
    provisional_fits: BTreeMap<u64, NodeWindowFits>,
    windows: u64,
    finished: bool,
}

struct ProbeRun {
    node: NodeId,
    context: Arc<RunContext>,
    progress: Arc<Mutex<Progress>>,
    /// The network-wide segments of this node (`fit_exchange`).
    exchange: Arc<Mutex<ExchangeState>>,
    /// The store lent to this trace's exchange; revoked when the trace is dropped.
    kv: Option<Arc<KvLease>>,
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
            let exchange = Arc::new(Mutex::new(ExchangeState::default()));
            // The store is lent for the trace plus the exchange's end; dropping the trace
            // (plugin off, or the next trace) revokes it.
            let kv = n
                .exchange_store()
                .map(|store| Arc::new(KvLease::from_shared(store, Instant::now() + MAX_TRACE + FINAL_WAIT_MAX * 2)));
            let thread = {
                let (config, context, stop, progress) = (
                    Config { output_dir: trace_output_dir(&config.output_dir, index), ..config.clone() },
                    Arc::clone(&context),
                    Arc::clone(&stop),
                    Arc::clone(&progress),
                );
                let exchange = Exchange {
                    node: n.node,
                    ctx: Arc::clone(&context),
                    trace: index,
                    kv: kv.clone(),
                    settings: EstimatorSettings::from_config(&config),
                    window: Duration::from_secs_f64(config.probe_window_s),
                    state: Arc::clone(&exchange),
                };
                let on_failure = Arc::clone(on_failure);
                let node = n.node;
                std::thread::Builder::new()
                    .name(format!("distprof-probe-{node}"))
                    .spawn(move || {
                        super::mark_thread_panics_reported();
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            probe(node, &context, socket, &config, &stop, &progress, exchange)
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
                exchange,
                kv,
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
            let (timestamp_mode, timestamps, segments, probe_stats, edge_fits) = match run {
                Some(r) => {
                    let p = r.progress.lock().unwrap_or_else(|p| p.into_inner());
                    let segments = r.exchange.lock().unwrap_or_else(|p| p.into_inner()).segments.clone();
                    let mut fits = p.final_fits.clone();
                    fits.extend(p.provisional_fits.values().cloned());
                    (
                        p.timestamp_mode
                            .clone()
                            .unwrap_or_else(|| "starting".into()),
                        p.timestamps.clone(),
                        segments,
                        p.probe_stats.clone(),
                        fits,
                    )
                }
                None => ("none".to_string(), None, Vec::new(), Vec::new(), Vec::new()),
            };
            let reference_node = run.map_or(config.reference_node, |r| r.context.reference_node);
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
                model: NodeClockModel {
                    node: n.node,
                    reachable: n.node == reference_node || !segments.is_empty(),
                    segments,
                },
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
        Some(p.windows)
    }

    /// Node `node`'s fit exchange so far: windows solved network-wide, and its cost
    /// (tests, diagnostics and `bench overhead`).
    pub fn exchange(&self, node: NodeId) -> Option<ExchangeState> {
        let r = self.probes.iter().find(|r| r.node == node)?;
        let s = r.exchange.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(s)
    }
}

impl Drop for TraceSession {
    /// The plugin turned off or a new trace replaced this one: stop the threads (they end
    /// on their own; nobody waits for them).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.sampler.thread().unpark();
        for kv in self.probes.iter().filter_map(|r| r.kv.as_ref()) {
            kv.revoke();
        }
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

/// The probe thread: the engine on the agreed context until `stop`, each closed window
/// written to the JSONL file and fitted at once; the fits final (drift fit over the
/// windows either side) go to the node's fit exchange, which solves the whole network from
/// every node's fits (`fit_exchange`); the model file is written when the exchange ends.
fn probe(
    node: NodeId,
    ctx: &RunContext,
    socket: UdpSocket,
    config: &Config,
    stop: &AtomicBool,
    progress: &Mutex<Progress>,
    exchange: Exchange,
) -> Result<(), String> {
    let setup = ProbeRunSetup {
        ctx,
        config,
        clock: VirtualClock::IDENTITY,
        purity: gap_preserved,
        start_local_ns: realtime_ns(),
        simulated_nic: None,
    };
    let settings = EstimatorSettings::from_config(config);
    let mut smoother = Smoother::new(settings, (config.probe_window_s * 1e9) as i64);
    let (to_exchange, from_probe) = std::sync::mpsc::channel::<WindowFits>();
    let exchange_thread = std::thread::Builder::new()
        .name(format!("distprof-fits-{node}"))
        .spawn(move || {
            super::mark_thread_panics_reported();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exchange.run(from_probe)))
                .map_err(|panic| format!("internal error: the fit exchange panicked: {}", super::panic_message(panic.as_ref())))
        })
        .map_err(|e| format!("cannot start the fit exchange thread of node {node}: {e}"))?;
    let finalised = |done: Vec<WindowFits>| {
        let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
        for f in done {
            p.provisional_fits.remove(&f.spec.window_id);
            p.final_fits.push(f.share(node));
            // The exchange thread ends only once `to_exchange` is dropped below.
            let _ = to_exchange.send(f);
        }
    };
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
            let stats = w.edges.iter().filter(|e| e.src == node).map(|e| ProbeEdgeStats {
                window_id: w.window_id,
                peer: e.dst,
                pairs_used: e.pure,
                pairs_lost: e.lost,
                min_rtt_ns: w.records.iter().filter(|r| r.dst == e.dst).map(ProbeRecord::round_trip_ns).min().unwrap_or(0),
            });
            {
                let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(t) = &mut p.timestamps {
                    t.absorb_window(w.nic_clock.as_ref());
                }
                p.windows += 1;
                p.probe_stats.extend(stats);
                p.provisional_fits.insert(w.window_id, fits.share(node));
            }
            finalised(smoother.push_fits(fits));
        },
    );
    finalised(smoother.finish_fits());
    drop(to_exchange);
    let dir = PathBuf::from(&config.output_dir);
    let timestamps = match ran {
        Ok(outcome) => outcome.timestamps,
        Err(e @ ProbeRunError::Output(_)) => return Err(format!("{e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory")),
        Err(e) => return Err(e.to_string()),
    };
    let segments = exchange_thread
        .join()
        .map_err(|_| "internal error: the fit exchange thread ended without a result".to_string())??;
    let windows = progress.lock().unwrap_or_else(|p| p.into_inner()).windows;
    let model = serde_json::json!({
        "node": node,
        "session_id": ctx.session_id,
        "reference_node": ctx.reference_node,
        "timestamp_mode": mode_name,
        "timestamps": timestamps,
        "windows": windows,
        "model": NodeClockModel { node, reachable: node == ctx.reference_node || !segments.is_empty(), segments },
    });
    let path = model_path(&dir, node);
    // Whole or absent: `distprof merge` must never read half a model.
    crate::atomic_file::write(&path, format!("{model}\n").as_bytes())
        .map_err(|e| format!("{e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory"))?;
    tracing::info!(
        node,
        windows,
        "distprof: probing stopped; model in {}",
        path.display()
    );
    Ok(())
}
