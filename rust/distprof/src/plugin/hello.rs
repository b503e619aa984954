//! The interim backend: small but real work on every hook, until the rendezvous and probe
//! engine replace it through [`super::make_backend`].
//!
//! - client created: a background thread writes this node's hello under `distprof/hello/<id>`
//!   in the key-value store and waits (bounded by `rendezvous_timeout_ms`) for node 0's;
//! - trace start / stop: one (host clock, tracer clock) snapshot pair each;
//! - trace stop: one JSONL `meta` line per node in `output_dir`;
//! - export: one `/distprof/node:<id>` XPlane per node with those facts as plane stats.

use super::{Backend, OnFailure, PluginError, TracerClock};
use crate::config::Config;
use crate::context::NodeId;
use crate::kv::KvStore;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every key distprof writes lives under this prefix; XLA and JAX use their own.
pub const KEY_PREFIX: &str = "distprof/";

pub fn hello_key(node: NodeId) -> String {
    format!("{KEY_PREFIX}hello/{node}")
}

/// What a node publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Hello {
    pub node: NodeId,
    pub num_nodes: u32,
    pub pid: u32,
    pub hostname: String,
}

/// Outcome of the hello exchange of one node, filled in by its background thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Rendezvous {
    Pending,
    /// No store (single node): nothing to exchange.
    Local,
    Done { node0: Hello, elapsed_ms: u64 },
    Failed { reason: String },
}

/// One (host clock S, tracer clock R) pair; R is the host clock when XLA gave no reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SnapshotPair {
    pub host_ns: u64,
    pub tracer_ns: u64,
}

struct NodeSession {
    node: NodeId,
    num_nodes: u32,
    rendezvous: Arc<Mutex<Rendezvous>>,
    // Kept so a later engine can join it; never joined on a hook (that could block XLA).
    _thread: Option<JoinHandle<()>>,
}

pub struct HelloBackend {
    config: Config,
    /// A failed hello exchange turns the plugin off through this (one log line).
    on_failure: OnFailure,
    nodes: Vec<NodeSession>,
    tracer_clock: Option<Box<dyn TracerClock>>,
    trace_start: Option<SnapshotPair>,
    trace_stop: Option<SnapshotPair>,
    agent_task_id: Option<i32>,
}

