//! One node's start inside XLA (hook 1): on a thread distprof owns, choose the probe
//! address, bind the UDP probe socket and run the rendezvous over the host's key-value
//! store, then keep the socket and the agreed run context for the probe engine.
//!
//! The hook only creates the lease and starts the thread; it never waits. The thread uses
//! the store through a [`KvLease`] that ends `rendezvous_timeout_ms` after the hook and is
//! revoked the moment the rendezvous returns, agreed or not: nothing distprof does after
//! the rendezvous uses the store (the network solve is merge's, docs/architecture.md
//! "Scale"), so a client XLA destroys later cannot leave distprof holding its callbacks.
//! A failure is reported once through the plugin's `on_failure` (one log line; the plugin
//! turns off).

use super::lease::KvLease;
use super::OnFailure;
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::kv::{KvStore, MemoryStore};
use crate::rendezvous::{self, address, digest};
use std::net::UdpSocket;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How much earlier than the lease the rendezvous gives up, so that it reports why.
const LEASE_MARGIN_MS: u64 = 5;

/// Where one node's start stands.
#[derive(Debug, Clone)]
pub enum NodeState {
    /// Binding or waiting for the other nodes.
    Pending,
    /// Every node of the session holds this context.
    Agreed {
        context: Arc<RunContext>,
        context_digest: String,
        elapsed_ms: u64,
    },
    /// The reason, as logged.
    Failed { reason: String },
}

impl NodeState {
    /// The state in the shape of the JSONL meta line and the plane's stats.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            NodeState::Pending => serde_json::json!({ "status": "pending" }),
            NodeState::Agreed {
                context,
                context_digest,
                elapsed_ms,
            } => serde_json::json!({
                "status": "agreed",
                "session_id": context.session_id,
                "context_digest": context_digest,
                "num_nodes": context.num_nodes,
                "reference_node": context.reference_node,
                "elapsed_ms": elapsed_ms,
            }),
            NodeState::Failed { reason } => {
                serde_json::json!({ "status": "failed", "reason": reason })
            }
        }
    }
}

/// State shared between the hook side and the node's thread.
struct Shared {
    state: Mutex<NodeState>,
    changed: Condvar,
    /// The bound probe socket, taken by the probe engine.
    socket: Mutex<Option<UdpSocket>>,
}

pub struct NodeSession {
    pub node: NodeId,
    pub num_nodes: u32,
    shared: Arc<Shared>,
    /// Revoked when the session is dropped (plugin off), so the store is let go even if the
    /// thread is still inside a call.
    lease: Option<Arc<KvLease>>,
    // Never joined: a hook must not wait, and dropping the handle detaches the thread,
    // which ends on its own within the lease.
    _thread: JoinHandle<()>,
}

