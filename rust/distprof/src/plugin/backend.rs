//! The backend an enabled plugin drives inside XLA.
//!
//! - client created: [`NodeSession::start`]: a distprof thread binds the probe socket and
//!   runs the rendezvous over XLA's key-value store (bounded lease); the hook returns at once;
//! - collector clock pair (hook 3, in `GpuTracer::DoStart()` before trace start): kept for the
//!   next trace start;
//! - trace start: [`TraceSession::start`]: the snapshot sampler (tracer clock from the hook,
//!   else the host clock) and the probe engine of every node that has agreed; the trace's
//!   start pair is XLA's collector pair when hook 3 gave one;
//! - trace stop: tells them to stop (the engine closes its last window, writes the JSONL
//!   file, fits and writes the model file on its own thread);
//! - export: the distprof plane of every node (clock model, snapshot pairs, probe
//!   statistics, timestamp mode) as bytes the C++ hook merges into XLA's `XSpace`.
//!
//! One process may host several nodes (one GPU client each, as the C++ test program does
//! with threads); the trace hooks are process-wide and apply to every node.

use super::node::{NodeSession, NodeState};
use super::trace::TraceSession;
use super::{Backend, OnFailure, PluginError, TracerClock};
use crate::config::Config;
use crate::context::NodeId;
use crate::distprof_plane::TracerStart;
use crate::kv::KvStore;

pub struct EngineBackend {
    config: Config,
    /// A node whose rendezvous or probe engine fails turns the plugin off through this
    /// (one log line).
    on_failure: OnFailure,
    nodes: Vec<NodeSession>,
    /// The current (or last) profiling session.
    trace: Option<TraceSession>,
    /// XLA's collector clock pair (hook 3), until the trace start that follows takes it.
    collector_pair: Option<TracerStart>,
    /// Whether the one warning about a trace without a hooked GPU client was given.
    warned_no_client: bool,
}

impl EngineBackend {
    pub fn new(config: Config, on_failure: OnFailure) -> Self {
        Self {
            config,
            on_failure,
            nodes: Vec::new(),
            trace: None,
            collector_pair: None,
            warned_no_client: false,
        }
    }

    /// The current or last trace (tests).
    pub fn trace(&self) -> Option<&TraceSession> {
        self.trace.as_ref()
    }
}

impl Backend for EngineBackend {
    fn client_created(
        &mut self,
        node: NodeId,
        num_nodes: u32,
        kv: Option<Box<dyn KvStore>>,
    ) -> Result<(), PluginError> {
        if self.nodes.iter().any(|n| n.node == node) {
            tracing::warn!(
                node,
                "distprof: a second GPU client for the same node; keeping the first"
            );
            return Ok(());
        }
        let session =
            NodeSession::start(node, num_nodes, kv, &self.config, self.on_failure.clone())
                .map_err(PluginError::new)?;
        self.nodes.push(session);
        Ok(())
    }

    fn trace_start(
        &mut self,
        tracer_clock: Option<Box<dyn TracerClock>>,
    ) -> Result<(), PluginError> {
        if self.nodes.is_empty() && !self.warned_no_client {
            // The GPU tracer runs whatever client jax created; hook 1 sits only in the
            // StreamExecutor client. From jax 0.7.2 on, XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT=1
            // makes the PJRT plugin create a TFRT GPU client instead (use_tfrt_gpu_client in
            // pjrt_c_api_gpu_internal.cc), which distprof does not hook: say so once.
            self.warned_no_client = true;
            tracing::warn!(
                "distprof: a trace started but no GPU client reached distprof's hook 1 in this \
                 process, so this trace has no clock data; jax's TFRT GPU client \
                 (XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT=1, jax 0.7.2 on) is not supported: \
                 unset that variable"
            );
        }
        // A start without a stop: end the previous session first.
        let mut previous = self.trace.take();
        if let Some(p) = previous.as_mut() {
            p.stop();
        }
        let session = TraceSession::start(
            &self.config,
            &self.nodes,
            previous.as_ref(),
            tracer_clock,
            self.collector_pair.take(),
            &self.on_failure,
        )?;
        self.trace = Some(session);
        Ok(())
    }

    fn trace_stop(&mut self) -> Result<(), PluginError> {
        match self.trace.as_mut() {
            Some(t) => t.stop(),
            None => tracing::debug!("distprof: trace stop without a trace start; nothing to stop"),
        }
        Ok(())
    }

    fn export(&mut self) -> Result<Vec<u8>, PluginError> {
        Ok(match &self.trace {
            Some(t) if !self.nodes.is_empty() => t.export(&self.config, &self.nodes),
            _ => Vec::new(),
        })
    }

    fn trace_clock_pair(&mut self, pair: TracerStart) -> Result<(), PluginError> {
        // A DoStart() that failed after creating its collector leaves a pair no trace start
        // took; the next DoStart() gives a new one, which replaces it.
        self.collector_pair = Some(pair);
        Ok(())
    }

    fn probes_finished(&self) -> bool {
        self.trace.as_ref().is_none_or(|t| t.probes_finished())
    }

