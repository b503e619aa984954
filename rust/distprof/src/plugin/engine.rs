//! The backend an enabled plugin drives inside XLA.
//!
//! - client created: [`NodeSession::start`]: a distprof thread binds the probe socket and
//!   runs the rendezvous over XLA's key-value store (bounded lease); the hook returns at once;
//! - trace start / stop: one (host clock, tracer clock) snapshot pair each; at stop the
//!   `distprof-io` thread appends one JSONL `meta` line per node in `output_dir`, with the
//!   rendezvous outcome (file I/O never runs on XLA's thread);
//! - export: one `/distprof/node:<id>` XPlane per node with those facts as plane stats.
//!
//! One process may host several nodes (one GPU client each, as the C++ test program does
//! with threads); the trace hooks are process-wide and apply to every node.

use super::node::{NodeSession, NodeState};
use super::{plane, Backend, OnFailure, PluginError, TracerClock};
use crate::config::Config;
use crate::context::NodeId;
use crate::kv::KvStore;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

/// One (host clock S, tracer clock R) pair; R is the host clock when XLA gave no reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SnapshotPair {
    pub host_ns: u64,
    pub tracer_ns: u64,
}

/// The host clock S: CLOCK_REALTIME in nanoseconds since the epoch.
pub fn host_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Work a hook hands off: runs on the backend's `distprof-io` thread, in order.
type Job = Box<dyn FnOnce() + Send>;

/// One thread per backend for the file writes of the trace hooks. It ends when the backend
/// is dropped (the channel closes) after the jobs already queued; nobody waits for it.
struct IoThread {
    jobs: mpsc::Sender<Job>,
    _thread: JoinHandle<()>,
}