impl HelloBackend {
    pub fn new(config: Config, on_failure: OnFailure) -> Self {
        Self {
            config,
            on_failure,
            nodes: Vec::new(),
            tracer_clock: None,
            trace_start: None,
            trace_stop: None,
            agent_task_id: None,
        }
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

/// The host clock S: CLOCK_REALTIME in nanoseconds since the epoch.
pub fn host_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::from("unknown");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn exchange_hello(kv: &dyn KvStore, me: &Hello, timeout: Duration) -> Result<Rendezvous, String> {
    let started = Instant::now();
    let value = serde_json::to_string(me).map_err(|e| e.to_string())?;
    kv.set(&hello_key(me.node), &value).map_err(|e| e.to_string())?;
    let raw = kv.get(&hello_key(0), timeout).map_err(|e| e.to_string())?;
    let node0: Hello = serde_json::from_str(&raw)
        .map_err(|e| format!("node 0's hello `{raw}` is not valid: {e}"))?;
    if node0.num_nodes != me.num_nodes {
        return Err(format!(
            "node 0 reports {} nodes, this node was told {}: the nodes are not from one job",
            node0.num_nodes, me.num_nodes
        ));
    }
    Ok(Rendezvous::Done { node0, elapsed_ms: started.elapsed().as_millis() as u64 })
}

impl Backend for HelloBackend {
    fn client_created(
        &mut self,
        node: NodeId,
        num_nodes: u32,
        kv: Option<Box<dyn KvStore>>,
    ) -> Result<(), PluginError> {
        if num_nodes == 0 || node >= num_nodes {
            return Err(PluginError::new(format!(
                "XLA reported node id {node} of {num_nodes} nodes; expected 0 <= node id < node count"
            )));
        }
        if self.nodes.iter().any(|n| n.node == node) {
            tracing::warn!(node, "distprof: a second GPU client for the same node; keeping the first");
            return Ok(());
        }
        let me = Hello { node, num_nodes, pid: std::process::id(), hostname: hostname() };
        let (rendezvous, thread) = match kv {
            None if num_nodes > 1 => {
                return Err(PluginError::new(format!(
                    "XLA passed no key-value store for node {node} of {num_nodes}; \
                     a multi-node job needs one (jax.distributed.initialize)"
                )))
            }
            None => (Arc::new(Mutex::new(Rendezvous::Local)), None),
            Some(kv) => {
                let slot = Arc::new(Mutex::new(Rendezvous::Pending));
                let out = Arc::clone(&slot);
                let timeout = Duration::from_millis(self.config.rendezvous_timeout_ms);
                let on_failure = Arc::clone(&self.on_failure);
                let thread = std::thread::Builder::new()
                    .name(format!("distprof-hello-{node}"))
                    .spawn(move || {
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            exchange_hello(kv.as_ref(), &me, timeout)
                        }))
                        .unwrap_or_else(|_| Err("the hello thread panicked".to_string()));
                        let outcome = match result {
                            Ok(done) => {
                                tracing::info!(node = me.node, "distprof: hello exchange done: {done:?}");
                                done
                            }
                            Err(reason) => Rendezvous::Failed { reason },
                        };
                        let failure = match &outcome {
                            Rendezvous::Failed { reason } => Some(reason.clone()),
                            _ => None,
                        };
                        if let Ok(mut s) = out.lock() {
                            *s = outcome;
                        }
                        if let Some(reason) = failure {
                            on_failure(&format!("hello exchange of node {}", me.node), &reason);
                        }
                    })
                    .map_err(|e| PluginError::new(format!("cannot start the hello thread: {e}")))?;
                (slot, Some(thread))
            }
        };
        self.nodes.push(NodeSession { node, num_nodes, rendezvous, _thread: thread });
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
        let dir = PathBuf::from(&self.config.output_dir);
        std::fs::create_dir_all(&dir).map_err(|e| {
            PluginError::new(format!(
                "cannot create output_dir {}: {e}; set XLA_DIST_PROF_OUTPUT_DIR to a writable directory",
                dir.display()
            ))
        })?;
        for n in &self.nodes {
            let line = serde_json::json!({
                "kind": "meta",
                "version": 1,
                "node": n.node,
                "num_nodes": n.num_nodes,
                "pid": std::process::id(),
                "agent_task_id": self.agent_task_id,
                "rendezvous": *n.rendezvous.lock().map_err(|_| PluginError::new("rendezvous state poisoned"))?,
                "trace_start": self.trace_start,
                "trace_stop": self.trace_stop,
            });
            let path = self.jsonl_path(n.node);
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| PluginError::new(format!("cannot open {}: {e}", path.display())))?;
            writeln!(file, "{line}")
                .map_err(|e| PluginError::new(format!("cannot write {}: {e}", path.display())))?;
        }
        Ok(())
    }

    fn export(&mut self) -> Result<Vec<u8>, PluginError> {
        let mut space = xplane::XSpace::default();
        for n in &self.nodes {
            let rendezvous = n.rendezvous.lock().map(|r| r.clone()).unwrap_or(Rendezvous::Pending);
            let mut plane = xplane::PlaneBuilder::new(n.node, &format!("/distprof/node:{}", n.node));
            plane.uint("node_id", u64::from(n.node));
            plane.uint("num_nodes", u64::from(n.num_nodes));
            if let Some(s) = self.trace_start {
                plane.uint("trace_start_host_ns", s.host_ns);
                plane.uint("trace_start_tracer_ns", s.tracer_ns);
            }
            if let Some(s) = self.trace_stop {
                plane.uint("trace_stop_host_ns", s.host_ns);
                plane.uint("trace_stop_tracer_ns", s.tracer_ns);
            }
            plane.str("rendezvous", &serde_json::to_string(&rendezvous).unwrap_or_default());
            space.planes.push(plane.finish());
        }
        Ok(xplane::encode(&space))
    }

    fn agent_connected(&mut self, task_id: i32) -> Result<(), PluginError> {
        tracing::debug!(task_id, "distprof: coordination agent connected");
        self.agent_task_id = Some(task_id);
        Ok(())
    }
}