    fn node_state(&self, node: NodeId) -> Option<NodeState> {
        self.nodes
            .iter()
            .find(|n| n.node == node)
            .map(|n| n.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distprof_plane::DistprofPlaneData;
    use crate::kv::{KvError, MemoryStore};
    use crate::plugin::trace::{decode_planes, model_path, MODEL_SCOPE};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// The in-memory store, counting every call a node makes (XLA's store as the nodes
    /// see it).
    #[derive(Clone, Default)]
    struct Counted {
        store: Arc<MemoryStore>,
        calls: Arc<AtomicU64>,
    }
    impl KvStore for Counted {
        fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.store.get(key, timeout)
        }
        fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.store.try_get(key)
        }
        fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.store.set(key, value)
        }
    }

    /// A tracer clock 5 s behind the host clock: the snapshot pairs must show it.
    struct BehindClock;
    const BEHIND_NS: i64 = 5_000_000_000;
    impl TracerClock for BehindClock {
        fn now_ns(&self) -> u64 {
            (crate::clock::realtime_ns() - BEHIND_NS) as u64
        }
    }

    type Failures = Arc<Mutex<Vec<String>>>;

    fn backend(config: Config) -> (EngineBackend, Failures) {
        let failures: Failures = Arc::default();
        let sink = Arc::clone(&failures);
        let on_failure: OnFailure =
            Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
        (EngineBackend::new(config, on_failure), failures)
    }

    fn wait_agreed(b: &EngineBackend, node: NodeId) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match b.node_state(node) {
                Some(NodeState::Agreed { context_digest, .. }) => return context_digest,
                Some(NodeState::Pending) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => panic!("node {node}: {other:?}"),
            }
        }
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Three nodes in one process over loopback: agree, probe for a few short windows,
    /// stop, export; every node's plane carries its snapshots (tracer 5 s behind), probe
    /// statistics and a model against node 0 (each probes node 0: its own edges place it),
    /// and every node writes its JSONL and model. After the rendezvous no node calls the
    /// store again, through every window of two traces: per-window work shares nothing.
    #[test]
    fn three_nodes_agree_probe_fit_and_export_their_planes() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            enabled: true,
            output_dir: dir.path().to_string_lossy().into(),
            probe_window_s: 0.5,
            probe_cadence_us: 10_000,
            snapshot_period_ms: 50,
            interface: "lo".into(),
            ..Config::default()
        };
        let kv = Counted::default();
        let (mut b, failures) = backend(config);
        for node in [2, 1, 0] {
            b.client_created(node, 3, Some(Box::new(kv.clone())))
                .unwrap();
        }
        let digests: Vec<String> = (0..3).map(|n| wait_agreed(&b, n)).collect();
        assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
        let rendezvous_calls = kv.calls.load(Ordering::SeqCst);
        assert!(rendezvous_calls > 0, "the rendezvous went through the counted store");

        let t = Instant::now();
        b.trace_start(Some(Box::new(BehindClock))).unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(50),
            "trace start took {:?}",
            t.elapsed()
        );
        wait_for("two closed windows on every node", || {
            (0..3).all(|n| b.trace().unwrap().windows_closed(n).unwrap_or(0) >= 2)
        });
        let t = Instant::now();
        b.trace_stop().unwrap();
        let bytes = b.export().unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(50),
            "stop + export took {:?}",
            t.elapsed()
        );
        assert!(
            failures.lock().unwrap().is_empty(),
            "{:?}",
            failures.lock().unwrap()
        );

        assert_eq!(decode_planes(&bytes).unwrap().len(), 3);
        // Short windows: the drift fit's span holds them back until probing stops, so the
        // model is complete once every probe thread ended.
        wait_for("every node's probe thread (after the engines drained)", || {
            b.trace().unwrap().probes_finished()
        });
        let planes = decode_planes(&b.export().unwrap()).unwrap();
        for (i, p) in planes.iter().enumerate() {
            let data = DistprofPlaneData::from_xplane(p).unwrap();
            assert_eq!(data.node, [2, 1, 0][i]);
            let Some(NodeState::Agreed { context, .. }) = b.node_state(data.node) else { panic!() };
            assert_eq!(data.session_id, context.session_id);
            // The node's own edges, every window closed, each with its peers.
            assert!(data.edge_fits.len() as u64 >= 2, "{} windows of fits", data.edge_fits.len());
            assert!(data.edge_fits.iter().all(|f| f.node == data.node && f.edges.len() == 2));
            assert_eq!(data.reference_node, 0);
            assert_eq!(data.tracer_clock, "rocm");
            assert!(
                data.timestamp_mode == "kernel" || data.timestamp_mode == "user",
                "{}",
                data.timestamp_mode
            );
            // The timestamping in detail travels in the plane too (no NIC clock on loopback).
            let stamps = data.timestamps.as_ref().expect("the plane states the timestamping");
            assert_eq!(serde_json::to_value(stamps.mode).unwrap(), data.timestamp_mode.as_str());
            assert!(stamps.stamp_error_bound_ns >= 5_000 && stamps.nic_clock.is_none(), "{stamps:?}");
            // Start pair, >= 1 sampled pair, stop pair; R is S - 5 s within the read window.
            assert!(data.snapshots.len() >= 3, "{} pairs", data.snapshots.len());
            for s in &data.snapshots {
                assert!(
                    (s.s_ns - s.r_ns - BEHIND_NS).abs() <= s.read_window_ns.max(1_000),
                    "{s:?}"
                );
            }
            let ts = data.tracer_start.unwrap();
            assert!((ts.s_ns - ts.r_ns - BEHIND_NS).abs() < 1_000_000);
            // Every node probes both others (out-degree clamped to N-1 = 2).
            let peers: std::collections::BTreeSet<_> =
                data.probe_stats.iter().map(|s| s.peer).collect();
            assert_eq!(peers.len(), 2, "{:?}", data.probe_stats);
            assert!(data
                .probe_stats
                .iter()
                .any(|s| s.pairs_used > 0 && s.min_rtt_ns > 0 && s.min_rtt_ns < 10_000_000));
            // One host, one clock: the fitted offset against node 0 is within the bound
            // of zero (loopback, same clock), and node 0 is the reference.
            assert!(data.model.reachable, "node {} unreachable", data.node);
            if data.node != 0 {
                assert!(!data.model.segments.is_empty());
                for seg in &data.model.segments {
                    assert!(seg.offset_ns.abs() <= seg.bound_ns.max(50_000.0), "{seg:?}");
                }
            }
        }
        // The probe threads finish on their own: JSONL with windows, and the model file.
        for node in 0..3u32 {
            let model = model_path(dir.path(), node);
            wait_for("the model file", || model.exists());
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
            let Some(NodeState::Agreed { context, .. }) = b.node_state(node) else {
                panic!("node {node} not agreed")
            };
            assert_eq!(v["session_id"], context.session_id.as_str());
            assert!(v["windows"].as_u64().unwrap() >= 2);
            assert_eq!(v["model_scope"], MODEL_SCOPE);
            assert_eq!(v["model"]["reachable"], true, "node {node} probes node 0: {v}");
            let file = crate::jsonl::read(&dir.path().join(crate::jsonl::file_name(node))).unwrap();
            assert!(file.windows.len() >= 2);
            assert!(file.windows.iter().any(|w| !w.records.is_empty()));
        }
        assert!(failures.lock().unwrap().is_empty());

        // A second trace in the same process writes into trace1/ and leaves the first
        // trace's files as they were.
        let first: Vec<u64> = (0..3u32)
            .map(|n| std::fs::metadata(dir.path().join(crate::jsonl::file_name(n))).unwrap().len())
            .collect();
        b.trace_start(None).unwrap();
        wait_for("a closed window of the second trace", || {
            (0..3).all(|n| b.trace().unwrap().windows_closed(n).unwrap_or(0) >= 1)
        });
        b.trace_stop().unwrap();
        let second = dir.path().join("trace1");
        for node in 0..3u32 {
            let model = model_path(&second, node);
            wait_for("the second trace's model file", || model.exists());
            let file = crate::jsonl::read(&second.join(crate::jsonl::file_name(node))).unwrap();
            assert!(!file.windows.is_empty());
            let len = std::fs::metadata(dir.path().join(crate::jsonl::file_name(node))).unwrap().len();
            assert_eq!(len, first[node as usize], "node {node}: the first trace's file changed");
        }
        assert!(failures.lock().unwrap().is_empty(), "{:?}", failures.lock().unwrap());
        assert_eq!(
            kv.calls.load(Ordering::SeqCst),
            rendezvous_calls,
            "a node called the store after its rendezvous (during two traces' windows)"
        );
    }

    #[test]
    fn a_trace_before_the_rendezvous_finished_has_snapshots_but_no_probes() {
        let config = Config {
            enabled: true,
            rendezvous_timeout_ms: 60_000,
            ..Config::default()
        };
        let kv = Arc::new(MemoryStore::new());
        let (mut b, _) = backend(config);
        // Node 1 of 2 alone: it waits for node 0.
        b.client_created(1, 2, Some(Box::new(kv)))
            .unwrap();
        b.trace_start(None).unwrap();
        b.trace_stop().unwrap();
        let planes = decode_planes(&b.export().unwrap()).unwrap();
        assert_eq!(planes.len(), 1);
        let data = DistprofPlaneData::from_xplane(&planes[0]).unwrap();
        assert_eq!(data.timestamp_mode, "none");
        assert_eq!(data.tracer_clock, "host");
        assert!(data.snapshots.len() >= 2);
        assert!(data.probe_stats.is_empty() && data.model.segments.is_empty());
        assert!(b.trace().unwrap().windows_closed(1).is_none());
    }

    #[test]
    fn invalid_node_id_is_an_error_naming_both_numbers() {
        let (mut b, _) = backend(Config::default());
        let err = b.client_created(4, 4, None).unwrap_err();
        assert!(err.0.contains("node id 4 of 4"), "{err}");
    }
}