impl IoThread {
    fn start() -> Result<Self, PluginError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("distprof-io".into())
            .spawn(move || {
                for job in queue {
                    // A panicking job must not take the queue down; the job reports its
                    // own failures.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .map_err(|e| PluginError::new(format!("cannot start the distprof-io thread: {e}")))?;
        Ok(Self { jobs, _thread: thread })
    }
}

pub struct EngineBackend {
    config: Config,
    /// A node whose rendezvous fails turns the plugin off through this (one log line).
    on_failure: OnFailure,
    nodes: Vec<NodeSession>,
    tracer_clock: Option<Box<dyn TracerClock>>,
    trace_start: Option<SnapshotPair>,
    trace_stop: Option<SnapshotPair>,
    agent_task_id: Option<i32>,
    io: Option<IoThread>,
}

impl EngineBackend {
    pub fn new(config: Config, on_failure: OnFailure) -> Self {
        Self {
            config,
            on_failure,
            nodes: Vec::new(),
            tracer_clock: None,
            trace_start: None,
            trace_stop: None,
            agent_task_id: None,
            io: None,
        }
    }

    /// Queues `job` on the I/O thread, starting it on first use.
    fn submit(&mut self, job: Job) -> Result<(), PluginError> {
        if self.io.is_none() {
            self.io = Some(IoThread::start()?);
        }
        let io = self.io.as_ref().expect("started above");
        io.jobs.send(job).map_err(|_| PluginError::new("the distprof-io thread has stopped"))
    }

    fn snapshot(&self) -> SnapshotPair {
        let host_ns = host_now_ns();
        let tracer_ns = self.tracer_clock.as_ref().map_or(host_ns, |c| c.now_ns());
        SnapshotPair { host_ns, tracer_ns }
    }

    fn jsonl_path(&self, node: NodeId) -> PathBuf {
        PathBuf::from(&self.config.output_dir).join(format!("distprof-node{node}.jsonl"))
    }
}

/// Appends each line to its node's JSONL file, creating `dir` if needed.
fn write_meta_lines(dir: &std::path::Path, lines: &[(PathBuf, serde_json::Value)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "cannot create output_dir {}: {e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory",
            dir.display()
        )
    })?;
    for (path, line) in lines {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        writeln!(file, "{line}").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

impl Backend for EngineBackend {
    fn client_created(
        &mut self,
        node: NodeId,
        num_nodes: u32,
        kv: Option<Box<dyn KvStore>>,
    ) -> Result<(), PluginError> {
        if self.nodes.iter().any(|n| n.node == node) {
            tracing::warn!(node, "distprof: a second GPU client for the same node; keeping the first");
            return Ok(());
        }
        let session = NodeSession::start(node, num_nodes, kv, &self.config, self.on_failure.clone())
            .map_err(PluginError::new)?;
        self.nodes.push(session);
        Ok(())
    }

    fn trace_start(&mut self, tracer_clock: Option<Box<dyn TracerClock>>) -> Result<(), PluginError> {
        self.tracer_clock = tracer_clock;
        self.trace_start = Some(self.snapshot());
        self.trace_stop = None;
        Ok(())
    }

    fn trace_stop(&mut self) -> Result<(), PluginError> {
        self.trace_stop = Some(self.snapshot());
        if self.nodes.is_empty() {
            tracing::debug!("distprof: trace stopped before any GPU client was created; nothing to write");
            return Ok(());
        }
        let lines: Vec<(PathBuf, serde_json::Value)> = self
            .nodes
            .iter()
            .map(|n| {
                let line = serde_json::json!({
                    "kind": "meta",
                    "version": 1,
                    "node": n.node,
                    "num_nodes": n.num_nodes,
                    "pid": std::process::id(),
                    "agent_task_id": self.agent_task_id,
                    "rendezvous": n.state().to_json(),
                    "trace_start": self.trace_start,
                    "trace_stop": self.trace_stop,
                });
                (self.jsonl_path(n.node), line)
            })
            .collect();
        let dir = PathBuf::from(&self.config.output_dir);
        let on_failure = self.on_failure.clone();
        self.submit(Box::new(move || {
            if let Err(reason) = write_meta_lines(&dir, &lines) {
                on_failure("trace stop", &reason);
            }
        }))
    }

    fn export(&mut self) -> Result<Vec<u8>, PluginError> {
        let mut space = plane::XSpace::default();
        for n in &self.nodes {
            let mut p = plane::PlaneBuilder::new(n.node, &format!("/distprof/node:{}", n.node));
            p.uint("node_id", u64::from(n.node));
            p.uint("num_nodes", u64::from(n.num_nodes));
            if let Some(s) = self.trace_start {
                p.uint("trace_start_host_ns", s.host_ns);
                p.uint("trace_start_tracer_ns", s.tracer_ns);
            }
            if let Some(s) = self.trace_stop {
                p.uint("trace_stop_host_ns", s.host_ns);
                p.uint("trace_stop_tracer_ns", s.tracer_ns);
            }
            let state = n.state();
            if let NodeState::Agreed { context, context_digest, .. } = &state {
                p.str("session_id", &context.session_id);
                p.str("context_digest", context_digest);
                p.uint("reference_node", u64::from(context.reference_node));
            }
            p.str("rendezvous", &state.to_json().to_string());
            space.planes.push(p.finish());
        }
        Ok(plane::encode(&space))
    }

    fn agent_connected(&mut self, task_id: i32) -> Result<(), PluginError> {
        tracing::debug!(task_id, "distprof: coordination agent connected");
        self.agent_task_id = Some(task_id);
        Ok(())
    }

    fn node_state(&self, node: NodeId) -> Option<NodeState> {
        self.nodes.iter().find(|n| n.node == node).map(|n| n.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryStore;
    use prost::Message;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Shares one in-memory store between the nodes of a test, as XLA shares its store.
    struct SharedKv(Arc<MemoryStore>);
    impl KvStore for SharedKv {
        fn get(&self, key: &str, timeout: Duration) -> Result<String, crate::kv::KvError> {
            self.0.get(key, timeout)
        }
        fn try_get(&self, key: &str) -> Result<Option<String>, crate::kv::KvError> {
            self.0.try_get(key)
        }
        fn set(&self, key: &str, value: &str) -> Result<(), crate::kv::KvError> {
            self.0.set(key, value)
        }
    }

    struct FixedClock(u64);
    impl TracerClock for FixedClock {
        fn now_ns(&self) -> u64 {
            self.0
        }
    }

    type Failures = Arc<Mutex<Vec<String>>>;

    fn backend(config: Config) -> (EngineBackend, Failures) {
        let failures: Failures = Arc::default();
        let sink = Arc::clone(&failures);
        let on_failure: OnFailure = Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
        (EngineBackend::new(config, on_failure), failures)
    }

    fn wait_agreed(b: &EngineBackend, node: NodeId) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match b.node_state(node) {
                Some(NodeState::Agreed { context_digest, .. }) => return context_digest,
                Some(NodeState::Pending) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                other => panic!("node {node}: {other:?}"),
            }
        }
    }

    #[test]
    fn three_nodes_agree_write_jsonl_and_export_planes() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config { enabled: true, output_dir: dir.path().to_string_lossy().into(), ..Config::default() };
        let kv = Arc::new(MemoryStore::new());
        let (mut b, failures) = backend(config);
        for node in [2, 1, 0] {
            b.client_created(node, 3, Some(Box::new(SharedKv(Arc::clone(&kv))))).unwrap();
        }
        let digests: Vec<String> = (0..3).map(|n| wait_agreed(&b, n)).collect();
        assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
        assert!(failures.lock().unwrap().is_empty());

        b.trace_start(Some(Box::new(FixedClock(1234)))).unwrap();
        b.trace_stop().unwrap();
        let path = dir.path().join("distprof-node1.jsonl");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(&path).is_ok_and(|t| t.ends_with('\n')) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["kind"], "meta");
        assert_eq!(line["node"], 1);
        assert_eq!(line["rendezvous"]["status"], "agreed");
        assert_eq!(line["rendezvous"]["context_digest"], digests[0].as_str());
        assert_eq!(line["trace_start"]["tracer_ns"], 1234);

        let bytes = b.export().unwrap();
        let space = plane::XSpace::decode(bytes.as_slice()).unwrap();
        assert_eq!(space.planes.len(), 3);
        let p = &space.planes[1];
        assert_eq!(p.name, "/distprof/node:1");
        let stat = |name: &str| {
            let id = p.stat_metadata.values().find(|m| m.name == name).unwrap().id;
            p.stats.iter().find(|s| s.metadata_id == id).unwrap().clone()
        };
        assert_eq!(stat("node_id").uint64_value, Some(1));
        assert_eq!(stat("num_nodes").uint64_value, Some(3));
        assert_eq!(stat("trace_stop_tracer_ns").uint64_value, Some(1234));
        assert_eq!(stat("context_digest").str_value.as_deref(), Some(digests[0].as_str()));
    }

    #[test]
    fn invalid_node_id_is_an_error_naming_both_numbers() {
        let (mut b, _) = backend(Config::default());
        let err = b.client_created(4, 4, None).unwrap_err();
        assert!(err.0.contains("node id 4 of 4"), "{err}");
    }
}

#[cfg(test)]
mod io_tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    #[test]
    fn an_unwritable_output_dir_is_reported_once_from_the_io_thread() {
        let file = tempfile::NamedTempFile::new().unwrap();
        // A directory below a regular file cannot be created.
        let out = file.path().join("out");
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&failures);
        let on_failure: OnFailure = Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
        let config = Config { enabled: true, output_dir: out.to_string_lossy().into(), ..Config::default() };
        let mut b = EngineBackend::new(config, on_failure);
        b.client_created(0, 1, None).unwrap();
        b.trace_start(None).unwrap();
        let started = Instant::now();
        b.trace_stop().unwrap();
        assert!(started.elapsed() < Duration::from_millis(50), "trace stop waited for the file system");
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let f = failures.lock().unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("trace stop: cannot create output_dir") && f[0].contains("XLA_DIST_PROF_OUTPUT_DIR"), "{}", f[0]);
    }
}