impl NodeSession {
    /// Starts node `node` of `num_nodes`; returns at once. `kv` is the host's store (XLA's);
    /// a one-node run needs none and agrees with itself on an in-memory store.
    pub fn start(
        node: NodeId,
        num_nodes: u32,
        kv: Option<Box<dyn KvStore>>,
        config: &Config,
        on_failure: OnFailure,
    ) -> Result<Self, String> {
        if num_nodes == 0 || node >= num_nodes {
            return Err(format!(
                "XLA reported node id {node} of {num_nodes} nodes; expected 0 <= node id < node count"
            ));
        }
        let started = Instant::now();
        let timeout = Duration::from_millis(config.rendezvous_timeout_ms);
        let lease = match kv {
            // A one-node run never touches the host's store: nothing to agree with.
            Some(kv) if num_nodes > 1 => Some(Arc::new(KvLease::new(kv, started + timeout))),
            _ if num_nodes == 1 => None,
            _ => {
                return Err(format!(
                    "XLA passed no key-value store for node {node} of {num_nodes}; \
                     a multi-node job needs one (jax.distributed.initialize)"
                ))
            }
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(NodeState::Pending),
            changed: Condvar::new(),
            socket: Mutex::new(None),
        });
        let thread_shared = Arc::clone(&shared);
        let thread_lease = lease.clone();
        let config = config.clone();
        let thread = std::thread::Builder::new()
            .name(format!("distprof-rdv-{node}"))
            .spawn(move || {
                super::mark_thread_panics_reported();
                let result = agree_watched(node, num_nodes, thread_lease.clone(), config, started);
                // The lease ends before anyone can see the outcome: whatever follows never
                // calls the store.
                if let Some(lease) = &thread_lease {
                    lease.revoke();
                }
                let state = match result {
                    Ok((context, socket)) => {
                        *thread_shared
                            .socket
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = Some(socket);
                        let context_digest = digest::context_digest(&context);
                        let elapsed_ms = started.elapsed().as_millis() as u64;
                        tracing::info!(
                            "distprof: node {node}/{num_nodes} agreed on context {context_digest} \
                             (session {}) in {elapsed_ms} ms",
                            context.session_id
                        );
                        NodeState::Agreed {
                            context: Arc::new(context),
                            context_digest,
                            elapsed_ms,
                        }
                    }
                    Err(reason) => NodeState::Failed { reason },
                };
                let failure = match &state {
                    NodeState::Failed { reason } => Some(reason.clone()),
                    _ => None,
                };
                *thread_shared
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = state;
                thread_shared.changed.notify_all();
                if let Some(reason) = failure {
                    on_failure(&format!("rendezvous of node {node}/{num_nodes}"), &reason);
                }
            })
            .map_err(|e| format!("cannot start the rendezvous thread of node {node}: {e}"))?;
        Ok(Self {
            node,
            num_nodes,
            shared,
            lease,
            _thread: thread,
        })
    }

    /// The current state, without blocking on the rendezvous.
    pub fn state(&self) -> NodeState {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `timeout` for the rendezvous to end; for distprof's own threads (and
    /// tests), never for a hook.
    pub fn wait(&self, timeout: Duration) -> NodeState {
        let guard = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .shared
            .changed
            .wait_timeout_while(guard, timeout, |s| matches!(s, NodeState::Pending))
            .unwrap_or_else(|p| p.into_inner());
        guard.clone()
    }

    /// A handle on the probe socket (a duplicate descriptor), once the node has agreed.
    pub fn probe_socket(&self) -> Option<std::io::Result<UdpSocket>> {
        self.shared
            .socket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.try_clone())
    }

    /// True while the node's thread may still call the host's store.
    pub fn holds_store(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| l.is_live())
    }
}

impl Drop for NodeSession {
    fn drop(&mut self) {
        if let Some(lease) = &self.lease {
            lease.revoke();
        }
    }
}

/// How long after the lease's end a store call may still be running before distprof
/// gives up on it. A store that honours timeouts returns by the lease's end (the lease cuts
/// every `get` there); one that does not may never return.
const HUNG_STORE_GRACE_MS: u64 = 1_000;

/// [`agree`] on a thread of its own, waited for until the lease's end plus
/// [`HUNG_STORE_GRACE_MS`]. A host store whose `Get` ignores its timeout would otherwise
/// keep the node pending (and the plugin on, doing nothing) for the rest of the process;
/// the thread stuck inside the host's call is left behind (nothing can interrupt it) and
/// finds the lease revoked if it ever returns.
fn agree_watched(
    node: NodeId,
    num_nodes: u32,
    lease: Option<Arc<KvLease>>,
    config: Config,
    started: Instant,
) -> Result<(RunContext, UdpSocket), String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let timeout_ms = config.rendezvous_timeout_ms;
    let limit = Duration::from_millis(timeout_ms + HUNG_STORE_GRACE_MS);
    std::thread::Builder::new()
        .name(format!("distprof-kv-{node}"))
        .spawn(move || {
            super::mark_thread_panics_reported();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                agree(node, num_nodes, lease.as_deref(), &config, started)
            }))
            .unwrap_or_else(|panic| {
                Err(format!(
                    "internal error: the rendezvous thread panicked: {}",
                    super::panic_message(panic.as_ref())
                ))
            });
            // The receiver may have given up on us; nothing else to do then.
            let _ = tx.send(result);
        })
        .map_err(|e| format!("cannot start the rendezvous thread of node {node}: {e}"))?;
    match rx.recv_timeout(limit.saturating_sub(started.elapsed())) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "the host's key-value store did not return from a call within {} ms of the GPU \
             client's creation although distprof asked for at most `rendezvous_timeout_ms` = \
             {} ms (a Get that ignores its timeout?); distprof gave up on the rendezvous and \
             no longer calls the store",
            limit.as_millis(),
            timeout_ms
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err("internal error: the rendezvous thread ended without a result".into())
        }
    }
}