/// The few XPlane messages this backend writes, wire-compatible with
/// `tsl/profiler/protobuf/xplane.proto` (field numbers from there; `optional` scalars have
/// the same encoding as the members of `XStat.value`'s oneof).
pub mod xplane {
    use prost::Message;
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, Message)]
    pub struct XSpace {
        #[prost(message, repeated, tag = "1")]
        pub planes: Vec<XPlane>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct XPlane {
        #[prost(int64, tag = "1")]
        pub id: i64,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(map = "int64, message", tag = "5")]
        pub stat_metadata: HashMap<i64, XStatMetadata>,
        #[prost(message, repeated, tag = "6")]
        pub stats: Vec<XStat>,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct XStatMetadata {
        #[prost(int64, tag = "1")]
        pub id: i64,
        #[prost(string, tag = "2")]
        pub name: String,
    }

    #[derive(Clone, PartialEq, Message)]
    pub struct XStat {
        #[prost(int64, tag = "1")]
        pub metadata_id: i64,
        #[prost(uint64, optional, tag = "3")]
        pub uint64_value: Option<u64>,
        #[prost(string, optional, tag = "5")]
        pub str_value: Option<String>,
    }

    /// Plane ids only need to be unique within one XSpace; XLA's own planes use small
    /// ids, so ours start far above them.
    const PLANE_ID_BASE: i64 = 0x6470_0000;

    pub struct PlaneBuilder(XPlane);

    impl PlaneBuilder {
        pub fn new(node: u32, name: &str) -> Self {
            Self(XPlane { id: PLANE_ID_BASE + i64::from(node), name: name.to_string(), ..XPlane::default() })
        }

        fn metadata_id(&mut self, name: &str) -> i64 {
            // Id 0 is reserved by XLA's XPlaneBuilder; ids are dense from 1.
            let id = self.0.stat_metadata.len() as i64 + 1;
            self.0.stat_metadata.insert(id, XStatMetadata { id, name: name.to_string() });
            id
        }

        pub fn uint(&mut self, name: &str, value: u64) {
            let metadata_id = self.metadata_id(name);
            self.0.stats.push(XStat { metadata_id, uint64_value: Some(value), str_value: None });
        }

        pub fn str(&mut self, name: &str, value: &str) {
            let metadata_id = self.metadata_id(name);
            self.0.stats.push(XStat { metadata_id, uint64_value: None, str_value: Some(value.to_string()) });
        }

        pub fn finish(self) -> XPlane {
            self.0
        }
    }

    pub fn encode(space: &XSpace) -> Vec<u8> {
        space.encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvError;
    use prost::Message;
    use std::collections::HashMap;
    use std::sync::Condvar;

    /// An in-memory store with XLA's semantics (blocking get with timeout).
    #[derive(Default, Clone)]
    struct MemKv(Arc<(Mutex<HashMap<String, String>>, Condvar)>);

    impl KvStore for MemKv {
        fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
            let (map, cv) = &*self.0;
            let guard = map.lock().unwrap();
            let (guard, _) = cv.wait_timeout_while(guard, timeout, |m| !m.contains_key(key)).unwrap();
            guard.get(key).cloned().ok_or(KvError::Timeout { key: key.into(), timeout_ms: timeout.as_millis() as u64 })
        }
        fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
            Ok(self.0 .0.lock().unwrap().get(key).cloned())
        }
        fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
            self.0 .0.lock().unwrap().insert(key.into(), value.into());
            self.0 .1.notify_all();
            Ok(())
        }
    }

    struct FixedClock(u64);
    impl TracerClock for FixedClock {
        fn now_ns(&self) -> u64 {
            self.0
        }
    }

    type Failures = Arc<Mutex<Vec<String>>>;

    fn backend(config: Config) -> (HelloBackend, Failures) {
        let failures: Failures = Arc::default();
        let sink = Arc::clone(&failures);
        let on_failure: OnFailure =
            Arc::new(move |what, why| sink.lock().unwrap().push(format!("{what}: {why}")));
        (HelloBackend::new(config, on_failure), failures)
    }

    fn wait_done(b: &HelloBackend, i: usize) -> Rendezvous {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = b.nodes[i].rendezvous.lock().unwrap().clone();
            if r != Rendezvous::Pending || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn three_nodes_exchange_hellos_write_jsonl_and_export_planes() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config { enabled: true, output_dir: dir.path().to_string_lossy().into(), ..Config::default() };
        let kv = MemKv::default();
        let (mut b, failures) = backend(config);
        // Node 2 and 1 before node 0: they must wait for node 0's hello.
        for node in [2, 1, 0] {
            b.client_created(node, 3, Some(Box::new(kv.clone()))).unwrap();
        }
        for i in 0..3 {
            match wait_done(&b, i) {
                Rendezvous::Done { node0, .. } => {
                    assert_eq!(node0.node, 0);
                    assert_eq!(node0.num_nodes, 3);
                    assert_eq!(node0.pid, std::process::id());
                }
                other => panic!("node index {i}: {other:?}"),
            }
        }
        assert!(kv.try_get(&hello_key(1)).unwrap().is_some());
        assert!(failures.lock().unwrap().is_empty());

        b.trace_start(Some(Box::new(FixedClock(1234)))).unwrap();
        b.trace_stop().unwrap();
        let text = std::fs::read_to_string(dir.path().join("distprof-node1.jsonl")).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["kind"], "meta");
        assert_eq!(line["node"], 1);
        assert_eq!(line["rendezvous"]["status"], "done");
        assert_eq!(line["trace_start"]["tracer_ns"], 1234);

        let bytes = b.export().unwrap();
        let space = xplane::XSpace::decode(bytes.as_slice()).unwrap();
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
    }

    #[test]
    fn missing_node0_times_out_within_the_bound() {
        let config = Config { enabled: true, rendezvous_timeout_ms: 100, ..Config::default() };
        let (mut b, failures) = backend(config);
        let started = Instant::now();
        b.client_created(1, 2, Some(Box::new(MemKv::default()))).unwrap();
        assert!(started.elapsed() < Duration::from_millis(50), "the hook must not wait");
        match wait_done(&b, 0) {
            Rendezvous::Failed { reason } => assert!(reason.contains("distprof/hello/0"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The failure reaches the plugin (which turns off), once, naming the node.
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let failures = failures.lock().unwrap();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].starts_with("hello exchange of node 1: "), "{}", failures[0]);
    }

    #[test]
    fn invalid_node_id_is_an_error_naming_both_numbers() {
        let (mut b, _) = backend(Config::default());
        let err = b.client_created(4, 4, None).unwrap_err();
        assert!(err.0.contains("node id 4 of 4"), "{err}");
    }
}