/// The thread's work: address, socket, rendezvous. Every error names what failed and
/// what to change.
fn agree(
    node: NodeId,
    num_nodes: u32,
    lease: Option<&KvLease>,
    config: &Config,
    started: Instant,
) -> Result<(RunContext, UdpSocket), String> {
    let chosen = address::discover(&config.interface, config.probe_port)
        .map_err(|e| format!("probe address: {e}"))?;
    let socket = UdpSocket::bind(chosen.addr).map_err(|e| {
        format!(
            "cannot bind the UDP probe socket to {} (interface {}, from {}): {e}; \
             set `probe_port` (XLA_DIST_PROF_PROBE_PORT) to 0 for any free port",
            chosen.addr, chosen.interface, chosen.source
        )
    })?;
    let probe_addr = socket
        .local_addr()
        .map_err(|e| format!("cannot read the probe socket's address: {e}"))?;
    tracing::debug!(node, %probe_addr, interface = %chosen.interface, source = chosen.source, "distprof: probe socket bound");
    // The rendezvous' own deadline must fall before the lease's end (which counts from the
    // hook), so that its precise errors (which node is missing) win over "lease ended":
    // the time spent so far rounded up, and a small margin for its last checks.
    // `rendezvous_timeout_ms` is node-local: changing it does not change the config digest.
    let spent_ms = started.elapsed().as_micros().div_ceil(1000) as u64;
    let left_ms = config
        .rendezvous_timeout_ms
        .saturating_sub(spent_ms + LEASE_MARGIN_MS)
        .max(1);
    let config = Config {
        rendezvous_timeout_ms: left_ms,
        ..config.clone()
    };
    let hostname = address::hostname();
    let context = match lease {
        Some(kv) => rendezvous::rendezvous(kv, node, num_nodes, &config, probe_addr, &hostname),
        None => rendezvous::rendezvous(
            &MemoryStore::new(),
            node,
            num_nodes,
            &config,
            probe_addr,
            &hostname,
        ),
    }
    .map_err(|e| e.to_string())?;
    Ok((context, socket))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvError;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    type Failures = Arc<Mutex<Vec<String>>>;

    fn sink() -> (OnFailure, Failures) {
        let failures: Failures = Arc::default();
        let f = Arc::clone(&failures);
        (
            Arc::new(move |what, why| f.lock().unwrap().push(format!("{what}: {why}"))),
            failures,
        )
    }

    /// XLA's store shape over the in-memory store, recording when it was last called.
    #[derive(Clone)]
    struct Recording {
        mem: Arc<MemoryStore>,
        calls: Arc<AtomicUsize>,
        last_call_end_us: Arc<AtomicU64>,
        epoch: Instant,
    }
    impl Recording {
        fn new() -> Self {
            Self {
                mem: Arc::new(MemoryStore::new()),
                calls: Arc::default(),
                last_call_end_us: Arc::default(),
                epoch: Instant::now(),
            }
        }
        fn done<T>(&self, r: T) -> T {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.last_call_end_us
                .fetch_max(self.epoch.elapsed().as_micros() as u64, Ordering::SeqCst);
            r
        }
    }
    impl KvStore for Recording {
        fn get(&self, key: &str, timeout: Duration) -> Result<String, KvError> {
            let r = self.mem.get(key, timeout);
            self.done(r)
        }
        fn try_get(&self, key: &str) -> Result<Option<String>, KvError> {
            let r = self.mem.try_get(key);
            self.done(r)
        }
        fn set(&self, key: &str, value: &str) -> Result<(), KvError> {
            let r = self.mem.set(key, value);
            self.done(r)
        }
    }

    fn config(timeout_ms: u64) -> Config {
        Config {
            enabled: true,
            rendezvous_timeout_ms: timeout_ms,
            ..Config::default()
        }
    }

    #[test]
    fn three_nodes_agree_on_one_context_and_let_go_of_the_store() {
        let kv = Recording::new();
        let (on_failure, failures) = sink();
        let cfg = config(10_000);
        // Node 0 last: the others wait for it.
        let sessions: Vec<NodeSession> = [2, 1, 0]
            .into_iter()
            .map(|n| {
                NodeSession::start(
                    n,
                    3,
                    Some(Box::new(kv.clone())),
                    &cfg,
                    Arc::clone(&on_failure),
                )
                .unwrap()
            })
            .collect();
        let mut digests = Vec::new();
        for s in &sessions {
            match s.wait(Duration::from_secs(10)) {
                NodeState::Agreed {
                    context,
                    context_digest,
                    ..
                } => {
                    assert_eq!(context.num_nodes, 3);
                    let sock = s.probe_socket().unwrap().unwrap();
                    assert_eq!(
                        context.nodes[s.node as usize].probe_addr,
                        sock.local_addr().unwrap()
                    );
                    digests.push(context_digest);
                }
                other => panic!("node {}: {other:?}", s.node),
            }
            assert!(
                !s.holds_store(),
                "node {} still holds the store after agreeing",
                s.node
            );
        }
        assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
        assert!(failures.lock().unwrap().is_empty());
        // After every node agreed, nothing touches the store any more.
        let calls = kv.calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(kv.calls.load(Ordering::SeqCst), calls);
    }

    #[test]
    fn one_node_agrees_without_a_store() {
        let (on_failure, failures) = sink();
        let s = NodeSession::start(0, 1, None, &config(1_000), on_failure).unwrap();
        match s.wait(Duration::from_secs(5)) {
            NodeState::Agreed { context, .. } => {
                assert_eq!(context.num_nodes, 1);
                assert_eq!(
                    context.out_edges,
                    vec![Vec::<NodeId>::new()],
                    "a lone node has no peers"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(failures.lock().unwrap().is_empty());
    }

    #[test]
    fn a_missing_master_fails_once_within_the_timeout_and_the_store_is_released_by_then() {
        let kv = Recording::new();
        let (on_failure, failures) = sink();
        let hook = Instant::now();
        let s =
            NodeSession::start(1, 2, Some(Box::new(kv.clone())), &config(300), on_failure).unwrap();
        assert!(
            hook.elapsed() < Duration::from_millis(50),
            "the hook must not wait: {:?}",
            hook.elapsed()
        );
        match s.wait(Duration::from_secs(5)) {
            NodeState::Failed { reason } => assert!(
                reason.contains("node 1") && reason.contains("master"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        // The last store call ended within the timeout (plus scheduling slack: 150 ms, as a
        // loaded 2-core machine delayed the thread's last wake-up by 56 ms once), measured
        // from the hook. A store that ignored the timeout would be used for the full 5 s.
        let last_us = kv.last_call_end_us.load(Ordering::SeqCst);
        let hook_us = hook.duration_since(kv.epoch).as_micros() as u64;
        assert!(
            last_us - hook_us <= 300_000 + 150_000,
            "store used {} us after the hook",
            last_us - hook_us
        );
        assert!(!s.holds_store());
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let f = failures.lock().unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("rendezvous of node 1/2: "), "{}", f[0]);
    }

    /// A host store whose `get` ignores its timeout (blocks far longer than asked).
    struct HangingKv;
    impl KvStore for HangingKv {
        fn get(&self, _key: &str, _timeout: Duration) -> Result<String, KvError> {
            std::thread::sleep(Duration::from_secs(3_600));
            Err(KvError::Unavailable("woke up".into()))
        }
        fn try_get(&self, _key: &str) -> Result<Option<String>, KvError> {
            Ok(None)
        }
        fn set(&self, _key: &str, _value: &str) -> Result<(), KvError> {
            Ok(())
        }
    }

    #[test]
    fn a_store_call_that_never_returns_fails_the_node_after_timeout_plus_grace() {
        let (on_failure, failures) = sink();
        let hook = Instant::now();
        let s = NodeSession::start(1, 2, Some(Box::new(HangingKv)), &config(200), on_failure).unwrap();
        match s.wait(Duration::from_secs(10)) {
            NodeState::Failed { reason } => {
                assert!(reason.contains("did not return") && reason.contains("200 ms"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let took = hook.elapsed();
        let bound = Duration::from_millis(200 + HUNG_STORE_GRACE_MS);
        assert!(took >= bound && took < bound + Duration::from_millis(500), "{took:?}");
        assert!(!s.holds_store());
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(failures.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_multi_node_run_without_a_store_is_refused_by_name() {
        let (on_failure, _) = sink();
        let err = NodeSession::start(0, 2, None, &config(1_000), on_failure)
            .err()
            .unwrap();
        assert!(
            err.contains("node 0 of 2") && err.contains("jax.distributed.initialize"),
            "{err}"
        );
    }

    #[test]
    fn dropping_the_session_releases_the_store_at_once() {
        let kv = Recording::new();
        let (on_failure, _) = sink();
        let s = NodeSession::start(
            1,
            2,
            Some(Box::new(kv.clone())),
            &config(60_000),
            on_failure,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(s.holds_store());
        let t = Instant::now();
        drop(s);
        assert!(
            t.elapsed() < Duration::from_millis(20),
            "drop waited {:?}",
            t.elapsed()
        );
        // The thread's call in flight returns at its poll slice (<= 1 s); after that the
        // store is never called again.
        std::thread::sleep(Duration::from_millis(1_200));
        let calls = kv.calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            kv.calls.load(Ordering::SeqCst),
            calls,
            "the store was called after the session was dropped"
        );
        assert_eq!(
            Arc::strong_count(&kv.mem),
            1,
            "someone still holds the store"
        );
    }
}
